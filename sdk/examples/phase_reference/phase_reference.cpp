// A constraint for tycho: the object's global phase set to zero after each step,
//   O ← O · exp(−i arg Σ O),
// over every slice at once. The far field of P·O does not change when O is multiplied by a
// constant phase factor, so the data cannot fix it and a reconstruction's phase drifts with
// the optimizer; this one keeps the phase of the object's mean at 0, so results can be compared
// and averaged without first aligning their phases. Host tensors only: the SDK's constraint
// adapter refuses an engine on a GPU when the run starts.
#include <tycho/sdk.hpp>
#include <tycho/sdk/constraint.hpp>

#include <cmath>
#include <complex>
#include <cstdint>

namespace {
using namespace tycho::sdk;

class phase_reference {
 public:
  // create(): `cfg` is the constraint's own entry of [[reconstruct.constraints]].
  phase_reference(const config_view&, const tycho_constraint_setup&) {}

  uint32_t acts_on() const { return TYCHO_CONSTRAINT_OBJECT; }

  // The adapter has checked the tensors: (S, H, W), complex64 or complex128, on the host.
  void apply(const constraint_arguments& a) {
    const int64_t n = element_count(*a.object);
    with_complex_values(*a.object, [&](auto* o) {
      using value = std::remove_pointer_t<decltype(o)>;
      std::complex<double> sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::complex<double>(o[k]);
      if (std::abs(sum) == 0) return;  // no phase to remove
      const value turn(std::conj(sum / std::abs(sum)));
      for (int64_t k = 0; k < n; ++k) o[k] *= turn;
    });
  }
};

const char* const k_keys[] = {nullptr};  // no keys of its own
constexpr uint32_t k_devices = TYCHO_DEVICE_BIT(kDLCPU);

const tycho_component k_components[] = {
    constraint_component<phase_reference>("phase_reference", "1.0.0",
                                          "sets the object's global phase (the phase of its mean) to zero after "
                                          "each step",
                                          k_devices, k_keys),
};
}  // namespace

TYCHO_PLUGIN("phase_reference", "1.0.0", k_components)
