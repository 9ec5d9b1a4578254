// The cuda engine as plan-only (TYCHO_COMPONENT_PLAN_ONLY): built when tycho is built without
// CUDA, so that `tycho plan` on a machine without the toolkit can still size a GPU run for
// another machine. It can never be created; the host only calls plan_memory.
#include <tycho/sdk.hpp>
#include <tycho/sdk/engine.hpp>

#include "cuda_description.hpp"

namespace {
using namespace tycho::sdk;

struct cuda_memory_model {
  static void plan_memory(const config_view& cfg, const tycho_memory_problem& p, tycho_memory_report* out) {
    tycho::cuda::plan_memory(cfg, p, out);
  }
};

tycho_component make_component() {
  tycho_component c = component(
      TYCHO_COMPONENT_ENGINE, "cuda", "1.0.0", tycho::cuda::k_description, tycho::cuda::k_capabilities.devices,
      tycho::cuda::k_config_keys,
      plan_only_engine_vtable<cuda_memory_model>(tycho::cuda::k_capabilities,
                                                 "this tycho was built without CUDA (plan only)"));
  c.flags = TYCHO_COMPONENT_PLAN_ONLY;
  c.settings = tycho::cuda::k_settings;
  return c;
}
const tycho_component k_components[] = {make_component()};
}  // namespace

TYCHO_PLUGIN("cuda_plan", "1.0.0", k_components)
