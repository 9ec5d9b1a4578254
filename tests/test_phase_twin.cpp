// The twin test (tycho/core/phase_twin.hpp): a phase object of atoms is skewed positive by many
// standard errors, its twin (point-reflected, conjugated) by as many negative, and a symmetric
// random phase stays within three.
#include <gtest/gtest.h>

#include <tycho/core/phase_twin.hpp>

#include <cmath>
#include <complex>
#include <random>
#include <vector>

namespace {

using cf = std::complex<float>;

// A lattice of Gaussian "atoms" (0.4 rad, σ 1.5 px, 6 px apart) on a slow phase ramp that wraps,
// with noise: (h, w).
std::vector<cf> atoms(int64_t h, int64_t w, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.03);
  std::vector<cf> o(std::size_t(h * w));
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) {
      double phase = 0.05 * double(i) + 0.03 * double(j) + noise(rng);  // the ramp wraps past π
      for (int64_t a = 3; a < h; a += 6)
        for (int64_t b = 3 + (a / 6 % 2) * 3; b < w; b += 6) {
          const double d2 = double((i - a) * (i - a) + (j - b) * (j - b));
          phase += 0.4 * std::exp(-d2 / (2 * 1.5 * 1.5));
        }
      o[std::size_t(i * w + j)] = std::polar(0.95f, float(phase));
    }
  return o;
}

}  // namespace

TEST(PhaseTwin, AtomsAreSkewedPositiveAndTheirTwinNegative) {
  const int64_t h = 90, w = 80;
  const auto o = atoms(h, w, 1);
  const int64_t box[4] = {10, 80, 10, 70};
  const auto a = tycho::local_phase_skewness(o.data(), 1, h, w, box, 8.0);
  ASSERT_TRUE(a.done);
  EXPECT_GT(a.skewness, 3 * a.standard_error) << a.skewness << " ± " << a.standard_error;
  // The twin: point-reflected and conjugated; the same box reflected.
  std::vector<cf> t(o.size());
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) t[std::size_t(i * w + j)] = std::conj(o[std::size_t((h - 1 - i) * w + (w - 1 - j))]);
  const int64_t twin_box[4] = {h - 80, h - 10, w - 70, w - 10};
  const auto b = tycho::local_phase_skewness(t.data(), 1, h, w, twin_box, 8.0);
  ASSERT_TRUE(b.done);
  EXPECT_NEAR(b.skewness, -a.skewness, 1e-6);
  EXPECT_LT(b.skewness, -3 * b.standard_error);
  // Correlated pixels count less than the box's: n_eff well below N.
  EXPECT_LT(a.effective_pixels, 0.5 * double(a.pixels));
  // Two slices of half the phase each: their product is the one slice's object.
  std::vector<cf> two(2 * o.size());
  for (std::size_t k = 0; k < o.size(); ++k) two[k] = two[k + o.size()] = std::polar(std::sqrt(std::abs(o[k])), 0.5f * std::arg(o[k]));
  const auto c = tycho::local_phase_skewness(two.data(), 2, h, w, box, 8.0);
  EXPECT_NEAR(c.skewness, a.skewness, 0.02);
}

TEST(PhaseTwin, ASymmetricRandomPhaseIsUndecided) {
  const int64_t h = 96, w = 96;
  int outside = 0;
  for (unsigned seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> g(0.0, 0.3);
    std::vector<cf> o(std::size_t(h * w));
    for (auto& z : o) z = std::polar(1.0f, float(g(rng)));
    const int64_t box[4] = {8, 88, 8, 88};
    const auto r = tycho::local_phase_skewness(o.data(), 1, h, w, box, 6.0);
    ASSERT_TRUE(r.done);
    outside += std::abs(r.skewness) > 3 * r.standard_error;
  }
  EXPECT_LE(outside, 1);  // 3 standard errors: about 0.3 % each
  // Too small a box, or no variation: not done.
  std::vector<cf> flat(std::size_t(h * w), cf(1, 0));
  const int64_t box[4] = {0, 96, 0, 96}, tiny[4] = {0, 4, 0, 96};
  EXPECT_FALSE(tycho::local_phase_skewness(flat.data(), 1, h, w, box, 6.0).done);
  EXPECT_FALSE(tycho::local_phase_skewness(flat.data(), 1, h, w, tiny, 6.0).done);
}
