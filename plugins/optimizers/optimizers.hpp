// Built-in optimizers on float32 or float64 data (complex parameters are pairs of independent
// reals): float32 / complex64 parameters keep float state (m, v, velocity), float64 /
// complex128 ones double state (m64, v64, velocity64), each updated in its own precision.
#pragma once

#include <cstdint>
#include <vector>

#include <tycho/sdk/simd.hpp>

#include "optimizer_elements.hpp"

namespace tycho::optimizers {

// Adam (Kingma & Ba 2015), bias-corrected:
//   m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;  p ← p − lr · m̂ / (√v̂ + ε)
struct adam_state {
  double learning_rate = 5e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  int64_t steps = 0;
  std::vector<float> m, v;
  std::vector<double> m64, v64;
  // The AVX2 build of the update loop (adam.cpp), where tycho::sdk::use_avx2_loops() says so.
  bool avx2_loop = tycho::sdk::use_avx2_loops();
  void step(float* param, const float* grad, int64_t n, float grad_scale, double lr_scale);
  void step(double* param, const double* grad, int64_t n, double grad_scale, double lr_scale);
  // Counts the step and returns its coefficients (what step() applies; the device path too).
  adam_coefficients begin_step(float grad_scale, double lr_scale);
};

// Plain gradient descent with optional momentum: u ← μ u + g;  p ← p − lr · u
struct sgd_state {
  double learning_rate = 1e-2, momentum = 0.0;
  int64_t steps = 0;  // counted for saving and resuming; the update does not use it
  std::vector<float> velocity;
  std::vector<double> velocity64;
  void step(float* param, const float* grad, int64_t n, float grad_scale, double lr_scale);
  void step(double* param, const double* grad, int64_t n, double grad_scale, double lr_scale);
  sgd_coefficients coefficients(float grad_scale, double lr_scale) const;
};

}  // namespace tycho::optimizers
