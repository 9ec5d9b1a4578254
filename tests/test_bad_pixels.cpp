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
    return run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations",
                        std::to_string(iterations), "-q", "--set", "output.previews=false", "--set",
                        "data.path=" + data, "-o", tmp_ / result});
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
