// The `empad` source (plugins/sources/detectors): EMPAD acquisitions (.xml + .raw, 128 x 130
// float32 frames whose last two rows are a footer) written by the tests (format_samples.hpp):
// read as RosettaSciIO 0.15 reads them (reference.json "generated"), the footer left out; the
// scan's shape from the .xml, the raw file's name or the config; crafted files refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <tycho/core/last_error.hpp>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "format_samples.hpp"
#include "realformats.hpp"
#include "source_under_test.hpp"

namespace fs = std::filesystem;

namespace {

class EmpadSource : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("tycho_empad_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
    tycho::test::write_format_samples(tmp_);
  }
  void TearDown() override {
    source_.close();
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  tycho_status open(const std::string& path, const std::string& more = "") {
    return source_.open(tycho::test::plugins(), "empad", "path = '" + path + "'\n" + more, tmp_.string());
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

// gen_empad.xml + scan_x4_y3.raw as RosettaSciIO reads them: a 3 x 4 scan of 128 x 128 frames
// (the footer, 999999 in every value, left out), its scan step from the field of view; the
// energy too.
TEST_F(EmpadSource, GeneratedFilesEqualRosettaSciIO) {
  tycho::test::write_format_samples_for_reference();
  const auto& ref = tycho::test::realformats_reference().at("generated").at("gen_empad.xml");
  ASSERT_EQ(open(tmp("gen_empad.xml")), TYCHO_OK) << tycho::last_error();
  const tycho_dataset_info i = source_.info();
  const auto shape = ref.at("shape").get<std::vector<int64_t>>();
  EXPECT_EQ(i.scan_shape[0], shape[0]);
  EXPECT_EQ(i.scan_shape[1], shape[1]);
  EXPECT_EQ(i.detector_shape[0], shape[2]);
  EXPECT_EQ(i.detector_shape[1], shape[3]);
  const auto all = source_.read(0, 12);
  tycho::test::expect_checksums(all, 128 * 128, ref);
  EXPECT_EQ(*std::max_element(all.begin(), all.end()), 4999.0f);  // no footer value
  const auto& ax = ref.at("axes").at(0);
  EXPECT_EQ(ax.at("units").get<std::string>(), "nm");
  EXPECT_NEAR(i.scan_step_A[0], ax.at("scale").get<double>() * 10, 1e-9);
  EXPECT_NEAR(i.scan_step_A[1], ref.at("axes").at(1).at("scale").get<double>() * 10, 1e-9);
  EXPECT_DOUBLE_EQ(i.energy_eV, 300e3);
  EXPECT_TRUE(std::isnan(i.detector_pixel_invA[0]));
  // A middle piece.
  const auto part = source_.read(5, 2);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 5 * 128 * 128));
}

// The scan's shape from the raw file's name when the .xml has no resolution; a stack (series)
// needs scan_shape; negative values pass as stored unless clipped.
TEST_F(EmpadSource, ScanShapeStacksAndNegativeValues) {
  tycho::test::write_sample(tmp_ / "byname.xml", "<root><raw_file filename=\"scan_x4_y3.raw\"/></root>");
  ASSERT_EQ(open(tmp("byname.xml")), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().scan_shape[0], 3);
  EXPECT_EQ(source_.info().scan_shape[1], 4);
  EXPECT_TRUE(std::isnan(source_.info().energy_eV));
  tycho::test::write_sample(tmp_ / "series.xml",
                            "<root><raw_file filename=\"scan_x4_y3.raw\"/><scan_parameters mode=\"acquire\">"
                            "<series_count>12</series_count></scan_parameters></root>");
  expect_refused(tmp("series.xml"), "", TYCHO_ERR_INVALID_ARGUMENT, {"12 frames", "scan_shape"});
  ASSERT_EQ(open(tmp("series.xml"), "scan_shape = [6, 2]\n"), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().scan_shape[1], 2);
  // A negative value in frame 1.
  std::string raw;
  {
    std::ifstream in(tmp("scan_x4_y3.raw"), std::ios::binary);
    raw.assign(std::istreambuf_iterator<char>(in), {});
  }
  const float negative = -3.5f;
  std::memcpy(&raw[128 * 130 * 4 + 40], &negative, 4);
  tycho::test::write_sample(tmp_ / "scan_x4_y3.raw", raw);
  ASSERT_EQ(open(tmp("byname.xml")), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.read(1, 1)[10], -3.5f);
  ASSERT_EQ(open(tmp("byname.xml"), "clip_negative = true\n"), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.read(1, 1)[10], 0.0f);
}

// The fuzz target's seeds (fuzz/corpus/empad: .xml files naming one frame, as the harness writes
// it beside them) are valid.
TEST_F(EmpadSource, FuzzSeedsAreValidFiles) {
  std::vector<float> frame(128 * 130);
  for (std::size_t k = 0; k < frame.size(); ++k) frame[k] = float(k % 97);
  tycho::test::write_sample(tmp_ / "scan_x1_y1.raw", std::string(reinterpret_cast<const char*>(frame.data()), frame.size() * 4));
  int n = 0;
  for (const auto& e : fs::directory_iterator(tycho::test::source_dir() + "/fuzz/corpus/empad")) {
    SCOPED_TRACE(e.path().string());
    fs::copy_file(e.path(), tmp_ / e.path().filename(), fs::copy_options::overwrite_existing);
    ASSERT_EQ(open(tmp(e.path().filename().string())), TYCHO_OK) << tycho::last_error();
    EXPECT_EQ(source_.read(0, 1)[5], 5.0f);
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST_F(EmpadSource, CraftedFilesAreRefused) {
  const std::string raw = tmp("scan_x4_y3.raw");
  fs::resize_file(raw, 128 * 130 * 4 * 12 - 100);
  expect_refused(tmp("gen_empad.xml"), "", TYCHO_ERR_BAD_DATA, {raw, "11 whole EMPAD frames", "truncated"});
  tycho::test::write_sample(tmp_ / "bad.xml", "<root><raw_file filename=\"scan_x4_y3.raw\"></root>");
  expect_refused(tmp("bad.xml"), "", TYCHO_ERR_BAD_DATA, {tmp("bad.xml"), "not well-formed XML", "line 1"});
  tycho::test::write_sample(tmp_ / "none.xml", "<root><exposure_time>1</exposure_time></root>");
  expect_refused(tmp("none.xml"), "", TYCHO_ERR_BAD_DATA, {tmp("none.xml"), "raw_file"});
  tycho::test::write_sample(tmp_ / "up.xml", "<root><raw_file filename=\"../../etc/x.raw\"/></root>");
  expect_refused(tmp("up.xml"), "", TYCHO_ERR_BAD_DATA, {"../../etc/x.raw", "no folders"});
  tycho::test::write_sample(tmp_ / "missing.xml", "<root><raw_file filename=\"gone.raw\"/></root>");
  expect_refused(tmp("missing.xml"), "", TYCHO_ERR_NOT_FOUND, {tmp("gone.raw"), "does not exist"});
  // Entity expansion (a "billion laughs"): refused by expat, not expanded.
  std::string lol = "<!DOCTYPE r [<!ENTITY l0 \"lol\">";
  for (int k = 1; k < 10; ++k) {
    lol += "<!ENTITY l" + std::to_string(k) + " \"";
    for (int j = 0; j < 10; ++j) lol += "&l" + std::to_string(k - 1) + ";";
    lol += "\">";
  }
  lol += "]><root><raw_file filename=\"&l9;\"/></root>";
  tycho::test::write_sample(tmp_ / "lol.xml", lol);
  expect_refused(tmp("lol.xml"), "", TYCHO_ERR_BAD_DATA, {tmp("lol.xml")});
}

}  // namespace
