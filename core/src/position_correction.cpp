#include "tycho/core/position_correction.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tycho/core/error.hpp"
#include "tycho/core/exact_sum.hpp"

namespace tycho {

template <class T>
void position_curvature(const std::complex<T>* probe, int64_t modes, int64_t n0, int64_t n1,
                        const std::complex<T>* object, int64_t slices, int64_t h, int64_t w, const int64_t box_lo[2],
                        const int64_t box_hi[2], double curvature[2]) {
  double power = 0;
  for (int64_t k = 0; k < modes * n0 * n1; ++k) power += std::norm(std::complex<double>(probe[k]));
  const int64_t r0 = std::max<int64_t>(box_lo[0], 1), r1 = std::min<int64_t>(box_hi[0], h - 1);
  const int64_t c0 = std::max<int64_t>(box_lo[1], 1), c1 = std::min<int64_t>(box_hi[1], w - 1);
  double sum[2] = {0, 0};
  int64_t count = 0;
  for (int64_t s = 0; s < slices; ++s) {
    const std::complex<T>* o = object + s * h * w;
    for (int64_t a = r0; a < r1; ++a)
      for (int64_t b = c0; b < c1; ++b) {
        const std::complex<double> d0 =
            (std::complex<double>(o[(a + 1) * w + b]) - std::complex<double>(o[(a - 1) * w + b])) * 0.5;
        const std::complex<double> d1 =
            (std::complex<double>(o[a * w + b + 1]) - std::complex<double>(o[a * w + b - 1])) * 0.5;
        sum[0] += std::norm(d0);
        sum[1] += std::norm(d1);
        if (s == 0) ++count;
      }
  }
  for (int a = 0; a < 2; ++a) curvature[a] = count > 0 ? 2.0 * power * sum[a] / double(count) : 0.0;
}

// The steps' sum is exact, so the same on one rank as on several (whose partial sums the host
// adds as doubles): each step enters it rounded to the grid q of tycho/core/exact_sum.hpp for
// 2^28 steps of at most max_step_px (≤ 2^e): q = 2^(e − 23). The positions themselves move by the
// steps as computed; only their mean is taken from the rounded ones (at most q/2 ≈ 6e-8 px off).
namespace {
constexpr int64_t k_most_exact_steps = int64_t(1) << 28;
double step_quantum(double max_step_px) {
  int e = 0;
  std::frexp(std::max(max_step_px, 1e-300), &e);  // max_step_px ≤ 2^e
  return exact_sum_quantum(e, double(k_most_exact_steps));
}
}  // namespace

void position_steps(const double* gradient, int64_t count, const double h[2], const position_step_options& o,
                    double* step, double sum[2]) {
  sum[0] = sum[1] = 0;
  if (count <= 0) return;
  if (count > k_most_exact_steps)
    fail(TYCHO_ERR_UNSUPPORTED, "position correction: ", count, " positions, more than the ", k_most_exact_steps,
         " whose mean step is summed exactly");
  const double q = step_quantum(o.max_step_px);
  if (!(h[0] > 0 && h[1] > 0 && std::isfinite(h[0]) && std::isfinite(h[1])))
    fail(TYCHO_ERR_BAD_DATA, "position correction: the curvature (", h[0], ", ", h[1],
         ") is not finite and positive: the object has no structure yet to locate the patterns by; ",
         "start it later ([reconstruct.positions] first_iteration)");
  for (int64_t j = 0; j < count; ++j)
    for (int a = 0; a < 2; ++a) {
      const double g = gradient[2 * j + a];
      if (!std::isfinite(g))
        fail(TYCHO_ERR_BAD_DATA, "position correction: the gradient of position ", j, " is ", g);
      const double d = std::clamp(-o.rate * g / h[a], -o.max_step_px, o.max_step_px);
      step[std::size_t(2 * j + a)] = d;
      sum[a] += std::nearbyint(d / q) * q;  // exact: see step_quantum
    }
}

void move_positions(double* positions, const double* step, int64_t count, const double mean[2],
                    const position_step_options& o) {
  for (int64_t j = 0; j < count; ++j)
    for (int a = 0; a < 2; ++a) {
      double& r = positions[2 * j + a];
      r = std::clamp(r + step[std::size_t(2 * j + a)] - (o.remove_mean_shift ? mean[a] : 0.0), o.lo[a], o.hi[a]);
    }
}

void step_positions(double* positions, const double* gradient, int64_t count, const double h[2],
                    const position_step_options& o) {
  if (count <= 0) return;
  std::vector<double> step(std::size_t(2 * count));
  double sum[2];
  position_steps(gradient, count, h, o, step.data(), sum);
  const double mean[2] = {sum[0] / double(count), sum[1] / double(count)};
  move_positions(positions, step.data(), count, mean, o);
}

template void position_curvature<float>(const std::complex<float>*, int64_t, int64_t, int64_t,
                                        const std::complex<float>*, int64_t, int64_t, int64_t, const int64_t[2],
                                        const int64_t[2], double[2]);
template void position_curvature<double>(const std::complex<double>*, int64_t, int64_t, int64_t,
                                         const std::complex<double>*, int64_t, int64_t, int64_t, const int64_t[2],
                                         const int64_t[2], double[2]);

namespace {
template <class T>
double pair_information_of(const T* a, const T* b, const double* mean, const uint8_t* valid, int64_t pixels) {
  double sum = 0;
  for (int64_t k = 0; k < pixels; ++k) {
    if ((valid != nullptr && valid[k] == 0) || !(mean[k] > 0)) continue;
    const double x = double(a[k]), y = double(b[k]);
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    sum += ((x - y) * (x - y) - x - y) / mean[k];
  }
  return sum;
}
}  // namespace

double pair_information(const float* a, const float* b, const double* mean, const uint8_t* valid, int64_t pixels) {
  return pair_information_of(a, b, mean, valid, pixels);
}
double pair_information(const uint16_t* a, const uint16_t* b, const double* mean, const uint8_t* valid, int64_t pixels) {
  return pair_information_of(a, b, mean, valid, pixels);
}

}  // namespace tycho
