// A test-only optimizer, "nan_after", that leaves its parameter alone until a chosen step and
// then writes NaN into it: the way a diverging run fills its state with NaN, made to happen at
// a known moment so tests/test_non_finite.cpp can check that the run stops there, keeps the
// last finite state, saves it and exits non-zero. Built into <build>/test-plugins only.
//
// [reconstruct.object] (or .probe): optimizer = "nan_after", nan_at_step = S (1-based count of
// this optimizer's steps; one step per mini-batch).
#include <tycho/sdk.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

namespace {
using namespace tycho::sdk;

struct nan_after {
  int64_t nan_at_step = 1;
  int64_t steps = 0;
};

tycho_status create(const tycho_config* cfg, const DLTensor* param, tycho_optimizer** out) {
  return guarded([&] {
    if (param->device.device_type != kDLCPU) fail(TYCHO_ERR_UNSUPPORTED, "nan_after: CPU parameters only");
    auto o = std::make_unique<nan_after>();
    o->nan_at_step = config_view(cfg).get_int("nan_at_step").value_or(1);
    *out = reinterpret_cast<tycho_optimizer*>(o.release());
  });
}

tycho_status step(tycho_optimizer* opt, DLTensor* param, const DLTensor*, const tycho_step_info*, void*) {
  return guarded([&] {
    auto* o = reinterpret_cast<nan_after*>(opt);
    if (++o->steps != o->nan_at_step) return;
    // Every element, as a diverged update leaves it.
    const int64_t reals = 2 * element_count(*param);
    if (param->dtype.bits == 128) {
      for (int64_t k = 0; k < reals; ++k) static_cast<double*>(param->data)[k] = std::numeric_limits<double>::quiet_NaN();
    } else {
      for (int64_t k = 0; k < reals; ++k) static_cast<float*>(param->data)[k] = std::numeric_limits<float>::quiet_NaN();
    }
  });
}

void destroy(tycho_optimizer* opt) { delete reinterpret_cast<nan_after*>(opt); }

const tycho_optimizer_vtable k_vtable = {sizeof(tycho_optimizer_vtable), TYCHO_ABI_VERSION, &create, &step, &destroy,
                                         nullptr, nullptr, nullptr, nullptr};
// learning_rate is accepted (and ignored) so that configs written for adam or sgd run unchanged.
const char* const k_keys[] = {"nan_at_step", "learning_rate", nullptr};
const tycho_component k_components[] = {
    component(TYCHO_COMPONENT_OPTIMIZER, "nan_after", "1.0.0", "test only: NaN into the parameter at a chosen step",
              TYCHO_DEVICE_BIT(kDLCPU), k_keys, &k_vtable),
};
}  // namespace

TYCHO_PLUGIN("test_nan_optimizer", "1.0.0", k_components)
