// `tycho reconstruct --from`: a run saved after 10 of its 20 iterations and resumed for the other
// 10 equals the 20-iteration run bit for bit (object, probe, optimizer state, loss history), with
// Adam on both parameters and with SGD + momentum on the probe; files that do not fit the
// config's data, or are not tycho results, are refused.
#include <gtest/gtest.h>

#include <tycho/host/result_record.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::command_result;
using tycho::test::load_result;
using tycho::test::run_command;

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }

class Resume : public ::testing::Test {
 protected:
  command_result reconstruct(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", example_config(), "-q",
                                     "--set", "reconstruct.iterations=20", "--set", "output.previews=false"};
    argv.insert(argv.end(), extra_sets_.begin(), extra_sets_.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv);
  }

  // A: 10 of 20 iterations; B: A resumed for 10 more; C: all 20 at once. B must equal C.
  void resume_equals_continuous() {
    const std::string a = tmp_ / "a.zip", b = tmp_ / "b.zip", c = tmp_ / "c.zip";
    auto ra = reconstruct({"--stop-after", "10", "-o", a});
    ASSERT_TRUE(ra.exited_with(0)) << ra.describe();
    auto rb = reconstruct({"--from", a, "--iterations", "10", "-o", b});
    ASSERT_TRUE(rb.exited_with(0)) << rb.describe();
    auto rc = reconstruct({"-o", c});
    ASSERT_TRUE(rc.exited_with(0)) << rc.describe();

    auto rec_a = load_result(a), rec_b = load_result(b), rec_c = load_result(c);
    EXPECT_EQ(rec_a.array("loss_history", a).count(), 10);
    EXPECT_EQ(rec_b.array("loss_history", b).count(), 20);
    std::vector<std::string> names = {"object", "probe", "loss_history", "positions_px"};
    for (const auto& arr : rec_c.arrays)
      if (arr.name.rfind("optimizer.", 0) == 0) names.push_back(arr.name);
    EXPECT_GT(names.size(), 4u) << "the result holds no optimizer state";
    for (const auto& name : names) {
      const auto& x = rec_b.array(name, b);
      const auto& y = rec_c.array(name, c);
      EXPECT_EQ(x.shape, y.shape) << name;
      EXPECT_TRUE(x.bytes == y.bytes) << name << " of the resumed run differs from the continuous run";
    }

    auto ma = nlohmann::json::parse(rec_a.manifest_json);
    auto mb = nlohmann::json::parse(rec_b.manifest_json);
    auto mc = nlohmann::json::parse(rec_c.manifest_json);
    EXPECT_EQ(ma.at("history").at("iterations"), 10);
    EXPECT_EQ(ma.at("history").at("schedule_iterations"), 20);
    EXPECT_EQ(mb.at("history").at("iterations"), 20);
    EXPECT_EQ(mb.at("history").at("schedule_iterations"), 20);
    EXPECT_EQ(mb.at("history").at("loss"), mc.at("history").at("loss"));
    EXPECT_EQ(mb.at("optimizer_state"), mc.at("optimizer_state"));
    // The scan map's refinement (on by default; steps from iteration 10, every 5) continues from the
    // file's state: the same map, C10 and BFGS memory as the run that was not interrupted.
    ASSERT_TRUE(mc.contains("scan_map_refined")) << "the scan map was not refined";
    EXPECT_EQ(ma.at("scan_map_refined").at("steps"), 1);  // iteration 10
    EXPECT_GT(mc.at("scan_map_refined").at("steps").get<int>(), 1);  // and later ones (15, 20)
    EXPECT_EQ(mb.at("scan_map_refined"), mc.at("scan_map_refined"));
    // The C10 the run started from (the parallax's here, not the stated −150 Å) is the resumed
    // run's too.
    EXPECT_EQ(mb.at("calibration"), mc.at("calibration"));
  }

  std::vector<std::string> extra_sets_;
  tycho::test::temp_folder tmp_;
};

TEST_F(Resume, ResumeEqualsContinuous) { resume_equals_continuous(); }

TEST_F(Resume, ResumeEqualsContinuousSgdProbe) {
  extra_sets_ = {"--set", "reconstruct.probe.optimizer=\"sgd\"", "--set", "reconstruct.probe.momentum=0.5",
                 "--set", "reconstruct.probe.learning_rate=0.05"};
  resume_equals_continuous();
}

// A scan the scan map turns (by the config here; the parallax's estimate does the same) lays its
// object out over the turned positions, a larger object than the raster's: the result must still
// be read back (it was refused as "(H, W) from the manifest's scan") and resume bit for bit.
TEST_F(Resume, ResumeEqualsContinuousOnATurnedScan) {
  extra_sets_ = {"--set", "preprocess.scan_rotation_deg=7"};
  resume_equals_continuous();
}

// Two slices free the scale, which waits for the rest of the map: stopped at iteration 10 it
// is waiting (the state's last number), and the resumed run goes on waiting and frees it where
// the continuous one does.
TEST_F(Resume, ResumeEqualsContinuousWhileAFreedScaleWaits) {
  extra_sets_ = {"--set", "reconstruct.slices=2", "--set", "reconstruct.slice_thickness_A=2.0"};
  resume_equals_continuous();
  const auto m = nlohmann::json::parse(load_result(tmp_ / "a.zip").manifest_json);
  EXPECT_EQ(m.at("scan_map_refined").at("state").back(), 1.0) << "the scale was not waiting at iteration 10";
}

// Without --iterations, --from runs what is left of the total; with nothing left it refuses.
TEST_F(Resume, RunsTheRestOfTheTotal) {
  const std::string a = tmp_ / "a.zip", b = tmp_ / "b.zip";
  auto ra = reconstruct({"--stop-after", "18", "-o", a});
  ASSERT_TRUE(ra.exited_with(0)) << ra.describe();
  auto rb = reconstruct({"--from", a, "-o", b});
  ASSERT_TRUE(rb.exited_with(0)) << rb.describe();
  EXPECT_EQ(load_result(b).array("loss_history", b).count(), 20);
  auto again = reconstruct({"--from", b, "-o", tmp_ / "c.zip"});
  EXPECT_TRUE(again.exited_with(2)) << again.describe();
  EXPECT_NE(again.err.find("already ran 20 of its 20 iterations"), std::string::npos) << again.err;
}

TEST_F(Resume, MismatchedShapesRefused) {
  const std::string a = tmp_ / "a.zip";
  auto ra = reconstruct({"--stop-after", "1", "-o", a});
  ASSERT_TRUE(ra.exited_with(0)) << ra.describe();
  // A different object padding: a different object shape for the same data.
  auto r = reconstruct({"--set", "preprocess.object_padding_px=8", "--from", a, "-o", tmp_ / "b.zip"});
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("does not match this config's data"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the file has scan 32 x 24, window 96 x 96, object 1 x 220 x 197"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the config gives scan 32 x 24, window 96 x 96, object 1 x 204 x 181"), std::string::npos)
      << r.err;
}

TEST_F(Resume, NotAResultRefused) {
  const std::string junk = tmp_.write("junk.zip", "this is not a zip file\n");
  auto r = reconstruct({"--from", junk, "-o", tmp_ / "b.zip"});
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("is not a tycho result"), std::string::npos) << r.err;

  auto missing = reconstruct({"--from", tmp_ / "missing.zip", "-o", tmp_ / "b.zip"});
  EXPECT_TRUE(missing.exited_with(2)) << missing.describe();
  EXPECT_NE(missing.err.find("no such file"), std::string::npos) << missing.err;

  // Without a CONFIG the --from file must be a prepared file; a missing one is said to be missing.
  auto alone = tycho::test::run_command(
      {tycho::test::tycho_exe(), "reconstruct", "--from", tmp_ / "missing.zip", "-o", tmp_ / "c.zip"});
  EXPECT_TRUE(alone.exited_with(2)) << alone.describe();
  EXPECT_NE(alone.err.find("--from '" + (tmp_ / "missing.zip") + "': no such file"), std::string::npos) << alone.err;
}

}  // namespace
