// What the per-pixel loss functions (intensity_pixel.hpp, poisson_pixel.hpp) share: the result
// of one pixel and the host/device qualifier, so that one function serves the CPU loop
// (pixel_loss_loop.hpp) and the CUDA kernel (pixel_loss_kernel.cuh).
#pragma once

#include <cmath>

#ifndef TYCHO_LOSS_HD
#if defined(__CUDACC__)
#define TYCHO_LOSS_HD __host__ __device__
#else
#define TYCHO_LOSS_HD
#endif
#endif

namespace tycho::losses {

// One pixel's contribution to Σ L and its dL/dI, in the engine's precision.
template <class Real>
struct pixel_loss_result {
  Real loss;
  Real dloss_dI;
};

// log(1 + x) for float and double alike on the host and on the device (log1pf and log1p are
// both there; a plain log1p(float) is not on the host).
TYCHO_LOSS_HD inline float log1p_of(float x) { return log1pf(x); }
TYCHO_LOSS_HD inline double log1p_of(double x) { return log1p(x); }

}  // namespace tycho::losses
