// The positions' Cramér–Rao bound at a run's end (session::report_position_bound, from the
// engine's tycho_engine_vtable::position_information): where a position moved and the data are
// counts, the log and the manifest's positions_precision give how precisely the data place each
// probe position. Poisson information grows with the counts: the MoS2 example's counts times four
// normalise to the same targets, so the run takes the same path, and the bound halves. Data that
// are not counts (floats), and a run in which no position moved yet, get none, and the log says
// why.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <tycho/host/result_record.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "npy_file.hpp"
#include "run_command.hpp"
#include "source_under_test.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::run_command;

// The MoS2 example on `data` (an .npy of its patterns), 12 iterations (the scan map steps at 10).
tycho::test::command_result run_on(const tycho::test::temp_folder& tmp, const std::string& data, const std::string& out,
                                   const std::string& iterations = "12", const std::string& correct = "\"auto\"") {
  return run_command({tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml",
                      "--iterations", iterations, "--set", "output.previews=false", "--set", "data.source=\"npy\"", "--set",
                      "data.path=\"" + data + "\"", "--set", "data.scan_step_A=0.5", "--set",
                      "data.detector_pixel_invA=0.06", "--set", "reconstruct.positions.correct=" + correct, "-o", out});
}

nlohmann::json manifest_of(const std::string& path) {
  return nlohmann::json::parse(tycho::test::load_result(path).manifest_json);
}

TEST(PositionBound, FourTimesTheCountsHalveTheBoundAndFloatsOrUnmovedPositionsHaveNone) {
  tycho::test::temp_folder tmp;
  std::vector<float> patterns;
  {
    tycho::test::source_under_test src;
    ASSERT_EQ(src.open(tycho::test::plugins(), "emd",
                       "path = '" + tycho::test::example_data("mos2_80kV_32x24_counts.h5") + "'\n", tmp.path().string()),
              TYCHO_OK)
        << tycho::last_error();
    patterns = src.read(0, 32 * 24);
  }
  std::vector<uint16_t> once(patterns.size()), four(patterns.size());
  for (std::size_t k = 0; k < patterns.size(); ++k) {
    ASSERT_LE(patterns[k] * 4, 65535.0f);
    once[k] = uint16_t(patterns[k]);
    four[k] = uint16_t(4 * once[k]);
  }
  const std::vector<int64_t> shape = {32, 24, 96, 96};
  tycho::test::write_npy(tmp / "once.npy", "<u2", shape, once.data(), once.size() * 2);
  tycho::test::write_npy(tmp / "four.npy", "<u2", shape, four.data(), four.size() * 2);
  tycho::test::write_npy(tmp / "floats.npy", "<f4", shape, patterns.data(), patterns.size() * 4);

  auto a = run_on(tmp, tmp / "once.npy", tmp / "once.zip");
  auto b = run_on(tmp, tmp / "four.npy", tmp / "four.zip");
  ASSERT_TRUE(a.exited_with(0)) << a.describe();
  ASSERT_TRUE(b.exited_with(0)) << b.describe();
  EXPECT_NE(a.err.find("positions: the data place each probe position to "), std::string::npos) << a.describe();
  const nlohmann::json pa = manifest_of(tmp / "once.zip").at("positions_precision");
  const nlohmann::json pb = manifest_of(tmp / "four.zip").at("positions_precision");
  EXPECT_EQ(pa.at("iteration"), 12);
  EXPECT_EQ(pa.at("patterns"), 768);
  EXPECT_EQ(pa.at("patterns_without_information"), 0);
  for (int axis = 0; axis < 2; ++axis) {
    const double x = pa.at("cramer_rao_A").at(axis).get<double>(), y = pb.at("cramer_rao_A").at(axis).get<double>();
    std::cout << "axis " << axis << ": " << x << " Å from the counts, " << y << " Å from four times them\n";
    // About 0.02 Å at this dose (bench/RESULTS.md: the true object gives 0.015-0.03 Å on the
    // matrix's 2-D entries at 10^4-10^5 electrons a pattern).
    EXPECT_GT(x, 0.005);
    EXPECT_LT(x, 0.1);
    EXPECT_NEAR(x / y, 2.0, 2e-3) << "axis " << axis;
  }
  auto c = run_on(tmp, tmp / "floats.npy", tmp / "floats.zip");
  ASSERT_TRUE(c.exited_with(0)) << c.describe();
  EXPECT_FALSE(manifest_of(tmp / "floats.zip").contains("positions_precision"));
  EXPECT_EQ(c.err.find("the data place each probe position"), std::string::npos) << c.describe();
  EXPECT_NE(c.err.find("no Cramér-Rao bound for the positions: the data are not counts (the source stores them as "
                       "float32"),
            std::string::npos)
      << c.describe();
  // One iteration, each position held: the scan map's first step is at the tenth, so none has moved.
  auto d = run_on(tmp, tmp / "once.npy", tmp / "one.zip", "1", "false");
  ASSERT_TRUE(d.exited_with(0)) << d.describe();
  EXPECT_FALSE(manifest_of(tmp / "one.zip").contains("positions_precision"));
  EXPECT_NE(d.err.find("no Cramér-Rao bound for the positions: no position has moved in this run's 1 iterations"),
            std::string::npos)
      << d.describe();
}

}  // namespace
