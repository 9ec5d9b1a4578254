// The host loops of a per-pixel loss (amplitude_pixel.hpp, intensity_pixel.hpp, poisson_pixel.hpp;
// called by losses_plugin.cpp): dL/dI of every pixel and Σ L (pixel_loss_sum, the vtable's
// evaluate), or the same with the intensity formed from the far field and the chain rule back to it
// in the same pass (far_field_loss_sum, evaluate_far_field). Each pattern summed in Real (the
// engine's precision) and the patterns in double. Thread-safe (reads `pixel` only).
#pragma once

#include <algorithm>
#include <complex>
#include <cstdint>
#include <type_traits>

#include "pixel_loss.hpp"

namespace tycho::losses {

// n pixels; mask may be null (all valid) and repeats every `mask_period` pixels (one pattern).
// `pixel(I, D, use)` returns the pixel's pixel_loss_result<Real>.
template <class Real, class Pixel>
double pixel_loss_sum(const Pixel& pixel, const Real* model_intensity, const float* measured, const uint8_t* mask,
                      int64_t mask_period, int64_t n, Real* dloss_dI) {
  double loss = 0;
  for (int64_t start = 0; start < n; start += mask_period) {
    const int64_t len = std::min(mask_period, n - start);
    const Real* im = model_intensity + start;
    const float* d = measured + start;
    Real* g = dloss_dI + start;
    // One loop with and one without a mask (a compile-time constant): a test of the mask
    // pointer inside the loop would be control flow and keep it from vectorising.
    auto pixels = [&](auto has_mask) {
      Real sum = Real(0);
#pragma omp simd reduction(+ : sum)
      for (int64_t k = 0; k < len; ++k) {
        bool use = true;
        if constexpr (decltype(has_mask)::value) use = mask[k] != 0;
        const pixel_loss_result<Real> r = pixel(im[k], d[k], use);
        g[k] = r.dloss_dI;
        sum += r.loss;
      }
      return sum;
    };
    const Real sum = mask != nullptr ? pixels(std::true_type{}) : pixels(std::false_type{});
    loss += double(sum);
  }
  return loss;
}

// tycho_loss_vtable::evaluate_far_field on the host, for n patterns of `modes` far fields
// psi (n, modes, m) and measured (n, m) float32 or uint16 counts: I = Σ_k intensity_scale·|Ψ_k|²
// (k in order), r = pixel(I, D), G_k = Ψ_k · (r.dloss_dI · gradient_scale); returns Σ L. One pass
// for one mode; for several, chunks of pixels: their I first, then every mode's G.
template <class Real, class Pixel, class Measured>
double far_field_loss_sum(const Pixel& pixel, const std::complex<Real>* psi, int64_t n, int64_t modes, int64_t m,
                          Real intensity_scale, const Measured* measured, const uint8_t* mask, Real gradient_scale,
                          std::complex<Real>* gradient) {
  double loss = 0;
  for (int64_t j = 0; j < n; ++j) {
    const Real* __restrict w = reinterpret_cast<const Real*>(psi + j * modes * m);
    Real* __restrict g = reinterpret_cast<Real*>(gradient + j * modes * m);
    const Measured* __restrict d = measured + j * m;
    auto one_mode = [&](auto has_mask) {
      Real sum = Real(0);
#pragma omp simd reduction(+ : sum)
      for (int64_t k = 0; k < m; ++k) {
        bool use = true;
        if constexpr (decltype(has_mask)::value) use = mask[k] != 0;
        const Real re = w[2 * k], im = w[2 * k + 1];
        const Real intensity = (re * re + im * im) * intensity_scale;
        const pixel_loss_result<Real> r = pixel(intensity, float(d[k]), use);
        const Real f = r.dloss_dI * gradient_scale;
        g[2 * k] = re * f;
        g[2 * k + 1] = im * f;
        sum += r.loss;
      }
      return sum;
    };
    if (modes == 1) {
      loss += double(mask != nullptr ? one_mode(std::true_type{}) : one_mode(std::false_type{}));
      continue;
    }
    constexpr int64_t chunk = 256;
    Real intensity[chunk], factor[chunk];
    Real sum = Real(0);
    for (int64_t start = 0; start < m; start += chunk) {
      const int64_t len = std::min(chunk, m - start);
      for (int64_t mode = 0; mode < modes; ++mode) {
        const Real* __restrict wm = w + 2 * (mode * m + start);
#pragma omp simd
        for (int64_t k = 0; k < len; ++k) {
          const Real v = (wm[2 * k] * wm[2 * k] + wm[2 * k + 1] * wm[2 * k + 1]) * intensity_scale;
          intensity[k] = mode == 0 ? v : intensity[k] + v;
        }
      }
#pragma omp simd reduction(+ : sum)
      for (int64_t k = 0; k < len; ++k) {
        const bool use = mask == nullptr || mask[start + k] != 0;
        const pixel_loss_result<Real> r = pixel(intensity[k], float(d[start + k]), use);
        factor[k] = r.dloss_dI * gradient_scale;
        sum += r.loss;
      }
      for (int64_t mode = 0; mode < modes; ++mode) {
        const Real* __restrict wm = w + 2 * (mode * m + start);
        Real* __restrict gm = g + 2 * (mode * m + start);
#pragma omp simd
        for (int64_t k = 0; k < len; ++k) {
          gm[2 * k] = wm[2 * k] * factor[k];
          gm[2 * k + 1] = wm[2 * k + 1] * factor[k];
        }
      }
    }
    loss += double(sum);
  }
  return loss;
}

}  // namespace tycho::losses
