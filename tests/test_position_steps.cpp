// The positions' own steps (core::driver::correct_positions): their curvature measured from the
// loss (measure_position_curvature) at the first step and 1, 4, 16, ... iterations after it, kept
// in the manifest's position_correction so that a resumed run steps as the uninterrupted one; and
// correct = "auto" (decide_positions), which weighs the corrections against their counting noise
// 20 iterations after the scan map converged and returns them to the map's where they are noise.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <tycho/host/result_record.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "zip_members.hpp"

namespace {

using tycho::test::run_command;

nlohmann::json manifest_of(const std::string& path) {
  return nlohmann::json::parse(tycho::test::load_result(path).manifest_json);
}

tycho::test::command_result reconstruct(std::vector<std::string> extra) {
  std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml",
                                   "--set", "output.previews=false"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_command(argv);
}

// 10 iterations from iteration 2 (the map held, so only the positions' own steps move them):
// measured at 2, 3 and 6. Stopped after 4 and resumed for 6 more, the run takes the file's scale
// (measured at 3) to iteration 5 and measures again at 6: every array the same bytes.
TEST(PositionSteps, TheMeasuredCurvatureIsLoggedSavedAndResumedBitForBit) {
  tycho::test::temp_folder tmp;
  const std::vector<std::string> sets = {"--set", "reconstruct.positions.correct=true", "--set",
                                         "reconstruct.positions.first_iteration=2", "--set",
                                         "reconstruct.positions.refine_scan_map=false"};
  auto with = [&](std::vector<std::string> v) {
    v.insert(v.end(), sets.begin(), sets.end());
    return v;
  };
  const std::string a = tmp / "a.zip", b = tmp / "b.zip", c = tmp / "c.zip";
  auto ra = reconstruct(with({"--iterations", "10", "-o", a}));
  ASSERT_TRUE(ra.exited_with(0)) << ra.describe();
  for (const char* at : {"iteration 2: each position's own correction begins: ", "iteration 3: ", "iteration 6: "})
    EXPECT_NE(ra.err.find(std::string(at) + "the positions' own steps take the loss's curvature"), std::string::npos)
        << at << "\n" << ra.err;
  EXPECT_EQ(ra.err.find("iteration 4: the positions' own steps take"), std::string::npos) << ra.err;
  const auto pa = manifest_of(a).at("position_correction");
  EXPECT_EQ(pa.at("first_measured_at"), 2);
  EXPECT_EQ(pa.at("measured_at"), 6);
  EXPECT_EQ(pa.at("patterns"), 128);  // one in 6 of the 32 x 24 patterns: the median's sample
  for (double s : pa.at("curvature_scale").get<std::vector<double>>()) {
    EXPECT_TRUE(std::isfinite(s) && s > 0.05 && s < 20) << s;
  }
  EXPECT_FALSE(pa.contains("weighing"));  // correct = true: nothing weighed

  auto rb = reconstruct(with({"--iterations", "10", "--stop-after", "4", "-o", b}));
  ASSERT_TRUE(rb.exited_with(0)) << rb.describe();
  EXPECT_EQ(manifest_of(b).at("position_correction").at("measured_at"), 3);
  auto rc = run_command({tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml",
                         "--from", b, "--iterations", "6", "-o", c, "--set", "output.previews=false", sets[0], sets[1],
                         sets[2], sets[3], sets[4], sets[5]});
  ASSERT_TRUE(rc.exited_with(0)) << rc.describe();
  EXPECT_EQ(manifest_of(c).at("position_correction"), pa);
  const auto A = tycho::test::load_result(a), C = tycho::test::load_result(c);
  for (const char* name : {"positions_px", "object", "probe", "loss_history"})
    EXPECT_TRUE(C.array(name, c).bytes == A.array(name, a).bytes) << name << " differs after resuming";
}

// correct = "auto" in a run that ends before the weighing (20 own steps): the end of the run says
// the corrections stand unweighed, from the iteration of their first own step, and the manifest
// holds no weighing.
TEST(PositionWeighing, ARunEndingBeforeTheWeighingSaysSo) {
  tycho::test::temp_folder tmp;
  const std::string a = tmp / "short.zip";
  auto r = reconstruct({"--iterations", "8", "--set", "reconstruct.positions.correct=\"auto\"", "-o", a});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.err.find("the positions' own corrections (from iteration 1) were not weighed against their counting "
                       "noise: the run ended at iteration 8, before iteration 20 where they would be"),
            std::string::npos)
      << r.err;
  const auto m = manifest_of(a);
  EXPECT_EQ(m.at("position_correction").at("first_measured_at"), 1);
  EXPECT_FALSE(m.at("position_correction").contains("weighing"));
}

// The MoS2 example's positions are the raster's (its README): what their own steps add beyond the
// scan map is counting noise, Σ Δᵀ J Δ / 2P near 1 (measured 0.93), so correct = "auto" (one
// slice: corrected from iteration 1 beside the map, which holds the scale) returns them to the
// map's after their 20th step, and the stopping rule gives the object a window to meet them again.
TEST(PositionWeighing, CorrectionsWithinTheirNoiseReturnToTheMapAndTheRuleWaits) {
  tycho::test::temp_folder tmp;
  const std::string a = tmp / "auto.zip";
  // The learning rates' schedule over 10 iterations: the rule would judge from iteration 29 (the
  // map's first step, then 20), before the window that follows the return.
  // No halving of the learning rates at the rule's verdicts: its windows would move `earliest`.
  auto r = reconstruct({"--set", "reconstruct.iterations=\"auto\"", "--set", "reconstruct.schedule_iterations=10",
                        "--set", "reconstruct.plateau_halvings=0", "--set", "reconstruct.positions.correct=\"auto\"",
                        "-o", a});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto m = manifest_of(a);
  const int64_t converged = int64_t(m.at("scan_map_refined").at("state").get<std::vector<double>>().at(49));
  ASSERT_GT(converged, 0);
  EXPECT_EQ(m.at("position_correction").at("first_measured_at"), 1);  // the positions' first own step
  const auto& w = m.at("position_correction").at("weighing");
  EXPECT_EQ(w.at("iteration"), 20);
  EXPECT_EQ(w.at("kept"), false);
  const double statistic = w.at("statistic"), noise = w.at("noise_A");
  EXPECT_GT(statistic, 0.3);
  EXPECT_LT(statistic, 2.0);
  // The noise per axis is the Cramér–Rao bound's scale (0.024 Å at the run's end).
  EXPECT_GT(noise, 0.01);
  EXPECT_LT(noise, 0.05);
  const int64_t at = w.at("iteration");
  const auto& stopping = m.at("history").at("stopping");
  // The rule waits for the window after the return, and for the map (which goes on) as before.
  EXPECT_EQ(int64_t(stopping.at("earliest")), std::max(at + int64_t(stopping.at("window")), converged));
  EXPECT_GE(int64_t(m.at("history").at("iterations")), at + int64_t(stopping.at("window")));
  EXPECT_NE(r.err.find("the positions returned to the scan map's at iteration " + std::to_string(at) +
                       ": the rule judges the loss from iteration " + std::to_string(at + 20)),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("iteration " + std::to_string(at) + ": the positions' own corrections beyond the scan map are"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the positions return to the scan map's"), std::string::npos) << r.err;
  // Returned: the saved positions are the map's, the affine map of the raster the manifest holds.
  const auto rec = tycho::test::load_result(a);
  const auto& p = rec.array("positions_px", a);
  // Their residual from a least-squares affine fit of the raster's indices is rounding alone.
  const int64_t n = p.count() / 2, ry = 24;
  double sums[3][3] = {}, rhs[2][3] = {};
  for (int64_t j = 0; j < n; ++j) {
    const double u[3] = {double(j / ry), double(j % ry), 1.0};
    for (int x = 0; x < 3; ++x) {
      for (int y = 0; y < 3; ++y) sums[x][y] += u[x] * u[y];
      for (int a2 = 0; a2 < 2; ++a2) rhs[a2][x] += u[x] * p.as<double>()[2 * j + a2];
    }
  }
  // Solve the 3 x 3 normal equations by Cramer's rule for each axis.
  auto det3 = [](const double M[3][3]) {
    return M[0][0] * (M[1][1] * M[2][2] - M[1][2] * M[2][1]) - M[0][1] * (M[1][0] * M[2][2] - M[1][2] * M[2][0]) +
           M[0][2] * (M[1][0] * M[2][1] - M[1][1] * M[2][0]);
  };
  const double D = det3(sums);
  double largest = 0;
  for (int a2 = 0; a2 < 2; ++a2) {
    double coef[3];
    for (int k = 0; k < 3; ++k) {
      double M[3][3];
      for (int x = 0; x < 3; ++x)
        for (int y = 0; y < 3; ++y) M[x][y] = y == k ? rhs[a2][x] : sums[x][y];
      coef[k] = det3(M) / D;
    }
    for (int64_t j = 0; j < n; ++j) {
      const double fit = coef[0] * double(j / ry) + coef[1] * double(j % ry) + coef[2];
      largest = std::max(largest, std::abs(p.as<double>()[2 * j + a2] - fit));
    }
  }
  EXPECT_LT(largest, 1e-6) << "px from the affine map of the raster";

  // The state is untrusted input as every member of a result is: values no run writes, or a
  // decision its statistic does not make, are refused naming the key and what was expected.
  const std::string at_text = std::to_string(at);
  struct crafted_case {
    std::string pointer, value, want;
  };
  const std::vector<crafted_case> cases = {
      {"/position_correction", "\"x\"", "has position_correction = \"x\", expected an object"},
      {"/position_correction/weighing/kept", "true",
       "has position_correction.weighing.kept = true, expected false (the decision its statistic makes"},
      {"/position_correction/weighing/statistic", "-3",
       "has position_correction.weighing.statistic = -3, expected a number >= 0"},
      {"/position_correction/weighing/noise_A", "0", "has position_correction.weighing.noise_A = 0, expected a number > 0"},
      {"/position_correction/weighing/iteration", std::to_string(at - 1),
       "has position_correction.weighing.iteration = " + std::to_string(at - 1) + ", expected " + at_text +
           ", the positions' 20th own step"},
      {"/position_correction/curvature_scale", "[1e-300, 1.0]",
       "expected 2 numbers from 1e-6 to 1e6 (the measured curvature over the object-roughness estimate)"},
      {"/position_correction/patterns", "5", "has position_correction.patterns = 5, expected an integer from 128 to 128"},
  };
  for (const auto& [pointer, value, want] : cases) {
    nlohmann::json bad = m;
    bad[nlohmann::json::json_pointer(pointer)] = nlohmann::json::parse(value);
    const std::string crafted = tmp / "crafted.zip";
    tycho::test::write_zip_members(crafted, {{"manifest.json", bad.dump()}}, a);
    auto rr = reconstruct({"--from", crafted, "--iterations", "2", "-o", tmp / "resumed.zip", "--set",
                           "reconstruct.positions.correct=\"auto\""});
    EXPECT_TRUE(rr.exited_with(2)) << pointer << " = " << value << "\n" << rr.describe();
    EXPECT_NE(rr.err.find(want), std::string::npos) << pointer << " = " << value << "\n" << rr.err;
  }
}

}  // namespace
