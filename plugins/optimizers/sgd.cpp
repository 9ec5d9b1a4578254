#include "optimizers.hpp"

namespace tycho::optimizers {
namespace {
template <class Real>
void sgd_loop(Real* param, const Real* grad, Real* velocity, int64_t n, Real lr, Real mu, Real grad_scale) {
  for (int64_t i = 0; i < n; ++i) {
    velocity[i] = mu * velocity[i] + grad[i] * grad_scale;
    param[i] -= lr * velocity[i];
  }
}
}  // namespace

sgd_coefficients sgd_state::coefficients(float grad_scale, double lr_scale) const {
  return {float(learning_rate * lr_scale), float(momentum), grad_scale};
}

void sgd_state::step(float* param, const float* grad, int64_t n, float grad_scale,
                      double lr_scale) {
  if (velocity.size() != std::size_t(n)) velocity.assign(std::size_t(n), 0.f);
  ++steps;
  const sgd_coefficients c = coefficients(grad_scale, lr_scale);
  sgd_loop<float>(param, grad, velocity.data(), n, c.learning_rate, c.momentum, grad_scale);
}

void sgd_state::step(double* param, const double* grad, int64_t n, double grad_scale,
                      double lr_scale) {
  if (velocity64.size() != std::size_t(n)) velocity64.assign(std::size_t(n), 0.0);
  ++steps;
  sgd_loop<double>(param, grad, velocity64.data(), n, learning_rate * lr_scale, momentum, grad_scale);
}

void sgd_state::step(float* param, const float* grad, const box_step& boxes, float grad_scale, double lr_scale) {
  const int64_t n = boxes.total_reals();
  if (velocity.size() != std::size_t(n)) velocity.assign(std::size_t(n), 0.f);
  ++steps;
  const sgd_coefficients c = coefficients(grad_scale, lr_scale);
  boxes.for_each_segment([&](int64_t, int64_t at, int64_t len) {
    sgd_loop<float>(param + at, grad + at, velocity.data() + at, len, c.learning_rate, c.momentum, grad_scale);
  });
}

void sgd_state::step(double* param, const double* grad, const box_step& boxes, double grad_scale, double lr_scale) {
  const int64_t n = boxes.total_reals();
  if (velocity64.size() != std::size_t(n)) velocity64.assign(std::size_t(n), 0.0);
  ++steps;
  boxes.for_each_segment([&](int64_t, int64_t at, int64_t len) {
    sgd_loop<double>(param + at, grad + at, velocity64.data() + at, len, learning_rate * lr_scale, momentum, grad_scale);
  });
}
}  // namespace tycho::optimizers
