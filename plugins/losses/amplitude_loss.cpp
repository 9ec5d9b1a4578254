#include "amplitude_loss.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace tycho::losses {
template <class Real>
double amplitude_loss(const Real* model_intensity, const float* measured, const uint8_t* mask,
                      int64_t mask_period, int64_t n, Real measured_scale, Real* dloss_dI) {
  // Branch-free per pixel so the loop vectorises; each mask period (one pattern) is summed in
  // Real and the patterns in double.
  double loss = 0;
  for (int64_t start = 0; start < n; start += mask_period) {
    const int64_t len = std::min(mask_period, n - start);
    const Real* im = model_intensity + start;
    const float* d = measured + start;
    Real* g = dloss_dI + start;
    // One loop with and one without a mask (has_mask is a compile-time constant): a `||` on
    // the mask pointer inside the loop is control flow, and the loop would not vectorise.
    auto pixels = [&](auto has_mask) {
      Real sum = Real(0);
#pragma omp simd reduction(+ : sum)
      for (int64_t k = 0; k < len; ++k) {
        // Selects, not products with the mask: a masked pixel may hold anything, even inf.
        // Arithmetic first, selects after: with the default -ftrapping-math the compiler does
        // not move a division or product out of a ?: arm, and an arm is control flow.
        int use = 1;
        if constexpr (decltype(has_mask)::value) use = int(mask[k]) != 0;
        const Real amp_model = std::sqrt(im[k]);
        const Real amp_meas = std::sqrt(std::max(Real(d[k]) * measured_scale, Real(0)));
        const Real diff = amp_model - amp_meas;
        const Real square = diff * diff;
        const bool positive = amp_model > Real(0);
        const Real ratio = amp_meas / (positive ? amp_model : Real(1));
        sum += use != 0 ? square : Real(0);
        g[k] = (use != 0) & positive ? Real(1) - ratio : Real(0);
      }
      return sum;
    };
    const Real sum = mask != nullptr ? pixels(std::true_type{}) : pixels(std::false_type{});
    loss += double(sum);
  }
  return loss;
}

template double amplitude_loss<float>(const float*, const float*, const uint8_t*, int64_t, int64_t, float,
                                      float*);
template double amplitude_loss<double>(const double*, const float*, const uint8_t*, int64_t, int64_t, double,
                                       double*);
}  // namespace tycho::losses
