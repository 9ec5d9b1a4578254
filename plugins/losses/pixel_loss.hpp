// What the per-pixel loss functions (amplitude_pixel.hpp, intensity_pixel.hpp, poisson_pixel.hpp)
// share: the result of one pixel and the host/device qualifier, so that one function serves the
// CPU loop (pixel_loss_loop.hpp) and the CUDA kernel (pixel_loss_kernel.cuh).
#pragma once

#include <cmath>

#ifndef TYCHO_LOSS_HD
#if defined(__CUDACC__)
#define TYCHO_LOSS_HD __host__ __device__
#else
#define TYCHO_LOSS_HD
#endif
#endif

#if defined(TYCHO_LOSS_LIBMVEC) && !defined(__CUDACC__)
// glibc declares the vector variants only under -ffast-math (math-vector.h), which would also
// drop the NaN and inf semantics the mask's selects rely on; these declarations ask for them
// alone (GCC with -fopenmp-simd calls _ZGVbN4v_logf, _ZGVbN2v_log from libmvec).
extern "C" {
#pragma omp declare simd notinbranch
float logf(float) noexcept;
#pragma omp declare simd notinbranch
double log(double) noexcept;
}
#endif

namespace tycho::losses {

// One pixel's contribution to Σ L and its dL/dI, in the engine's precision.
template <class Real>
struct pixel_loss_result {
  Real loss;
  Real dloss_dI;
};

// log(1 + x), x > −1, for float and double on the host and on the device. The device has a fast
// log1p. The host's is a scalar library call (≈ 20 ns) that keeps the pixel loop from
// vectorising, so there log1p comes from log, which libmvec (glibc's vector maths, where CMake
// finds it: TYCHO_LOSS_LIBMVEC) provides 4 (2) pixels at a time, with Kahan's correction for the
// rounding of w = 1 + x: log(w) · x / (w − 1) is accurate near 0 as log1p is (Goldberg 1991,
// "What every computer scientist should know about floating-point arithmetic", theorem 4).
TYCHO_LOSS_HD inline float log1p_of(float x) {
#if defined(__CUDA_ARCH__)
  return log1pf(x);
#else
  const float w = 1.f + x, v = w - 1.f;
  return v == 0.f ? x : logf(w) * (x / v);  // a select: both arms are computed
#endif
}
TYCHO_LOSS_HD inline double log1p_of(double x) {
#if defined(__CUDA_ARCH__)
  return log1p(x);
#else
  const double w = 1.0 + x, v = w - 1.0;
  return v == 0.0 ? x : log(w) * (x / v);
#endif
}

}  // namespace tycho::losses
