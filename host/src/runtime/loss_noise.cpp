#include "runtime/loss_noise.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace tycho::host {

int64_t loss_noise_replicates(int64_t pixels) {
  return std::clamp<int64_t>((int64_t(1) << 23) / std::max<int64_t>(pixels, 1), 16, 128);
}

std::optional<double> loss_variance_per_pattern(const tycho_loss_vtable* vt, tycho_loss* loss,
                                                const std::vector<double>& mean_counts,
                                                const std::vector<uint8_t>& mask, int64_t n0, int64_t n1,
                                                double measured_scale) {
  const std::size_t n = std::size_t(n0 * n1);
  if (vt == nullptr || vt->evaluate == nullptr || mean_counts.size() != n || n == 0) return std::nullopt;
  std::vector<float> model(n), counts(n), dloss(n);
  std::vector<double> lambda(n);
  for (std::size_t k = 0; k < n; ++k) {
    lambda[k] = std::isfinite(mean_counts[k]) ? std::max(mean_counts[k], 0.0) : 0.0;
    model[k] = float(measured_scale * lambda[k]);
  }
  int64_t shape[3] = {1, n0, n1}, mask_shape[2] = {n0, n1};
  DLTensor model_t{model.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  DLTensor counts_t{counts.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  DLTensor dloss_t{dloss.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  DLTensor mask_t{const_cast<uint8_t*>(mask.data()), {kDLCPU, 0}, 2, {kDLUInt, 8, 1}, mask_shape, nullptr, 0};
  // A fixed seed: every rank, and a run started again, gets the same draws.
  std::mt19937_64 rng(0x7963686f);  // "ycho"
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t replicates = loss_noise_replicates(int64_t(n));
  std::vector<double> values;
  values.reserve(std::size_t(replicates));
  for (int64_t r = 0; r < replicates; ++r) {
    for (std::size_t k = 0; k < n; ++k) {
      // Poisson draws below 30 counts; above, the normal approximation (skewness 1/√λ < 0.19),
      // rounded: a few times cheaper, and the loss's spread there is that of χ²₁ whatever the tail.
      if (lambda[k] <= 0)
        counts[k] = 0.0f;
      else if (lambda[k] < 30)
        counts[k] = float(std::poisson_distribution<int64_t>(lambda[k])(rng));
      else
        counts[k] = float(std::max(0.0, std::round(lambda[k] + std::sqrt(lambda[k]) * normal(rng))));
    }
    double sum = 0;
    if (vt->evaluate(loss, &model_t, &counts_t, mask.empty() ? nullptr : &mask_t, measured_scale, &dloss_t, &sum,
                     nullptr) != TYCHO_OK)
      return std::nullopt;
    if (!std::isfinite(sum)) return std::nullopt;
    values.push_back(sum);
  }
  double mean = 0;
  for (double v : values) mean += v;
  mean /= double(values.size());
  double ss = 0;
  for (double v : values) ss += (v - mean) * (v - mean);
  return ss / double(values.size() - 1);
}

}  // namespace tycho::host
