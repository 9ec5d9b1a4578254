// The Poisson (counting-noise) loss of one pixel, shared by the CPU loop (pixel_loss_loop.hpp)
// and the CUDA kernel (pixel_losses.cu).
//
// The negative log-likelihood of counts D_k given the expected counts c I_k, with c = 1 / s the
// factor from the model's units back to counts (s = measured_scale), is, up to terms in D only,
//   −log P = Σ_k c I_k − D_k log(c I_k)
// (Thibault & Guizar-Sicairos 2012, New J. Phys. 14 063004, the Poisson model; Godard et al.
// 2012, Opt. Express 20 25914; Odstrčil, Menzel & Guizar-Sicairos 2018, Opt. Express 26 3108,
// the Poisson likelihood). Written in the model's units with the guard ε (below),
// and with the terms in D only chosen so that L ≥ 0 and L = 0 at the fit (the Poisson deviance):
//   L = ½ Σ_k mask_k [ m_k − d_k − d_k log(m_k / d_k) ],   m = I + ε,  d = s D + ε,
//   dL/dI_k = ½ (m_k − d_k) / m_k = ½ (I_k − s D_k) / (I_k + ε).
// This is s/2 · (−log P) of the counts with ε/s counts added to model and data alike.
//
// The factor ½ s: near the fit the deviance is (cI − D)² / (2D) = c (I − sD)² / (2 sD), so
// s/2 times it is (I − sD)² / (4 sD), the amplitude loss's (√I − √(sD))² to second order at
// every pixel: the same loss scale and, to first order, the same gradient, so the amplitude
// loss's learning rates carry over.
//
// The guard ε: without it dL/dI = ½ (1 − sD/I) is −∞ at I = 0 wherever a count was recorded.
// With ε added to the model and the data (not the model alone), the minimum stays at I = sD
// exactly, dL/dI is finite everywhere (−½ sD / ε at I = 0; 0 at I = 0 where D = 0), and so is
// ∂L/∂Ψ* = (dL/dI) Ψ, below ¼ sD / √ε in modulus near I = 0. ε is relative to the data's
// scale: ε = poisson_epsilon · Ī with Ī = 1 / (N0 N1) the mean pixel intensity in the model's
// units (the engines scale the mean total intensity to 1), i.e. poisson_epsilon times the mean
// counts per pixel, whatever the dose or detector size. Negative data (after a background
// subtraction) and negative model values count as 0.
#pragma once

#include <cstdint>

#include "pixel_loss.hpp"

namespace tycho::losses {

template <class Real>
struct poisson_pixel {
  static constexpr bool same_bits_at_any_width = false;  // its log is libmvec's, a separate SSE and AVX2 implementation (far_field_loss.hpp)
  Real measured_scale;  // s: D · s is in the units of I
  Real epsilon;         // ε in the units of I (> 0)

  // ε = epsilon_relative / (N0 N1): `epsilon_relative` times the mean pixel intensity.
  static poisson_pixel for_patterns(double measured_scale, int64_t pattern_pixels, double epsilon_relative) {
    return {Real(measured_scale), Real(epsilon_relative / double(pattern_pixels))};
  }

  // Selects, not products with the mask: a masked pixel may hold anything, even inf or NaN.
  TYCHO_LOSS_HD pixel_loss_result<Real> operator()(Real model_intensity, float measured, bool use) const {
    const Real scaled = Real(measured) * measured_scale;
    const Real m = (model_intensity > Real(0) ? model_intensity : Real(0)) + epsilon;
    const Real d = (scaled > Real(0) ? scaled : Real(0)) + epsilon;
    const Real r = m - d;
    // m − d − d log(m/d) = d (u − log(1 + u)) with u = r / d, written with log1p so that the
    // ratio near 1 (the fit) loses no digits to log.
    const Real loss = Real(0.5) * (r - d * log1p_of(r / d));
    return {use ? loss : Real(0), use ? Real(0.5) * r / m : Real(0)};
  }
};

}  // namespace tycho::losses
