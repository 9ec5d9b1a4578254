// Hostile input, round three (issue 28): limits checked before the work, and the integer
// arithmetic that was undefined behaviour under UBSan. Settings a careless or hostile user gives
// (a window of 2^62 pixels, 2e9 iterations, a NUL in the output path, a scan step of 1e-300 Å,
// NaN in a vector, an energy of 1e300 eV, previews = "yes" with --overwrite) and data that
// degenerate (a CXI scan whose positions all coincide, listed positions not in raster order
// under a drift model, a uint64 count near 2^64). Each is refused with exit status 2 and a
// message naming the key or file and the accepted range, before anything is replaced, where it
// used to overflow, run, or fail late with another key's message. Every file is made here.
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cxi_test_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "tycho/host/dataset.hpp"

namespace fs = std::filesystem;
using tycho::test::command_result;
using tycho::test::error_line;
using tycho::test::run_command;
using tycho::test::tycho_exe;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool contains(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

class HostileLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text = read_text(tycho::test::source_dir() + "/examples/mos2.toml");
    const std::string from = "\"data/mos2_80kV_32x24_counts.h5\"";
    text.replace(text.find(from), from.size(), "\"" + tycho::test::example_data("mos2_80kV_32x24_counts.h5") + "\"");
    config_ = tmp_.write("run.toml", text);
  }
  // `tycho COMMAND config --set ...` (reconstruct: one iteration into out.zip), which must fail
  // with exit status 2 and write nothing; its error line.
  std::string refused(const std::vector<std::string>& sets, const std::string& command = "reconstruct") {
    std::vector<std::string> argv = {tycho_exe(), command, config_};
    if (command == "reconstruct") argv.insert(argv.end(), {"-q", "--iterations", "1", "-o", out()});
    for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
    const std::string m = error_line(run_command(argv));
    EXPECT_FALSE(fs::exists(out()));
    EXPECT_EQ(m.find("internal error"), std::string::npos) << m;
    return m;
  }
  std::string out() const { return tmp_ / "out.zip"; }

  tycho::test::temp_folder tmp_;
  std::string config_;
};

// pad_detector_to near 2^63 overflowed the window's product (UBSan), then asked for a vector
// beyond max_size ("internal error"); 1e5 x 1e5 asked the allocator for 30 TB and said "out of
// host memory" without the key. A window within the range that the patterns' memory cannot hold
// is refused by the key before the padded copy is requested (the example's counts stay uint16,
// 2 bytes per padded pixel).
TEST_F(HostileLimits, PaddedWindowIsBoundedBeforeItsProductIsFormed) {
  for (const char* window : {"[4611686018427387904, 4611686018427387904]", "[100000, 100000]"})
    EXPECT_TRUE(contains(refused({std::string("preprocess.pad_detector_to=") + window}),
                         "[preprocess] pad_detector_to must be two integers [N0, N1] from 1 to 65536, the padded "
                         "window in pixels, got"))
        << window;
  const std::string m = refused({"preprocess.pad_detector_to=[65536, 65536]"});
  EXPECT_TRUE(contains(m, "tycho: error: [preprocess] pad_detector_to = [65536, 65536]: the 768 patterns padded to "
                          "65536 x 65536 pixels need 6.00 TiB, more than this machine's "))
      << m;
}

// The command line capped --iterations at 1e9; the config's key had no bound.
TEST_F(HostileLimits, ConfiguredIterationsAreBoundedLikeTheFlag) {
  auto r = run_command({tycho_exe(), "reconstruct", config_, "-q", "-o", out(), "--set",
                        "reconstruct.iterations=2000000000"});
  EXPECT_EQ(error_line(r), "tycho: error: [reconstruct] iterations must be from 0 to 1000000000, got 2000000000");
  EXPECT_FALSE(fs::exists(out()));
  EXPECT_EQ(refused({"reconstruct.iterations=2000000000"}, "plan"),
            "tycho: error: [reconstruct] iterations must be from 0 to 1000000000, got 2000000000");
}

// A NUL in [output] path wrote a file named up to the NUL and reported the whole name; -o too.
TEST_F(HostileLimits, ControlCharactersInTheOutputPathAreRefused) {
  EXPECT_EQ(refused({"output.path=\"run\\u0000.zip\""}),
            "tycho: error: [output] path 'run\\x00.zip' holds a NUL byte at byte 3; expected a file name without NUL "
            "or control characters (the system would cut or garble it)");
  auto r = run_command({tycho_exe(), "reconstruct", config_, "-q", "--iterations", "1", "-o", tmp_ / "a\nb.zip"});
  EXPECT_TRUE(contains(error_line(r), "the result file name '" + (tmp_ / "a\\x0ab.zip") +
                                          "' holds a control character at byte "))
      << r.describe();
  EXPECT_FALSE(fs::exists(tmp_ / "a\nb.zip"));
}

// previews = "yes" was refused only after the run, by then with --overwrite the existing result
// was replaced and the command exited 2. Now the type is checked first and the file is untouched.
TEST_F(HostileLimits, WrongPreviewsTypeIsRefusedBeforeAnExistingResultIsReplaced) {
  const std::string existing = tmp_.write("existing.zip", "the previous result\n");
  auto r = run_command({tycho_exe(), "reconstruct", config_, "-q", "--iterations", "1", "-o", existing, "--overwrite",
                        "--set", "output.previews=\"yes\""});
  EXPECT_EQ(error_line(r),
            "tycho: error: config key 'previews' in [output] must be a bool (declared by the runtime), got a string");
  EXPECT_EQ(read_text(existing), "the previous result\n");
}

// NaN in a vector setting passed the settings check and failed in the engine; an energy of 1e300
// or 1e-300 eV was refused by messages about the aperture and the defocus; scan steps of 1e-300
// and 1e300 Å put every position on one pixel or made a 2^31 px object.
TEST_F(HostileLimits, NumbersOutsideTheirRangeAreRefusedByTheirOwnKey) {
  EXPECT_EQ(refused({"preprocess.scan_origin_A=[nan, 0]"}),
            "tycho: error: config key 'scan_origin_A' in [preprocess] must be an array of finite numbers (declared by "
            "the runtime), got nan at index 0");
  for (const char* e : {"1e300", "1e-300"})
    EXPECT_TRUE(contains(refused({std::string("optics.energy_eV=") + e}),
                         "eV: expected a beam energy from 1 eV to 100000000 eV (100 MeV)"))
        << e;
  EXPECT_TRUE(contains(refused({"optics.energy_eV=1e300"}, "plan"), "[optics] energy_eV = 1e+300 eV"));
  EXPECT_EQ(refused({"data.scan_step_A=1e-300"}),
            "tycho: error: [data] scan_step_A = 1e-300 Å: expected a scan step from 1e-06 to 1000000000 Å");
  EXPECT_EQ(refused({"data.scan_step_A=1e300"}),
            "tycho: error: [data] scan_step_A = 1e+300 Å: expected a scan step from 1e-06 to 1000000000 Å");
  for (const char* axis : {"2", "-1"})
    EXPECT_EQ(refused({std::string("data.fast_axis=") + axis}),
              std::string("tycho: error: [data] fast_axis = ") + axis +
                  ": expected 0 (Rx) or 1 (Ry), the scan axis the beam swept first");
  EXPECT_EQ(refused({"data.fast_axis=0.5"}),
            "tycho: error: config key 'fast_axis' in [data] must be an integer (declared by the runtime), got a float");
}

// binning = 1000000 suggested crop_detector = [0, 0], itself refused.
TEST_F(HostileLimits, BinningRemedyIsNeverARefusedValue) {
  EXPECT_EQ(refused({"preprocess.binning=1000000"}, "plan"),
            "tycho: error: [preprocess] binning = 1000000 is larger than the 96 x 96 detector; expected a factor from "
            "1 to 96 that divides both sizes");
  EXPECT_TRUE(contains(refused({"preprocess.binning=5"}, "plan"), "with crop_detector = [95, 95]"));
}

// The plan compared the run with the physical memory; it now takes what is available.
TEST_F(HostileLimits, PlanComparesWithTheAvailableMemoryAndSaysSo) {
  auto r = run_command({tycho_exe(), "plan", config_});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out, "(memory: this machine's available memory: ")) << r.out;
  EXPECT_TRUE(contains(r.out, " (MemAvailable, no swap) less a 10 % margin)")) << r.out;
}

// A uint64 count near 2^64 was formatted through a conversion to int64 (undefined: UBSan), and
// printed negative.
TEST(HostileLimitsUnit, LargeCountWarningPrintsTheValueExactly) {
  tycho::host::dataset d;
  d.description = "counts.npy";
  d.info.stored_dtype = {kDLUInt, 64, 1};
  d.max_value = 18446744073709551616.0f;  // 2^64, as float32 holds 2^64 - 1
  const std::string w = tycho::host::float32_rounding_warning(d);
  EXPECT_TRUE(contains(w, "is stored as uint64 and its values reach 18446744073709551616 (the largest, as float32)"))
      << w;
}

// CXI files: translations that all coincide (every position on one point), and a grid listed out
// of raster order under linear = "drift", which assumes the listed order is a raster's (turned or not).
class HostileScans : public ::testing::Test {
 protected:
  std::string cxi_with(const std::string& name, const std::vector<double>& translations_m) {
    const std::string path = tmp_ / name;
    tycho::test::h5_file_writer w(path);
    EXPECT_TRUE(w.ok());
    w.u16("/entry_1/data_1/data", {768, 96, 96}, tycho::test::mos2_counts().data());
    w.doubles("/entry_1/sample_1/geometry_1/translation", {3, 768}, translations_m);
    w.number("/entry_1/instrument_1/source_1/energy", 80e3 * tycho::test::k_joule_per_eV);
    w.number("/entry_1/instrument_1/detector_1/distance", tycho::test::k_mos2_distance_m);
    w.number("/entry_1/instrument_1/detector_1/x_pixel_size", tycho::test::mos2_pixel_m());
    w.number("/entry_1/instrument_1/detector_1/y_pixel_size", tycho::test::mos2_pixel_m());
    return path;
  }
  command_result run(const std::string& cxi, const std::string& more = "") {
    const std::string config =
        tmp_.write("cxi.toml", "[data]\nsource = \"cxi\"\npath = \"" + cxi +
                                   "\"\n[optics]\nsemiangle_mrad = 25.0\nC10_A = -150.0\n[reconstruct]\n"
                                   "iterations = 1\n" + more + "[output]\npreviews = false\n");
    return run_command({tycho_exe(), "reconstruct", config, "-q", "-o", tmp_ / "out.zip"});
  }
  tycho::test::temp_folder tmp_;
};

TEST_F(HostileScans, PositionsThatAllCoincideAreRefused) {
  const std::string cxi = cxi_with("zero.cxi", std::vector<double>(3 * 768, 0.0));
  const std::string m = error_line(run(cxi));
  EXPECT_TRUE(contains(m, "lists 768 scan positions that all lie on one point (within 0 x 0 object pixels): expected "
                          "a scan of positions that differ"))
      << m;
  EXPECT_TRUE(contains(m, cxi)) << m;
  EXPECT_FALSE(fs::exists(tmp_ / "out.zip"));
}

TEST_F(HostileScans, DriftModelNeedsPositionsInRasterOrder) {
  // The MoS2 raster listed as a snake scan (every other row's frames reversed): the same grid of
  // positions in an order no grid lists them in. (Reversed as a whole, or every row alike, the
  // list is the raster turned by 180° or mirrored, which the drift model takes.)
  const std::vector<double> raster = tycho::test::mos2_translations_m(false);
  std::vector<double> reversed(raster.size());
  for (int64_t axis = 0; axis < 3; ++axis)
    for (int64_t k = 0; k < 768; ++k) {
      const int64_t row = k / 24, col = row % 2 == 1 ? 23 - k % 24 : k % 24;
      reversed[std::size_t(axis * 768 + k)] = raster[std::size_t(axis * 768 + row * 24 + col)];
    }
  const std::string drift = "[reconstruct.positions]\ncorrect = true\n[[reconstruct.constraints]]\n"
                            "name = \"positions_affine\"\nlinear = \"drift\"\n";
  const std::string m = error_line(run(cxi_with("reversed.cxi", reversed), "batch_size = 128\n" + drift));
  EXPECT_TRUE(contains(m, "linear = \"drift\" needs a raster scan of at least 2 x 2 positions listed in raster order"))
      << m;
  EXPECT_FALSE(fs::exists(tmp_ / "out.zip"));
}

}  // namespace
