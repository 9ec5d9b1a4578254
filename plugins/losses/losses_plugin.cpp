// The built-in loss components, each a class behind the SDK's loss adapter (tycho/sdk/loss.hpp:
// the vtable, its exception barrier and the argument checks).
#include <tycho/sdk.hpp>
#include <tycho/sdk/loss.hpp>
#include <tycho/sdk/simd.hpp>

#include <cmath>
#include <complex>
#include <cstdint>

#include "amplitude_pixel.hpp"
#include "far_field_loss.hpp"
#include "intensity_pixel.hpp"
#include "pixel_loss_loop.hpp"
#include "poisson_pixel.hpp"
#ifdef TYCHO_HAVE_CUDA
#include "pixel_losses_cuda.hpp"
#endif

namespace {
using namespace tycho::sdk;

// Built with CUDA: device tensors run the kernels of pixel_losses.cu.
#ifdef TYCHO_HAVE_CUDA
constexpr bool k_cuda = true;
#else
constexpr bool k_cuda = false;
#endif
constexpr uint32_t k_devices = TYCHO_DEVICE_BIT(kDLCPU) | (k_cuda ? TYCHO_DEVICE_BIT(kDLCUDA) : 0u);

// Refuses float64 tensors on the device: the kernels compute in float32, as the cuda engine.
[[maybe_unused]] void refuse_float64_on_device(const char* name, const loss_arguments& a) {
  if (a.float64)
    fail(TYCHO_ERR_UNSUPPORTED, name, " loss: the CUDA path computes in float32 only; model_intensity "
         "and dloss_dintensity are float64");
}

// A per-pixel loss (amplitude_pixel.hpp, intensity_pixel.hpp, poisson_pixel.hpp;
// `loss.pixel<Real>(a)` gives its parameters) through the host loop of pixel_loss_loop.hpp in the
// engine's precision, or its CUDA kernel in float32: the one dispatch the pixel losses share.
template <class Loss>
void evaluate_pixel_loss(const Loss& loss, [[maybe_unused]] const char* name, const loss_arguments& a) {
#ifdef TYCHO_HAVE_CUDA
  if (a.device.device_type == kDLCUDA) {
    refuse_float64_on_device(name, a);
    tycho::losses::pixel_loss_cuda(loss.template pixel<float>(a), data_of<const float>(*a.model_intensity),
                                   data_of<const float>(*a.measured), a.mask, a.pattern_pixels, a.count,
                                   data_of<float>(*a.dloss_dintensity), a.loss_sum, a.stream, a.device.device_id);
    return;
  }
#endif
  if (a.float64)
    *a.loss_sum += tycho::losses::pixel_loss_sum(loss.template pixel<double>(a),
                                                 data_of<const double>(*a.model_intensity),
                                                 data_of<const float>(*a.measured), a.mask, a.pattern_pixels,
                                                 a.count, data_of<double>(*a.dloss_dintensity));
  else
    *a.loss_sum += tycho::losses::pixel_loss_sum(loss.template pixel<float>(a),
                                                 data_of<const float>(*a.model_intensity),
                                                 data_of<const float>(*a.measured), a.mask, a.pattern_pixels,
                                                 a.count, data_of<float>(*a.dloss_dintensity));
}

// The fused path (tycho_loss_vtable::evaluate_far_field) of a per-pixel loss on the host, in the
// far field's precision, for float32 or uint16 data. Device tensors: unsupported (the cuda engine
// calls evaluate), so an engine falls back to evaluate there.
template <class Loss>
void evaluate_pixel_loss_far_field(const Loss& loss, const char* name, const far_field_arguments& a) {
  if (a.device.device_type != kDLCPU)
    fail(TYCHO_ERR_UNSUPPORTED, name, " loss: evaluate_far_field runs on the host only; use evaluate");
  auto run = [&](auto real, auto measured) {
    using Real = decltype(real);
    using Measured = decltype(measured);
    *a.loss_sum += tycho::losses::far_field_loss_sum(
        loss.avx2_loops, loss.template pixel<Real>(a), data_of<const std::complex<Real>>(*a.far_field), a.patterns,
        a.modes, a.pattern_pixels, Real(a.intensity_scale), data_of<const Measured>(*a.measured), a.mask,
        Real(a.gradient_scale), data_of<std::complex<Real>>(*a.gradient));
  };
  if (a.float64)
    a.measured_counts ? run(double(), uint16_t()) : run(double(), float());
  else
    a.measured_counts ? run(float(), uint16_t()) : run(float(), float());
}

// What the vtable calls on a per-pixel loss class Loss (its `name`, its `pixel<Real>(arguments)`):
// evaluate and evaluate_far_field through the dispatches above, and the build of the fused loop
// the instance runs (far_field_loss.hpp), asked once at create().
template <class Loss>
struct pixel_loss_component {
  bool avx2_loops = use_avx2_loops();

  void evaluate(const loss_arguments& a) const { evaluate_pixel_loss(self(), Loss::name, a); }
  void evaluate_far_field(const far_field_arguments& a) const {
    evaluate_pixel_loss_far_field(self(), Loss::name, a);
  }

 private:
  const Loss& self() const { return static_cast<const Loss&>(*this); }
};

// The guards' defaults below, as numbers (the declarations' defaults, k_*_settings, say the same).
constexpr double k_amplitude_epsilon_default = 0;
constexpr double k_poisson_epsilon_default = 1e-3;

// A loss whose pixel function takes a guard ε relative to the mean pixel intensity (Pixel<Real>::
// for_patterns(s, N0 N1, ε_rel)), read from `key` of [reconstruct]: finite, ≤ 1e6, > 0 (≥ 0 when
// `zero_allowed`). The host checks the declared range first; this covers a create() without it
// (tests, tools).
template <class Loss, template <class> class Pixel>
class guarded_loss : public pixel_loss_component<Loss> {
 public:
  guarded_loss(const config_view& cfg, const char* key, double fallback, bool zero_allowed)
      : epsilon_relative_(cfg.get_double(key).value_or(fallback)) {
    const double e = epsilon_relative_;
    if (!std::isfinite(e) || e < 0 || (e == 0 && !zero_allowed) || e > 1e6)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] ", key, " must be a finite number ",
           zero_allowed ? ">= 0" : "> 0", " and <= 1e6, got ", e);
  }

  template <class Real, class Arguments>  // loss_arguments or far_field_arguments
  Pixel<Real> pixel(const Arguments& a) const {
    return Pixel<Real>::for_patterns(a.measured_scale, a.pattern_pixels, epsilon_relative_);
  }

 private:
  double epsilon_relative_;
};

// The amplitude loss (√(I + ε) − √(sD + ε))², ε = amplitude_epsilon · Ī (amplitude_pixel.hpp;
// 0 by default: no guard).
struct amplitude : guarded_loss<amplitude, tycho::losses::amplitude_pixel> {
  static constexpr const char* name = "amplitude";
  explicit amplitude(const config_view& cfg)
      : guarded_loss(cfg, "amplitude_epsilon", k_amplitude_epsilon_default, /*zero_allowed=*/true) {}
};

// The intensity loss w Σ(I − sD)², w = N0 N1 / 4 (intensity_pixel.hpp); no settings.
struct intensity : pixel_loss_component<intensity> {
  static constexpr const char* name = "intensity";
  explicit intensity(const config_view&) {}

  template <class Real, class Arguments>
  static tycho::losses::intensity_pixel<Real> pixel(const Arguments& a) {
    return tycho::losses::intensity_pixel<Real>::for_patterns(a.measured_scale, a.pattern_pixels);
  }
};

// The Poisson loss ½ Σ [m − d − d log(m/d)], m = I + ε, d = sD + ε, ε = poisson_epsilon · Ī
// (poisson_pixel.hpp).
struct poisson : guarded_loss<poisson, tycho::losses::poisson_pixel> {
  static constexpr const char* name = "poisson";
  explicit poisson(const config_view& cfg)
      : guarded_loss(cfg, "poisson_epsilon", k_poisson_epsilon_default, /*zero_allowed=*/false) {}
};

const char* const k_no_keys[] = {nullptr};
const tycho_setting k_no_settings[] = {end_of_settings()};  // declared: no keys
const char* const k_amplitude_keys[] = {"amplitude_epsilon", nullptr};
const tycho_setting k_amplitude_settings[] = {
    setting("amplitude_epsilon", TYCHO_SETTING_NUMBER, "0",
            "guard ε of the amplitude loss for I -> 0, relative to the mean pixel intensity; added to model and "
            "data alike; 0 (default): no guard")
        .at_least(0)
        .at_most(1e6),
    end_of_settings()};
const char* const k_poisson_keys[] = {"poisson_epsilon", nullptr};
const tycho_setting k_poisson_settings[] = {
    setting("poisson_epsilon", TYCHO_SETTING_NUMBER, "1e-3",
            "guard ε of the Poisson loss for I -> 0, relative to the mean pixel intensity (the mean counts per "
            "pixel); added to model and data alike")
        .above(0)
        .at_most(1e6),
    end_of_settings()};

const tycho_component k_components[] = {
    with_settings(component(TYCHO_COMPONENT_LOSS, amplitude::name, "1.0.0",
                            "amplitude loss Σ(√(I + ε) − √(sD + ε))², normalised to the mean measured intensity, "
                            "guarded by amplitude_epsilon",
                            k_devices, k_amplitude_keys, loss_vtable<amplitude>(amplitude::name, k_devices)),
                  k_amplitude_settings),
    with_settings(component(TYCHO_COMPONENT_LOSS, intensity::name, "1.0.0",
                            "Gaussian loss on intensities (N0 N1 / 4) Σ(I − sD)²: the amplitude loss's scale at the "
                            "mean pixel",
                            k_devices, k_no_keys, loss_vtable<intensity>(intensity::name, k_devices)),
                  k_no_settings),
    with_settings(component(TYCHO_COMPONENT_LOSS, poisson::name, "1.0.0",
                            "Poisson negative log-likelihood of the counts (deviance · s/2), guarded by poisson_epsilon",
                            k_devices, k_poisson_keys, loss_vtable<poisson>(poisson::name, k_devices)),
                  k_poisson_settings),
};
}  // namespace

TYCHO_PLUGIN("losses", "1.0.0", k_components)
