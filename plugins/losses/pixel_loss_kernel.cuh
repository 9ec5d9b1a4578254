// The device kernel of a per-pixel loss (its instances: pixel_losses.cu):
// dL/dI per pixel and Σ L, reduced per block in float (as the host loop sums each pattern in
// float) and added to the device accumulator in double.
#pragma once

#include <tycho/sdk.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "pixel_loss.hpp"

namespace tycho::losses {
namespace pixel_loss_detail {

constexpr int k_threads = 256;
constexpr int64_t k_max_blocks = 2048;  // grid-stride beyond: fewer atomics on the one double

template <class Pixel>
__global__ void __launch_bounds__(k_threads)
    pixel_loss_kernel(Pixel pixel, const float* __restrict__ model, const float* __restrict__ measured,
                      const uint8_t* __restrict__ mask, int64_t period, int64_t n, float* __restrict__ grad,
                      double* __restrict__ loss_sum) {
  float sum = 0.f;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const bool use = mask == nullptr || mask[k % period] != 0;
    const pixel_loss_result<float> r = pixel(model[k], measured[k], use);
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

inline void check(cudaError_t e, const char* name, const char* call) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  sdk::fail(TYCHO_ERR_INTERNAL, name, ": ", call, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

}  // namespace pixel_loss_detail

// Queues the kernel on `stream` (no synchronisation); `name` ("poisson loss") goes into errors.
template <class Pixel>
void launch_pixel_loss(const char* name, const Pixel& pixel, const float* model_intensity, const float* measured,
                       const uint8_t* mask, int64_t mask_period, int64_t n, float* dloss_dI, double* loss_sum,
                       void* stream, int device) {
  using namespace pixel_loss_detail;
  if (n <= 0) return;
  check(cudaSetDevice(device), name, "cudaSetDevice");
  const int64_t blocks = std::min<int64_t>((n + k_threads - 1) / k_threads, k_max_blocks);
  pixel_loss_kernel<<<unsigned(blocks), k_threads, 0, static_cast<cudaStream_t>(stream)>>>(
      pixel, model_intensity, measured, mask, mask_period, n, dloss_dI, loss_sum);
  check(cudaGetLastError(), name, "the kernel's launch");
}

}  // namespace tycho::losses
