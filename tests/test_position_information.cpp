// A position's Fisher information from neighbouring patterns alone (tycho::pair_information,
// tycho/core/position_correction.hpp): unbiased under Poisson counts, whatever the dose.

#include <gtest/gtest.h>

#include <tycho/core/position_correction.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

// Two expected patterns a small shift apart (a fringe moved by 0.2 rad) at `level` counts a pixel,
// many pairs of Poisson draws: the mean of pair_information is Σ (λa − λb)² / m, within its
// standard error, at 50 counts a pixel and at 0.05 (where most pixels hold no count and a pair's
// estimate is mostly noise); with equal patterns it is 0.
void expect_unbiased(double level, double shift, int pairs) {
  const int64_t n = 256;
  std::vector<double> la(n), lb(n), mean(n);
  double want = 0;
  for (int64_t k = 0; k < n; ++k) {
    la[k] = level * (1 + 0.6 * std::sin(0.3 * double(k)));
    lb[k] = level * (1 + 0.6 * std::sin(0.3 * double(k) + shift));
    mean[k] = 0.5 * (la[k] + lb[k]);
    want += (la[k] - lb[k]) * (la[k] - lb[k]) / mean[k];
  }
  std::mt19937_64 rng(7);
  std::vector<uint16_t> a(n), b(n);
  std::vector<float> af(n), bf(n);
  double sum = 0, sum2 = 0;
  for (int p = 0; p < pairs; ++p) {
    for (int64_t k = 0; k < n; ++k) {
      a[k] = uint16_t(std::poisson_distribution<int>(la[k])(rng));
      b[k] = uint16_t(std::poisson_distribution<int>(lb[k])(rng));
      af[k] = float(a[k]);
      bf[k] = float(b[k]);
    }
    const double v = tycho::pair_information(a.data(), b.data(), mean.data(), nullptr, n);
    ASSERT_EQ(v, tycho::pair_information(af.data(), bf.data(), mean.data(), nullptr, n));  // either dtype
    sum += v;
    sum2 += v * v;
  }
  const double m = sum / pairs, se = std::sqrt((sum2 / pairs - m * m) / pairs);
  EXPECT_LT(std::abs(m - want), 3.5 * se + 1e-9 * want) << "level " << level << ": " << m << " ± " << se
                                                         << " against " << want;
  EXPECT_GT(se, 0) << "level " << level;  // noise: the pairs differ
}

TEST(PositionInformation, NeighbouringPatternsMeasureItWithoutAModel) {
  expect_unbiased(50, 0.2, 2000);
  expect_unbiased(0.05, 0.2, 20000);
  expect_unbiased(50, 0, 2000);
}

TEST(PositionInformation, MaskedPixelsAndPixelsWithNoMeanAreLeftOut) {
  const std::vector<uint16_t> a = {10, 0, 7, 3}, b = {4, 9, 7, 1};
  const std::vector<double> mean = {5, 5, 0, 2};
  const std::vector<uint8_t> valid = {1, 0, 1, 1};
  // Pixel 1 masked, pixel 2 without counts in the mean: (36 − 14) / 5 + (4 − 4) / 2.
  EXPECT_DOUBLE_EQ(tycho::pair_information(a.data(), b.data(), mean.data(), valid.data(), 4), 22.0 / 5);
  const std::vector<float> af = {10, NAN, 7, 3}, bf = {4, 9, 7, 1};
  EXPECT_DOUBLE_EQ(tycho::pair_information(af.data(), bf.data(), mean.data(), nullptr, 4), 22.0 / 5);
}

}  // namespace
