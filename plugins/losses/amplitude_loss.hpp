// The amplitude (Gaussian on √I) loss, per pattern:
//   L = Σ_k mask_k (√I_k − √(s D_k))²,   dL/dI_k = 1 − √(s D_k) / √I_k
// (Thibault & Guizar-Sicairos 2012; Odstrčil et al. 2018), with s = measured_scale bringing the
// measured counts to the model's units. I = 0 is guarded: dL/dI = 0 there (the chain rule
// multiplies by Ψ = 0 anyway).
#pragma once

#include <cstdint>

namespace tycho::losses {
// n pixels; mask may be null (all valid) and repeats every `mask_period` pixels (one pattern;
// without a mask, any period that splits the sum into float-sized pieces).
double amplitude_loss(const float* model_intensity, const float* measured, const uint8_t* mask,
                      int64_t mask_period, int64_t n, float measured_scale, float* dloss_dI);
}
