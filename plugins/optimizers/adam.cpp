#include <cmath>

#include "optimizers.hpp"

namespace tycho::optimizers {
adam_coefficients adam_state::begin_step(float grad_scale, double lr_scale) {
  ++steps;
  // Bias corrections folded into the step size and epsilon, as in the paper's final form.
  const double c1 = 1.0 - std::pow(beta1, double(steps));
  const double c2 = 1.0 - std::pow(beta2, double(steps));
  return {float(beta1), float(beta2), float(learning_rate * lr_scale / c1), float(std::sqrt(c2)),
          float(epsilon), grad_scale};
}

void adam_state::step(float* param, const float* grad, int64_t n, float grad_scale,
                      double lr_scale) {
  // Zeros on the first step; a restored state (set_state) already has n values.
  if (m.size() != std::size_t(n)) m.assign(std::size_t(n), 0.f);
  if (v.size() != std::size_t(n)) v.assign(std::size_t(n), 0.f);
  const adam_coefficients c = begin_step(grad_scale, lr_scale);
  const float b1 = c.beta1, b2 = c.beta2;
  const float step_size = c.step_size;
  const float sqrt_c2 = c.sqrt_c2;
  const float eps = c.epsilon;
  float* __restrict mp = m.data();
  float* __restrict vp = v.data();
// simd only: a thread team here would not honour the engine's thread count.
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * grad_scale;
    mp[i] = b1 * mp[i] + (1.f - b1) * g;
    vp[i] = b2 * vp[i] + (1.f - b2) * g * g;
    param[i] -= step_size * mp[i] / (std::sqrt(vp[i]) / sqrt_c2 + eps);
  }
}
}  // namespace tycho::optimizers
