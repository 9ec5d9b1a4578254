// The amplitude (Gaussian on √I) loss on host tensors: the loop of pixel_loss_loop.hpp over
// amplitude_pixel.hpp (where the formula, its guard ε and its sources are).
#pragma once

#include <cstdint>

#include "amplitude_pixel.hpp"

namespace tycho::losses {
// n pixels; mask may be null (all valid) and repeats every `mask_period` = N0 · N1 pixels (one
// pattern). The model intensity and dL/dI are in the engine's precision (float or double), the
// measured data float32; each pattern is summed in that precision and the patterns in double.
// Returns Σ L; writes dL/dI of every pixel (0 on masked ones). Thread-safe (reads `pixel` only).
template <class Real>
double amplitude_loss(const amplitude_pixel<Real>& pixel, const Real* model_intensity, const float* measured,
                      const uint8_t* mask, int64_t mask_period, int64_t n, Real* dloss_dI);

extern template double amplitude_loss<float>(const amplitude_pixel<float>&, const float*, const float*,
                                             const uint8_t*, int64_t, int64_t, float*);
extern template double amplitude_loss<double>(const amplitude_pixel<double>&, const double*, const float*,
                                              const uint8_t*, int64_t, int64_t, double*);
}  // namespace tycho::losses
