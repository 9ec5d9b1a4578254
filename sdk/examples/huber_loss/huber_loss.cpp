// A robust loss for tycho: Huber's loss on the amplitude residual r = √I − √(s D),
//   L = Σ_k mask_k h(r_k),   h(r) = r²                 for |r| ≤ δ
//                            h(r) = 2δ|r| − δ²         for |r| > δ
//   dL/dI_k = h'(r_k) / (2 √I_k)   (0 where I = 0 and on masked pixels),
// the amplitude loss near the data and a linear one for outliers (hot pixels, zingers), with δ
// from [reconstruct] huber_delta, in the units of √I: the engine scales each pattern's total
// intensity to about 1, so on a 96 × 96 detector a typical residual is a few 1e-3 (default 5e-3).
// With δ larger than every residual it is the built-in `amplitude` loss.
// Host tensors only: device tensors are refused with TYCHO_ERR_UNSUPPORTED.
#include <tycho/sdk.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {
using namespace tycho::sdk;

struct huber {
  double delta = 5e-3;
};

template <class Real>
double huber_loss(const huber& h, const Real* model, const float* measured, const uint8_t* mask, int64_t period,
                  int64_t n, Real scale, Real* dloss_dI) {
  const Real delta = Real(h.delta);
  double loss = 0;  // each pattern summed in Real, the patterns in double
  for (int64_t start = 0; start < n; start += period) {
    const int64_t len = std::min(period, n - start);
    Real sum = 0;
    for (int64_t k = start; k < start + len; ++k) {
      const bool use = mask == nullptr || mask[k - start] != 0;
      const Real amp_model = std::sqrt(model[k]);
      const Real amp_meas = std::sqrt(std::max(Real(measured[k]) * scale, Real(0)));
      const Real r = amp_model - amp_meas;
      const bool inside = std::abs(r) <= delta;
      sum += use ? (inside ? r * r : Real(2) * delta * std::abs(r) - delta * delta) : Real(0);
      // h'(r) / (2√I): inside, (√I − √(sD)) / √I as the amplitude loss writes it.
      const Real grad = inside ? Real(1) - amp_meas / amp_model : std::copysign(delta, r) / amp_model;
      dloss_dI[k] = use && amp_model > Real(0) ? grad : Real(0);
    }
    loss += double(sum);
  }
  return loss;
}

tycho_status huber_create(const tycho_config* cfg, tycho_loss** out) {
  return guarded([&] {
    huber h;
    if (auto d = config_view(cfg).get_double("huber_delta")) h.delta = *d;
    if (!(h.delta > 0) || !std::isfinite(h.delta))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] huber_delta must be a finite number > 0, got ", h.delta);
    *out = reinterpret_cast<tycho_loss*>(new huber(h));
  });
}

tycho_status huber_evaluate(tycho_loss* loss, const DLTensor* model, const DLTensor* measured, const DLTensor* mask,
                            double measured_scale, DLTensor* grad, double* loss_sum, void* /*stream*/) {
  return guarded([&] {
    for (const DLTensor* t : {model, measured, static_cast<const DLTensor*>(grad), mask})
      if (t != nullptr && t->device.device_type != kDLCPU)
        fail(TYCHO_ERR_UNSUPPORTED, "huber loss: host tensors only (this is a CPU-only example)");
    const bool f64 = model != nullptr && same_dtype(model->dtype, dtype_float64);
    expect_tensor(model, "model_intensity", f64 ? dtype_float64 : dtype_float32, 3);
    expect_tensor(measured, "measured", dtype_float32, 3);
    expect_tensor(grad, "dloss_dintensity", f64 ? dtype_float64 : dtype_float32, 3);
    const int64_t n = element_count(*model);
    if (element_count(*measured) != n || element_count(*grad) != n)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "huber loss: model ", shape_string(*model), ", measured ",
           shape_string(*measured), " and gradient ", shape_string(*grad), " must have the same shape");
    const int64_t period = model->shape[1] * model->shape[2];
    const uint8_t* mask_data = nullptr;
    if (mask != nullptr) {
      expect_tensor(mask, "mask", dtype_uint8, 2);
      if (element_count(*mask) != period)
        fail(TYCHO_ERR_INVALID_ARGUMENT, "huber loss: mask ", shape_string(*mask), " does not match the patterns ",
             shape_string(*model));
      mask_data = data_of<const uint8_t>(*mask);
    }
    const huber& h = *reinterpret_cast<const huber*>(loss);
    *loss_sum += f64 ? huber_loss(h, data_of<const double>(*model), data_of<const float>(*measured), mask_data,
                                  period, n, measured_scale, data_of<double>(*grad))
                     : huber_loss(h, data_of<const float>(*model), data_of<const float>(*measured), mask_data,
                                  period, n, float(measured_scale), data_of<float>(*grad));
  });
}

void huber_destroy(tycho_loss* loss) { delete reinterpret_cast<huber*>(loss); }

const tycho_loss_vtable k_huber = {sizeof(tycho_loss_vtable), TYCHO_ABI_VERSION, &huber_create, &huber_evaluate,
                                   &huber_destroy};
const char* const k_keys[] = {"huber_delta", nullptr};  // read from [reconstruct]

const tycho_component k_components[] = {
    component(TYCHO_COMPONENT_LOSS, "huber", "1.0.0",
              "Huber loss on the amplitude residual: squared within huber_delta, linear beyond",
              TYCHO_DEVICE_BIT(kDLCPU), k_keys, &k_huber),
};
}  // namespace

TYCHO_PLUGIN("huber_loss", "1.0.0", k_components)
