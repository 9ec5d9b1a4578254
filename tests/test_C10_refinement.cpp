// [optics] refine_C10: "auto" (the default) refines the probe's C10 with the scan map for one
// slice; with several, where the map refines the scan's scale too ([reconstruct.positions]
// refine_scan_scale = "auto", the default with several slices: the probe then waits for the map),
// and holds it where the scale is held (a thick specimen's slices trade off against the defocus:
// with the probe refined alongside, the map's C10 ran away on a 45 Å GaAs [110] crystal,
// bench/RESULTS.md session 9); true refines it with any number of slices; anything else is
// refused by name, and so is anything but true, false or "auto" for refine_scan_scale.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <tycho/host/result_record.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::run_command;

// The MoS2 example with two slices, the scan map refined from iteration 1 (once, by default).
tycho::test::command_result run_two_slices(const std::string& out, const std::vector<std::string>& extra,
                                          const std::string& iterations = "1") {
  std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml",
                                   "--iterations", iterations, "--set", "output.previews=false", "--set",
                                   "reconstruct.slices=2", "--set", "reconstruct.slice_thickness_A=1.0", "--set",
                                   "reconstruct.positions.scan_map_first_iteration=1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {"-o", out});
  return run_command(argv);
}

nlohmann::json scan_map_of(const std::string& path) {
  return nlohmann::json::parse(tycho::test::load_result(path).manifest_json).at("scan_map_refined");
}

TEST(C10Refinement, AutoHoldsC10WithSeveralSlicesAndTheScaleHeldAndTrueRefinesIt) {
  tycho::test::temp_folder tmp;
  const std::string held = tmp / "auto.zip", refined = tmp / "true.zip";
  auto a = run_two_slices(held, {"--set", "reconstruct.positions.refine_scan_scale=false"});
  ASSERT_TRUE(a.exited_with(0)) << a.describe();
  EXPECT_NE(a.err.find("the scan map's refinement holds C10 at "), std::string::npos) << a.describe();
  EXPECT_NE(a.err.find("with 2 slices and the scan's scale held"), std::string::npos) << a.describe();
  EXPECT_FALSE(scan_map_of(held).contains("C10_A"));
  // The parallax measures the defocus at the specimen's middle; the run starts from the
  // entrance's, and the log says both.
  EXPECT_NE(a.err.find("at the specimen's middle, moved to its entrance surface by half the slices' depth"),
            std::string::npos)
      << a.describe();

  auto t = run_two_slices(refined, {"--set", "reconstruct.positions.refine_scan_scale=false", "--set",
                                    "optics.refine_C10=true"});
  ASSERT_TRUE(t.exited_with(0)) << t.describe();
  EXPECT_EQ(t.err.find("holds C10"), std::string::npos) << t.describe();
  ASSERT_TRUE(scan_map_of(refined).contains("C10_A"));
  EXPECT_TRUE(scan_map_of(refined).at("C10_A").is_number());
}

// The default with several slices: the map refines the scale and C10, and the probe waits for it.
// Two iterations, the map stepping at both. With C10 kept as stated (refine_C10 = false, so that
// only the probe's optimizer could change the probe), the probe ends bit for bit as in a run that
// never refines it.
TEST(C10Refinement, SeveralSlicesRefineTheScaleAndC10WhileTheProbeWaits) {
  tycho::test::temp_folder tmp;
  const std::string moved = tmp / "default.zip", waits = tmp / "waits.zip", held = tmp / "held.zip";
  const std::vector<std::string> every = {"--set", "reconstruct.positions.scan_map_every=1"};
  auto d = run_two_slices(moved, every, "2");
  ASSERT_TRUE(d.exited_with(0)) << d.describe();
  EXPECT_NE(d.err.find("the scan map's refinement moves the scan's scale and the probe's C10 (2 slices); the probe is "
                       "refined from the iteration after the map converges"),
            std::string::npos)
      << d.describe();
  const nlohmann::json m = scan_map_of(moved);
  ASSERT_TRUE(m.contains("C10_A"));
  EXPECT_NE(std::sqrt(m.at("step_scale").at(0).get<double>() * m.at("step_scale").at(1).get<double>()), 1.0);

  std::vector<std::string> stated = every;
  stated.insert(stated.end(), {"--set", "optics.refine_C10=false"});
  auto w = run_two_slices(waits, stated, "2");
  ASSERT_TRUE(w.exited_with(0)) << w.describe();
  std::vector<std::string> never = stated;
  never.insert(never.end(), {"--set", "reconstruct.probe.first_iteration=1000"});
  auto h = run_two_slices(held, never, "2");
  ASSERT_TRUE(h.exited_with(0)) << h.describe();
  const auto a = tycho::test::load_result(waits), b = tycho::test::load_result(held);
  const auto &pa = a.array("probe", waits), &pb = b.array("probe", held);
  ASSERT_EQ(pa.shape, pb.shape);
  EXPECT_TRUE(pa.bytes == pb.bytes) << "the probe moved before the scan map converged";
}

// A stated C10 the parallax does not replace (its standard error above 2 %: the shared si110,
// 2.6 %) is kept, and the log says why, with what the parallax measured.
TEST(C10Refinement, AStatedC10KeptOverAnImpreciseParallaxIsSaid) {
  const std::string data = tycho::test::source_dir() + "/../shared/data/si110/si110_200kV_24x24_counts.h5";
  if (!std::filesystem::exists(data)) GTEST_SKIP() << "../shared/data (the abTEM data sets) is not beside the source tree";
  tycho::test::temp_folder tmp;
  auto r = run_command({tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/si110.toml",
                        "--iterations", "1", "--set", "output.previews=false", "-o", tmp / "s.zip"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.err.find("keeping the stated C10 = -100 Å: the bright field's parallax measured "), std::string::npos)
      << r.describe();
  EXPECT_NE(r.err.find(" %, more than the 2 % it needs to replace a stated C10"), std::string::npos) << r.describe();
}

// The stated C10 is the entrance surface's; the multislice model applies each slice's potential
// at the slice's top, so its probe carries C10 + dz / 2 (session::state::model_C10_shift_A). The
// initial probes (0 iterations) of the MoS2 example: with 2 slices of 20 Å at C10 = -150 Å, the
// same bytes as with one slice at -140 Å, not those at -150 Å; the result's probe_fit and
// calibration say -150 Å.
TEST(C10Refinement, TheModelsProbeCarriesHalfASliceMoreThanTheEntranceSurfacesC10) {
  tycho::test::temp_folder tmp;
  auto initial_probe = [&](const std::string& name, std::vector<std::string> sets) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct",
                                     tycho::test::source_dir() + "/examples/mos2.toml", "--set", "reconstruct.iterations=0", "--set",
                                     "output.previews=false", "-o", tmp / name};
    sets.push_back("optics.refine_C10=false");  // the stated C10, not the parallax's
    for (auto& v : sets) argv.insert(argv.end(), {"--set", v});
    auto r = run_command(argv);
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    return tycho::test::load_result(tmp / name);
  };
  const auto sliced = initial_probe("sliced.zip", {"reconstruct.slices=2", "reconstruct.slice_thickness_A=20.0",
                                                   "optics.C10_A=-150.0"});
  const auto shifted = initial_probe("shifted.zip", {"optics.C10_A=-140.0"});
  const auto stated = initial_probe("stated.zip", {"optics.C10_A=-150.0"});
  const std::string s = tmp / "sliced.zip";
  EXPECT_TRUE(sliced.array("probe", s).bytes == shifted.array("probe", tmp / "shifted.zip").bytes);
  EXPECT_FALSE(sliced.array("probe", s).bytes == stated.array("probe", tmp / "stated.zip").bytes);
  const auto m = nlohmann::json::parse(sliced.manifest_json);
  EXPECT_EQ(m.at("calibration").at("C10_A"), -150.0);
  ASSERT_TRUE(m.contains("probe_fit")) << sliced.manifest_json;
  EXPECT_NEAR(m.at("probe_fit").at("C10_A").get<double>(), -150.0, 0.5);
  EXPECT_EQ(m.at("probe_fit").at("initial_C10_A"), -150.0);
}

TEST(C10Refinement, RefusesAnythingButTrueFalseAuto) {
  tycho::test::temp_folder tmp;
  const std::pair<const char*, const char*> cases[] = {
      {"optics.refine_C10=\"sometimes\"", "[optics] refine_C10 must be true, false or \"auto\""},
      {"optics.refine_C10=\"sometimes\"", "where the map refines the scale), got \"sometimes\""},
      {"reconstruct.positions.refine_scan_scale=\"yes\"",
       "[reconstruct.positions] refine_scan_scale must be true, false or \"auto\""},
      {"reconstruct.positions.refine_scan_scale=2", "got 2"},
      {"optics.refine_C10=1", "got 1"},
      {"optics.refine_C10=[true]", "got an array"},
  };
  for (const auto& [bad, expected] : cases) {
    auto r = run_two_slices(tmp / "bad.zip", {"--set", bad});
    EXPECT_TRUE(r.exited_with(2)) << bad << "\n" << r.describe();
    EXPECT_NE(tycho::test::error_line(r).find(expected), std::string::npos) << bad << "\n" << r.describe();
  }
}

}  // namespace
