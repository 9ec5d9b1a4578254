// [data] positions_from (issue 11): a fresh run starts at the positions a result saved, bit for
// bit, instead of the source's raster; a result of another scan or grid, or a file that is not a
// result, is refused before any iteration with a message naming the key and the file. A 6 x 5
// simulated scan of 64 x 64 patterns: nine short runs, about 3 s in all.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::command_result;
using tycho::test::run_command;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class PositionsFrom : public ::testing::Test {
 protected:
  // A noise-free simulated scan; `scan` = "[Rx, Ry]".
  std::string config(const std::string& name, const std::string& scan) {
    return tmp_.write(name, "[data]\nsource = \"simulate\"\nscan_shape = " + scan +
                                "\ndetector_shape = [64, 64]\n[reconstruct]\nbatch_size = 10\nthreads = 2\n");
  }
  command_result reconstruct(const std::string& config, const std::string& out, std::vector<std::string> sets) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", config, "-q", "-o", out,
                                     "--set", "output.previews=false"};
    for (auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(std::move(s));
    }
    return run_command(argv);
  }
  static std::string from(const std::string& path) { return "data.positions_from=\"" + path + "\""; }

  tycho::test::temp_folder tmp_;
};

// Step 1 corrects the positions; step 2, without correction, starts from them and saves them
// unchanged: bit for bit step 1's, and not the raster (which a run without the key keeps).
TEST_F(PositionsFrom, AFreshRunStartsAtTheResultsPositionsBitForBit) {
  const std::string sim = config("sim.toml", "[6, 5]");
  const std::string a = tmp_ / "a.zip", b = tmp_ / "b.zip", raster = tmp_ / "raster.zip";
  auto ra = reconstruct(sim, a, {"reconstruct.iterations=3", "reconstruct.positions.correct=true"});
  ASSERT_TRUE(ra.exited_with(0)) << ra.describe();
  auto rb = reconstruct(sim, b, {"reconstruct.iterations=1", "reconstruct.positions.correct=false", from(a)});
  ASSERT_TRUE(rb.exited_with(0)) << rb.describe();
  auto rr = reconstruct(sim, raster, {"reconstruct.iterations=1", "reconstruct.positions.correct=false"});
  ASSERT_TRUE(rr.exited_with(0)) << rr.describe();

  const auto ra_rec = tycho::test::load_result(a), rb_rec = tycho::test::load_result(b),
             rr_rec = tycho::test::load_result(raster);
  const auto& pa = ra_rec.array("positions_px", a);
  const auto& pb = rb_rec.array("positions_px", b);
  const auto& pr = rr_rec.array("positions_px", raster);
  ASSERT_EQ(pa.shape, (std::vector<int64_t>{30, 2}));
  EXPECT_TRUE(pa.bytes != pr.bytes) << "step 1 did not move the positions: the test would prove nothing";
  EXPECT_EQ(pb.shape, pa.shape);
  EXPECT_TRUE(pb.bytes == pa.bytes) << "the run did not start from (or did not keep) the result's positions";
  // A fresh run: one iteration of history, not step 1's three.
  EXPECT_EQ(rb_rec.array("loss_history", b).count(), 1);
}

// The source's raster stays the nominal positions: a drift model (which needs a raster) fits from
// it while the run corrects positions that started off the raster.
TEST_F(PositionsFrom, TheSourcesPositionsStayTheNominalOnes) {
  const std::string sim = config("sim.toml", "[6, 5]");
  const std::string a = tmp_ / "a.zip", b = tmp_ / "b.zip";
  auto ra = reconstruct(sim, a, {"reconstruct.iterations=3", "reconstruct.positions.correct=true"});
  ASSERT_TRUE(ra.exited_with(0)) << ra.describe();
  auto rb = reconstruct(sim, b, {"reconstruct.iterations=1", from(a), "reconstruct.positions.correct=true",
                                 "reconstruct.constraints=[{name=\"positions_affine\",linear=\"drift\"}]"});
  EXPECT_TRUE(rb.exited_with(0)) << rb.describe();
}

TEST_F(PositionsFrom, AResultOfAnotherScanOrGridOrNoResultIsRefused) {
  const std::string sim = config("sim.toml", "[6, 5]");
  const std::string a = tmp_ / "a.zip";
  auto ra = reconstruct(sim, a, {"reconstruct.iterations=1"});
  ASSERT_TRUE(ra.exited_with(0)) << ra.describe();

  // The same number of positions in another scan shape.
  auto scan = reconstruct(config("other.toml", "[5, 6]"), tmp_ / "x.zip", {"reconstruct.iterations=1", from(a)});
  EXPECT_TRUE(scan.exited_with(2)) << scan.describe();
  EXPECT_TRUE(contains(scan.err, "[data] positions_from '" + a + "' holds the positions of a 6 x 5 scan; this run's "
                                 "data are a 5 x 6 scan (30 positions): give the result of a run on the same data"))
      << scan.err;

  // The same scan on another object grid (another padding).
  auto grid = reconstruct(sim, tmp_ / "x.zip", {"reconstruct.iterations=1", "preprocess.object_padding_px=8", from(a)});
  EXPECT_TRUE(grid.exited_with(2)) << grid.describe();
  EXPECT_TRUE(contains(grid.err, "[data] positions_from '" + a + "' has an object of ")) << grid.err;
  EXPECT_TRUE(contains(grid.err, "its positions lie on another grid (check [preprocess] object_padding_px")) << grid.err;

  // Not a tycho result (the config itself), and no file at all.
  auto toml = reconstruct(sim, tmp_ / "x.zip", {"reconstruct.iterations=1", from(sim)});
  EXPECT_TRUE(toml.exited_with(2)) << toml.describe();
  EXPECT_TRUE(contains(toml.err, "[data] positions_from '" + sim + "' is not a tycho result")) << toml.err;
  auto none = reconstruct(sim, tmp_ / "x.zip", {"reconstruct.iterations=1", from(tmp_ / "none.zip")});
  EXPECT_TRUE(none.exited_with(2)) << none.describe();
  EXPECT_TRUE(contains(none.err, "[data] positions_from '" + (tmp_ / "none.zip") + "': no such file")) << none.err;
}

}  // namespace
