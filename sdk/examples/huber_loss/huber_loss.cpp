// A robust loss for tycho: Huber's loss on the amplitude residual r = √I − √(s D),
//   L = Σ_k mask_k h(r_k),   h(r) = r²                 for |r| ≤ δ
//                            h(r) = 2δ|r| − δ²         for |r| > δ
//   dL/dI_k = h'(r_k) / (2 √I_k)   (0 where I = 0 and on masked pixels),
// the amplitude loss near the data and a linear one for outliers (hot pixels, zingers), with δ
// from [reconstruct] huber_delta, in the units of √I: the engine scales each pattern's total
// intensity to about 1, so on a 96 × 96 detector a typical residual is a few 1e-3 (default 5e-3).
// With δ larger than every residual it is the built-in `amplitude` loss.
// Host tensors only: the SDK's loss adapter refuses others with TYCHO_ERR_UNSUPPORTED.
#include <tycho/sdk.hpp>
#include <tycho/sdk/loss.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {
using namespace tycho::sdk;

class huber {
 public:
  // create(): `cfg` is the [reconstruct] table.
  explicit huber(const config_view& cfg) {
    delta_ = cfg.get_double("huber_delta").value_or(5e-3);
    if (!(delta_ > 0) || !std::isfinite(delta_))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] huber_delta must be a finite number > 0, got ", delta_);
  }

  // Called from several threads at once: reads the instance only. The adapter has checked the
  // tensors' dtypes, shapes and device before.
  void evaluate(const loss_arguments& a) const {
    if (a.float64)
      *a.loss_sum += sum(data_of<const double>(*a.model_intensity), a, data_of<double>(*a.dloss_dintensity));
    else
      *a.loss_sum += sum(data_of<const float>(*a.model_intensity), a, data_of<float>(*a.dloss_dintensity));
  }

 private:
  // Each pattern summed in Real (the engine's precision), the patterns in double.
  template <class Real>
  double sum(const Real* model, const loss_arguments& a, Real* dloss_dI) const {
    const float* measured = data_of<const float>(*a.measured);
    const Real delta = Real(delta_), scale = Real(a.measured_scale);
    double loss = 0;
    for (int64_t start = 0; start < a.count; start += a.pattern_pixels) {
      Real pattern = 0;
      for (int64_t k = start; k < std::min(start + a.pattern_pixels, a.count); ++k) {
        const bool use = a.mask == nullptr || a.mask[k - start] != 0;
        const Real amp_model = std::sqrt(model[k]);
        const Real amp_meas = std::sqrt(std::max(Real(measured[k]) * scale, Real(0)));
        const Real r = amp_model - amp_meas;
        const bool inside = std::abs(r) <= delta;
        pattern += use ? (inside ? r * r : Real(2) * delta * std::abs(r) - delta * delta) : Real(0);
        // h'(r) / (2√I): inside, (√I − √(sD)) / √I as the amplitude loss writes it.
        const Real grad = inside ? Real(1) - amp_meas / amp_model : std::copysign(delta, r) / amp_model;
        dloss_dI[k] = use && amp_model > Real(0) ? grad : Real(0);
      }
      loss += double(pattern);
    }
    return loss;
  }

  double delta_;
};

const char* const k_keys[] = {"huber_delta", nullptr};  // read from [reconstruct]
constexpr uint32_t k_devices = TYCHO_DEVICE_BIT(kDLCPU);

const tycho_component k_components[] = {
    component(TYCHO_COMPONENT_LOSS, "huber", "1.0.0",
              "Huber loss on the amplitude residual: squared within huber_delta, linear beyond", k_devices, k_keys,
              loss_vtable<huber>("huber", k_devices)),
};
}  // namespace

TYCHO_PLUGIN("huber_loss", "1.0.0", k_components)
