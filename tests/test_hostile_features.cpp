// Hostile input against the features added after the first hardening pass: `tycho evaluate`'s
// truth files (NaN phases, an empty phase, a zero pixel, an origin of 1e300, a NaN scan shape, an
// .npy header declaring 2^64 values, no true positions), the constraint entries' numbers (a
// low-pass of 1e300 Å, a probe power of 1e300, an integer a double cannot hold), host_memory_GiB
// out of range and `tycho plan` with an unknown target_residency. Each is refused with exit
// status 2 and a message naming the member or key, where it used to give NaN, a hang, a message
// with a garbage number or an "internal error". Plus the Gaussian filter those constraints and
// the accuracy metric share: no NaN for a tiny σ, and a kernel longer than the image folded onto
// it (the same sums as the unfolded filter). About 2 s: one 1-iteration run, the rest fail
// before reading the data.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <tycho/core/accuracy.hpp>
#include <tycho/core/error.hpp>

#include <cmath>
#include <complex>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "npy_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "zip_members.hpp"

namespace fs = std::filesystem;
using tycho::test::command_result;
using tycho::test::error_line;
using tycho::test::run_command;
using tycho::test::bytes_of;
using tycho::test::npy_bytes;
using tycho::test::tycho_exe;

namespace {

// A 4 x 4 float32 phase of zeros, with `value` at element 5.
std::string phase_with(float value) {
  std::vector<float> v(16, 0.0f);
  v[5] = value;
  return npy_bytes("<f4", "(4, 4)", std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
}

// A truth of the members given (name without ".npy"), stored uncompressed; members not given
// are the valid ones of a 4 x 4 cell.
void write_truth(const fs::path& out, std::vector<std::pair<std::string, std::string>> members) {
  const std::vector<std::pair<std::string, std::string>> valid = {
      {"phase", phase_with(0.5f)},
      {"pixel_size_A", npy_bytes("<f8", "()", bytes_of<double>({0.1736111111111111}))},
      {"scan_origin_A", npy_bytes("<f8", "(2,)", bytes_of<double>({17.0, 19.0}))}};
  for (const auto& v : valid) {
    bool given = false;
    for (const auto& m : members) given = given || m.first == v.first;
    if (!given) members.push_back(v);
  }
  for (auto& m : members) m.first += ".npy";
  tycho::test::write_zip_members(out, members);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The bytes of member `name` of the zip `path`.
std::string read_member(const std::string& path, const std::string& name) {
  const auto bytes = tycho::test::read_zip_member(path, name);
  EXPECT_TRUE(bytes.has_value()) << path << ": " << name;
  return bytes.value_or("");
}

// A copy of the zip `from` at `to` with member `name` replaced by `bytes`.
void replace_member(const std::string& from, const std::string& to, const std::string& name, const std::string& bytes) {
  tycho::test::write_zip_members(to, {{name, bytes}}, from, /*stored=*/false);
}

class HostileFeatures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tycho_hostile_features_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::string text = read_text(tycho::test::source_dir() + "/examples/mos2.toml");
    const std::string from = "\"data/mos2_80kV_32x24_counts.h5\"";
    text.replace(text.find(from), from.size(), "\"" + tycho::test::example_data("mos2_80kV_32x24_counts.h5") + "\"");
    config_ = (dir_ / "run.toml").string();
    std::ofstream(config_) << text;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // A result to evaluate against the crafted truths: one iteration, made once.
  static const std::string& result() {
    static const std::string path = [] {
      const std::string p = (dir_ / "r.zip").string();
      // The stated raster (not the lattice's scale): the messages name its extent.
      auto r = run_command({tycho_exe(), "reconstruct", config_, "-q", "--iterations", "1", "-o", p, "--set",
                            "output.previews=false", "--set", "reconstruct.positions.correct=false", "--set",
                            "preprocess.scan_scale=\"stated\""});
      EXPECT_TRUE(r.exited_with(0)) << r.describe();
      return p;
    }();
    return path;
  }
  static std::string evaluate_error(const std::string& name, const std::vector<std::pair<std::string, std::string>>& m) {
    const fs::path truth = dir_ / (name + ".npz");
    write_truth(truth, m);
    return error_line(run_command({tycho_exe(), "evaluate", result(), "--truth", truth.string()}));
  }
  // The error of a run of the example with `sets` (each a --set), which must fail before it
  // writes anything.
  static std::string run_error(const std::vector<std::string>& sets, const char* command = "reconstruct") {
    const std::string out = (dir_ / "refused.zip").string();
    std::vector<std::string> argv = {tycho_exe(), command, config_};
    if (std::string(command) == "reconstruct") argv.insert(argv.end(), {"-q", "--iterations", "1", "-o", out});
    for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
    const std::string m = error_line(run_command(argv));
    EXPECT_FALSE(fs::exists(out));
    return m;
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path HostileFeatures::dir_;
std::string HostileFeatures::config_;

}  // namespace

TEST_F(HostileFeatures, TruthPhasesMustBeFiniteAndNotEmpty) {
  const std::string nan = (dir_ / "nan.npz").string(), inf = (dir_ / "inf.npz").string();
  EXPECT_EQ(evaluate_error("nan", {{"phase", phase_with(std::nanf(""))}}),
            "tycho: error: '" + nan + "': 'phase' holds nan at element 5; expected finite phases in radians");
  EXPECT_EQ(evaluate_error("inf", {{"phase_total", phase_with(INFINITY)}}),
            "tycho: error: '" + inf + "': 'phase_total' holds inf at element 5; expected finite phases in radians");
  EXPECT_EQ(evaluate_error("empty", {{"phase", npy_bytes("<f4", "(0, 4)", "")}}),
            "tycho: error: '" + (dir_ / "empty.npz").string() +
                "': 'phase' is (0, 4); expected a phase of at least 1 x 1 pixels");
}

TEST_F(HostileFeatures, TruthGeometryMustBeFiniteAndInRange) {
  EXPECT_EQ(evaluate_error("pixel", {{"pixel_size_A", npy_bytes("<f8", "()", bytes_of<double>({0.0}))}}),
            "tycho: error: '" + (dir_ / "pixel.npz").string() +
                "': 'pixel_size_A' is 0; expected one finite value > 0 (Å)");
  EXPECT_EQ(evaluate_error("origin", {{"scan_origin_A", npy_bytes("<f8", "(2,)", bytes_of<double>({1e300, 19.0}))}}),
            "tycho: error: '" + (dir_ / "origin.npz").string() +
                "': 'scan_origin_A' is [1e+300, 19]; expected 2 finite values in Å, within 2^31 pixels "
                "(372827022.2 Å) of the cell");
  // A NaN row count became INT64_MIN positions in the coverage check.
  EXPECT_EQ(evaluate_error("shape", {{"scan_shape", npy_bytes("<f8", "(2,)", bytes_of<double>({NAN, 24.0}))}}),
            "tycho: error: '" + (dir_ / "shape.npz").string() +
                "': 'scan_shape' is [nan, 24]; expected 2 whole numbers of positions from 1 to 2^31 (the scan's rows "
                "and columns)");
  EXPECT_EQ(evaluate_error("step", {{"scan_step_A", npy_bytes("<f8", "()", bytes_of<double>({-0.5}))}}),
            "tycho: error: '" + (dir_ / "step.npz").string() +
                "': 'scan_step_A' holds -0.5; expected a finite step > 0 in Å");
  EXPECT_EQ(evaluate_error("nopositions", {{"positions_true_A", npy_bytes("<f8", "(0, 2)", "")}}),
            "tycho: error: '" + (dir_ / "nopositions.npz").string() +
                "': 'positions_true_A' holds no positions; expected (P, 2) positions in Å");
}

// The .npy reader's errors were the SDK's exception type, which the command reported as an
// internal error (exit status 3).
TEST_F(HostileFeatures, TruthMemberDeclaringHugeShapeIsABadFile) {
  EXPECT_EQ(evaluate_error("huge", {{"phase", npy_bytes("<f4", "(4294967296, 4294967296)", std::string(64, '\0'))}}),
            "tycho: error: '" + (dir_ / "huge.npz").string() +
                "': member 'phase': shape (4294967296, 4294967296) overflows");
}

// A result edited by hand: an object with one NaN scored Pearson 0 with exit status 0; a
// manifest without its calibration was an "internal error" (nlohmann's exception), then the
// JSON library's text (issue 28): now the key and what was expected.
TEST_F(HostileFeatures, EvaluatedResultMustBeFiniteAndComplete) {
  const std::string truth = tycho::test::example_data("mos2_ground_truth.npz");
  std::string object = read_member(result(), "object.npy");
  ASSERT_GT(object.size(), 128u + 8u * 1000u);
  const float nan = std::nanf("");
  std::memcpy(&object[object.size() - 8 * 1000], &nan, 4);  // the real part of element P - 1000
  const std::string with_nan = (dir_ / "nan_object.zip").string();
  replace_member(result(), with_nan, "object.npy", object);
  const int64_t element = int64_t((object.size() - 128) / 8) - 1000;  // complex elements
  EXPECT_EQ(error_line(run_command({tycho_exe(), "evaluate", with_nan, "--truth", truth})),
            "tycho: error: '" + with_nan + "' (evaluated): array 'object' (1 x 220 x 197) holds 1 non-finite value "
                "(first: nan at element " + std::to_string(element) + "); expected finite numbers: a run from it would "
                "compute NaN. tycho never saves one, so the file was changed or written by another program; start from "
                "an earlier file");

  auto manifest = nlohmann::json::parse(read_member(result(), "manifest.json"));
  manifest.erase("calibration");
  const std::string no_calibration = (dir_ / "no_calibration.zip").string();
  replace_member(result(), no_calibration, "manifest.json", manifest.dump());
  EXPECT_EQ(error_line(run_command({tycho_exe(), "evaluate", no_calibration, "--truth", truth})),
            "tycho: error: '" + no_calibration +
                "': member 'manifest.json' has no calibration.window_shape (no 'calibration' at all); expected 2 integers "
                "from 1 to 65536");
}

// A σ below 1/8 px is a single tap (every local phase 0) and a field of view of 1 px has no
// variance: both scored Pearson 0 with exit status 0.
TEST_F(HostileFeatures, DegenerateMetricSettingsAreRefused) {
  const std::string truth = tycho::test::example_data("mos2_ground_truth.npz");
  EXPECT_EQ(error_line(run_command({tycho_exe(), "evaluate", result(), "--truth", truth, "--sigma-A", "1e-300"})),
            "tycho: error: '" + result() + "' against the truth '" + truth + "': sigma_A = 1e-300 Å is below 1/8 of the object's pixel (0.1736111111 Å): the "
            "Gaussian is a single tap and the local phase is 0 everywhere; expected at least 0.02170138889 Å");
  EXPECT_EQ(error_line(run_command({tycho_exe(), "evaluate", result(), "--truth", truth, "--fov-fraction", "1e-300"})),
            "tycho: error: '" + result() + "' against the truth '" + truth + "': the field of view on axis 0 is 1 px (fov_fraction 1e-300 of the positions' "
            "extent, 89.28 px); expected at least 2 px: give a larger fov_fraction");
}

// probe_orthogonal_modes with one mode did nothing, silently (positions_affine without
// position correction already said so).
TEST_F(HostileFeatures, ModeConstraintWithOneModeWarns) {
  auto r = run_command({tycho_exe(), "reconstruct", config_, "--iterations", "1", "-o", (dir_ / "one_mode.zip").string(),
                        "--set", "output.previews=false", "--set", "reconstruct.constraints=[{name=\"probe_orthogonal_modes\"}]"});
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.err.find("[tycho warning] constraints: [[reconstruct.constraints]] 1 (probe_orthogonal_modes): "
                       "orthonormalises several probe modes, and this run has one ([reconstruct] probe_modes = 1): it "
                       "does nothing in this run\n"),
            std::string::npos)
      << r.err;
}

TEST_F(HostileFeatures, ConstraintNumbersOutOfRangeAreRefused) {
  EXPECT_EQ(run_error({"reconstruct.constraints=[{name=\"object_lowpass\", sigma_A=1e300}]"}),
            "tycho: error: [[reconstruct.constraints]] 1 (object_lowpass): config key 'sigma_A' in "
            "[reconstruct.constraints] must be > 0 and <= 10000, i.e. in (0, 10000] (declared by constraint "
            "'object_lowpass'), got 1.0000000000000001e+300");
  EXPECT_EQ(run_error({"reconstruct.constraints=[{name=\"probe_power\", relative_power=1e300}]"}),
            "tycho: error: [[reconstruct.constraints]] 1 (probe_power): config key 'relative_power' in "
            "[reconstruct.constraints] must be > 0 and <= 1000000, i.e. in (0, 1000000] (declared by constraint "
            "'probe_power'), got 1.0000000000000001e+300");
  // 2^53 + 1: toml++ gives no double for it; the message read one from an empty optional.
  EXPECT_EQ(run_error({"reconstruct.constraints=[{name=\"object_tv\", iterations=9007199254740993}]"}),
            "tycho: error: [[reconstruct.constraints]] 1 (object_tv): config key 'iterations' in "
            "[reconstruct.constraints] must be >= 1 and <= 1000, i.e. in [1, 1000] (declared by constraint "
            "'object_tv'), got 9007199254740993");
}

TEST_F(HostileFeatures, HostMemoryAndResidencyAreCheckedByPlan) {
  EXPECT_EQ(run_error({"reconstruct.host_memory_GiB=1e-300"}, "plan"),
            "tycho: error: [reconstruct] host_memory_GiB = 1e-300: must be from 1 byte to below 2^63 bytes (9.3e-10 "
            "to 8589934592 GiB)");
  EXPECT_EQ(run_error({"reconstruct.host_memory_GiB=1e300"}, "plan"),
            "tycho: error: [reconstruct] host_memory_GiB = 1e+300: must be from 1 byte to below 2^63 bytes (9.3e-10 "
            "to 8589934592 GiB)");
  EXPECT_EQ(run_error({"reconstruct.target_residency=\"gpu\""}, "plan"),
            "tycho: error: [reconstruct] target_residency = \"gpu\": expected \"device\", \"host\", \"disk\" or "
            "\"auto\"");
}

TEST(HostileGaussian, TinySigmaLeavesTheImageAndHugeSigmaIsRefused) {
  EXPECT_EQ(tycho::gaussian_kernel(1e-300), std::vector<double>{1.0});  // was {NaN}: 0 / 0
  try {
    (void)tycho::gaussian_kernel(1e300);
    ADD_FAILURE() << "a kernel of 4e300 px was built";
  } catch (const tycho::error& e) {
    EXPECT_STREQ(e.what(), "gaussian_kernel: sigma 1e+300 px is wider than 4194304 px");
  }
}

// A kernel longer than the boundary's period (σ = 3 px: 25 taps on rows of 5 and columns of 4)
// gives the sums of the unfolded filter, computed here tap by tap with scipy's index rules.
TEST(HostileGaussian, KernelLongerThanTheImageIsFoldedExactly) {
  const int64_t h = 4, w = 5;
  std::vector<std::complex<double>> image(std::size_t(h * w));
  for (int64_t k = 0; k < h * w; ++k) image[std::size_t(k)] = {std::sin(0.7 * double(k)), std::cos(1.3 * double(k))};
  const std::vector<double> taps = tycho::gaussian_kernel(3.0);
  const int64_t r = int64_t(taps.size() / 2);
  for (const auto boundary : {tycho::filter_boundary::reflect, tycho::filter_boundary::wrap}) {
    auto index = [&](int64_t i, int64_t n) {
      const int64_t period = boundary == tycho::filter_boundary::wrap ? n : 2 * n;
      int64_t m = ((i % period) + period) % period;
      return m < n ? m : period - 1 - m;
    };
    std::vector<std::complex<double>> rows(image.size()), expected(image.size());
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j)
        for (int64_t k = -r; k <= r; ++k)
          rows[std::size_t(i * w + j)] += taps[std::size_t(k + r)] * image[std::size_t(i * w + index(j + k, w))];
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j)
        for (int64_t k = -r; k <= r; ++k)
          expected[std::size_t(i * w + j)] += taps[std::size_t(k + r)] * rows[std::size_t(index(i + k, h) * w + j)];
    std::vector<std::complex<double>> filtered = image;
    tycho::gaussian_filter_2d(filtered.data(), h, w, 3.0, boundary);
    for (std::size_t k = 0; k < image.size(); ++k) EXPECT_NEAR(std::abs(filtered[k] - expected[k]), 0.0, 1e-14) << k;
  }
}
