#include <cmath>

#include "optimizers.hpp"

namespace tycho::optimizers {
namespace {
// The update loop in one precision; the coefficients come in that precision. Inlined into an
// SSE2 and an AVX2 copy below (always_inline: the AVX2 copy must vectorise its own inlined body);
// element by element, no FMA (-ffp-contract=off), so both give the same bits.
template <class Real>
__attribute__((always_inline)) inline void adam_body(Real* param, const Real* grad, Real* __restrict mp,
                                                     Real* __restrict vp, int64_t n, Real b1, Real b2,
                                                     Real step_size, Real sqrt_c2, Real eps, Real grad_scale) {
// simd only: a thread team here would not honour the engine's thread count.
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    Real g = grad[i] * grad_scale;
    mp[i] = b1 * mp[i] + (Real(1) - b1) * g;
    vp[i] = b2 * vp[i] + (Real(1) - b2) * g * g;
    param[i] -= step_size * mp[i] / (std::sqrt(vp[i]) / sqrt_c2 + eps);
  }
}

template <class Real>
void adam_loop_sse2(Real* param, const Real* grad, Real* mp, Real* vp, int64_t n, Real b1, Real b2, Real step_size,
                    Real sqrt_c2, Real eps, Real grad_scale) {
  adam_body(param, grad, mp, vp, n, b1, b2, step_size, sqrt_c2, eps, grad_scale);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <class Real>
__attribute__((target("avx2"))) void adam_loop_avx2(Real* param, const Real* grad, Real* mp, Real* vp, int64_t n,
                                                    Real b1, Real b2, Real step_size, Real sqrt_c2, Real eps,
                                                    Real grad_scale) {
  adam_body(param, grad, mp, vp, n, b1, b2, step_size, sqrt_c2, eps, grad_scale);
}
#endif

template <class Real>
void adam_loop(bool avx2, Real* param, const Real* grad, Real* mp, Real* vp, int64_t n, Real b1, Real b2,
               Real step_size, Real sqrt_c2, Real eps, Real grad_scale) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (avx2) return adam_loop_avx2(param, grad, mp, vp, n, b1, b2, step_size, sqrt_c2, eps, grad_scale);
#else
  (void)avx2;
#endif
  adam_loop_sse2(param, grad, mp, vp, n, b1, b2, step_size, sqrt_c2, eps, grad_scale);
}
}  // namespace

adam_coefficients adam_state::coefficients(int64_t t, float grad_scale, double lr_scale) const {
  // Bias corrections folded into the step size and epsilon, as in the paper's final form.
  const double c1 = 1.0 - std::pow(beta1, double(t));
  const double c2 = 1.0 - std::pow(beta2, double(t));
  return {float(beta1), float(beta2), float(learning_rate * lr_scale / c1), float(std::sqrt(c2)),
          float(epsilon), grad_scale};
}

adam_coefficients adam_state::begin_step(float grad_scale, double lr_scale) {
  ++steps;
  return coefficients(steps, grad_scale, lr_scale);
}

void adam_state::step(float* param, const float* grad, int64_t n, float grad_scale,
                      double lr_scale) {
  // Zeros on the first step; a restored state (set_state) already has n values.
  if (m.size() != std::size_t(n)) m.assign(std::size_t(n), 0.f);
  if (v.size() != std::size_t(n)) v.assign(std::size_t(n), 0.f);
  const adam_coefficients c = begin_step(grad_scale, lr_scale);
  adam_loop<float>(avx2_loop, param, grad, m.data(), v.data(), n, c.beta1, c.beta2, c.step_size, c.sqrt_c2, c.epsilon,
                   grad_scale);
}

void adam_state::step(double* param, const double* grad, int64_t n, double grad_scale,
                      double lr_scale) {
  if (m64.size() != std::size_t(n)) m64.assign(std::size_t(n), 0.0);
  if (v64.size() != std::size_t(n)) v64.assign(std::size_t(n), 0.0);
  ++steps;
  const double c1 = 1.0 - std::pow(beta1, double(steps));
  const double c2 = 1.0 - std::pow(beta2, double(steps));
  adam_loop<double>(avx2_loop, param, grad, m64.data(), v64.data(), n, beta1, beta2, learning_rate * lr_scale / c1,
                    std::sqrt(c2), epsilon, grad_scale);
}

// Boxes: each box's segments with the coefficients of its own step count, which a box shares
// with the whole-parameter step of that number bit for bit (the same coefficients, the same loop).
void adam_state::step(float* param, const float* grad, const box_step& boxes, float grad_scale, double lr_scale) {
  const int64_t n = boxes.total_reals();
  if (m.size() != std::size_t(n)) m.assign(std::size_t(n), 0.f);
  if (v.size() != std::size_t(n)) v.assign(std::size_t(n), 0.f);
  ++steps;
  int64_t box = -1;
  adam_coefficients c{};
  boxes.for_each_segment([&](int64_t k, int64_t at, int64_t len) {
    if (k != box) c = coefficients(boxes.steps[box = k], grad_scale, lr_scale);
    adam_loop<float>(avx2_loop, param + at, grad + at, m.data() + at, v.data() + at, len, c.beta1, c.beta2,
                     c.step_size, c.sqrt_c2, c.epsilon, grad_scale);
  });
}

void adam_state::step(double* param, const double* grad, const box_step& boxes, double grad_scale, double lr_scale) {
  const int64_t n = boxes.total_reals();
  if (m64.size() != std::size_t(n)) m64.assign(std::size_t(n), 0.0);
  if (v64.size() != std::size_t(n)) v64.assign(std::size_t(n), 0.0);
  ++steps;
  boxes.for_each_segment([&](int64_t k, int64_t at, int64_t len) {
    const double t = double(boxes.steps[k]);
    const double c1 = 1.0 - std::pow(beta1, t), c2 = 1.0 - std::pow(beta2, t);
    adam_loop<double>(avx2_loop, param + at, grad + at, m64.data() + at, v64.data() + at, len, beta1, beta2,
                      learning_rate * lr_scale / c1, std::sqrt(c2), epsilon, grad_scale);
  });
}
}  // namespace tycho::optimizers
