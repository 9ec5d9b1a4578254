// The amplitude loss kernel: dL/dI per pixel and Σ L, reduced per block in float (as the host
// loop sums each pattern in float) and added to the device accumulator in double.
#include <tycho/sdk.hpp>

#include <cuda_runtime.h>

#include <algorithm>

#include "amplitude_loss_cuda.hpp"
#include "amplitude_pixel.hpp"

namespace tycho::losses {
namespace {

constexpr int k_threads = 256;
constexpr int64_t k_max_blocks = 2048;  // grid-stride beyond: fewer atomics on the one double

__global__ void __launch_bounds__(k_threads)
    amplitude_kernel(const float* __restrict__ model, const float* __restrict__ measured,
                     const uint8_t* __restrict__ mask, int64_t period, int64_t n, float scale,
                     float* __restrict__ grad, double* __restrict__ loss_sum) {
  float sum = 0.f;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const bool use = mask == nullptr || mask[k % period] != 0;
    const amplitude_pixel_result r = amplitude_pixel(model[k], measured[k], scale, use);
    grad[k] = r.dloss_dI;
    sum += r.loss;
  }
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  __shared__ float warp_sums[k_threads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = lane < k_threads / 32 ? warp_sums[lane] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) atomicAdd(loss_sum, double(sum));
  }
}

void check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  sdk::fail(TYCHO_ERR_INTERNAL, "amplitude loss: ", call, " failed: ", cudaGetErrorName(e), ": ",
            cudaGetErrorString(e));
}

}  // namespace

void amplitude_loss_cuda(const float* model_intensity, const float* measured, const uint8_t* mask,
                         int64_t mask_period, int64_t n, float measured_scale, float* dloss_dI,
                         double* loss_sum, void* stream, int device) {
  if (n <= 0) return;
  check(cudaSetDevice(device), "cudaSetDevice");
  const int64_t blocks = std::min<int64_t>((n + k_threads - 1) / k_threads, k_max_blocks);
  amplitude_kernel<<<unsigned(blocks), k_threads, 0, static_cast<cudaStream_t>(stream)>>>(
      model_intensity, measured, mask, mask_period, n, measured_scale, dloss_dI, loss_sum);
  check(cudaGetLastError(), "the amplitude kernel's launch");
}

}  // namespace tycho::losses
