// The amplitude (Gaussian on √I) loss, per pattern:
//   L = Σ_k mask_k (√I_k − √(s D_k))²,   dL/dI_k = 1 − √(s D_k) / √I_k
// (Thibault & Guizar-Sicairos 2012; Odstrčil et al. 2018), with s = measured_scale bringing the
// measured counts to the model's units. I = 0 is guarded: dL/dI = 0 there (the chain rule
// multiplies by Ψ = 0 anyway).
#pragma once

#include <cstdint>

namespace tycho::losses {
// n pixels; mask may be null (all valid) and repeats every `mask_period` pixels (one pattern;
// without a mask, any period that splits the sum into float-sized pieces). The model intensity
// and dL/dI are in the engine's precision (float or double), the measured data float32; each
// pattern is summed in that precision and the patterns in double.
template <class Real>
double amplitude_loss(const Real* model_intensity, const float* measured, const uint8_t* mask,
                      int64_t mask_period, int64_t n, Real measured_scale, Real* dloss_dI);

extern template double amplitude_loss<float>(const float*, const float*, const uint8_t*, int64_t, int64_t,
                                             float, float*);
extern template double amplitude_loss<double>(const double*, const float*, const uint8_t*, int64_t,
                                              int64_t, double, double*);
}  // namespace tycho::losses
