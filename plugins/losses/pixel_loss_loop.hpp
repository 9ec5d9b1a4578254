// The host loop of a per-pixel loss (amplitude_pixel.hpp, intensity_pixel.hpp, poisson_pixel.hpp;
// called by losses_plugin.cpp): dL/dI of every pixel and Σ L (the vtable's evaluate; its fused
// path is far_field_loss.hpp), each pattern summed in Real (the engine's precision) and the
// patterns in double. Thread-safe (reads `pixel` only).
#pragma once

#include <algorithm>
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

}  // namespace tycho::losses
