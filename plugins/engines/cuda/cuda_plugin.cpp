// The `cuda` engine component behind the ABI's engine vtable. Loading this library touches no
// CUDA API (no device is needed to list plugins): the first CUDA call is in create.
#include <tycho/sdk.hpp>

#include <cstddef>

#include "cuda_description.hpp"
#include "cuda_engine.hpp"

namespace {
using namespace tycho::sdk;
using tycho::cuda::cuda_engine;

cuda_engine* as_engine(tycho_engine* eng) { return reinterpret_cast<cuda_engine*>(eng); }

tycho_status create(const tycho_engine_setup* setup, tycho_engine** out) {
  return guarded([&] {
    // A 1.1 host's setup ends at loss_ref (one slice, no position gradient).
    if (setup == nullptr || setup->struct_size < offsetof(tycho_engine_setup, slice_propagator))
      fail(TYCHO_ERR_ABI_MISMATCH, "cuda engine: engine setup struct is too small");
    if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "cuda engine: no output handle");
    // Before any CUDA call: a float64 run is refused the same with or without a GPU.
    const std::string precision = config_view(setup->config).get_string("precision").value_or("float32");
    if (precision != "float32")
      fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] precision = \"", precision,
           "\": the cuda engine computes in float32 only; use engine = \"cpu\"");
    *out = reinterpret_cast<tycho_engine*>(new cuda_engine(*setup));
  });
}

// Queues the batch; the batch's loss stays on the device until collect_loss.
tycho_status compute_batch(tycho_engine* eng, const int64_t* indices, int64_t count, double*) {
  return guarded([&] { as_engine(eng)->compute_batch(indices, count); });
}

tycho_status get_tensor(tycho_engine* eng, tycho_tensor_id id, DLTensor* out) {
  return guarded([&] { *out = *as_engine(eng)->tensor(id); });
}

void destroy(tycho_engine* eng) { delete as_engine(eng); }

tycho_status read_tensor(tycho_engine* eng, tycho_tensor_id id, void* dst, size_t bytes) {
  return guarded([&] { as_engine(eng)->read_tensor(id, dst, bytes); });
}

void* stream(tycho_engine* eng) { return eng != nullptr ? as_engine(eng)->stream() : nullptr; }

tycho_status collect_loss(tycho_engine* eng, double* loss_sum) {
  return guarded([&] {
    const double loss = as_engine(eng)->collect_loss();
    if (loss_sum != nullptr) *loss_sum += loss;
  });
}

const tycho_engine_vtable k_vtable = {sizeof(tycho_engine_vtable), TYCHO_ABI_VERSION, &create,
                                      &compute_batch, &get_tensor, &destroy, &read_tensor,
                                      &stream, &collect_loss, &tycho::cuda::plan_memory};
const tycho_component k_components[] = {
    with_settings(component(TYCHO_COMPONENT_ENGINE, "cuda", "1.0.0", tycho::cuda::k_description,
                            TYCHO_DEVICE_BIT(kDLCUDA), tycho::cuda::k_config_keys, &k_vtable),
                  tycho::cuda::k_settings),
};
}  // namespace

TYCHO_PLUGIN("cuda", "1.0.0", k_components)
