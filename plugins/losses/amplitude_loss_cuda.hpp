// The amplitude loss on device tensors (built with CUDA only): queued on `stream`, no
// synchronisation; Σ L is added to the device double *loss_sum (double atomics, one per block).
#pragma once

#include <cstdint>

#include "amplitude_pixel.hpp"

namespace tycho::losses {
// n pixels of patterns of `mask_period` pixels each; mask (device, may be null) repeats per
// pattern. float32 only (the cuda engine's precision). Throws tycho::sdk::error naming the
// failed CUDA call.
void amplitude_loss_cuda(const amplitude_pixel<float>& pixel, const float* model_intensity, const float* measured,
                         const uint8_t* mask, int64_t mask_period, int64_t n, float* dloss_dI, double* loss_sum,
                         void* stream, int device);
}  // namespace tycho::losses
