// The `cuda` engine component: the engine class of cuda_engine.hpp behind the ABI's engine
// vtable (tycho/sdk/engine.hpp checks the setup and catches every exception at the boundary).
// Loading this library touches no CUDA API (no device is needed to list plugins): the first
// CUDA call is in create, after the setup's checks.
#include <tycho/sdk.hpp>
#include <tycho/sdk/engine.hpp>

#include "cuda_description.hpp"
#include "cuda_engine.hpp"

namespace {
using namespace tycho::sdk;

// The device engine as the adapter sees it: the batch's loss stays on the device until
// collect_loss, and tensors are read back through the engine's stream.
class cuda_component {
 public:
  explicit cuda_component(const engine_setup& s) : engine_(*s.raw, s.host_finishes_batches) {}

  void compute_batch(const int64_t* indices, int64_t count) { engine_.compute_batch(indices, count); }
  DLTensor* tensor(tycho_tensor_id id) { return engine_.tensor(id); }
  void read_tensor(tycho_tensor_id id, void* dst, size_t bytes) { engine_.read_tensor(id, dst, bytes); }
  void* stream() { return engine_.stream(); }
  double collect_loss() { return engine_.collect_loss(); }
  DLTensor* fixed_point_sums() { return engine_.fixed_point_sums(); }
  bool finish_batch(bool ends_iteration, double&) { return engine_.finish_batch(ends_iteration); }
  static void plan_memory(const config_view& cfg, const tycho_memory_problem& p, tycho_memory_report* out) {
    tycho::cuda::plan_memory(cfg, p, out);
  }

 private:
  tycho::cuda::cuda_engine engine_;
};

const tycho_component k_components[] = {
    with_settings(component(TYCHO_COMPONENT_ENGINE, "cuda", "1.0.0", tycho::cuda::k_description,
                            tycho::cuda::k_capabilities.devices, tycho::cuda::k_config_keys,
                            engine_vtable<cuda_component>(tycho::cuda::k_capabilities)),
                  tycho::cuda::k_settings),
};
}  // namespace

TYCHO_PLUGIN("cuda", "1.0.0", k_components)
