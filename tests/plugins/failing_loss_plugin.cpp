// A test-only loss named "failing": create succeeds, evaluate always fails with a message of its
// own. The C API test checks that this exact text reaches tycho_last_error() (the engine calls
// the loss from its worker threads, so the text must cross threads and not be replaced by a
// generic "loss failed"). Built into <build>/test-plugins-failing, reached via TYCHO_PLUGIN_PATH.
#include <tycho/sdk.hpp>

namespace {
using namespace tycho::sdk;

struct failing_instance {};

tycho_status failing_create(const tycho_config*, tycho_loss** out) {
  *out = reinterpret_cast<tycho_loss*>(new failing_instance);
  return TYCHO_OK;
}

tycho_status failing_evaluate(tycho_loss*, const DLTensor*, const DLTensor*, const DLTensor*, double, DLTensor*,
                              double*, void*) {
  return guarded([] { fail(TYCHO_ERR_BAD_DATA, "failing loss: deliberate failure (test plugin)"); });
}

void failing_destroy(tycho_loss* loss) { delete reinterpret_cast<failing_instance*>(loss); }

const tycho_loss_vtable k_failing = {sizeof(tycho_loss_vtable), TYCHO_ABI_VERSION, &failing_create,
                                     &failing_evaluate, &failing_destroy};
const char* const k_no_keys[] = {nullptr};
const tycho_component k_components[] = {
    component(TYCHO_COMPONENT_LOSS, "failing", "1.0.0", "test: a loss whose evaluate always fails",
              TYCHO_DEVICE_BIT(kDLCPU), k_no_keys, &k_failing),
};
}  // namespace

TYCHO_PLUGIN("failing_loss", "1.0.0", k_components)
