#include "runtime/stopping_rule.hpp"

#include <algorithm>
#include <cmath>

namespace tycho::host {

loss_trend fit_loss_trend(std::span<const double> history, int64_t k, int64_t window, double counting_noise) {
  loss_trend t;
  if (window < 3 || k < window || k > int64_t(history.size())) return t;
  // Centred sums: near a plateau the losses differ in their 5th or 6th digit.
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

stopping_state stopping_state_of(std::span<const double> history, const stopping_settings& s) {
  stopping_state st;
  const int64_t n = int64_t(history.size());
  // Judged at every iteration from the earliest on (not only the last): the verdict after k
  // iterations depends on those k losses alone.
  for (int64_t k = std::max(s.window, s.earliest); !s.held && k <= std::min(n, s.max_iterations); ++k) {
    st.last = fit_loss_trend(history, k, s.window, s.counting_noise);
    if (st.last.flat()) {
      st.plateau = k;
      st.reason = st.last.rising() ? "rising" : "converged";
      if (s.halvings_left > 0) {
        st.halve = true;
        return st;
      }
      st.stop = true;
      // A loss that rose by more than its noise has not converged: the run is unstable (steps
      // too large for the data, or a stage that pulls against the others). It still ends here,
      // since more iterations would not bring it back, but says so.
      st.reason = st.last.rising() ? "rising" : "converged";
      return st;
    }
  }
  if (n >= s.max_iterations) {
    st.stop = true;
    st.reason = "max_iterations";
  }
  return st;
}

}  // namespace tycho::host
