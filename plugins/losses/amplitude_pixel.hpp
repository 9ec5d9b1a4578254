// The amplitude loss of one pixel, shared by the device kernel (amplitude_loss.cu) and the
// CPU-side tests that compare it with the host loop of amplitude_loss.cpp:
//   contribution = (√I − √(s D))²,   dL/dI = 1 − √(s D)/√I   on used pixels; 0 where I = 0
//   and on masked pixels.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TYCHO_LOSS_HD __host__ __device__
#else
#define TYCHO_LOSS_HD
#endif

namespace tycho::losses {

struct amplitude_pixel_result {
  float loss;
  float dloss_dI;
};

// Selects, not products with the mask, as the host loop: a masked pixel may hold anything.
TYCHO_LOSS_HD inline amplitude_pixel_result amplitude_pixel(float model_intensity, float measured,
                                                            float measured_scale, bool use) {
  const float amp_model = sqrtf(model_intensity);
  const float scaled = measured * measured_scale;
  const float amp_meas = sqrtf(scaled > 0.f ? scaled : 0.f);
  const float diff = amp_model - amp_meas;
  return {use ? diff * diff : 0.f, use && amp_model > 0.f ? 1.f - amp_meas / amp_model : 0.f};
}

}  // namespace tycho::losses
