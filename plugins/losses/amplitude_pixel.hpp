// The amplitude loss of one pixel, shared by the CPU loop (pixel_loss_loop.hpp)
// and the CUDA kernel (pixel_losses.cu, through pixel_loss_kernel.cuh):
//   contribution = (√(I + ε) − √(s D + ε))²,   dL/dI = 1 − √(s D + ε)/√(I + ε)
// on used pixels, 0 on masked ones (Thibault & Guizar-Sicairos 2012; Odstrčil et al. 2018 for the
// loss; the guard ε as the Poisson loss's, poisson_pixel.hpp).
//
// The guard ε: without it (ε = 0) the gradient ∂L/∂Ψ* = (dL/dI) Ψ tends to −√(sD) Ψ/|Ψ| as
// I → 0: wherever the model's far field is numerically empty (outside the bright-field disc of
// a flat starting object, |Ψ|² ~ 1e-14 of the peak) while a count was recorded, each such pixel
// pulls with the full weight √(sD) in the direction of the rounding noise's phase. Those
// gradients are partly noise, the same on no two machines or rank counts, and Adam's first steps
// (lr · g/|g|) carry them into the object and probe. Added to model and data alike, ε keeps the
// minimum at I = sD and leaves pixels with I, sD ≫ ε as they were, while |∂L/∂Ψ*| ≤
// √(sD + ε) |Ψ| / √ε stays bounded by the model's own amplitude there. ε = amplitude_epsilon · Ī,
// Ī = 1/(N0 N1) the mean pixel intensity in the model's units (the engines scale the mean total
// intensity to 1), so the same relative guard holds at any dose and detector size. The price:
// the dark field of a flat starting object grows from I ≈ 0 more slowly, so short runs converge
// later (MoS2: better from ~50 iterations on, worse at 20–30; docs/losses.md has the figures).
// ε = 0 (the default) is the unguarded loss, with dL/dI = 0 at I = 0 (the chain rule multiplies
// by Ψ = 0 there anyway).
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
  static constexpr bool same_bits_at_any_width = true;  // sqrt and division only: the same bits in SSE2 and AVX2 code (far_field_loss.hpp)
  Real measured_scale;  // s: D · s is in the units of I
  Real epsilon;         // ε in the units of I (≥ 0)

  // ε = epsilon_relative / (N0 N1): `epsilon_relative` times the mean pixel intensity.
  static amplitude_pixel for_patterns(double measured_scale, int64_t pattern_pixels, double epsilon_relative) {
    return {Real(measured_scale), Real(epsilon_relative / double(pattern_pixels))};
  }

  // Arithmetic first, selects after, and selects rather than products with the mask: a masked
  // pixel may hold anything, even inf or NaN (and a select keeps the host loop branch-free, so
  // it vectorises).
  TYCHO_LOSS_HD pixel_loss_result<Real> operator()(Real model_intensity, float measured, bool use) const {
    // No clamp on the model (I = Σ|Ψ|² ≥ 0): a NaN from a diverged state must reach the loss sum.
    const Real amp_model = amplitude_of(model_intensity + epsilon);
    const Real scaled = Real(measured) * measured_scale;
    const Real amp_meas = amplitude_of((scaled > Real(0) ? scaled : Real(0)) + epsilon);
    const Real diff = amp_model - amp_meas;
    const Real square = diff * diff;
    const bool positive = amp_model > Real(0);
    const Real ratio = amp_meas / (positive ? amp_model : Real(1));
    return {use ? square : Real(0), use && positive ? Real(1) - ratio : Real(0)};
  }
};

}  // namespace tycho::losses
