// One element of the built-in optimizers' updates, shared by the device kernels
// (optimizers.cu) and the CPU-side tests that compare them with the host loops of adam.cpp and
// sgd.cpp. Coefficients are computed once per step on the host, as the host loops do.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TYCHO_OPT_HD __host__ __device__
#else
#define TYCHO_OPT_HD
#endif

namespace tycho::optimizers {

// Adam with the bias corrections folded into the step size and ε (adam.cpp):
// step_size = lr·lr_scale / (1 − β1^t), sqrt_c2 = √(1 − β2^t).
struct adam_coefficients {
  float beta1, beta2, step_size, sqrt_c2, epsilon, grad_scale;
};

TYCHO_OPT_HD inline void adam_element(float& param, float& m, float& v, float grad,
                                      const adam_coefficients& c) {
  const float g = grad * c.grad_scale;
  m = c.beta1 * m + (1.f - c.beta1) * g;
  v = c.beta2 * v + (1.f - c.beta2) * g * g;
  param -= c.step_size * m / (sqrtf(v) / c.sqrt_c2 + c.epsilon);
}

// Gradient descent with momentum (sgd.cpp): u ← μ u + g·scale;  p ← p − lr u.
struct sgd_coefficients {
  float learning_rate, momentum, grad_scale;
};

TYCHO_OPT_HD inline void sgd_element(float& param, float& velocity, float grad, const sgd_coefficients& c) {
  velocity = c.momentum * velocity + grad * c.grad_scale;
  param -= c.learning_rate * velocity;
}

}  // namespace tycho::optimizers
