#include "runtime/stopping_rule.hpp"

#include <algorithm>
#include <cmath>

namespace tycho::host {

loss_trend fit_loss_trend(std::span<const double> history, int64_t k, int64_t window, double counting_noise) {
  loss_trend t;
  if (window < 3 || k < window || k > int64_t(history.size())) return t;
  // Centred sums: the losses differ from one another in their 5th or 6th digit near a plateau.
  const auto first = history.begin() + (k - window);
  double mean = 0;
  for (int64_t i = 0; i < window; ++i) mean += first[i];
  mean /= double(window);
  const double x_mean = 0.5 * double(window - 1);
  double sxy = 0, sxx = 0;
  for (int64_t i = 0; i < window; ++i) {
    const double x = double(i) - x_mean;
    sxy += x * (first[i] - mean);
    sxx += x * x;
  }
  const double slope = sxy / sxx;
  double ss = 0;
  for (int64_t i = 0; i < window; ++i) {
    const double r = first[i] - mean - slope * (double(i) - x_mean);
    ss += r * r;
  }
  t.predicted_fall = -slope * double(window);
  t.residual_sd = std::sqrt(ss / double(window - 2));
  t.noise = std::max(counting_noise, t.residual_sd);
  t.evaluated = true;
  return t;
}

int64_t decay_iterations(int64_t plateau) { return std::max<int64_t>(2, (plateau + 1) / 2); }

namespace {
// The last iteration q at which a decay can start and still end by the cap (0: none; the decay
// then spans the whole run).
int64_t last_decay_start(int64_t max_iterations) {
  int64_t q = 2 * max_iterations / 3;
  while (q > 0 && q + decay_iterations(q) > max_iterations) --q;
  while (q + 1 + decay_iterations(q + 1) <= max_iterations) ++q;
  return q;
}
}  // namespace

stopping_state stopping_state_of(std::span<const double> history, const stopping_settings& s) {
  stopping_state st;
  const int64_t n = int64_t(history.size());
  const int64_t from = std::max(s.window, s.earliest);
  // A decaying run looks for its plateau only while the decay that follows still fits the cap.
  const int64_t last_start = s.decays ? last_decay_start(s.max_iterations) : s.max_iterations;
  for (int64_t k = from; k <= std::min(n, last_start); ++k) {
    st.last = fit_loss_trend(history, k, s.window, s.counting_noise);
    if (st.last.flat()) {
      st.plateau = k;
      break;
    }
  }
  if (st.plateau > 0) {
    st.hold_until = st.plateau;
    st.end = s.decays ? st.plateau + decay_iterations(st.plateau) : st.plateau;
    st.reason = "converged";
  } else {
    // No plateau (yet): a decaying run that reaches its last start decays to the cap.
    st.hold_until = s.decays && n >= last_start ? last_start : s.max_iterations;
    st.end = s.max_iterations;
    st.reason = "max_iterations";
  }
  st.stop = n >= st.end;
  if (!st.stop) st.reason.clear();
  return st;
}

}  // namespace tycho::host
