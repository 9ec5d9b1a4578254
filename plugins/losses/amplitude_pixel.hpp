// The amplitude loss of one pixel, shared by the CPU loop (amplitude_loss.cpp, through
// pixel_loss_loop.hpp) and the CUDA kernel (amplitude_loss.cu, through pixel_loss_kernel.cuh):
//   contribution = (√I − √(s D))²,   dL/dI = 1 − √(s D)/√I   on used pixels; 0 where I = 0
//   and on masked pixels.
#pragma once

#include <cmath>
#include <cstdint>

#include "pixel_loss.hpp"

namespace tycho::losses {

template <class Real>
TYCHO_LOSS_HD inline Real amplitude_of(Real intensity) {
#if defined(__CUDA_ARCH__)
  return sqrt(intensity);
#else
  return std::sqrt(intensity);
#endif
}

template <class Real>
struct amplitude_pixel {
  Real measured_scale;  // s: D · s is in the units of I

  // Arithmetic first, selects after, and selects rather than products with the mask: a masked
  // pixel may hold anything, even inf or NaN (and a select keeps the host loop branch-free, so
  // it vectorises).
  TYCHO_LOSS_HD pixel_loss_result<Real> operator()(Real model_intensity, float measured, bool use) const {
    const Real amp_model = amplitude_of(model_intensity);
    const Real scaled = Real(measured) * measured_scale;
    const Real amp_meas = amplitude_of(scaled > Real(0) ? scaled : Real(0));
    const Real diff = amp_model - amp_meas;
    const Real square = diff * diff;
    const bool positive = amp_model > Real(0);
    const Real ratio = amp_meas / (positive ? amp_model : Real(1));
    return {use ? square : Real(0), use && positive ? Real(1) - ratio : Real(0)};
  }
};

}  // namespace tycho::losses
