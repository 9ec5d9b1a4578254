// The `dm` source (plugins/sources/detectors): Gatan .dm4 / .dm3 files written by the tests'
// writer (tests/support/dm_test_file.hpp) read back bit for bit (4-D scans and 3-D stacks, every
// data type, both byte orders, DM3 and DM4); several images in one file; calibrations and the
// voltage; files RosettaSciIO read once (tests/support/format_samples.hpp) read as it reads them;
// the real test-1.dm4 of ../shared; crafted files refused naming the offset and what was expected.
#include <gtest/gtest.h>
#include <unistd.h>

#include <tycho/core/last_error.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "dm_test_file.hpp"
#include "format_samples.hpp"
#include "realformats.hpp"
#include "source_under_test.hpp"

namespace fs = std::filesystem;
using tycho::test::dm_image_spec;

namespace {

class DmSource : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("tycho_dm_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    source_.close();
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  tycho_status open(const std::string& path, const std::string& more = "") {
    return source_.open(tycho::test::plugins(), "dm", "path = '" + path + "'\n" + more, tmp_.string());
  }
  std::string tmp(const std::string& name) const { return (tmp_ / name).string(); }
  void expect_refused(const std::string& path, const std::string& more, tycho_status status,
                      const std::vector<std::string>& parts) {
    EXPECT_EQ(open(path, more), status) << tycho::last_error();
    const std::string msg = tycho::last_error();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
  tycho::test::source_under_test source_;
  fs::path tmp_;
};

std::vector<float> sample_floats(uint64_t n, uint32_t modulo) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (uint64_t k = 0; k < n; ++k) v[std::size_t(k)] = float(tycho::test::sample_value(k, modulo));
  return v;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// 4-D scans and 3-D stacks of every supported data type, DM3 and DM4, both byte orders: the
// values written, in scan order; calibrations converted to Å and Å⁻¹; the voltage as energy.
TEST_F(DmSource, EveryTypeVersionAndOrderRoundTrips) {
  struct variant {
    int data_type;
    uint32_t modulo;
    int version;
    bool little;
    bool four_d;
  };
  const variant variants[] = {{10, 60000, 4, true, true}, {6, 250, 4, true, true},   {1, 30000, 3, false, true},
                              {7, 100000, 3, true, true}, {11, 100000, 4, false, false}, {2, 4000, 4, true, false},
                              {12, 4000, 3, false, false}, {9, 120, 4, true, true}};
  for (const variant& v : variants) {
    SCOPED_TRACE("DataType " + std::to_string(v.data_type) + " DM" + std::to_string(v.version) +
                 (v.little ? " little" : " big") + (v.four_d ? " 4-D" : " 3-D"));
    source_.close();
    dm_image_spec im;
    im.data_type = v.data_type;
    im.dims = v.four_d ? std::vector<int64_t>{6, 5, 4, 3} : std::vector<int64_t>{6, 5, 12};
    const uint64_t n = 6 * 5 * 12;
    switch (v.data_type) {
      case 10: im.data = tycho::test::sample_bytes<uint16_t>(n, v.modulo); break;
      case 6: im.data = tycho::test::sample_bytes<uint8_t>(n, v.modulo); break;
      case 1: im.data = tycho::test::sample_bytes<int16_t>(n, v.modulo); break;
      case 7: im.data = tycho::test::sample_bytes<int32_t>(n, v.modulo); break;
      case 11: im.data = tycho::test::sample_bytes<uint32_t>(n, v.modulo); break;
      case 2: im.data = tycho::test::sample_bytes<float>(n, v.modulo); break;
      case 12: im.data = tycho::test::sample_bytes<double>(n, v.modulo); break;
      case 9: im.data = tycho::test::sample_bytes<int8_t>(n, v.modulo); break;
    }
    im.calibrations = {{2.5, 0.04, "1/nm"}, {3, 0.05, "1/nm"}, {0, 0.3, "nm"}, {0, 0.25, "nm"}};
    if (!v.four_d) im.calibrations.resize(3);
    im.voltage_V = 300e3;
    im.order_swapped = v.four_d ? 1 : -1;
    im.format = "Diffraction image";
    tycho::test::write_sample(tmp_ / "f.dm", tycho::test::dm_bytes(v.version, v.little, {im}));
    ASSERT_EQ(open(tmp("f.dm"), v.four_d ? "" : "scan_shape = [4, 3]\n"), TYCHO_OK) << tycho::last_error();
    const tycho_dataset_info i = source_.info();
    EXPECT_EQ(i.scan_shape[0], v.four_d ? 3 : 4);
    EXPECT_EQ(i.scan_shape[1], v.four_d ? 4 : 3);
    EXPECT_EQ(i.detector_shape[0], 5);
    EXPECT_EQ(i.detector_shape[1], 6);
    const std::vector<float> values = sample_floats(n, v.modulo);
    EXPECT_TRUE(same_bits(source_.read(0, 12), values));
    EXPECT_TRUE(same_bits(source_.read(7, 3), std::vector<float>(values.begin() + 7 * 30, values.begin() + 10 * 30)));
    EXPECT_NEAR(i.detector_pixel_invA[0], 0.005, 1e-9);  // rows: dimension 1, 0.05 1/nm
    EXPECT_NEAR(i.detector_pixel_invA[1], 0.004, 1e-9);
    if (v.four_d) {
      EXPECT_NEAR(i.scan_step_A[0], 2.5, 1e-6);  // scan y: dimension 3, 0.25 nm
      EXPECT_NEAR(i.scan_step_A[1], 3.0, 1e-6);
    } else {
      EXPECT_TRUE(std::isnan(i.scan_step_A[0]));
    }
    EXPECT_DOUBLE_EQ(i.energy_eV, 300e3);
    EXPECT_EQ(i.reads_stored_dtype, v.data_type == 10 || v.data_type == 6 ? 1 : 0);
    if (v.data_type == 10) {
      const auto stored = source_.read_uint16(0, 12);
      EXPECT_TRUE(std::equal(stored.begin(), stored.end(), values.begin()));
    }
  }
}

// Several images (a thumbnail and two 4-D scans, as K3 acquisitions save): refused without
// [data] image, listing them; each read with it.
TEST_F(DmSource, SeveralImagesNeedTheImageKey) {
  tycho::test::write_format_samples(tmp_);
  const std::string f = tmp("gen_multi.dm4");
  expect_refused(f, "", TYCHO_ERR_BAD_DATA, {f, "several 3-D or 4-D images", "[data] image", "image 0 (thumbnail)",
                                             "image 1: dimensions [5, 5, 2, 3]", "image 2: dimensions [4, 6, 3, 2]"});
  ASSERT_EQ(open(f, "image = 2\n"), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().detector_shape[0], 6);
  EXPECT_EQ(std::string(source_.info().description), f + ":ImageList[2]");
  expect_refused(f, "image = 7\n", TYCHO_ERR_NOT_FOUND, {"no image 7", "image 2"});
  ASSERT_EQ(open(tmp("gen_4d.dm4")), TYCHO_OK) << tycho::last_error();  // its thumbnail is left out
  EXPECT_EQ(std::string(source_.info().description), tmp("gen_4d.dm4") + ":ImageList[1]");
}

// The files of tests/support/format_samples.hpp as RosettaSciIO 0.15 read them
// (reference.json "generated"): shapes, values and calibrations.
TEST_F(DmSource, GeneratedFilesEqualRosettaSciIO) {
  tycho::test::write_format_samples(tmp_);
  tycho::test::write_format_samples_for_reference();
  const auto& gen = tycho::test::realformats_reference().at("generated");
  struct use {
    const char* file;
    int image;      // ImageList index (thumbnails count)
    int dataset;    // RosettaSciIO's list (thumbnails left out)
  };
  for (const use& u : {use{"gen_4d.dm4", 1, 0}, use{"gen_3d.dm3", 0, 0}, use{"gen_multi.dm4", 1, 0}, use{"gen_multi.dm4", 2, 1}}) {
    SCOPED_TRACE(std::string(u.file) + " image " + std::to_string(u.image));
    const auto& ref = gen.at(u.file).at("datasets").at(std::size_t(u.dataset));
    const auto shape = ref.at("shape").get<std::vector<int64_t>>();
    const bool four = shape.size() == 4;
    ASSERT_EQ(open(tmp(u.file), "image = " + std::to_string(u.image) + (four ? "\n" : "\nscan_shape = [" +
                                                                          std::to_string(shape[0]) + ", 1]\n")),
              TYCHO_OK)
        << tycho::last_error();
    const tycho_dataset_info i = source_.info();
    const int64_t frames = four ? shape[0] * shape[1] : shape[0];
    if (four) {
      EXPECT_EQ(i.scan_shape[0], shape[0]);
      EXPECT_EQ(i.scan_shape[1], shape[1]);
    }
    EXPECT_EQ(i.detector_shape[0], shape[shape.size() - 2]);
    EXPECT_EQ(i.detector_shape[1], shape.back());
    tycho::test::expect_checksums(source_.read(0, frames), i.detector_shape[0] * i.detector_shape[1], ref);
    // Calibrations: RosettaSciIO's axes (scale, units) against tycho's in Å / Å⁻¹.
    const auto& axes = ref.at("axes");
    const auto per = [](const std::string& u) {
      return u == "nm" ? 10.0 : u == "µm" ? 1e4 : u == "Å" ? 1.0 : u == "1/nm" ? 0.1 : u == "1/Å" ? 1.0 : NAN;
    };
    const auto& ax_rows = axes.at(axes.size() - 2);
    EXPECT_NEAR(i.detector_pixel_invA[0], ax_rows.at("scale").get<double>() * per(ax_rows.at("units")), 1e-12);
    if (four) {
      const auto& ax_scan = axes.at(0);
      EXPECT_NEAR(i.scan_step_A[0], ax_scan.at("scale").get<double>() * per(ax_scan.at("units")), 1e-9);
    }
  }
}

// ../shared/data/realformats/test-1.dm4: a 3-D int16 stack of two 2 x 2 frames.
TEST_F(DmSource, RealFileEqualsRosettaSciIO) {
  if (!tycho::test::have_realformats()) GTEST_SKIP() << "../shared/data/realformats is absent: real-file checks skipped";
  const auto& ref = tycho::test::realformats_reference().at("files").at("test-1.dm4").at("datasets").at(0);
  const std::string f = tycho::test::realformats_dir() + "/test-1.dm4";
  expect_refused(f, "", TYCHO_ERR_INVALID_ARGUMENT, {"2 frames", "scan_shape"});
  ASSERT_EQ(open(f, "scan_shape = [2, 1]\n"), TYCHO_OK) << tycho::last_error();
  const tycho_dataset_info i = source_.info();
  EXPECT_EQ(i.detector_shape[0], 2);
  EXPECT_EQ(i.detector_shape[1], 2);
  EXPECT_EQ(i.stored_dtype.code, kDLInt);
  EXPECT_EQ(i.stored_dtype.bits, 16);
  EXPECT_EQ(ref.at("dtype").get<std::string>(), "int16");
  tycho::test::expect_checksums(source_.read(0, 2), 4, ref);
  EXPECT_TRUE(std::isnan(i.detector_pixel_invA[0]));  // its calibrations are pixels (scale 1, no units)
}

// The fuzz target's seeds (fuzz/corpus/dm) are valid files (two_images.dm4 with [data] image).
TEST_F(DmSource, FuzzSeedsAreValidFiles) {
  const std::string dir = tycho::test::source_dir() + "/fuzz/corpus/dm/";
  for (const auto& [file, more] : std::vector<std::pair<std::string, std::string>>{
           {"scan_4d.dm4", ""}, {"two_images.dm4", "image = 2\n"}, {"frame_3d.dm3", ""}}) {
    SCOPED_TRACE(file);
    ASSERT_EQ(open(dir + file, more), TYCHO_OK) << tycho::last_error();
    EXPECT_FALSE(source_.read(0, 1).empty());
  }
}

// Crafted files: refused naming the file, the offset or image, and what was expected.
TEST_F(DmSource, CraftedFilesAreRefused) {
  dm_image_spec im{10, {6, 5, 4, 3}, tycho::test::sample_bytes<uint16_t>(360, 1000), {}, "Diffraction image", 1, 0, ""};
  const std::string good = tycho::test::dm_bytes(4, true, {im});
  const std::string f = tmp("x.dm4");
  const auto put = [&](const std::string& b) { tycho::test::write_sample(f, b); };
  put(good.substr(0, good.size() / 2));
  expect_refused(f, "", TYCHO_ERR_BAD_DATA, {f, "at offset", "left"});
  std::string version = good;
  version[3] = 5;
  put(version);
  expect_refused(f, "", TYCHO_ERR_BAD_DATA, {f, "version 5", "3 or 4"});
  put(good.substr(0, 10));
  expect_refused(f, "", TYCHO_ERR_BAD_DATA, {f, "too short"});
  // The root group claims 2^40 entries.
  std::string many = good;
  many[18] = 1;
  put(many);
  expect_refused(f, "", TYCHO_ERR_BAD_DATA, {f, "offset 16", "more than the file can hold"});
  // Dimensions that do not match the data, a DataType that does not match its elements.
  dm_image_spec wrong = im;
  wrong.dims = {6, 5, 4, 4};
  put(tycho::test::dm_bytes(4, true, {wrong}));
  expect_refused(f, "", TYCHO_ERR_BAD_DATA, {f + ":ImageList[0]", "[6, 5, 4, 4]", "480 values", "holds 360"});
  wrong = im;
  wrong.data_type = 11;
  wrong.element = 4;  // uint16 elements under a uint32 DataType
  put(tycho::test::dm_bytes(4, true, {wrong}));
  expect_refused(f, "", TYCHO_ERR_BAD_DATA, {"2 bytes", "DataType 11", "4-byte uint32"});
  wrong.data_type = 3;  // complex
  put(tycho::test::dm_bytes(4, true, {wrong}));
  expect_refused(f, "", TYCHO_ERR_UNSUPPORTED, {"DataType 3"});
  // The older mixed order of 4-D data, and a spectrum image.
  wrong = im;
  wrong.order_swapped = 0;
  put(tycho::test::dm_bytes(4, true, {wrong}));
  expect_refused(f, "", TYCHO_ERR_UNSUPPORTED, {"Data Order Swapped = 0"});
  wrong = im;
  wrong.format = "Spectrum image";
  put(tycho::test::dm_bytes(4, true, {wrong}));
  expect_refused(f, "", TYCHO_ERR_BAD_DATA, {"Spectrum image"});
  // A thumbnail index beyond int (found by the fuzzer: a float-to-int conversion out of range,
  // which UBSan reports): ignored, the image read.
  put(tycho::test::dm_bytes(4, true, {im}, {3942650000LL}));
  ASSERT_EQ(open(f), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.read(0, 12).size(), std::size_t(360));
  // A 2-D image only.
  dm_image_spec flat{10, {6, 5}, tycho::test::sample_bytes<uint16_t>(30, 1000), {}, "", -1, 0, ""};
  put(tycho::test::dm_bytes(3, true, {flat}));
  expect_refused(f, "", TYCHO_ERR_NOT_FOUND, {"no 3-D or 4-D image", "image 0: dimensions [6, 5]"});
  // Every single-byte corruption of a small file is refused or read, never a crash (the
  // sanitized build watches the reads).
  const std::string small = tycho::test::dm_bytes(4, true, {dm_image_spec{6, {2, 2, 2}, std::string(8, '\1'), {}, "", -1, 0, ""}});
  int refused = 0;
  for (std::size_t k = 0; k < small.size(); k += 3) {
    std::string b = small;
    b[k] = char(b[k] ^ 0xa5);
    put(b);
    if (open(f, "scan_shape = [2, 1]\n") == TYCHO_OK) {
      (void)source_.read(0, 2);
    } else {
      ++refused;
      EXPECT_NE(std::string(tycho::last_error()).find(f), std::string::npos) << tycho::last_error();
    }
  }
  EXPECT_GT(refused, int(small.size()) / 6);
}

}  // namespace
