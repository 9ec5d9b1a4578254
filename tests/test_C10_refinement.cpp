// [optics] refine_C10: "auto" (the default) refines the probe's C10 with the scan map for one
// slice and holds it for several (a thick specimen's slices trade off against the defocus: the
// map's C10 ran away on a 45 Å GaAs [110] crystal, bench/RESULTS.md session 9); true refines it
// with any number of slices; anything else is refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <tycho/host/result_record.hpp>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::run_command;

// The MoS2 example with two slices, the scan map refined once (at iteration 1).
tycho::test::command_result run_two_slices(const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml",
                                   "--iterations", "1", "--set", "output.previews=false", "--set",
                                   "reconstruct.slices=2", "--set", "reconstruct.slice_thickness_A=1.0", "--set",
                                   "reconstruct.positions.scan_map_first_iteration=1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {"-o", out});
  return run_command(argv);
}

nlohmann::json scan_map_of(const std::string& path) {
  return nlohmann::json::parse(tycho::test::load_result(path).manifest_json).at("scan_map_refined");
}

TEST(C10Refinement, AutoHoldsC10WithSeveralSlicesAndTrueRefinesIt) {
  tycho::test::temp_folder tmp;
  const std::string held = tmp / "auto.zip", refined = tmp / "true.zip";
  auto a = run_two_slices(held, {});
  ASSERT_TRUE(a.exited_with(0)) << a.describe();
  EXPECT_NE(a.err.find("the scan map's refinement holds C10 at "), std::string::npos) << a.describe();
  EXPECT_NE(a.err.find("with 2 slices"), std::string::npos) << a.describe();
  EXPECT_FALSE(scan_map_of(held).contains("C10_A"));
  // The parallax measures the defocus at the specimen's middle; the run starts from the
  // entrance's, and the log says both.
  EXPECT_NE(a.err.find("at the specimen's middle, moved to its entrance surface by half the slices' depth"),
            std::string::npos)
      << a.describe();

  auto t = run_two_slices(refined, {"--set", "optics.refine_C10=true"});
  ASSERT_TRUE(t.exited_with(0)) << t.describe();
  EXPECT_EQ(t.err.find("holds C10"), std::string::npos) << t.describe();
  ASSERT_TRUE(scan_map_of(refined).contains("C10_A"));
  EXPECT_TRUE(scan_map_of(refined).at("C10_A").is_number());
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

TEST(C10Refinement, RefusesAnythingButTrueFalseAuto) {
  tycho::test::temp_folder tmp;
  const std::pair<const char*, const char*> cases[] = {
      {"optics.refine_C10=\"sometimes\"", "[optics] refine_C10 must be true, false or \"auto\""},
      {"optics.refine_C10=\"sometimes\"", "hold it with several), got \"sometimes\""},
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
