// The pixel losses on device tensors (built with CUDA only): the per-pixel functions of
// amplitude_pixel.hpp, intensity_pixel.hpp and poisson_pixel.hpp in the generic kernel of
// pixel_loss_kernel.cuh (pixel_losses.cu). Queued on `stream`, no synchronisation; Σ L is added
// to the device double *loss_sum (double atomics, one per block).
#pragma once

#include <cstdint>

#include "amplitude_pixel.hpp"
#include "intensity_pixel.hpp"
#include "poisson_pixel.hpp"

namespace tycho::losses {
// n pixels of patterns of `mask_period` pixels each; mask (device, may be null) repeats per
// pattern. float32 only (the cuda engine's precision). Throws tycho::sdk::error naming the loss
// and the failed CUDA call.
void pixel_loss_cuda(const amplitude_pixel<float>& pixel, const float* model_intensity, const float* measured,
                     const uint8_t* mask, int64_t mask_period, int64_t n, float* dloss_dI, double* loss_sum,
                     void* stream, int device);
void pixel_loss_cuda(const intensity_pixel<float>& pixel, const float* model_intensity, const float* measured,
                     const uint8_t* mask, int64_t mask_period, int64_t n, float* dloss_dI, double* loss_sum,
                     void* stream, int device);
void pixel_loss_cuda(const poisson_pixel<float>& pixel, const float* model_intensity, const float* measured,
                     const uint8_t* mask, int64_t mask_period, int64_t n, float* dloss_dI, double* loss_sum,
                     void* stream, int device);
}  // namespace tycho::losses
