// Built-in optimizers on float32 or float64 data (complex parameters are pairs of independent
// reals): float32 / complex64 parameters keep float state (m, v, velocity), float64 /
// complex128 ones double state (m64, v64, velocity64), each updated in its own precision.
#pragma once

#include <cstdint>
#include <vector>

#include <tycho/sdk/simd.hpp>

#include "optimizer_elements.hpp"

namespace tycho::optimizers {

// A step on boxes of a parameter (tycho_step_info's boxes, ABI 1.3): the parameter is `leading`
// planes of height × width elements of `reals` reals each (2 for complex), C order; box k is
// rows [b[4k], b[4k+1]) × columns [b[4k+2], b[4k+3]) of every plane, with step count steps[k].
struct box_step {
  int64_t leading, height, width, reals;
  const int64_t* boxes;
  const int64_t* steps;
  int64_t count;
  int64_t total_reals() const { return leading * height * width * reals; }
  // f(offset, length): every row segment of every box, in reals, box k by box k (k passed too).
  template <class F>
  void for_each_segment(F&& f) const {
    for (int64_t k = 0; k < count; ++k) {
      const int64_t* b = boxes + 4 * k;
      for (int64_t l = 0; l < leading; ++l)
        for (int64_t r = b[0]; r < b[1]; ++r) f(k, ((l * height + r) * width + b[2]) * reals, (b[3] - b[2]) * reals);
    }
  }
};

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
  // Only the boxes, each with the bias correction of its own step count (counts the step).
  void step(float* param, const float* grad, const box_step& boxes, float grad_scale, double lr_scale);
  void step(double* param, const double* grad, const box_step& boxes, double grad_scale, double lr_scale);
  // Counts the step and returns its coefficients (what step() applies; the device path too).
  adam_coefficients begin_step(float grad_scale, double lr_scale);
  // The coefficients of step number t (bias corrections 1 − β^t), in float32 as step() uses them.
  adam_coefficients coefficients(int64_t t, float grad_scale, double lr_scale) const;
};

// Plain gradient descent with optional momentum: u ← μ u + g;  p ← p − lr · u
struct sgd_state {
  double learning_rate = 1e-2, momentum = 0.0;
  int64_t steps = 0;  // counted for saving and resuming; the update does not use it
  std::vector<float> velocity;
  std::vector<double> velocity64;
  void step(float* param, const float* grad, int64_t n, float grad_scale, double lr_scale);
  void step(double* param, const double* grad, int64_t n, double grad_scale, double lr_scale);
  // Only the boxes (the rule has no step count; the boxes' counts are not used).
  void step(float* param, const float* grad, const box_step& boxes, float grad_scale, double lr_scale);
  void step(double* param, const double* grad, const box_step& boxes, double grad_scale, double lr_scale);
  sgd_coefficients coefficients(float grad_scale, double lr_scale) const;
};

}  // namespace tycho::optimizers
