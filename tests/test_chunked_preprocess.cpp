// The preprocessing stage on chunks of stored counts (host/src/data/chunked_preprocess.hpp,
// docs/streaming.md): for every step that changes the patterns (crop, binning, recentre on the
// centre-of-mass fit, scan rotation and transpose, normalisation) the targets, totals, mask and
// report equal the whole-scan float32 path's (read_dataset as float32, mask_bad_pixels,
// preprocess_dataset) bit for bit, on the MoS2 counts and on synthetic uint8/uint16 scans read
// in several chunks, a share of the ranks' blocks, with a saturated pixel masked.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/host/dataset.hpp>
#include <tycho/host/preprocess.hpp>

#include <toml++/toml.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../host/src/data/bad_pixels.hpp"
#include "../host/src/data/chunked_preprocess.hpp"
#include "built_in_plugins.hpp"
#include "cxi_test_file.hpp"
#include "npy_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::host::dataset;

const tycho::host::component_ref& source(const char* name) {
  return tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, name);
}

struct stage_result {
  dataset d;
  std::string json;
};

// The whole-scan path as the session runs it for float32 reads.
stage_result whole_scan(const char* src, const tycho::config_document& doc, int64_t part, int64_t parts) {
  tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
  stage_result r;
  r.d = tycho::host::read_dataset(source(src), &cfg, part, parts, false);
  const toml::table& pre = doc.table_at("preprocess");
  tycho::host::mask_bad_pixels(r.d, tycho::host::read_bad_pixel_settings(pre, doc.origin(), r.d.info.stored_dtype));
  const auto given = tycho::host::read_preprocess_settings(pre, doc.origin());
  tycho::host::refuse_moving_masked_pixels(r.d, given);
  r.json = tycho::host::preprocess_dataset(r.d, doc, tycho::host::sum_on_one_rank).to_json();
  return r;
}

// Compares the chunked path's result with the whole-scan one, value for value and bit for bit.
void expect_same(const stage_result& f, const tycho::host::chunked_read& c, const std::string& what) {
  const dataset& a = f.d;
  const dataset& b = c.data;
  EXPECT_EQ(b.n0, a.n0) << what;
  EXPECT_EQ(b.n1, a.n1) << what;
  EXPECT_EQ(b.info.detector_shape[0], a.info.detector_shape[0]) << what;
  EXPECT_EQ(b.info.detector_shape[1], a.info.detector_shape[1]) << what;
  EXPECT_EQ(std::memcmp(b.info.detector_pixel_invA, a.info.detector_pixel_invA, sizeof a.info.detector_pixel_invA), 0)
      << what;
  EXPECT_EQ(std::memcmp(&b.total_intensity, &a.total_intensity, sizeof(double)), 0)
      << what << ": total " << b.total_intensity << " vs " << a.total_intensity;
  EXPECT_EQ(std::memcmp(&b.mean_total_intensity, &a.mean_total_intensity, sizeof(double)), 0) << what;
  EXPECT_EQ(b.max_value, a.max_value) << what;
  EXPECT_EQ(b.detector_mask, a.detector_mask) << what;
  EXPECT_EQ(b.bad_pixels.masked_pixels, a.bad_pixels.masked_pixels) << what;
  EXPECT_EQ(b.bad_pixels.saturated_values, a.bad_pixels.saturated_values) << what;
  EXPECT_EQ(c.report.to_json(), f.json) << what;
  ASSERT_TRUE(a.counts.empty()) << what;
  if (!b.counts.empty()) {
    ASSERT_TRUE(b.targets.empty()) << what;
    ASSERT_EQ(b.counts.size(), a.targets.size()) << what;
    for (std::size_t k = 0; k < a.targets.size(); ++k) ASSERT_EQ(float(b.counts[k]), a.targets[k]) << what << " " << k;
  } else {
    ASSERT_EQ(b.targets.size(), a.targets.size()) << what;
    EXPECT_EQ(std::memcmp(b.targets.data(), a.targets.data(), a.targets.size() * sizeof(float)), 0) << what;
  }
}

tycho::config_document mos2_config(const std::string& preprocess) {
  return tycho::config_document::parse(
      "[data]\nsource = \"emd\"\npath = \"" + tycho::test::shared_data("mos2_80kV_32x24_counts.h5") +
          "\"\n[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = -60.0\n[preprocess]\n" + preprocess,
      "<test>", tycho::test::source_dir());
}

// The MoS2 counts (768 patterns of 96 x 96 uint16) through each step that changes them, as
// float32 targets and as uint16 counts where the step keeps whole counts.
TEST(ChunkedPreprocess, MoS2CountsEqualTheWholeScanFloat32PathBitForBit) {
  const std::vector<std::pair<std::string, bool>> stages = {
      {"crop_detector = [64, 60]", true},
      {"binning = 2", true},
      {"com_fit = \"plane\"\nrecentre = true", true},
      {"scan_rotation_deg = 90\nscan_transpose = true", false},
      {"normalise = true", false},
      {"crop_detector = [90, 88]\nbinning = 2\ncom_fit = \"plane\"\nrecentre = true\nscan_rotation_deg = 270\n"
       "normalise = true",
       false},
  };
  for (const auto& [stage, also_counts] : stages) {
    const auto doc = mos2_config(stage);
    const stage_result f = whole_scan("emd", doc, 0, 1);
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    for (bool integer : {false, true}) {
      if (integer && !also_counts) continue;
      const auto c = tycho::host::read_preprocessed_in_chunks(source("emd"), &cfg, 0, 1, doc, tycho::host::sum_on_one_rank,
                                                           {}, integer, int64_t(1) << 20);
      EXPECT_EQ(c.read_as, "the stored uint16 counts") << "the emd source delivers the MoS2 counts as stored";
      EXPECT_EQ(c.data.counts.empty(), !integer) << stage;
      expect_same(f, c, stage + (integer ? " (uint16 targets)" : " (float32 targets)"));
    }
  }
}

// Counts held in memory, as the session reads them when the stage only measures and at most
// reorders pixels: a transpose, given, or estimated by the default scan geometry on the MoS2
// counts recorded with the detector transposed, permutes the uint16 counts exactly as the float32
// path permutes its targets (and finds the transpose on both).
TEST(ChunkedPreprocess, CountsInMemoryAreTransposedAsTheFloat32Targets) {
  tycho::test::temp_folder tmp;
  const auto& counts = tycho::test::mos2_counts();  // (768, 96, 96)
  std::vector<uint16_t> transposed(counts.size());
  for (std::size_t j = 0; j < 768; ++j)
    for (std::size_t u = 0; u < 96; ++u)
      for (std::size_t v = 0; v < 96; ++v) transposed[(j * 96 + u) * 96 + v] = counts[(j * 96 + v) * 96 + u];
  tycho::test::write_npy(tmp / "t.npy", "<u2", {32, 24, 96, 96}, transposed.data(), transposed.size() * 2);
  const std::string npy_data = "[data]\nsource = \"npy\"\npath = \"" + std::string(tmp / "t.npy") +
                               "\"\ncentred = true\nscan_step_A = 0.5\ndetector_pixel_invA = 0.06\n";
  const std::string optics = "[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = -150.0\n";
  for (const char* what : {"given", "estimated"}) {
    const bool given = std::string(what) == "given";
    const auto doc = given ? mos2_config("scan_transpose = true")
                           : tycho::config_document::parse(npy_data + optics + "[preprocess]\n", "<test>",
                                                           tmp.path().string());
    const char* src = given ? "emd" : "npy";
    const stage_result f = whole_scan(src, doc, 0, 1);
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    dataset c = tycho::host::read_dataset(source(src), &cfg, 0, 1, true);
    ASSERT_FALSE(c.counts.empty()) << what;
    tycho::host::mask_bad_pixels(c, tycho::host::read_bad_pixel_settings(doc.table_at("preprocess"), doc.origin(),
                                                                          c.info.stored_dtype));
    const std::string json = tycho::host::preprocess_dataset(c, doc, tycho::host::sum_on_one_rank).to_json();
    EXPECT_EQ(json, f.json) << what;
    EXPECT_NE(json.find("transpose\":true"), std::string::npos) << what << ": " << json;
    ASSERT_TRUE(c.targets.empty()) << what;
    ASSERT_EQ(c.counts.size(), f.d.targets.size()) << what;
    for (std::size_t k = 0; k < c.counts.size(); ++k) ASSERT_EQ(float(c.counts[k]), f.d.targets[k]) << what << " " << k;
  }
}

// Synthetic centred uint16 and uint8 scans of 13 x 11 patterns of 20 x 18, read 7 patterns per
// chunk, as rank 1 of 3 (a block starting mid-scan): binning of counts up to 65535 / 4 stays
// uint16; a saturated pixel and a pixel hot in one pattern are masked (with steps that do not
// move pixels); a factor that could pass 65535 falls back to float32 targets with the same values.
TEST(ChunkedPreprocess, SyntheticCountsInChunksAndSharesEqualTheWholeScanPath) {
  tycho::test::temp_folder tmp;
  const int64_t rx = 13, ry = 11, n0 = 20, n1 = 18, n = n0 * n1;
  std::mt19937 gen(5);
  std::vector<uint16_t> u16(std::size_t(rx * ry * n));
  for (int64_t j = 0; j < rx * ry; ++j) {  // a disc off-centre that drifts with the scan position
    const double c0 = n0 / 2 + 1.5 + 0.1 * double(j / ry), c1 = n1 / 2 - 1 + 0.15 * double(j % ry);
    for (int64_t k = 0; k < n; ++k) {
      const double r2 = (double(k / n1) - c0) * (double(k / n1) - c0) + (double(k % n1) - c1) * (double(k % n1) - c1);
      std::poisson_distribution<int> counts(r2 < 25 ? 3000.0 : 20.0);
      u16[std::size_t(j * n + k)] = uint16_t(std::min(counts(gen), 4000));
    }
  }
  u16[std::size_t(70 * n + 5 * n1 + 9)] = 8000;  // 9 x 8000 > 65535: binning by 3 may pass it
  std::vector<uint16_t> saturated = u16;
  saturated[std::size_t(40 * n + 3 * n1 + 2)] = 65535;
  std::vector<uint8_t> u8(u16.size());
  for (std::size_t k = 0; k < u8.size(); ++k) u8[k] = uint8_t(u16[k] / 32);  // below 255, the saturated uint8
  tycho::test::write_npy(tmp / "u16.npy", "<u2", {rx, ry, n0, n1}, u16.data(), u16.size() * 2);
  tycho::test::write_npy(tmp / "sat.npy", "<u2", {rx, ry, n0, n1}, saturated.data(), saturated.size() * 2);
  tycho::test::write_npy(tmp / "u8.npy", "|u1", {rx, ry, n0, n1}, u8.data(), u8.size());

  const std::string calibration = "scan_step_A = 0.5\ndetector_pixel_invA = 0.03\n";
  struct stage_case {
    const char* file;
    std::string stage;
    bool counts;  // uint16 results expected with integer targets
  };
  // The 8000 is also a pixel hot in one pattern, which the search for bad pixels finds and masks,
  // and a masked pixel cannot be moved yet: the cases that move pixels leave the search off; the
  // one that does not (sat.npy) finds it on the chunks as on the scan.
  const std::string no_search = "detect_bad_pixels = false\n";
  const std::vector<stage_case> cases = {
      {"u16.npy", no_search + "crop_detector = [16, 15]\ncom_fit = \"plane\"\nrecentre = true\nscan_rotation_deg = 90", true},
      {"u16.npy", no_search + "binning = 2\nscan_transpose = true", true},
      {"u16.npy", no_search + "scan_rotation_deg = \"auto\"\ncom_fit = \"plane\"", true},
      {"u16.npy", no_search + "binning = 3\ncrop_detector = [18, 18]", false},  // 9 x 8000 may pass 65535
      {"sat.npy", "com_fit = \"plane\"\nnormalise = true", false},
      {"u8.npy", no_search + "crop_detector = [17, 16]\nscan_rotation_deg = 180\nnormalise = true", false},
      {"u8.npy", no_search + "crop_detector = [12, 12]\nbinning = 2\ncom_fit = \"constant\"\nrecentre = true", true},
  };
  for (const auto& c : cases) {
    const auto doc = tycho::config_document::parse(
        "[data]\nsource = \"npy\"\npath = \"" + (tmp / c.file) + "\"\ncentred = true\n" + calibration +
            "[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = 0.0\n[preprocess]\n" + c.stage,
        "<test>", tmp.path().string());
    const std::string what = std::string(c.file) + ": " + c.stage;
    const stage_result f = whole_scan("npy", doc, 1, 3);
    ASSERT_EQ(f.d.first, 48) << what;
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    for (bool integer : {false, true}) {
      const auto r = tycho::host::read_preprocessed_in_chunks(source("npy"), &cfg, 1, 3, doc, tycho::host::sum_on_one_rank,
                                                           {}, integer, 7 * n * 2);
      EXPECT_EQ(r.data.counts.empty(), !(integer && c.counts)) << what;
      expect_same(f, r, what + (integer ? " (integer targets)" : ""));
    }
  }
  // The saturated pixel is masked on the chunks as on the scan.
  const auto doc = tycho::config_document::parse("[data]\nsource = \"npy\"\npath = \"" + (tmp / "sat.npy") +
                                                     "\"\ncentred = true\n" + calibration + "[preprocess]\nnormalise = true",
                                                 "<test>", tmp.path().string());
  tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
  const auto r = tycho::host::read_preprocessed_in_chunks(source("npy"), &cfg, 0, 1, doc, tycho::host::sum_on_one_rank, {},
                                                       false);
  // And the 8000 in pattern 70, stored pixel (5, 9), found hot in that pattern.
  EXPECT_EQ(r.data.bad_pixels.masked_pixels, 2);
  EXPECT_EQ(r.data.bad_pixels.value_pixels, 1);
  ASSERT_EQ(r.data.bad_pixels.found.size(), 1u) << r.bad_pixel_warning;
  EXPECT_EQ(r.data.bad_pixels.found[0].row, 5);
  EXPECT_EQ(r.data.bad_pixels.found[0].column, 9);
  EXPECT_EQ(r.data.bad_pixels.found[0].reason, "hot_in_some_patterns");
  EXPECT_NE(r.bad_pixel_warning.find("2 of 360 detector pixels"), std::string::npos) << r.bad_pixel_warning;
}

// `tycho preprocess --save-raw-data` with a stage that changes the patterns prepares them from
// chunks of the MoS2 counts, streamed into the file: its patterns.npy holds the whole-scan float32
// path's patterns (centred) as the counts they are, value for value: uint8, as no MoS2 count
// passes 255.
TEST(ChunkedPreprocess, APreparedFileFromChunksHoldsTheWholeScanPatterns) {
  tycho::test::temp_folder tmp;
  const std::string stage = "crop_detector = [64, 60]\ncom_fit = \"plane\"\nrecentre = true\nscan_rotation_deg = 90";
  auto r = tycho::test::run_command(
      {tycho::test::tycho_exe(), "preprocess", tycho::test::source_dir() + "/examples/mos2.toml", "--save-raw-data",
       "--set", "data.path=\"" + tycho::test::shared_data("mos2_80kV_32x24_counts.h5") + "\"", "--set",
       "preprocess.crop_detector=[64, 60]", "--set", "preprocess.com_fit=\"plane\"", "--set",
       "preprocess.recentre=true", "--set", "preprocess.scan_rotation_deg=90", "-o", tmp / "prepared.zip"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.err.find("read 768 patterns in chunks of the stored uint16 counts (2 passes before the file); "
                       "writing them as uint8 counts"),
            std::string::npos)
      << r.err;
  const stage_result f = whole_scan("emd", mos2_config(stage), 0, 1);
  ASSERT_EQ(f.d.n0, 64);  // the crop's; the quarter turn moves the positions, not the pixels
  const auto record = tycho::test::load_result(tmp / "prepared.zip");
  const auto& patterns = record.array("patterns", tmp / "prepared.zip");
  ASSERT_EQ(patterns.dtype.code, kDLUInt);
  ASSERT_EQ(patterns.dtype.bits, 8);
  ASSERT_EQ(patterns.bytes.size(), f.d.targets.size());
  const int64_t n = f.d.n0 * f.d.n1;
  std::vector<float> centred(f.d.targets.size());
  for (int64_t l = 0; l < f.d.patterns; ++l)
    tycho::host::fftshift_pattern(f.d.targets.data() + l * n, centred.data() + l * n, f.d.n0, f.d.n1);
  const uint8_t* counts = patterns.as<uint8_t>();
  for (std::size_t k = 0; k < centred.size(); ++k) ASSERT_EQ(float(counts[k]), centred[k]) << "value " << k;
}

// Float32 data (non-integer values, a NaN pixel masked) and int32 counts, which the npy source
// delivers as float32 only, are read in float32 chunks: the same targets, totals and report
// as the whole-scan path, bit for bit; a negative value is refused with the whole-scan path's
// message.
TEST(ChunkedPreprocess, Float32ChunksEqualTheWholeScanPathAndRefuseNegativeValues) {
  tycho::test::temp_folder tmp;
  const int64_t rx = 6, ry = 5, n0 = 16, n1 = 14, n = n0 * n1;
  std::mt19937 gen(9);
  std::gamma_distribution<float> dose(2.0f, 40.0f);
  std::vector<float> f32(std::size_t(rx * ry * n));
  for (auto& v : f32) v = dose(gen);
  std::vector<int32_t> i32(f32.size());
  for (std::size_t k = 0; k < f32.size(); ++k) i32[k] = int32_t(f32[k] * 1000.0f);
  f32[std::size_t(7 * n + 33)] = std::numeric_limits<float>::quiet_NaN();
  tycho::test::write_npy(tmp / "f32.npy", "<f4", {rx, ry, n0, n1}, f32.data(), f32.size() * 4);
  tycho::test::write_npy(tmp / "i32.npy", "<i4", {rx, ry, n0, n1}, i32.data(), i32.size() * 4);
  f32[std::size_t(7 * n + 33)] = -2.5f;
  tycho::test::write_npy(tmp / "negative.npy", "<f4", {rx, ry, n0, n1}, f32.data(), f32.size() * 4);
  auto config = [&](const char* file, const std::string& stage) {
    return tycho::config_document::parse("[data]\nsource = \"npy\"\npath = \"" + (tmp / file) +
                                             "\"\ncentred = true\n[preprocess]\n" + stage,
                                         "<test>", tmp.path().string());
  };
  for (const auto& [file, stage] : {std::pair{"f32.npy", std::string("normalise = true\ncom_fit = \"plane\"")},
                                    std::pair{"i32.npy", std::string("crop_detector = [12, 13]\ncom_fit = \"plane\"\n"
                                                                     "recentre = true\nscan_transpose = true")}}) {
    const auto doc = config(file, stage);
    const std::string what = std::string(file) + ": " + stage;
    const stage_result f = whole_scan("npy", doc, 0, 1);
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    const auto r = tycho::host::read_preprocessed_in_chunks(source("npy"), &cfg, 0, 1, doc,
                                                            tycho::host::sum_on_one_rank, {}, true, 4 * n * 4);
    EXPECT_EQ(r.read_as, "float32") << what;
    EXPECT_TRUE(r.data.counts.empty()) << what;
    expect_same(f, r, what);
  }
  const auto doc = config("negative.npy", "normalise = true");
  tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
  std::string whole, chunked;
  try {
    whole_scan("npy", doc, 0, 1);
  } catch (const tycho::error& e) {
    whole = e.what();
  }
  try {
    tycho::host::read_preprocessed_in_chunks(source("npy"), &cfg, 0, 1, doc, tycho::host::sum_on_one_rank, {}, false,
                                             4 * n * 4);
  } catch (const tycho::error& e) {
    chunked = e.what();
  }
  EXPECT_NE(whole.find("pattern 7 (scan position 1, 2), pixel (2, 5) is negative (-2.5)"), std::string::npos) << whole;
  EXPECT_EQ(chunked, whole);
}

}  // namespace
