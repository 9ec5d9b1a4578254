#include "amplitude_loss.hpp"

#include <algorithm>
#include <cmath>

namespace tycho::losses {
double amplitude_loss(const float* model_intensity, const float* measured, const uint8_t* mask,
                      int64_t mask_period, int64_t n, float measured_scale, float* dloss_dI) {
  double loss = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (mask != nullptr && mask[k % mask_period] == 0) {
      dloss_dI[k] = 0.f;
      continue;
    }
    float amp_model = std::sqrt(model_intensity[k]);
    float amp_meas = std::sqrt(std::max(measured[k] * measured_scale, 0.f));
    float diff = amp_model - amp_meas;
    loss += double(diff) * double(diff);
    dloss_dI[k] = amp_model > 0.f ? 1.f - amp_meas / amp_model : 0.f;
  }
  return loss;
}
}  // namespace tycho::losses
