// A position's Fisher information from neighbouring patterns alone (tycho::pair_information,
// tycho/core/position_correction.hpp): unbiased under Poisson counts, whatever the dose.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <tycho/core/position_correction.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "npy_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

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

// Patterns that are all the same (a disc of counts, no specimen): neighbouring patterns differ by
// no more than their noise, so the data place no position; the weighing's factor is 0, the
// corrections return to the map, and the result resumes (the factor read back from 0 to 1).
TEST(PositionInformation, DataThatPlaceNoPositionWeighNothingAndResume) {
  const int64_t sa = 8, sb = 8, n = 32;
  std::vector<uint16_t> counts(std::size_t(sa * sb * n * n), 0);
  for (int64_t p = 0; p < sa * sb; ++p)
    for (int64_t u = 0; u < n; ++u)
      for (int64_t v = 0; v < n; ++v)
        if ((u - n / 2) * (u - n / 2) + (v - n / 2) * (v - n / 2) <= 36) counts[std::size_t((p * n + u) * n + v)] = 50;
  tycho::test::temp_folder tmp;
  tycho::test::write_npy(tmp / "flat.npy", "<u2", {sa, sb, n, n}, counts.data(), counts.size() * 2);
  const std::string cfg = tmp / "flat.toml";
  {
    std::ofstream f(cfg);
    f << "[data]\nsource = \"npy\"\npath = \"flat.npy\"\ncentred = true\nscan_step_A = 0.5\n"
         "detector_pixel_invA = 0.1\n[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 20.0\nC10_A = -50.0\n"
         "[preprocess]\nscan_rotation_deg = 0\n[reconstruct]\niterations = 25\n[reconstruct.positions]\n"
         "correct = \"auto\"\n[output]\npreviews = false\n";
  }
  const auto r = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct", cfg, "-o", tmp / "a.zip"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto m = nlohmann::json::parse(tycho::test::load_result(tmp / "a.zip").manifest_json);
  const auto& w = m.at("position_correction").at("weighing");
  EXPECT_EQ(w.at("information_ratio"), 0.0) << w.dump();
  EXPECT_EQ(w.at("statistic"), 0.0) << w.dump();
  EXPECT_FALSE(w.at("kept").get<bool>()) << w.dump();
  EXPECT_NE(r.err.find("place no position"), std::string::npos) << r.err;
  const auto again = tycho::test::run_command(
      {tycho::test::tycho_exe(), "reconstruct", cfg, "--from", tmp / "a.zip", "--iterations", "2", "-o", tmp / "b.zip"});
  EXPECT_TRUE(again.exited_with(0)) << again.describe();
}

}  // namespace
