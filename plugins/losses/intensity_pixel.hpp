// The intensity (Gaussian on I) loss of one pixel, shared by the CPU loop (pixel_loss_loop.hpp)
// and the CUDA kernel (pixel_losses.cu):
//   L = w Σ_k mask_k (I_k − s D_k)²,   dL/dI_k = 2 w (I_k − s D_k),   w = N0 N1 / 4,
// the least-squares fit of intensities with one variance for every pixel (the Gaussian noise
// model of Thibault & Guizar-Sicairos 2012, New J. Phys. 14 063004, with uniform weights;
// Godard et al. 2012, Opt. Express 20 25914, the Gaussian model on intensities), s =
// measured_scale bringing D to the model's units.
//
// Why w = N0 N1 / 4: the engines scale every pattern so that its mean total intensity is 1
// (measured_scale = 1 / mean total), so the mean pixel intensity is Ī = 1 / (N0 N1). The
// amplitude loss is (√I − √(sD))² ≈ (I − sD)² / (4 I) near the fit; w = 1 / (4 Ī) makes the
// two losses, and their gradients, equal to second (first) order at a pixel of mean intensity,
// so the loss history reads on the same scale and the default learning rates carry over (Adam
// divides the scale out anyway; SGD sees it). Brighter pixels than the mean weigh more here
// than under the amplitude loss, darker ones less: the Gaussian noise model's point.
#pragma once

#include <cstdint>

#include "pixel_loss.hpp"

namespace tycho::losses {

template <class Real>
struct intensity_pixel {
  static constexpr bool same_bits_at_any_width = true;  // products only: the same bits in SSE2 and AVX2 code (far_field_loss.hpp)
  Real measured_scale;  // s: D · s is in the units of I
  Real weight;          // w = N0 N1 / 4

  // For patterns of `pattern_pixels` = N0 · N1 pixels.
  static intensity_pixel for_patterns(double measured_scale, int64_t pattern_pixels) {
    return {Real(measured_scale), Real(double(pattern_pixels) / 4.0)};
  }

  // Selects, not products with the mask: a masked pixel may hold anything, even inf or NaN.
  TYCHO_LOSS_HD pixel_loss_result<Real> operator()(Real model_intensity, float measured, bool use) const {
    const Real residual = model_intensity - Real(measured) * measured_scale;
    const Real wr = weight * residual;
    return {use ? wr * residual : Real(0), use ? Real(2) * wr : Real(0)};
  }
};

}  // namespace tycho::losses
