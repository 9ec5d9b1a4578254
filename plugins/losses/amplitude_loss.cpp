#include "amplitude_loss.hpp"

#include "amplitude_pixel.hpp"
#include "pixel_loss_loop.hpp"

namespace tycho::losses {
template <class Real>
double amplitude_loss(const Real* model_intensity, const float* measured, const uint8_t* mask,
                      int64_t mask_period, int64_t n, Real measured_scale, Real* dloss_dI) {
  return pixel_loss_sum(amplitude_pixel<Real>{measured_scale}, model_intensity, measured, mask, mask_period, n,
                        dloss_dI);
}

template double amplitude_loss<float>(const float*, const float*, const uint8_t*, int64_t, int64_t, float,
                                      float*);
template double amplitude_loss<double>(const double*, const float*, const uint8_t*, int64_t, int64_t, double,
                                       double*);
}  // namespace tycho::losses
