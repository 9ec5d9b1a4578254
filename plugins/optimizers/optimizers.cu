// Adam and SGD kernels for device parameters: one thread per real (grid-stride), the host's
// per-element formula (optimizer_elements.hpp) with the host's per-step coefficients.
#include <tycho/sdk.hpp>

#include <cuda_runtime.h>

#include <algorithm>

#include "optimizers_cuda.hpp"

namespace tycho::optimizers {
namespace {

constexpr int k_threads = 256;

void check(cudaError_t e, const char* call, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  sdk::fail(e == cudaErrorMemoryAllocation ? TYCHO_ERR_OUT_OF_MEMORY : TYCHO_ERR_INTERNAL, "optimizer: ", call,
            " (", what, ") failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + k_threads - 1) / k_threads;
  return unsigned(std::min<int64_t>(b, int64_t(1) << 20));  // grid-stride beyond
}

__global__ void __launch_bounds__(k_threads)
    adam_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                float* __restrict__ v, int64_t n, adam_coefficients c) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float p = param[i], mi = m[i], vi = v[i];
    adam_element(p, mi, vi, grad[i], c);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ void __launch_bounds__(k_threads)
    sgd_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ velocity, int64_t n,
               sgd_coefficients c) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float p = param[i], u = velocity[i];
    sgd_element(p, u, grad[i], c);
    param[i] = p;
    velocity[i] = u;
  }
}

}  // namespace

// The engine's stream may be gone by now: wait for the device, then free in the order of the
// legacy default stream.
device_state::~device_state() {
  if (device_ < 0 || (a_ == nullptr && b_ == nullptr)) return;
  (void)cudaSetDevice(device_);
  (void)cudaDeviceSynchronize();
  if (a_ != nullptr) (void)cudaFreeAsync(a_, nullptr);
  if (b_ != nullptr) (void)cudaFreeAsync(b_, nullptr);
  (void)cudaStreamSynchronize(nullptr);
  (void)cudaGetLastError();
}

void device_state::ensure(int64_t n, int buffers, void* stream, int device) {
  check(cudaSetDevice(device), "cudaSetDevice", "optimizer state");
  if (n_ == n && device_ == device && (buffers < 2 || b_ != nullptr)) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (a_ != nullptr) check(cudaFreeAsync(a_, s), "cudaFreeAsync", "optimizer state");
  if (b_ != nullptr) check(cudaFreeAsync(b_, s), "cudaFreeAsync", "optimizer state");
  a_ = b_ = nullptr;
  n_ = 0;
  device_ = device;
  const size_t bytes = size_t(n) * sizeof(float);
  check(cudaMallocAsync(reinterpret_cast<void**>(&a_), bytes, s), "cudaMallocAsync", "optimizer state");
  check(cudaMemsetAsync(a_, 0, bytes, s), "cudaMemsetAsync", "optimizer state");
  if (buffers > 1) {
    check(cudaMallocAsync(reinterpret_cast<void**>(&b_), bytes, s), "cudaMallocAsync", "optimizer state");
    check(cudaMemsetAsync(b_, 0, bytes, s), "cudaMemsetAsync", "optimizer state");
  }
  n_ = n;
}

void device_state::read(int which, float* host, int64_t n, int device) {
  float* buf = which == 0 ? a_ : b_;
  if (buf == nullptr || n_ != n) {
    std::fill(host, host + n, 0.f);
    return;
  }
  check(cudaSetDevice(device_), "cudaSetDevice", "optimizer state");
  (void)device;
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "optimizer state");
  check(cudaMemcpy(host, buf, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy",
        "optimizer state");
}

void device_state::write(int which, const float* host, int64_t n, int buffers, int device) {
  // Ordered on the legacy default stream, then waited for: complete before any later work.
  ensure(n, buffers, nullptr, device);
  check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize", "optimizer state");
  float* buf = which == 0 ? a_ : b_;
  check(cudaMemcpy(buf, host, size_t(n) * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy",
        "optimizer state");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "optimizer state");
}

void device_state::adam_step(float* param, const float* grad, int64_t n, const adam_coefficients& c, void* stream,
                             int device) {
  ensure(n, 2, stream, device);
  adam_kernel<<<blocks_for(n), k_threads, 0, static_cast<cudaStream_t>(stream)>>>(param, grad, a_, b_, n, c);
  check(cudaGetLastError(), "kernel launch", "adam");
}

void device_state::sgd_step(float* param, const float* grad, int64_t n, const sgd_coefficients& c, void* stream,
                            int device) {
  ensure(n, 1, stream, device);
  sgd_kernel<<<blocks_for(n), k_threads, 0, static_cast<cudaStream_t>(stream)>>>(param, grad, a_, n, c);
  check(cudaGetLastError(), "kernel launch", "sgd");
}

}  // namespace tycho::optimizers
