#include "amplitude_loss.hpp"

#include "pixel_loss_loop.hpp"

namespace tycho::losses {
template <class Real>
double amplitude_loss(const amplitude_pixel<Real>& pixel, const Real* model_intensity, const float* measured,
                      const uint8_t* mask, int64_t mask_period, int64_t n, Real* dloss_dI) {
  return pixel_loss_sum(pixel, model_intensity, measured, mask, mask_period, n, dloss_dI);
}

template double amplitude_loss<float>(const amplitude_pixel<float>&, const float*, const float*, const uint8_t*,
                                      int64_t, int64_t, float*);
template double amplitude_loss<double>(const amplitude_pixel<double>&, const double*, const float*,
                                       const uint8_t*, int64_t, int64_t, double*);
}  // namespace tycho::losses
