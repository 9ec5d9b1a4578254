#include "amplitude_loss.hpp"

#include <algorithm>
#include <cmath>

namespace tycho::losses {
double amplitude_loss(const float* model_intensity, const float* measured, const uint8_t* mask,
                      int64_t mask_period, int64_t n, float measured_scale, float* dloss_dI) {
  // Branch-free per pixel so the loop vectorises; each mask period (one pattern) is summed in
  // float and the patterns in double.
  double loss = 0;
  for (int64_t start = 0; start < n; start += mask_period) {
    const int64_t len = std::min(mask_period, n - start);
    const float* im = model_intensity + start;
    const float* d = measured + start;
    float* g = dloss_dI + start;
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t k = 0; k < len; ++k) {
      // Selects, not products with the mask: a masked pixel may hold anything, even inf.
      const bool use = mask == nullptr || mask[k] != 0;
      const float amp_model = std::sqrt(im[k]);
      const float amp_meas = std::sqrt(std::max(d[k] * measured_scale, 0.f));
      const float diff = amp_model - amp_meas;
      sum += use ? diff * diff : 0.f;
      g[k] = use && amp_model > 0.f ? 1.f - amp_meas / amp_model : 0.f;
    }
    loss += double(sum);
  }
  return loss;
}
}  // namespace tycho::losses
