// Multislice, probe modes and position correction against the ground truth of the independent
// abTEM data sets in ../shared/data (their READMEs), short runs of the recipes in examples/
// scored by `tycho evaluate`. The figures at 100 iterations are in bench/RESULTS.md
// (bench/issue11.sh); these runs are shorter, with floors measured on this machine class.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>
#include <regex>
#include <fstream>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::run_command;

std::string shared(const std::string& rel) { return tycho::test::source_dir() + "/../shared/data/" + rel; }
std::string recipe(const std::string& name) { return tycho::test::source_dir() + "/examples/" + name; }

class MultisliceAccuracy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(shared("si110/README.md")))
      GTEST_SKIP() << "../shared/data (the abTEM data sets) is not beside the source tree";
  }
  // Runs `config` with `sets`, then evaluates against `truth`; the evaluate JSON.
  // `extra` goes to the command line as it is (e.g. {"--stop-after", "30"}).
  nlohmann::json run_and_evaluate(const std::string& config, const std::vector<std::string>& sets,
                                  const std::string& truth, const std::string& out,
                                  const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", config, "-q", "-o",
                                     (tmp_.path() / out).string(), "--set", "output.previews=false"};
    for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = run_command(argv);
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    auto e = run_command({tycho::test::tycho_exe(), "evaluate", (tmp_.path() / out).string(), "--truth", truth});
    EXPECT_TRUE(e.exited_with(0)) << e.describe();
    try {
      return nlohmann::json::parse(e.out);
    } catch (const nlohmann::json::exception& x) {
      ADD_FAILURE() << "evaluate printed no JSON: " << x.what() << "\n" << e.describe();
      return nlohmann::json::object();
    }
  }
  tycho::test::temp_folder tmp_;
};

// si110 (100 Å of Si [110]): 10 slices of 10 Å against one slice, 15 iterations each of the
// default recipe. Measured: 10 slices total-phase Pearson 0.946 and RMS 0.43 rad, one slice 0.713
// and 0.99 rad (where the stopping rule ends the recipe, 143 iterations: 0.9893 and 0.169 rad).
TEST_F(MultisliceAccuracy, Si110TenSlicesRecoverTheTotalPhase) {
  const std::string truth = shared("si110/si110_ground_truth.npz");
  auto multi = run_and_evaluate(recipe("si110.toml"), {"reconstruct.iterations=15"}, truth, "s10.zip");
  auto single = run_and_evaluate(recipe("si110.toml"), {"reconstruct.iterations=15", "reconstruct.slices=1"}, truth,
                                 "s1.zip");
  const double p10 = multi.at("total_phase").at("pearson"), p1 = single.at("total_phase").at("pearson");
  const double r10 = multi.at("total_phase").at("rms_rad"), r1 = single.at("total_phase").at("rms_rad");
  std::cout << "si110 15 iterations: 10 slices Pearson " << p10 << " RMS " << r10 << " rad; 1 slice " << p1 << " "
            << r1 << "\n";
  EXPECT_GT(p10, 0.9);
  EXPECT_LT(r10, 0.6);
  EXPECT_GT(p10, p1 + 0.05);
  EXPECT_LT(r10, r1);
  EXPECT_EQ(multi.at("slices"), 10);
}

// bilayer (two MoS2 layers 43 Å apart, 1.6 and 44.8 Å deep): with ten uniform slices of 5 Å,
// slice 0 shows the top layer and slice 8 the bottom one (depth sectioning without knowing the
// depths), after 15 iterations of the default recipe. Measured: own 0.889 / other 0.081 (top),
// 0.934 / 0.093 (bottom); where the stopping rule ends it (206 iterations): 0.914 / 0.078 and
// 0.945 / 0.094 (the two truths themselves correlate 0.088 at best).
TEST_F(MultisliceAccuracy, BilayerSlicesSeparateTheLayers) {
  auto j = run_and_evaluate(recipe("bilayer.toml"), {"reconstruct.iterations=15"},
                            shared("bilayer/bilayer_ground_truth.npz"), "bilayer.zip");
  const auto& layers = j.at("layers");
  ASSERT_EQ(layers.size(), 2u) << j.dump();
  for (const auto& l : layers) {
    std::cout << "layer in slice " << l.at("slice") << ": own " << l.at("pearson") << ", other "
              << l.at("pearson_other") << "\n";
    EXPECT_GT(l.at("pearson").get<double>(), 0.85) << l.dump();
    EXPECT_LT(l.at("pearson_other").get<double>(), 0.15) << l.dump();
  }
  EXPECT_EQ(layers[0].at("slice"), 0);
  EXPECT_EQ(layers[1].at("slice"), 8);
}

// mos2_jitter (positions off the raster by 0.25 Å rms and a 0.5 Å drift): the example as
// shipped, the default recipe told the paths, the optics, the fast axis and the Poisson loss, to
// its stopping rule (336 iterations, about 15 s): issue 27's figures, Pearson ≥ 0.95 and the
// positions within 0.05 Å (measured 0.9588 / 0.0364 Å). Without the fast axis the scan map holds
// the isotropic scale: the crystal lattice's by default ([preprocess] scan_scale = "auto"),
// 1.0146 against the truth's 1.0109, with the drift's 1.8 % step ratio and shear left to the
// run's refinement: 0.903 / 0.046 Å (the stated step's: 0.937 / 0.080 Å). The fast axis is what
// meets the figures by the README's metric, whose registration is to whole pixels: without it the
// map's scale about the scan's centre leaves the object half a pixel off the truth's grid, and
// registered to the sub-pixel (`pearson_subpixel`) that run is the better one, 0.971 against the
// fast axis's 0.976 and the stated step's 0.957, its positions nearer the truth.
TEST_F(MultisliceAccuracy, JitterExampleMeetsItsFiguresAndNeedsItsFastAxis) {
  const std::string truth = shared("mos2_partial/mos2_jitter_ground_truth.npz");
  auto j = run_and_evaluate(recipe("mos2_jitter.toml"), {}, truth, "jitter.zip");
  const double rms = j.at("positions").at("rms_A"), start = j.at("positions").at("start_rms_A");
  std::cout << "mos2_jitter: positions " << rms << " Å from " << start << " Å, Pearson " << j.at("pearson") << "\n";
  EXPECT_NEAR(start, 0.374, 0.001);
  EXPECT_LT(rms, 0.05);
  EXPECT_GE(j.at("pearson").get<double>(), 0.95);
  // The same with the fast axis not known: the example's text less its fast_axis line.
  std::ifstream in(recipe("mos2_jitter.toml"));
  std::stringstream text;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("fast_axis", 0) != 0) text << line << "\n";
  const std::string unknown = (tmp_.path() / "no_fast_axis.toml").string();
  std::ofstream(unknown) << std::regex_replace(text.str(), std::regex("\\.\\./\\.\\./shared"),
                                               tycho::test::source_dir() + "/../shared");
  auto u = run_and_evaluate(unknown, {}, truth, "jitter-unknown.zip");
  std::cout << "without the fast axis: positions " << u.at("positions").at("rms_A") << " Å, Pearson " << u.at("pearson")
            << "\n";
  EXPECT_LT(u.at("pearson").get<double>(), j.at("pearson").get<double>() - 0.02);
  // Registered to the sub-pixel, within 0.01 of the fast axis's: the loss was the grid's.
  EXPECT_GT(u.at("pearson_subpixel").get<double>(), j.at("pearson_subpixel").get<double>() - 0.01);
  EXPECT_LT(u.at("positions").at("rms_A").get<double>(), 0.05);
  const auto lattice = nlohmann::json::parse(tycho::test::load_result(tmp_.path() / "jitter-unknown.zip").manifest_json)
                           .at("preprocess").at("scan_map").at("lattice");
  EXPECT_EQ(lattice.at("applied"), "scale") << lattice.dump();
  EXPECT_NEAR(lattice.at("scale").get<double>(), 1.0109, 0.006) << lattice.dump();
}

}  // namespace
