#include "optimizers.hpp"

namespace tycho::optimizers {
sgd_coefficients sgd_state::coefficients(float grad_scale, double lr_scale) const {
  return {float(learning_rate * lr_scale), float(momentum), grad_scale};
}

void sgd_state::step(float* param, const float* grad, int64_t n, float grad_scale,
                      double lr_scale) {
  if (velocity.size() != std::size_t(n)) velocity.assign(std::size_t(n), 0.f);
  ++steps;
  const sgd_coefficients c = coefficients(grad_scale, lr_scale);
  const float lr = c.learning_rate, mu = c.momentum;
  for (int64_t i = 0; i < n; ++i) {
    velocity[std::size_t(i)] = mu * velocity[std::size_t(i)] + grad[i] * grad_scale;
    param[i] -= lr * velocity[std::size_t(i)];
  }
}
}  // namespace tycho::optimizers
