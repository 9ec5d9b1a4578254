// Bad detector pixels ([preprocess] saturation_value, max_masked_fraction; host/src/data/bad_pixels.cpp):
// non-finite and saturated values are masked in every pattern, not refused. The arithmetic on
// small synthetic datasets (the mask, the zeroed values, the totals, the warning's counts and
// coordinates, the ranks' masks combined, the refusals), the engine mask combined with the
// detector padding, and runs of the `tycho` command on MoS2 copies with a detector gap (uint16
// 65535) and with NaN/inf pixels (float32), compared with the clean counts.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <tycho/core/error.hpp>
#include <tycho/host/parallel.hpp>
#include <tycho/host/session.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../host/src/data/bad_pixels.hpp"
#include "../host/src/data/detector_padding.hpp"
#include "built_in_plugins.hpp"
#include "emd_test_file.hpp"
#include "realformats.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
using tycho::host::bad_pixel_settings;
using tycho::host::dataset;
using tycho::host::mask_bad_pixels;
using tycho::test::command_result;
using tycho::test::run_command;

namespace {

constexpr float k_nan = std::numeric_limits<float>::quiet_NaN();
constexpr float k_inf = std::numeric_limits<float>::infinity();

// numpy's fftshift / ifftshift of an (n0, n1) array.
template <class T>
std::vector<T> fftshift(const std::vector<T>& a, int64_t n0, int64_t n1) {  // FFT order → centred
  std::vector<T> out(a.size());
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      out[std::size_t(((i + n0 / 2) % n0) * n1 + (j + n1 / 2) % n1)] = a[std::size_t(i * n1 + j)];
  return out;
}
template <class T>
std::vector<T> ifftshift(const std::vector<T>& a, int64_t n0, int64_t n1) {  // centred → FFT order
  std::vector<T> out(a.size());
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      out[std::size_t(i * n1 + j)] = a[std::size_t(((i + n0 / 2) % n0) * n1 + (j + n1 / 2) % n1)];
  return out;
}

// A dataset of `patterns` centred (n0, n1) patterns as read_dataset leaves it (FFT order, no
// totals): pattern j, stored pixel (r, c) holds 1 + j + r + c, then `bad` values put in at
// stored coordinates (pattern, row, column, value).
struct bad_value {
  int64_t pattern, row, column;
  float value;
};
dataset make_dataset(int64_t patterns, int64_t n0, int64_t n1, const std::vector<bad_value>& bad,
                     DLDataType stored = {kDLUInt, 16, 1}, int64_t first = 0, int64_t all = -1) {
  dataset d;
  d.description = "test.h5";
  d.patterns = patterns;
  d.first = first;
  d.all_patterns = all < 0 ? patterns : all;
  d.n0 = n0;
  d.n1 = n1;
  d.info.detector_shape[0] = n0;
  d.info.detector_shape[1] = n1;
  d.info.scan_shape[0] = 1;
  d.info.scan_shape[1] = d.all_patterns;
  d.info.patterns_centred = 1;
  d.info.stored_dtype = stored;
  for (int64_t j = 0; j < patterns; ++j) {
    std::vector<float> p(std::size_t(n0 * n1));
    for (int64_t r = 0; r < n0; ++r)
      for (int64_t c = 0; c < n1; ++c) p[std::size_t(r * n1 + c)] = float(1 + first + j + r + c);
    for (const auto& b : bad)
      if (b.pattern == first + j) p[std::size_t(b.row * n1 + b.column)] = b.value;
    auto f = ifftshift(p, n0, n1);
    d.targets.insert(d.targets.end(), f.begin(), f.end());
  }
  return d;
}

bad_pixel_settings settings_of(const std::string& preprocess, DLDataType stored = {kDLUInt, 16, 1}) {
  toml::table t = toml::parse(preprocess);
  return tycho::host::read_bad_pixel_settings(t, "test.toml", stored);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(BadPixels, DtypeMaximumIsTheSaturationDefault) {
  EXPECT_EQ(tycho::host::dtype_maximum({kDLUInt, 8, 1}), 255.0);
  EXPECT_EQ(tycho::host::dtype_maximum({kDLUInt, 16, 1}), 65535.0);
  EXPECT_EQ(tycho::host::dtype_maximum({kDLUInt, 32, 1}), 4294967295.0);
  EXPECT_EQ(tycho::host::dtype_maximum({kDLInt, 16, 1}), 32767.0);
  EXPECT_EQ(tycho::host::dtype_maximum({kDLInt, 32, 1}), 2147483647.0);
  EXPECT_FALSE(tycho::host::dtype_maximum({kDLFloat, 32, 1}).has_value());
  EXPECT_FALSE(tycho::host::dtype_maximum({kDLFloat, 16, 1}).has_value());

  EXPECT_EQ(settings_of("").saturation_value, 65535.0);
  EXPECT_FALSE(settings_of("", {kDLFloat, 32, 1}).saturation_value.has_value());
  EXPECT_EQ(settings_of("").max_masked_fraction, 0.5);
  EXPECT_EQ(settings_of("saturation_value = 60000").saturation_value, 60000.0);
  EXPECT_EQ(settings_of("saturation_value = 1.5e4", {kDLFloat, 32, 1}).saturation_value, 15000.0);
  EXPECT_FALSE(settings_of("saturation_value = false").saturation_value.has_value());
  EXPECT_EQ(settings_of("max_masked_fraction = 1").max_masked_fraction, 1.0);
  EXPECT_EQ(settings_of("max_masked_fraction = 0.05").max_masked_fraction, 0.05);
  for (const char* bad : {"saturation_value = 0", "saturation_value = -3", "saturation_value = true",
                          "saturation_value = \"65535\"", "saturation_value = nan", "max_masked_fraction = 1.5",
                          "max_masked_fraction = -0.1", "max_masked_fraction = \"half\""}) {
    try {
      settings_of(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const tycho::error& e) {
      EXPECT_TRUE(contains(e.what(), "test.toml: [preprocess] ")) << e.what();
    }
  }
}

// Two NaNs, an inf, a −inf and two saturated values in 4 of 6 patterns, on 5 distinct pixels:
// those pixels are 0 in every pattern, the mask marks them, the totals leave them out, and the
// warning names the counts and the first pixels in the stored (centred) coordinates.
TEST(BadPixels, MaskedInEveryPattern) {
  const int64_t n0 = 5, n1 = 4;
  const std::vector<bad_value> bad = {{1, 0, 3, k_nan},    {4, 0, 3, k_nan},    {2, 4, 0, k_inf},
                                      {2, 2, 2, -k_inf},   {3, 1, 1, 65535.f},  {3, 3, 2, 70000.f}};
  dataset d = make_dataset(6, n0, n1, bad);
  const dataset clean = make_dataset(6, n0, n1, {});
  const std::string warning = mask_bad_pixels(d, settings_of(""));

  std::set<int64_t> bad_pixels;  // stored index
  for (const auto& b : bad) bad_pixels.insert(b.row * n1 + b.column);
  ASSERT_EQ(bad_pixels.size(), 5u);
  const auto mask_centred = fftshift(d.detector_mask, n0, n1);
  ASSERT_EQ(mask_centred.size(), std::size_t(n0 * n1));
  double total = 0;
  for (int64_t k = 0; k < n0 * n1; ++k)
    EXPECT_EQ(mask_centred[std::size_t(k)], bad_pixels.count(k) ? 0 : 1) << "pixel " << k;
  for (int64_t j = 0; j < 6; ++j) {
    std::vector<float> got(d.targets.begin() + j * n0 * n1, d.targets.begin() + (j + 1) * n0 * n1);
    std::vector<float> want(clean.targets.begin() + j * n0 * n1, clean.targets.begin() + (j + 1) * n0 * n1);
    const auto got_c = fftshift(got, n0, n1), want_c = fftshift(want, n0, n1);
    for (int64_t k = 0; k < n0 * n1; ++k) {
      EXPECT_EQ(got_c[std::size_t(k)], bad_pixels.count(k) ? 0.f : want_c[std::size_t(k)]) << j << ", " << k;
      total += got_c[std::size_t(k)];
    }
  }
  EXPECT_EQ(d.total_intensity, total);
  EXPECT_DOUBLE_EQ(d.mean_total_intensity, total / 6);

  EXPECT_EQ(d.bad_pixels.masked_pixels, 5);
  EXPECT_EQ(d.bad_pixels.nonfinite_values, 4);
  EXPECT_EQ(d.bad_pixels.saturated_values, 2);
  EXPECT_EQ(d.bad_pixels.patterns, 4);
  EXPECT_EQ(d.bad_pixels.saturation_value, 65535.0);
  for (const char* part : {"masked 5 of 20 detector pixels (25 %)", "at least one of 4 patterns",
                           "4 non-finite values", "2 saturated values", "saturation_value = 65535",
                           "maximum of the stored uint16", "(0, 3) = nan in pattern 1", "(1, 1) = 65535 in pattern 3",
                           "(2, 2) = -inf in pattern 2", "(3, 2) = 70000 in pattern 3", "(4, 0) = inf in pattern 2",
                           "'mask'"})
    EXPECT_TRUE(contains(warning, part)) << "'" << part << "' not in: " << warning;

  // Nothing bad: no mask, no warning, the totals of every pixel.
  dataset c = make_dataset(6, n0, n1, {});
  EXPECT_EQ(mask_bad_pixels(c, settings_of("")), "");
  EXPECT_TRUE(c.detector_mask.empty());
  EXPECT_EQ(c.bad_pixels.masked_pixels, 0);
  EXPECT_GT(c.total_intensity, total);
}

// Float data have no saturation value unless given; saturation_value = false turns it off for
// integers; a given value masks everything at or above it.
TEST(BadPixels, SaturationValue) {
  dataset f = make_dataset(2, 3, 3, {{0, 1, 1, 1e9f}}, {kDLFloat, 32, 1});
  EXPECT_EQ(mask_bad_pixels(f, settings_of("", {kDLFloat, 32, 1})), "");
  dataset g = make_dataset(2, 3, 3, {{0, 1, 1, 65535.f}});
  EXPECT_EQ(mask_bad_pixels(g, settings_of("saturation_value = false")), "");
  EXPECT_EQ(g.bad_pixels.masked_pixels, 0);
  // Values 1 + j + r + c: pattern 1's (2, 2) holds 6, pattern 0's 5; >= 6 masks only (2, 2).
  dataset h = make_dataset(2, 3, 3, {});
  const std::string w = mask_bad_pixels(h, settings_of("saturation_value = 6"));
  EXPECT_EQ(h.bad_pixels.masked_pixels, 1) << w;
  EXPECT_EQ(h.bad_pixels.saturated_values, 1) << w;
  EXPECT_TRUE(contains(w, "(2, 2) = 6 in pattern 1")) << w;
  EXPECT_FALSE(contains(w, "maximum of the stored")) << w;
}

TEST(BadPixels, RefusedWhenTooMuchIsMasked) {
  // Every pixel of a 2 x 2 detector bad: no valid pixel, whatever max_masked_fraction says.
  dataset all = make_dataset(3, 2, 2, {{0, 0, 0, k_nan}, {1, 0, 1, k_nan}, {2, 1, 0, k_inf}, {2, 1, 1, 65535.f}});
  try {
    mask_bad_pixels(all, settings_of("max_masked_fraction = 1"));
    ADD_FAILURE() << "a mask without a valid pixel was accepted";
  } catch (const tycho::error& e) {
    EXPECT_EQ(e.status, TYCHO_ERR_BAD_DATA);
    EXPECT_TRUE(contains(e.what(), "no valid detector pixel is left")) << e.what();
    EXPECT_TRUE(contains(e.what(), "test.h5")) << e.what();
  }
  // A saturation value below the signal masks most of the detector: refused, naming the key.
  dataset most = make_dataset(2, 4, 4, {});
  try {
    mask_bad_pixels(most, settings_of("saturation_value = 3"));
    ADD_FAILURE() << "a mostly masked detector was accepted";
  } catch (const tycho::error& e) {
    EXPECT_EQ(e.status, TYCHO_ERR_BAD_DATA);
    for (const char* part : {"max_masked_fraction = 0.5", "saturation_value", "of 16 detector pixels"})
      EXPECT_TRUE(contains(e.what(), part)) << "'" << part << "' not in: " << e.what();
  }
  // The same with the fraction raised is accepted.
  dataset raised = make_dataset(2, 4, 4, {});
  EXPECT_NO_THROW(mask_bad_pixels(raised, settings_of("saturation_value = 3\nmax_masked_fraction = 0.95")));
  EXPECT_GT(raised.bad_pixels.masked_pixels, 8);
  // All intensity in masked pixels: no intensity left.
  dataset zero = make_dataset(2, 2, 2, {});
  std::fill(zero.targets.begin(), zero.targets.end(), 0.f);
  zero.targets[0] = k_nan;
  try {
    mask_bad_pixels(zero, settings_of(""));
    ADD_FAILURE() << "data without intensity was accepted";
  } catch (const tycho::error& e) {
    EXPECT_TRUE(contains(e.what(), "holds no intensity")) << e.what();
  }
}

// Two ranks holding patterns [0, 3) and [3, 6): a pixel bad only in rank 1's patterns is masked
// on rank 0 too, the counts are the whole scan's, and both ranks end with one rank's mask.
TEST(BadPixels, RanksCombineTheirMasks) {
  const int64_t n0 = 4, n1 = 5;
  const std::vector<bad_value> bad = {{1, 0, 0, k_nan}, {4, 3, 4, 65535.f}, {5, 0, 0, k_inf}, {5, 2, 1, k_nan}};
  dataset one = make_dataset(6, n0, n1, bad);
  const std::string one_warning = mask_bad_pixels(one, settings_of(""));

  dataset r0 = make_dataset(3, n0, n1, bad, {kDLUInt, 16, 1}, 0, 6);
  dataset r1 = make_dataset(3, n0, n1, bad, {kDLUInt, 16, 1}, 3, 6);
  // Each rank's report, as it would send it (its findings do not depend on the others').
  std::string text0, text1;
  {
    dataset c0 = r0, c1 = r1;
    mask_bad_pixels(c0, settings_of(""), [&](const std::string& t) { return std::vector<std::string>{text0 = t}; });
    mask_bad_pixels(c1, settings_of(""), [&](const std::string& t) { return std::vector<std::string>{text1 = t}; });
  }
  auto both = [&](const std::string&) { return std::vector<std::string>{text0, text1}; };
  const std::string w0 = mask_bad_pixels(r0, settings_of(""), both);
  const std::string w1 = mask_bad_pixels(r1, settings_of(""), both);
  EXPECT_EQ(w0, one_warning);
  EXPECT_EQ(w1, one_warning);
  EXPECT_EQ(r0.detector_mask, one.detector_mask);
  EXPECT_EQ(r1.detector_mask, one.detector_mask);
  EXPECT_EQ(r0.bad_pixels.masked_pixels, 3);
  EXPECT_EQ(r0.bad_pixels.nonfinite_values, 3);
  EXPECT_EQ(r0.bad_pixels.saturated_values, 1);
  EXPECT_EQ(r0.bad_pixels.patterns, 3);
  EXPECT_TRUE(contains(w0, "(0, 0) = nan in pattern 1")) << w0;  // the earliest of patterns 1 and 5
  EXPECT_EQ(r0.total_intensity + r1.total_intensity, one.total_intensity);
  std::vector<float> joined = r0.targets;
  joined.insert(joined.end(), r1.targets.begin(), r1.targets.end());
  EXPECT_EQ(joined, one.targets);
}

// The engine's mask: the padding's and the bad pixels', in FFT order; the result's `mask` is
// the same in the centred order.
TEST(BadPixels, CombinedWithDetectorPadding) {
  const int64_t n0 = 5, n1 = 4, m0 = 6, m1 = 7;
  dataset d = make_dataset(2, n0, n1, {{0, 1, 2, k_nan}, {1, 4, 0, 65535.f}});
  mask_bad_pixels(d, settings_of(""));
  ASSERT_EQ(d.bad_pixels.masked_pixels, 2);

  // Unpadded: the engine gets the bad pixels' mask.
  dataset same = d;
  auto p0 = tycho::host::pad_detector(same, {n0, n1});
  EXPECT_FALSE(p0.padded());
  EXPECT_EQ(p0.mask, d.detector_mask);
  auto r0 = tycho::host::result_mask(p0);
  EXPECT_EQ(r0.name, "mask");
  EXPECT_EQ(r0.shape, (std::vector<int64_t>{n0, n1}));
  EXPECT_EQ(r0.dtype.code, kDLUInt);
  EXPECT_EQ(r0.dtype.bits, 8);
  std::vector<uint8_t> centred(r0.as<uint8_t>(), r0.as<uint8_t>() + n0 * n1);
  EXPECT_EQ(centred, fftshift(d.detector_mask, n0, n1));
  EXPECT_EQ(centred[1 * n1 + 2], 0);
  EXPECT_EQ(centred[4 * n1 + 0], 0);

  // Padded 5 x 4 → 6 x 7: masked = padding or bad, exactly the centred padding of the bad mask.
  auto p = tycho::host::pad_detector(d, {m0, m1});
  ASSERT_TRUE(p.padded());
  auto r = tycho::host::result_mask(p);
  EXPECT_EQ(r.shape, (std::vector<int64_t>{m0, m1}));
  const int64_t b0 = tycho::host::centred_padding(n0, m0)[0], b1 = tycho::host::centred_padding(n1, m1)[0];
  int64_t zeros = 0;
  for (int64_t i = 0; i < m0; ++i)
    for (int64_t j = 0; j < m1; ++j) {
      const bool measured = i >= b0 && i < b0 + n0 && j >= b1 && j < b1 + n1;
      const bool bad = measured && ((i - b0 == 1 && j - b1 == 2) || (i - b0 == 4 && j - b1 == 0));
      EXPECT_EQ(r.as<uint8_t>()[i * m1 + j], measured && !bad ? 1 : 0) << i << ", " << j;
      zeros += !(measured && !bad);
    }
  EXPECT_EQ(zeros, m0 * m1 - n0 * n1 + 2);
  EXPECT_EQ(p.mask, ifftshift(std::vector<uint8_t>(r.as<uint8_t>(), r.as<uint8_t>() + m0 * m1), m0, m1));
  // Nothing padded or masked: all ones, and the engine gets no mask.
  dataset c = make_dataset(1, 3, 3, {});
  mask_bad_pixels(c, settings_of(""));
  auto pc = tycho::host::pad_detector(c, {3, 3});
  EXPECT_TRUE(pc.mask.empty());
  auto rc = tycho::host::result_mask(pc);
  EXPECT_TRUE(std::all_of(rc.as<uint8_t>(), rc.as<uint8_t>() + 9, [](uint8_t v) { return v == 1; }));
}

// ---- MoS2 copies through the `tycho` command

constexpr int64_t k_rx = 32, k_ry = 24, k_q = 96, k_patterns = k_rx * k_ry, k_pixels = k_q * k_q;
const std::string k_array = "/datacube_root/datacube/data";

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }
std::string counts_file() { return tycho::test::example_data("mos2_80kV_32x24_counts.h5"); }
std::string ground_truth() { return tycho::test::example_data("mos2_ground_truth.npz"); }

std::vector<uint16_t> read_counts() {
  std::vector<uint16_t> v(std::size_t(k_patterns * k_pixels));
  hid_t f = H5Fopen(counts_file().c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, k_array.c_str(), H5P_DEFAULT);
  const herr_t rc = H5Dread(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
  H5Fclose(f);
  EXPECT_GE(rc, 0) << "reading " << counts_file();
  return v;
}

tycho::test::emd_file_spec mos2_spec(tycho::test::emd_element type, const void* values) {
  tycho::test::emd_file_spec spec;
  spec.dims = {hsize_t(k_rx), hsize_t(k_ry), hsize_t(k_q), hsize_t(k_q)};
  spec.type = type;
  spec.values = values;
  spec.mark_file = true;
  spec.calibration = tycho::test::emd_calibration{0.5, "A", 0.06, "A^-1"};
  spec.microscope = tycho::test::emd_microscope{80000, 25, -150};
  return spec;
}

class BadPixelsCli : public ::testing::Test {
 protected:
  // The example config on `data` for `iterations`, result in the temp folder.
  command_result reconstruct(const std::string& data, const std::string& result, int iterations) {
    // The scan map held: over a 30-iteration schedule its early steps are erratic (the step ratio
    // 0.965–1.03 at iteration 30 depending on the seed; it settles over the example's 100), which
    // would swamp the masks' effect this test measures.
    return run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations",
                        std::to_string(iterations), "-q", "--set", "output.previews=false", "--set",
                        "reconstruct.positions.refine_scan_map=false", "--set", "data.path=" + data, "-o",
                        tmp_ / result});
  }
  double pearson(const std::string& result) {
    auto r = run_command({tycho::test::tycho_exe(), "evaluate", tmp_ / result, "--truth", ground_truth()});
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    try {
      return nlohmann::json::parse(r.out).at("pearson").get<double>();
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << r.describe();
      return NAN;
    }
  }
  tycho::test::temp_folder tmp_;
};

// The warning lines of a run that hold `text`.
std::vector<std::string> warnings_with(const command_result& r, const std::string& text) {
  std::vector<std::string> lines;
  for (const auto& line : r.err_lines())
    if (line.rfind("[tycho warning] preprocess: ", 0) == 0 && contains(line, text)) lines.push_back(line);
  return lines;
}

// Every loss finite, the last one below the first.
void expect_finite_decreasing(const tycho::host::loaded_record& rec, const std::string& name) {
  const auto& h = rec.array("loss_history", name);
  ASSERT_GT(h.count(), 1);
  for (int64_t i = 0; i < h.count(); ++i) EXPECT_TRUE(std::isfinite(h.as<double>()[i])) << name << " " << i;
  EXPECT_LT(h.as<double>()[h.count() - 1], h.as<double>()[0]) << name;
}

// The same MoS2 counts three ways, with the same iterations: clean (uint16 as shipped), with a
// detector gap (stored row 52 and column 44 at 65535 in every pattern, uint16), and as float32
// with 12 NaN, one inf and one −inf values on 14 distinct pixels of 14 patterns. The masked
// runs warn with the counts, save the mask, keep a finite, decreasing loss and reconstruct
// almost as well as the clean counts. Measured (Pearson against the ground truth, 30 iterations,
// 2 threads): clean 0.9268, gap 0.9270, NaN 0.9268; the gap file with its 65535 values left in
// (saturation_value = false) reaches 0.175. The margins below are 50 times the differences seen.
TEST_F(BadPixelsCli, DetectorGapAndNaNPixelsReconstruct) {
  const int iterations = 30;
  const std::vector<uint16_t> counts = read_counts();
  ASSERT_LT(*std::max_element(counts.begin(), counts.end()), 65535) << "the shipped counts are not saturated";

  const int64_t gap_row = 52, gap_column = 44;  // stored (centred) coordinates, both cross the bright disc
  std::vector<uint16_t> gap = counts;
  for (int64_t j = 0; j < k_patterns; ++j)
    for (int64_t k = 0; k < k_q; ++k) {
      gap[std::size_t(j * k_pixels + gap_row * k_q + k)] = 65535;
      gap[std::size_t(j * k_pixels + k * k_q + gap_column)] = 65535;
    }
  std::string why;
  ASSERT_TRUE(tycho::test::write_emd_file(tmp_ / "gap.h5", mos2_spec(tycho::test::emd_element::uint16, gap.data()), &why))
      << why;

  std::vector<float> nan(counts.begin(), counts.end());
  std::mt19937 gen(11);
  std::set<int64_t> pixels, patterns;
  std::vector<std::pair<int64_t, int64_t>> where;  // (pattern, stored pixel)
  while (where.size() < 14) {
    const int64_t j = std::uniform_int_distribution<int64_t>(0, k_patterns - 1)(gen);
    const int64_t k = std::uniform_int_distribution<int64_t>(0, k_pixels - 1)(gen);
    if (pixels.count(k) || patterns.count(j)) continue;
    pixels.insert(k);
    patterns.insert(j);
    where.push_back({j, k});
  }
  for (std::size_t i = 0; i < where.size(); ++i)
    nan[std::size_t(where[i].first * k_pixels + where[i].second)] = i == 12 ? k_inf : i == 13 ? -k_inf : k_nan;
  ASSERT_TRUE(tycho::test::write_emd_file(tmp_ / "nan.h5", mos2_spec(tycho::test::emd_element::float32, nan.data()), &why))
      << why;

  auto clean = reconstruct(counts_file(), "clean.zip", iterations);
  ASSERT_TRUE(clean.exited_with(0)) << clean.describe();
  EXPECT_TRUE(warnings_with(clean, "detector pixels").empty()) << clean.err;
  auto gapped = reconstruct(tmp_ / "gap.h5", "gap.zip", iterations);
  ASSERT_TRUE(gapped.exited_with(0)) << gapped.describe();
  auto nanned = reconstruct(tmp_ / "nan.h5", "nan.zip", iterations);
  ASSERT_TRUE(nanned.exited_with(0)) << nanned.describe();

  // The warnings: once each, with the counts.
  const int64_t gap_pixels = 2 * k_q - 1;
  auto gap_lines = warnings_with(gapped, "detector pixels");
  ASSERT_EQ(gap_lines.size(), 1u) << gapped.err;
  for (const std::string& part : std::vector<std::string>{
       "masked " + std::to_string(gap_pixels) + " of 9216 detector pixels", "at least one of 768 patterns",
        "0 non-finite values", std::to_string(gap_pixels * k_patterns) + " saturated values",
        "saturation_value = 65535 (the maximum of the stored uint16)", "(0, 44) = 65535 in pattern 0"})
    EXPECT_TRUE(contains(gap_lines[0], part)) << "'" << part << "' not in: " << gap_lines[0];
  auto nan_lines = warnings_with(nanned, "detector pixels");
  ASSERT_EQ(nan_lines.size(), 1u) << nanned.err;
  for (const std::string& part : std::vector<std::string>{"masked 14 of 9216 detector pixels", "at least one of 14 patterns",
                                 "14 non-finite values", "0 saturated values", "no saturation check"})
    EXPECT_TRUE(contains(nan_lines[0], part)) << "'" << part << "' not in: " << nan_lines[0];

  // The saved masks, centred, and the manifest's counts.
  auto rec_clean = tycho::test::load_result(tmp_ / "clean.zip");
  auto rec_gap = tycho::test::load_result(tmp_ / "gap.zip");
  auto rec_nan = tycho::test::load_result(tmp_ / "nan.zip");
  auto mask_of = [](const tycho::host::loaded_record& rec, const std::string& name) {
    const auto& m = rec.array("mask", name);
    EXPECT_EQ(m.shape, (std::vector<int64_t>{k_q, k_q})) << name;
    EXPECT_EQ(m.dtype.code, kDLUInt) << name;
    EXPECT_EQ(m.dtype.bits, 8) << name;
    return std::vector<uint8_t>(m.as<uint8_t>(), m.as<uint8_t>() + m.count());
  };
  const auto mask_clean = mask_of(rec_clean, "clean.zip"), mask_gap = mask_of(rec_gap, "gap.zip"),
             mask_nan = mask_of(rec_nan, "nan.zip");
  for (int64_t r = 0; r < k_q; ++r)
    for (int64_t c = 0; c < k_q; ++c) {
      const std::size_t k = std::size_t(r * k_q + c);
      EXPECT_EQ(mask_clean[k], 1) << r << ", " << c;
      EXPECT_EQ(mask_gap[k], r == gap_row || c == gap_column ? 0 : 1) << r << ", " << c;
      EXPECT_EQ(mask_nan[k], pixels.count(int64_t(k)) ? 0 : 1) << r << ", " << c;
    }
  auto bad_of = [](const tycho::host::loaded_record& rec) {
    return nlohmann::json::parse(rec.manifest_json).at("data").at("bad_pixels");
  };
  EXPECT_EQ(bad_of(rec_clean).at("masked_pixels"), 0);
  EXPECT_EQ(bad_of(rec_gap).at("masked_pixels"), gap_pixels);
  EXPECT_EQ(bad_of(rec_gap).at("saturation_value"), 65535.0);
  EXPECT_EQ(bad_of(rec_nan).at("masked_pixels"), 14);
  EXPECT_EQ(bad_of(rec_nan).at("nonfinite_values"), 14);
  EXPECT_TRUE(bad_of(rec_nan).at("saturation_value").is_null());

  expect_finite_decreasing(rec_clean, "clean.zip");
  expect_finite_decreasing(rec_gap, "gap.zip");
  expect_finite_decreasing(rec_nan, "nan.zip");
  const double p_clean = pearson("clean.zip"), p_gap = pearson("gap.zip"), p_nan = pearson("nan.zip");
  std::cout << "pearson after " << iterations << " iterations: clean " << p_clean << ", gap " << p_gap << ", NaN "
            << p_nan << "\n";
  RecordProperty("pearson_clean", std::to_string(p_clean));
  RecordProperty("pearson_gap", std::to_string(p_gap));
  RecordProperty("pearson_nan", std::to_string(p_nan));
  EXPECT_GT(p_clean, 0.90);
  EXPECT_GT(p_gap, p_clean - 0.01);
  EXPECT_GT(p_nan, p_clean - 0.005);
}

// A saturation value inside the signal masks most of the detector: refused before anything
// runs, naming the key; an unknown type for the key is refused the same way.
TEST_F(BadPixelsCli, WrongSaturationValueIsRefused) {
  auto r = run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations", "1", "-q",
                        "--set", "preprocess.saturation_value=1", "-o", tmp_ / "result.zip"});
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_TRUE(contains(r.err, "max_masked_fraction = 0.5")) << r.err;
  EXPECT_TRUE(contains(r.err, "Is the saturation value right?")) << r.err;
  EXPECT_FALSE(fs::exists(tmp_ / "result.zip"));
  auto t = run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations", "1", "-q",
                        "--set", "preprocess.max_masked_fraction=2", "-o", tmp_ / "result.zip"});
  EXPECT_TRUE(t.exited_with(2)) << t.describe();
  EXPECT_TRUE(contains(t.err, "[preprocess] max_masked_fraction must be a number from 0 to 1")) << t.err;
}

// Ranks as threads: NaNs only in the second half of the scan (rank 1's patterns of 2) are
// masked on both ranks, so two ranks follow one rank's trajectory and save its mask.
TEST_F(BadPixelsCli, TwoRanksMaskWhatOneRankMasks) {
  const std::vector<uint16_t> counts = read_counts();
  std::vector<float> values(counts.begin(), counts.end());
  for (int64_t j : {500, 600, 700}) values[std::size_t(j * k_pixels + (30 + j % 7) * k_q + 60)] = k_nan;
  std::string why;
  ASSERT_TRUE(tycho::test::write_emd_file(tmp_ / "half.h5", mos2_spec(tycho::test::emd_element::float32, values.data()),
                                          &why))
      << why;
  auto doc = tycho::config_document::load_file(example_config());
  doc.set_from_text("reconstruct.iterations=3");
  doc.set_from_text("reconstruct.threads=1");
  doc.set_from_text("output.previews=false");
  doc.set_from_text("data.path=\"" + tmp_ / "half.h5" + "\"");
  auto& reg = tycho::host::registry::global();

  tycho::host::session one(doc.clone(), reg);
  one.run(0, {});
  one.save(tmp_ / "one.zip", TYCHO_SAVE_OVERWRITE);
  std::vector<double> loss2;
  std::string manifest2;
  std::vector<DLDevice> cpus(2, DLDevice{kDLCPU, 0});
  std::mutex m;
  tycho::host::run_local_ranks(doc, reg, cpus, [&](tycho::host::parallel_context& ctx) {
    tycho::host::session s(doc.clone(), reg, "", &ctx);
    s.run(0, {});
    if (ctx.is_root()) {
      std::lock_guard lock(m);
      s.save(tmp_ / "two.zip", TYCHO_SAVE_OVERWRITE);
      loss2 = s.loss_history();
      manifest2 = s.manifest_json();
    }
  });
  ASSERT_EQ(loss2.size(), one.loss_history().size());
  for (std::size_t i = 0; i < loss2.size(); ++i) EXPECT_NEAR(loss2[i] / one.loss_history()[i], 1.0, 1e-5) << i;
  auto bad = nlohmann::json::parse(manifest2).at("data").at("bad_pixels");
  EXPECT_EQ(bad.at("masked_pixels"), 3) << bad.dump();
  EXPECT_EQ(bad.at("nonfinite_values"), 3) << bad.dump();
  EXPECT_EQ(bad, nlohmann::json::parse(one.manifest_json()).at("data").at("bad_pixels"));
  const auto a = tycho::test::load_result(tmp_ / "one.zip"), b = tycho::test::load_result(tmp_ / "two.zip");
  EXPECT_EQ(a.array("mask", "one.zip").bytes, b.array("mask", "two.zip").bytes);
  int64_t zeros = 0;
  for (int64_t k = 0; k < k_pixels; ++k) zeros += a.array("mask", "one.zip").as<uint8_t>()[k] == 0;
  EXPECT_EQ(zeros, 3);
}

}  // namespace

namespace {

// The preprocessing stage does not move the bad-pixel mask through recentring, binning or
// cropping yet: such a run and `tycho preprocess` on data with bad pixels are refused, naming the
// data and the count, instead of mixing masked zeros into real pixels. A scan rotation turns the
// positions, not the patterns: it runs, the mask where it was. A transpose (an exact permutation)
// runs with the mask transposed along with the pixels.
TEST_F(BadPixelsCli, StepsThatWouldMoveMaskedPixelsAreRefused) {
  std::vector<uint16_t> gap = read_counts();
  for (int64_t j = 0; j < k_patterns; ++j) gap[std::size_t(j * k_pixels + 52 * k_q + 10)] = 65535;
  std::string why;
  ASSERT_TRUE(tycho::test::write_emd_file(tmp_ / "gap.h5", mos2_spec(tycho::test::emd_element::uint16, gap.data()), &why))
      << why;
  for (const std::string& set : {std::string("preprocess.crop_detector=[80, 80]"),
                                 std::string("preprocess.com_fit=\"plane\"")}) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations", "1",
                                     "-q", "--set", "output.previews=false", "--set", "data.path=" + (tmp_ / "gap.h5"),
                                     "-o", tmp_ / "r.zip", "--set", set};
    if (set.find("com_fit") != std::string::npos) argv.insert(argv.end(), {"--set", "preprocess.recentre=true"});
    auto r = run_command(argv);
    EXPECT_TRUE(r.exited_with(2)) << set << "\n" << r.describe();
    EXPECT_TRUE(contains(r.err, "has 1 bad detector pixels (masked)")) << set << "\n" << r.describe();
  }
  auto turned = run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations", "1", "-q", "--set",
                             "output.previews=false", "--set", "data.path=" + (tmp_ / "gap.h5"), "-o", tmp_ / "t.zip",
                             "--set", "preprocess.scan_rotation_deg=90"});
  ASSERT_TRUE(turned.exited_with(0)) << turned.describe();
  const auto mask = tycho::test::load_result(tmp_ / "t.zip").array("mask", "t.zip");
  EXPECT_EQ(mask.bytes[std::size_t(52 * k_q + 10)], 0) << "the bad pixel stays masked where it is";
  auto transposed = run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations", "1", "-q",
                                 "--set", "output.previews=false", "--set", "data.path=" + (tmp_ / "gap.h5"), "-o",
                                 tmp_ / "tr.zip", "--set", "preprocess.scan_transpose=true"});
  ASSERT_TRUE(transposed.exited_with(0)) << transposed.describe();
  const auto moved = tycho::test::load_result(tmp_ / "tr.zip").array("mask", "tr.zip");
  EXPECT_EQ(moved.bytes[std::size_t(10 * k_q + 52)], 0) << "the mask follows the transposed pixels";
  EXPECT_EQ(moved.bytes[std::size_t(52 * k_q + 10)], 1) << "the pixel's old place is a real pixel now";
  auto p = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "-q", "--set",
                        "data.path=" + (tmp_ / "gap.h5"), "-o", tmp_ / "prepared.zip"});
  EXPECT_TRUE(p.exited_with(2)) << p.describe();
  EXPECT_TRUE(contains(p.err, "prepared files do not carry a bad-pixel mask yet")) << p.describe();
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "prepared.zip"));
}

}  // namespace

// ---- Dead and hot pixels found in the data ([preprocess] detect_bad_pixels), pixels given by
// hand ([preprocess] bad_pixels) and the source's detector mask.

namespace {

using tycho::host::found_bad_pixel;

// `patterns` centred (n, n) patterns of Poisson counts (fixed seed): a bright-field disc of
// radius 8 (40 counts per pixel, a sharp edge), a dark-field ring to radius 14 (2 counts) and
// 0.3 counts beyond; stored as uint16 counts. Then `edit` changes the centred pattern j.
dataset poisson_disc(int64_t patterns, int64_t n, uint32_t seed,
                     const std::function<void(int64_t, std::vector<float>&)>& edit = {}) {
  dataset d = make_dataset(patterns, n, n, {});
  std::mt19937 gen(seed);
  for (int64_t j = 0; j < patterns; ++j) {
    std::vector<float> p(std::size_t(n * n));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) {
        const double radius = std::hypot(double(r - n / 2), double(c - n / 2));
        const double lambda = radius <= 8 ? 40.0 : radius <= 14 ? 2.0 : 0.3;
        p[std::size_t(r * n + c)] = float(std::poisson_distribution<int>(lambda)(gen));
      }
    if (edit) edit(j, p);
    const auto f = ifftshift(p, n, n);
    std::copy(f.begin(), f.end(), d.targets.begin() + j * n * n);
  }
  return d;
}

// The found pixels as "(row, column) reason", sorted.
std::set<std::string> found_set(const dataset& d) {
  std::set<std::string> s;
  for (const found_bad_pixel& f : d.bad_pixels.found)
    s.insert("(" + std::to_string(f.row) + ", " + std::to_string(f.column) + ") " + f.reason);
  return s;
}

std::string joined(const std::set<std::string>& s) {
  std::string t;
  for (const auto& x : s) t += x + "; ";
  return t;
}

TEST(BadPixels, NewKeysAreReadAndRefusedNamingThem) {
  EXPECT_TRUE(settings_of("").detect);
  EXPECT_TRUE(settings_of("").given.empty());
  EXPECT_FALSE(settings_of("detect_bad_pixels = false").detect);
  const auto given = settings_of("bad_pixels = [[0, 3], [4, 0]]").given;
  ASSERT_EQ(given.size(), 2u);
  EXPECT_EQ(given[0], (std::array<int64_t, 2>{0, 3}));
  EXPECT_EQ(given[1], (std::array<int64_t, 2>{4, 0}));
  EXPECT_TRUE(settings_of("bad_pixels = []").given.empty());
  for (const char* bad : {"detect_bad_pixels = 1", "detect_bad_pixels = \"yes\""}) {
    try {
      settings_of(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const tycho::error& e) {
      EXPECT_EQ(e.status, TYCHO_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(e.what(), "test.toml: [preprocess] detect_bad_pixels must be true")) << e.what();
    }
  }
  for (const char* bad : {"bad_pixels = 3", "bad_pixels = [1, 2]", "bad_pixels = [[1]]", "bad_pixels = [[1, 2, 3]]",
                          "bad_pixels = [[1.5, 2]]", "bad_pixels = [[-1, 2]]", "bad_pixels = [[\"1\", 2]]",
                          "bad_pixels = [[1, 2], [3, 1e3]]", "bad_pixels = \"[[1, 2]]\""}) {
    try {
      settings_of(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const tycho::error& e) {
      EXPECT_EQ(e.status, TYCHO_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(e.what(), "test.toml: [preprocess] bad_pixels must be an array of [row, column] pairs"))
          << bad << ": " << e.what();
    }
  }
  // Outside the detector (5 x 4): refused when the data's shape is known, naming both.
  dataset d = make_dataset(2, 5, 4, {});
  for (const char* outside : {"bad_pixels = [[5, 0]]", "bad_pixels = [[0, 4]]"}) {
    try {
      mask_bad_pixels(d, settings_of(outside));
      ADD_FAILURE() << outside << " was accepted";
    } catch (const tycho::error& e) {
      EXPECT_EQ(e.status, TYCHO_ERR_INVALID_ARGUMENT);
      for (const char* part : {"test.toml: [preprocess] bad_pixels names the pixel", "outside the 5 x 4 detector",
                               "rows 0 to 4, columns 0 to 3", "test.h5"})
        EXPECT_TRUE(contains(e.what(), part)) << "'" << part << "' not in: " << e.what();
    }
  }
}

// Pixels given by hand are masked where the stored (centred) detector has them, counted apart
// and named in the warning and the manifest; the detector's own mask (d.source_mask, stored
// frame) likewise, its values not looked at (65535 there is no saturated value).
TEST(BadPixels, GivenPixelsAndTheSourceMaskAreMaskedInTheStoredFrame) {
  const int64_t n0 = 5, n1 = 4;
  dataset d = make_dataset(3, n0, n1, {{1, 2, 1, 65535.f}});
  d.source_mask.assign(std::size_t(n0 * n1), 0);
  d.source_mask[2 * n1 + 1] = 1;  // the saturated pixel: the detector knows it
  d.source_mask[3 * n1 + 3] = 7;
  const std::string w = mask_bad_pixels(d, settings_of("bad_pixels = [[0, 3], [4, 0], [0, 3]]"));
  const auto mask = fftshift(d.detector_mask, n0, n1);
  for (int64_t k = 0; k < n0 * n1; ++k)
    EXPECT_EQ(mask[std::size_t(k)], k == 0 * n1 + 3 || k == 4 * n1 + 0 || k == 2 * n1 + 1 || k == 3 * n1 + 3 ? 0 : 1) << k;
  EXPECT_EQ(d.bad_pixels.masked_pixels, 4) << w;
  EXPECT_EQ(d.bad_pixels.saturated_values, 0) << w;
  EXPECT_EQ(d.bad_pixels.value_pixels, 0) << w;
  EXPECT_EQ(d.bad_pixels.given.size(), 2u) << w;
  EXPECT_EQ(d.bad_pixels.detector_mask_pixels, 2) << w;
  for (const char* part : {"masked 4 of 20 detector pixels (20 %) are bad", "2 given in [preprocess] bad_pixels: (0, 3), (4, 0)",
                           "2 marked bad by the detector's own mask"})
    EXPECT_TRUE(contains(w, part)) << "'" << part << "' not in: " << w;
  const auto j = nlohmann::json::parse(tycho::host::bad_pixels_json(d));
  EXPECT_EQ(j.at("given"), nlohmann::json::parse("[[0, 3], [4, 0]]"));
  EXPECT_EQ(j.at("detector_mask_pixels"), 2);
  EXPECT_EQ(j.at("masked_pixels"), 4);
  // The values of the masked pixels are 0 in every pattern.
  for (int64_t p = 0; p < 3; ++p) {
    std::vector<float> got(d.targets.begin() + p * n0 * n1, d.targets.begin() + (p + 1) * n0 * n1);
    const auto c = fftshift(got, n0, n1);
    EXPECT_EQ(c[0 * n1 + 3], 0.f);
    EXPECT_EQ(c[2 * n1 + 1], 0.f);
  }
}

// On Poisson counts with a sharp-edged bright disc and a dark-field ring: nothing is found in
// the clean data (the disc's and the ring's edges included); dead pixels in the disc and the
// ring, hot ones in the dark field and on the detector's edge, one hot in only 2 of 64 patterns
// and a pair of adjacent hot pixels are all found, with their reasons, and nothing else.
// detect_bad_pixels = false finds nothing; a detector too small to compare is not searched.
TEST(BadPixels, DeadAndHotPixelsAreFoundAgainstTheirNeighbours) {
  const int64_t n = 40, patterns = 64;
  dataset clean = poisson_disc(patterns, n, 7);
  const std::string w_clean = mask_bad_pixels(clean, settings_of(""));
  EXPECT_EQ(w_clean, "");
  EXPECT_TRUE(clean.bad_pixels.found.empty()) << joined(found_set(clean));
  EXPECT_EQ(clean.bad_pixels.compared_pixels, n * n);
  EXPECT_TRUE(contains(clean.bad_pixels.note, "searched 1600 detector pixels over 64 patterns")) << clean.bad_pixels.note;
  EXPECT_TRUE(contains(clean.bad_pixels.note, "none found")) << clean.bad_pixels.note;

  auto edit = [](int64_t j, std::vector<float>& p) {
    auto at = [&](int64_t r, int64_t c) -> float& { return p[std::size_t(r * n + c)]; };
    at(22, 24) = 0;                    // dead, in the disc
    at(20, 31) = 0;                    // dead, in the ring
    at(3, 5) += 25;                    // hot, dark field
    at(39, 17) += 8;                   // hot, the detector's last row
    at(7, 30) += 6;                    // a hot pair
    at(7, 31) += 6;
    if (j == 5 || j == 40) at(25, 18) = 600;  // hot in 2 of 64 patterns, in the disc
  };
  dataset bad = poisson_disc(patterns, n, 7, edit);
  const std::string w = mask_bad_pixels(bad, settings_of(""));
  const std::set<std::string> want = {"(22, 24) dead", "(20, 31) dead", "(3, 5) hot", "(39, 17) hot", "(7, 30) hot",
                                      "(7, 31) hot", "(25, 18) hot_in_some_patterns"};
  EXPECT_EQ(found_set(bad), want) << joined(found_set(bad)) << "\n" << w;
  EXPECT_EQ(bad.bad_pixels.masked_pixels, 7);
  for (const char* part : {"7 found in the data (2 dead, 4 hot, 1 hot in some patterns",
                           "(22, 24) dead: mean 0 per pattern where its neighbours hold",
                           "(25, 18) hot in some patterns: up to 600"})
    EXPECT_TRUE(contains(w, part)) << "'" << part << "' not in: " << w;
  const auto mask = fftshift(bad.detector_mask, n, n);
  EXPECT_EQ(mask[std::size_t(22 * n + 24)], 0);
  EXPECT_EQ(mask[std::size_t(39 * n + 17)], 0);
  EXPECT_EQ(std::count(mask.begin(), mask.end(), uint8_t(0)), 7);
  // The figures of one of them: a dead pixel's mean is 0, its neighbours' about the disc's 40.
  for (const found_bad_pixel& f : bad.bad_pixels.found)
    if (f.row == 22 && f.column == 24) {
      EXPECT_EQ(f.mean, 0.0);
      EXPECT_NEAR(f.neighbours_mean, 40.0, 2.5);
      EXPECT_GT(f.score, tycho::host::bad_pixel_threshold);
    }
  const auto j = nlohmann::json::parse(tycho::host::bad_pixels_json(bad));
  EXPECT_EQ(j.at("detection").at("found").size(), 7u);
  EXPECT_EQ(j.at("detection").at("enabled"), true);
  EXPECT_EQ(j.at("detection").at("compared_pixels"), n * n);

  dataset off = poisson_disc(patterns, n, 7, edit);
  EXPECT_EQ(mask_bad_pixels(off, settings_of("detect_bad_pixels = false")), "");
  EXPECT_TRUE(off.bad_pixels.found.empty());
  EXPECT_TRUE(contains(off.bad_pixels.note, "detect_bad_pixels = false")) << off.bad_pixels.note;
  EXPECT_FALSE(nlohmann::json::parse(tycho::host::bad_pixels_json(off)).at("detection").at("enabled").get<bool>());

  // Noise-free data (the simulate source's fractions of the beam, 13 x 11 patterns of 48 x 48):
  // their spread over the detector is their structure alone, so pixels a few per mille off their
  // neighbours lie 10 to 31 robust deviations out; none is twice or half its neighbours, so none
  // is bad (with the size condition left out, 9 were). One pixel of the bright field at 3 times
  // its value is.
  auto simulated = [](float factor) {
    auto doc = tycho::config_document::parse(
        "[data]\nsource = \"simulate\"\nscan_shape = [13, 11]\ndetector_shape = [48, 48]\nthreads = 2\n", "<test>", "/");
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    dataset s = tycho::host::read_dataset(tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "simulate"), &cfg);
    const std::size_t k = std::size_t(((24 + 2 + 24) % 48) * 48 + (24 - 3 + 24) % 48);  // stored (26, 21), FFT order
    for (int64_t j = 0; j < s.patterns; ++j) s.targets[std::size_t(j * 48 * 48) + k] *= factor;
    mask_bad_pixels(s, settings_of("", s.info.stored_dtype));
    return s;
  };
  const dataset smooth = simulated(1.0f);
  EXPECT_EQ(smooth.bad_pixels.compared_pixels, 48 * 48);
  EXPECT_TRUE(smooth.bad_pixels.found.empty()) << joined(found_set(smooth));
  EXPECT_EQ(found_set(simulated(3.0f)), (std::set<std::string>{"(26, 21) hot"}));

  dataset tiny = make_dataset(4, 5, 5, {{0, 2, 2, 1e4f}});
  EXPECT_EQ(mask_bad_pixels(tiny, settings_of("")), "");
  EXPECT_TRUE(contains(tiny.bad_pixels.note, "not searched for: only 25 pixels")) << tiny.bad_pixels.note;
}

// Two ranks holding half the patterns each find what one rank finds (the counts' sums are exact).
TEST(BadPixels, RanksFindWhatOneRankFinds) {
  const int64_t n = 40, patterns = 64;
  auto edit = [](int64_t j, std::vector<float>& p) {
    p[std::size_t(22 * n + 24)] = 0;
    p[std::size_t(3 * n + 5)] += 25;
    if (j == 50) p[std::size_t(25 * n + 18)] = 900;  // in rank 1's patterns only
  };
  dataset one = poisson_disc(patterns, n, 3, edit);
  const std::string w_one = mask_bad_pixels(one, settings_of(""));
  ASSERT_EQ(one.bad_pixels.found.size(), 3u) << w_one;

  dataset whole = poisson_disc(patterns, n, 3, edit);
  auto half = [&](int64_t first) {
    dataset h = whole;
    h.first = first;
    h.patterns = patterns / 2;
    h.targets.assign(whole.targets.begin() + first * n * n, whole.targets.begin() + (first + patterns / 2) * n * n);
    return h;
  };
  dataset r0 = half(0), r1 = half(patterns / 2);
  std::string text0, text1;
  {
    dataset c0 = r0, c1 = r1;
    mask_bad_pixels(c0, settings_of(""), [&](const std::string& t) { return std::vector<std::string>{text0 = t}; });
    mask_bad_pixels(c1, settings_of(""), [&](const std::string& t) { return std::vector<std::string>{text1 = t}; });
  }
  auto both = [&](const std::string&) { return std::vector<std::string>{text0, text1}; };
  const std::string w0 = mask_bad_pixels(r0, settings_of(""), both), w1 = mask_bad_pixels(r1, settings_of(""), both);
  EXPECT_EQ(w0, w_one);
  EXPECT_EQ(w1, w_one);
  EXPECT_EQ(r0.detector_mask, one.detector_mask);
  EXPECT_EQ(r1.detector_mask, one.detector_mask);
  EXPECT_EQ(found_set(r0), found_set(one));
  EXPECT_EQ(tycho::host::bad_pixels_json(r1), tycho::host::bad_pixels_json(one));
}

// ---- The shared MoS2 counts with 8 bad pixels (bench/bad_pixels/inject.py's recipe): through
// the emd source and the host's read, all 8 are found with their reasons and nothing else; the
// clean counts give none. Then `tycho reconstruct` with 0 iterations on the copy: the log, the
// manifest and the saved mask say the same.

struct injected_pixel {
  int64_t row, column;
  const char* kind;
  int value;
  const char* reason;
};
const injected_pixel k_injected[] = {
    {61, 43, "dead", 0, "dead"},    {36, 40, "dead", 0, "dead"},   {45, 52, "dead", 0, "dead"},
    {30, 20, "offset", 30, "hot"},  {66, 80, "offset", 3, "hot"},  {0, 61, "offset", 10, "hot"},
    {50, 44, "spikes", 2000, "hot_in_some_patterns"},              {77, 95, "stuck", 1000, "hot"}};

std::vector<uint16_t> injected_counts() {
  std::vector<uint16_t> v = read_counts();
  for (int64_t j = 0; j < k_patterns; ++j)
    for (const injected_pixel& p : k_injected) {
      uint16_t& x = v[std::size_t(j * k_pixels + p.row * k_q + p.column)];
      const std::string kind = p.kind;
      if (kind == "dead") x = 0;
      else if (kind == "offset") x = uint16_t(x + p.value);
      else if (kind == "stuck") x = uint16_t(p.value);
      else if (j == 17 || j == 273 || j == 529) x = uint16_t(p.value);
    }
  return v;
}

dataset read_through_emd(const std::string& path) {
  auto doc = tycho::config_document::parse("[data]\nsource = \"emd\"\npath = \"" + path + "\"\n", "<test>", "/");
  tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
  return tycho::host::read_dataset(tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "emd"), &cfg, 0, 1, true);
}

TEST_F(BadPixelsCli, Mos2InjectedPixelsAreFoundExactly) {
  dataset clean = read_through_emd(counts_file());
  EXPECT_EQ(mask_bad_pixels(clean, settings_of("")), "");
  EXPECT_TRUE(clean.bad_pixels.found.empty()) << joined(found_set(clean));
  EXPECT_EQ(clean.bad_pixels.compared_pixels, k_pixels);

  const std::vector<uint16_t> counts = injected_counts();
  std::string why;
  ASSERT_TRUE(tycho::test::write_emd_file(tmp_ / "injected.h5", mos2_spec(tycho::test::emd_element::uint16, counts.data()),
                                          &why))
      << why;
  dataset d = read_through_emd(tmp_ / "injected.h5");
  ASSERT_FALSE(d.counts.empty()) << "read as counts, as a run reads them";
  const std::string w = mask_bad_pixels(d, settings_of(""));
  std::set<std::string> want;
  for (const injected_pixel& p : k_injected)
    want.insert("(" + std::to_string(p.row) + ", " + std::to_string(p.column) + ") " + p.reason);
  EXPECT_EQ(found_set(d), want) << joined(found_set(d)) << "\n" << w;
  EXPECT_EQ(d.bad_pixels.masked_pixels, 8);
  // The weakest margin, printed for bench/RESULTS.md: every score against the threshold.
  for (const found_bad_pixel& f : d.bad_pixels.found)
    std::cout << "(" << f.row << ", " << f.column << ") " << f.reason << " z = " << f.score << "\n";

  // No iteration: the data read, masked and saved with the initial object.
  auto r = run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "-q", "--set",
                        "reconstruct.iterations=0", "--set", "output.previews=false", "--set",
                        "data.path=" + (tmp_ / "injected.h5"), "-o", tmp_ / "injected.zip"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  auto lines = warnings_with(r, "detector pixels");
  ASSERT_EQ(lines.size(), 1u) << r.err;
  for (const char* part : {"masked 8 of 9216 detector pixels", "8 found in the data (3 dead, 4 hot, 1 hot in some patterns",
                           "(45, 52) dead", "(77, 95) hot"})
    EXPECT_TRUE(contains(lines[0], part)) << "'" << part << "' not in: " << lines[0];
  const auto rec = tycho::test::load_result(tmp_ / "injected.zip");
  const auto bad = nlohmann::json::parse(rec.manifest_json).at("data").at("bad_pixels");
  EXPECT_EQ(bad.at("masked_pixels"), 8);
  EXPECT_EQ(bad.at("detection").at("found").size(), 8u);
  const auto& mask = rec.array("mask", "injected.zip");
  for (const injected_pixel& p : k_injected) EXPECT_EQ(mask.as<uint8_t>()[p.row * k_q + p.column], 0);
  EXPECT_EQ(std::count(mask.as<uint8_t>(), mask.as<uint8_t>() + mask.count(), uint8_t(0)), 8);

  // A crop cannot carry the mask yet: refused, saying the pixels were found and how to keep them.
  auto cropped = run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "-q", "--set",
                              "reconstruct.iterations=0", "--set", "preprocess.crop_detector=[80, 80]", "--set",
                              "data.path=" + (tmp_ / "injected.h5"), "-o", tmp_ / "cropped.zip"});
  EXPECT_TRUE(cropped.exited_with(2)) << cropped.describe();
  EXPECT_TRUE(contains(cropped.err, "has 8 bad detector pixels (masked)")) << cropped.err;
  EXPECT_TRUE(contains(cropped.err, "8 of them found dead or hot in the data: [preprocess] detect_bad_pixels = false "
                                    "leaves them in, unmasked"))
      << cropped.err;
}

}  // namespace

namespace {

// ---- Every shared data file as it is: what the search finds (printed: bench/RESULTS.md's
// table). The simulated scans hold no bad pixel and none is found. The real detectors' files:
// the Merlin ROI scans' documented hot pixel ("hot_pixel_52x_39y": x 52, y 39 of RosettaSciIO's
// frame, whose rows the mib source delivers bottom-up too: row rows − 1 − 39) is found; their
// 4 x 2 scans hold nothing else; the single frames (a test pattern of 10-count pixels on zeros,
// not diffraction) hold pixels that keep one value in every frame.

struct shared_finding {
  std::string file;
  int64_t compared = 0;
  std::vector<found_bad_pixel> found;
  std::string refused;  // the host's refusal after the search, if any (e.g. no intensity)
};

shared_finding search(const tycho::host::component_ref& source, const std::string& data_toml, const std::string& name,
                      const std::string& base_dir) {
  shared_finding out;
  out.file = name;
  auto doc = tycho::config_document::parse("[data]\n" + data_toml, "<test>", base_dir);
  tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
  dataset d = tycho::host::read_dataset(source, &cfg, 0, 1, true);
  try {
    mask_bad_pixels(d, settings_of("", d.info.stored_dtype));
  } catch (const tycho::error& e) {
    out.refused = e.what();
  }
  out.compared = d.bad_pixels.compared_pixels;
  out.found = d.bad_pixels.found;
  std::cout << name << ": " << d.patterns << " patterns of " << d.n0 << " x " << d.n1 << ", compared "
            << out.compared << ", found " << out.found.size();
  int64_t dead = 0, stuck = 0;  // stuck: the same value in every pattern (no counting noise)
  for (const auto& f : out.found) {
    dead += f.reason == "dead";
    stuck += f.reason != "dead" && f.mean == f.max;
  }
  if (!out.found.empty()) std::cout << " (" << dead << " dead, " << stuck << " hot with one value in every pattern)";
  for (std::size_t i = 0; i < out.found.size() && i < 3; ++i) {
    const auto& f = out.found[i];
    std::cout << "; (" << f.row << ", " << f.column << ") " << f.reason << " mean " << f.mean << " vs "
              << f.neighbours_mean << ", max " << f.max << " vs " << f.neighbours_max << ", z " << f.score;
  }
  if (!out.refused.empty()) std::cout << " [then refused: " << out.refused.substr(0, 80) << "]";
  std::cout << "\n";
  return out;
}

TEST(BadPixels, SharedDataFilesHoldOnlyRealBadPixels) {
  const auto& emd = tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "emd");
  const std::string data = tycho::test::source_dir() + "/../shared/data/";
  for (const char* file : {"mos2/mos2_80kV_32x24_counts.h5", "mos2/mos2_80kV_32x24_clean.h5",
                           "mos2_partial/mos2_partial_80kV_32x24_counts.h5",
                           "mos2_partial/mos2_jitter_80kV_32x24_counts.h5", "si110/si110_200kV_24x24_counts.h5",
                           "bilayer/bilayer_200kV_24x24_counts.h5"}) {
    if (!fs::exists(data + file)) {
      std::cout << file << ": absent, skipped\n";
      continue;
    }
    const shared_finding f = search(emd, "path = \"" + data + file + "\"\n", file, "/");
    EXPECT_GT(f.compared, 4000) << file;
    EXPECT_TRUE(f.found.empty()) << file;
  }
  if (!tycho::test::have_realformats()) GTEST_SKIP() << "../shared/data/realformats is absent";
  tycho::test::temp_folder tmp;
  const auto& mib = tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "mib");
  int hot_found = 0;
  for (const auto& [key, ref] : tycho::test::realformats_reference().at("files").items()) {
    const auto colon = key.find(".zip:");
    if (colon == std::string::npos || ref.contains("rosettasciio_refuses")) continue;
    const std::string zip = key.substr(0, colon + 4), member = key.substr(colon + 5);
    const std::string path = tycho::test::extract_realformat(zip, member, tmp.path().string());
    tycho::test::extract_realformat(zip, member.substr(0, member.size() - 4) + ".hdr", tmp.path().string());
    const auto shape = ref.at("shape").get<std::vector<int64_t>>();
    int64_t frames = 1;
    for (std::size_t a = 0; a + 2 < shape.size(); ++a) frames *= shape[a];
    const int64_t rx = shape.size() == 4 ? shape[0] : frames, ry = shape.size() == 4 ? shape[1] : 1;
    const shared_finding f = search(mib,
                                    "path = \"" + path + "\"\nscan_shape = [" + std::to_string(rx) + ", " +
                                        std::to_string(ry) + "]\n",
                                    key, tmp.path().string());
    const auto hot_at = member.find("hot_pixel_52x_39y");
    if (hot_at != std::string::npos) {
      const int64_t rows = shape[shape.size() - 2];
      bool found = false;
      for (const auto& p : f.found) found |= p.row == rows - 1 - 39 && p.column == 52 && p.reason == "hot";
      EXPECT_TRUE(found) << key << ": the documented hot pixel";
      hot_found += found;
      EXPECT_EQ(f.found.size(), 1u) << key;
    } else if (member.find("4x2") != std::string::npos) {
      EXPECT_TRUE(f.found.empty()) << key;
    } else {
      // Single frames and stacks of 9: every pixel found stands above (or below) all but one of
      // its neighbours by at least 25 counts in the mean (a single count's spread there is 1).
      for (const auto& p : f.found)
        EXPECT_GE(std::abs(p.mean - p.neighbours_mean), 2.5) << key << " (" << p.row << ", " << p.column << ")";
    }
  }
  EXPECT_EQ(hot_found, 2);
  // The ARINA master (all 16 frames hold 0: no intensity, refused after the search) and the
  // DM4 stack (two 2 x 2 frames: too small to search).
  const auto& arina = tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "arina");
  const shared_finding a = search(arina, "path = \"" + tycho::test::realformats_dir() + "/test_00_master.h5\"\n",
                                  "test_00_master.h5", "/");
  EXPECT_TRUE(a.found.empty());
  const auto& dm = tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "dm");
  const shared_finding m = search(dm, "path = \"" + tycho::test::realformats_dir() + "/test-1.dm4\"\nscan_shape = [2, 1]\n",
                                  "test-1.dm4", "/");
  EXPECT_TRUE(m.found.empty());
  EXPECT_EQ(m.compared, 4);
}

}  // namespace
