// The amplitude loss kernel: the per-pixel function of amplitude_pixel.hpp in the generic kernel
// of pixel_loss_kernel.cuh (dL/dI per pixel and Σ L, reduced per block in float, as the host loop
// sums each pattern in float, and added to the device accumulator in double).
#include "amplitude_loss_cuda.hpp"
#include "pixel_loss_kernel.cuh"

namespace tycho::losses {

void amplitude_loss_cuda(const amplitude_pixel<float>& pixel, const float* model_intensity, const float* measured,
                         const uint8_t* mask, int64_t mask_period, int64_t n, float* dloss_dI, double* loss_sum,
                         void* stream, int device) {
  launch_pixel_loss("amplitude loss", pixel, model_intensity, measured, mask, mask_period, n, dloss_dI, loss_sum,
                    stream, device);
}

}  // namespace tycho::losses
