// The cuda engine as plan-only (TYCHO_COMPONENT_PLAN_ONLY): built when tycho is built without
// CUDA, so that `tycho plan` on a machine without the toolkit can still size a GPU run for
// another machine. It can never be created; the host only calls plan_memory.
#include <tycho/sdk.hpp>

#include "cuda_description.hpp"

namespace {
using namespace tycho::sdk;

tycho_status no_create(const tycho_engine_setup*, tycho_engine**) {
  return report(TYCHO_ERR_UNSUPPORTED, "cuda engine: this tycho was built without CUDA (plan only)");
}

tycho_engine_vtable make_vtable() {
  tycho_engine_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.abi_version = TYCHO_ABI_VERSION;
  vt.create = &no_create;
  vt.plan_memory = &tycho::cuda::plan_memory;
  return vt;
}
const tycho_engine_vtable k_vtable = make_vtable();

tycho_component make_component() {
  tycho_component c = component(TYCHO_COMPONENT_ENGINE, "cuda", "1.0.0", tycho::cuda::k_description,
                                TYCHO_DEVICE_BIT(kDLCUDA), tycho::cuda::k_config_keys, &k_vtable);
  c.flags = TYCHO_COMPONENT_PLAN_ONLY;
  c.settings = tycho::cuda::k_settings;
  return c;
}
const tycho_component k_components[] = {make_component()};
}  // namespace

TYCHO_PLUGIN("cuda_plan", "1.0.0", k_components)
