// Multislice, probe modes and position correction through the `tycho` command: bad values of the
// new keys are refused naming the key; position correction off leaves the positions bit for bit
// as recorded; the saved object and probe have the configured slices and modes.
#include <gtest/gtest.h>

#include <tycho/host/result_record.hpp>

#include <cmath>
#include <complex>
#include <cstring>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::run_command;

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }

class MultisliceRuns : public ::testing::Test {
 protected:
  tycho::test::command_result reconstruct(const std::vector<std::string>& sets, const std::string& out) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", example_config(), "-q", "-o",
                                     (tmp_.path() / out).string(), "--set", "output.previews=false"};
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    return run_command(argv);
  }
  tycho::test::temp_folder tmp_;
};

// Each bad value names its key (and is refused before any data is read: exit 2, fast).
TEST_F(MultisliceRuns, BadValuesAreRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"reconstruct.slices=0", "slices"},
      {"reconstruct.slices=-3", "slices"},
      {"reconstruct.slices=2", "slice_thickness_A"},
      {"reconstruct.slice_thickness_A=0", "slice_thickness_A"},
      {"reconstruct.probe_modes=0", "probe_modes"},
      {"reconstruct.probe_modes=65", "probe_modes"},
      {"reconstruct.probe.mode_power=1.0", "mode_power"},
      {"reconstruct.positions.learning_rate=-1", "learning_rate"},
      {"reconstruct.positions.max_step_A=0", "max_step_A"},
      {"reconstruct.positions.first_iteration=0", "first_iteration"},
      {"reconstruct.positions.correkt=true", "correkt"},
      {"reconstruct.object.depth_regulariser=\"gaussian\"", "depth_regulariser"},
  };
  for (const auto& [set, key] : cases) {
    auto r = reconstruct({set, "reconstruct.iterations=1"}, "bad.zip");
    EXPECT_TRUE(r.exited && r.exit_code != 0) << set << "\n" << r.describe();
    EXPECT_NE(r.err.find(key), std::string::npos) << set << ": the message does not name '" << key << "'\n" << r.err;
  }
}

// Several slices get the depth regulariser object_missing_cone by default (the manifest's
// provenance lists it), unless depth_regulariser = "none" or the list has a depth regulariser of
// its own; one slice never. The default and the constraint listed by hand give the same bits.
TEST_F(MultisliceRuns, SeveralSlicesAreRegularisedInDepthByDefault) {
  auto lists_cone = [&](const std::string& zip) {
    const std::string manifest = tycho::test::load_result(tmp_.path() / zip).manifest_json;
    return manifest.find("\"object_missing_cone\"") != std::string::npos;
  };
  const std::string two = "reconstruct.slices=2", dz = "reconstruct.slice_thickness_A=5", its = "reconstruct.iterations=2";
  ASSERT_TRUE(reconstruct({two, dz, its}, "default.zip").exited_with(0));
  EXPECT_TRUE(lists_cone("default.zip"));
  ASSERT_TRUE(reconstruct({two, dz, its, "reconstruct.object.depth_regulariser=\"none\""}, "none.zip").exited_with(0));
  EXPECT_FALSE(lists_cone("none.zip"));
  ASSERT_TRUE(reconstruct({two, dz, its, "reconstruct.object.depth_regulariser=\"none\"",
                           "reconstruct.constraints=[{name=\"object_missing_cone\"}]"},
                          "listed.zip")
                  .exited_with(0));
  EXPECT_TRUE(lists_cone("listed.zip"));
  const auto a = tycho::test::load_result(tmp_.path() / "default.zip").array("object", "default.zip");
  const auto b = tycho::test::load_result(tmp_.path() / "listed.zip").array("object", "listed.zip");
  EXPECT_EQ(a.bytes, b.bytes);
  const auto c = tycho::test::load_result(tmp_.path() / "none.zip").array("object", "none.zip");
  EXPECT_NE(a.bytes, c.bytes);
  ASSERT_TRUE(reconstruct({its}, "one.zip").exited_with(0));
  EXPECT_FALSE(lists_cone("one.zip"));
}

// Correction off or not yet started: positions come back bit for bit as recorded; on: they move. Two slices of 1 Å and two modes give a (2, H, W) object and a (2, N, N) probe.
TEST_F(MultisliceRuns, PositionsMoveOnlyWhenCorrected) {
  auto initial = reconstruct({"reconstruct.iterations=0"}, "initial.zip");
  ASSERT_TRUE(initial.exited_with(0)) << initial.describe();
  auto off = reconstruct({"reconstruct.iterations=2", "reconstruct.positions.correct=false"}, "off.zip");
  ASSERT_TRUE(off.exited_with(0)) << off.describe();
  auto later = reconstruct({"reconstruct.iterations=2", "reconstruct.positions.correct=true",
                            "reconstruct.positions.first_iteration=3"},
                           "later.zip");
  ASSERT_TRUE(later.exited_with(0)) << later.describe();
  auto on = reconstruct({"reconstruct.iterations=2", "reconstruct.positions.correct=true", "reconstruct.slices=2",
                         "reconstruct.slice_thickness_A=1.0", "reconstruct.probe_modes=2"},
                        "on.zip");
  ASSERT_TRUE(on.exited_with(0)) << on.describe();
  auto positions = [&](const char* file) {
    return tycho::test::load_result((tmp_.path() / file).string()).array("positions_px", file).bytes;
  };
  EXPECT_EQ(positions("off.zip"), positions("initial.zip"));
  EXPECT_EQ(positions("later.zip"), positions("initial.zip"));
  EXPECT_NE(positions("on.zip"), positions("initial.zip"));
  auto rec = tycho::test::load_result((tmp_.path() / "on.zip").string());
  const auto& obj = rec.array("object", "on.zip");
  const auto& probe = rec.array("probe", "on.zip");
  ASSERT_EQ(obj.shape.size(), 3u);
  EXPECT_EQ(obj.shape[0], 2);
  EXPECT_EQ(probe.shape[0], 2);
}

// [reconstruct.object] kind = "phase": every object value has modulus 1 after the run (and
// "complex", the default, leaves moduli free).
TEST_F(MultisliceRuns, PhaseObjectsKeepUnitModulus) {
  auto phase = reconstruct({"reconstruct.iterations=2", "reconstruct.object.kind=\"phase\""}, "phase.zip");
  ASSERT_TRUE(phase.exited_with(0)) << phase.describe();
  auto complex_run = reconstruct({"reconstruct.iterations=2"}, "complex.zip");
  ASSERT_TRUE(complex_run.exited_with(0)) << complex_run.describe();
  auto worst = [&](const char* file) {
    auto rec = tycho::test::load_result((tmp_.path() / file).string());
    const auto& obj = rec.array("object", file);
    const auto* z = obj.as<std::complex<float>>();
    double w = 0;
    for (int64_t k = 0; k < obj.count(); ++k) w = std::max(w, std::abs(std::abs(double(std::abs(z[k]))) - 1.0));
    return w;
  };
  EXPECT_LT(worst("phase.zip"), 1e-6);
  EXPECT_GT(worst("complex.zip"), 1e-3);
  auto bad = reconstruct({"reconstruct.iterations=1", "reconstruct.object.kind=\"amplitude\""}, "bad.zip");
  EXPECT_FALSE(bad.exited_with(0));
  EXPECT_NE(bad.err.find("kind"), std::string::npos) << bad.err;
}

}  // namespace
