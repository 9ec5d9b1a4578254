// The pixel losses' kernels: each per-pixel function in the generic kernel of
// pixel_loss_kernel.cuh (dL/dI per pixel and Σ L, reduced per block in float, as the host loop
// sums each pattern in float, and added to the device accumulator in double).
#include "pixel_loss_kernel.cuh"
#include "pixel_losses_cuda.hpp"

namespace tycho::losses {

void pixel_loss_cuda(const amplitude_pixel<float>& pixel, const float* model_intensity, const float* measured,
                     const uint8_t* mask, int64_t mask_period, int64_t n, float* dloss_dI, double* loss_sum,
                     void* stream, int device) {
  launch_pixel_loss("amplitude loss", pixel, model_intensity, measured, mask, mask_period, n, dloss_dI, loss_sum,
                    stream, device);
}

void pixel_loss_cuda(const intensity_pixel<float>& pixel, const float* model_intensity, const float* measured,
                     const uint8_t* mask, int64_t mask_period, int64_t n, float* dloss_dI, double* loss_sum,
                     void* stream, int device) {
  launch_pixel_loss("intensity loss", pixel, model_intensity, measured, mask, mask_period, n, dloss_dI, loss_sum,
                    stream, device);
}

void pixel_loss_cuda(const poisson_pixel<float>& pixel, const float* model_intensity, const float* measured,
                     const uint8_t* mask, int64_t mask_period, int64_t n, float* dloss_dI, double* loss_sum,
                     void* stream, int device) {
  launch_pixel_loss("poisson loss", pixel, model_intensity, measured, mask, mask_period, n, dloss_dI, loss_sum,
                    stream, device);
}

}  // namespace tycho::losses
