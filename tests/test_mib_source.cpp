// The `mib` source (plugins/sources/detectors): Merlin .mib files written by the tests' own
// writer (tests/support/mib_test_file.hpp) read back bit for bit at every counter depth, RAW
// and counts, single chip and 2x2 quad (with its gap); the scan shape from the .hdr or the
// config; crafted files (truncated, bit-flipped, oversized) refused naming the file, the offset
// and what was expected; and the real files of ../shared/data/realformats equal to RosettaSciIO.
#include <gtest/gtest.h>
#include <unistd.h>

#include <tycho/core/last_error.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "mib_test_file.hpp"
#include "realformats.hpp"
#include "source_under_test.hpp"

namespace fs = std::filesystem;
using tycho::test::mib_options;

namespace {

class MibSource : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("tycho_mib_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    source_.close();
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  tycho_status open(const std::string& path, const std::string& more = "") {
    return source_.open(tycho::test::plugins(), "mib", "path = '" + path + "'\n" + more, tmp_.string());
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

// n frames of random counts below 2^depth.
std::vector<uint32_t> random_frames(int64_t n, int64_t px, int depth, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> v(std::size_t(n * px));
  const uint32_t top = depth >= 32 ? 0xffffffffu : (uint32_t(1) << depth) - 1;
  for (auto& x : v) x = rng() & top;
  return v;
}

std::vector<float> as_float(const std::vector<uint32_t>& v) { return std::vector<float>(v.begin(), v.end()); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every counter depth and storage, one chip and a quad: written by the tests' writer, read back
// exactly, in the stored dtype too where the host may ask for it.
TEST_F(MibSource, EveryDepthAndLayoutRoundTrips) {
  struct variant {
    const char* type;
    int depth;
    bool quad;
    int bits;  // the delivered stored dtype
  };
  const variant variants[] = {{"U08", 1, false, 8},  {"U08", 6, false, 8},  {"U16", 12, false, 16},
                              {"U32", 24, false, 32}, {"R64", 1, false, 8},  {"R64", 6, false, 8},
                              {"R64", 12, false, 16}, {"R64", 24, false, 32}, {"U16", 12, true, 16},
                              {"R64", 1, true, 8},   {"R64", 6, true, 8},   {"R64", 12, true, 16}};
  unsigned seed = 1;
  for (const variant& v : variants) {
    SCOPED_TRACE(std::string(v.type) + " depth " + std::to_string(v.depth) + (v.quad ? " quad" : " single"));
    source_.close();
    mib_options o;
    o.type = v.type;
    o.depth = v.depth;
    o.quad = v.quad;
    o.rows = o.cols = v.quad ? 512 : 256;
    const int64_t px = o.rows * o.cols, n = 6;
    const auto frames = random_frames(n, px, v.depth, seed++);
    tycho::test::write_bytes(tmp("f.mib"), tycho::test::mib_bytes(o, frames));
    ASSERT_EQ(open(tmp("f.mib"), "scan_shape = [2, 3]\n"), TYCHO_OK) << tycho::last_error();
    const tycho_dataset_info i = source_.info();
    EXPECT_EQ(i.scan_shape[0], 2);
    EXPECT_EQ(i.scan_shape[1], 3);
    EXPECT_EQ(i.detector_shape[0], o.rows);
    EXPECT_EQ(i.detector_shape[1], o.cols);
    EXPECT_EQ(i.stored_dtype.code, kDLUInt);
    EXPECT_EQ(i.stored_dtype.bits, v.bits);
    EXPECT_TRUE(std::isnan(i.scan_step_A[0]) && std::isnan(i.detector_pixel_invA[0]) && std::isnan(i.energy_eV));
    EXPECT_TRUE(same_bits(source_.read(0, n), as_float(frames)));
    EXPECT_TRUE(same_bits(source_.read(4, 2), as_float(std::vector<uint32_t>(frames.begin() + 4 * px, frames.end()))));
    EXPECT_EQ(i.reads_stored_dtype, v.bits <= 16 ? 1 : 0);
    if (v.bits == 16) {
      const auto stored = source_.read_uint16(1, 3);
      EXPECT_TRUE(std::equal(stored.begin(), stored.end(), frames.begin() + px));
    }
  }
}

// A 2x2 quad with quad_gap_px = 2: 514 x 514 patterns, the chips in the corners, the gap NaN
// (masked by the host), and no stored-dtype reads (uint16 cannot say "masked").
TEST_F(MibSource, QuadGapIsInsertedAndMasked) {
  mib_options o;
  o.quad = true;
  o.rows = o.cols = 512;
  const auto frames = random_frames(2, 512 * 512, 12, 7);
  tycho::test::write_bytes(tmp("q.mib"), tycho::test::mib_bytes(o, frames));
  ASSERT_EQ(open(tmp("q.mib"), "scan_shape = [1, 2]\nquad_gap_px = 2\n"), TYCHO_OK) << tycho::last_error();
  const tycho_dataset_info i = source_.info();
  ASSERT_EQ(i.detector_shape[0], 514);
  ASSERT_EQ(i.detector_shape[1], 514);
  EXPECT_EQ(i.reads_stored_dtype, 0);
  const auto got = source_.read(0, 2, -1.0f);
  int64_t nan = 0;
  for (int64_t f = 0; f < 2; ++f)
    for (int64_t r = 0; r < 514; ++r)
      for (int64_t c = 0; c < 514; ++c) {
        const float v = got[std::size_t((f * 514 + r) * 514 + c)];
        const bool in_gap = r == 256 || r == 257 || c == 256 || c == 257;
        if (in_gap) {
          nan += std::isnan(v);
          continue;
        }
        const int64_t sr = r - (r > 257 ? 2 : 0), sc = c - (c > 257 ? 2 : 0);
        ASSERT_EQ(v, float(frames[std::size_t((f * 512 + sr) * 512 + sc)])) << f << " " << r << " " << c;
      }
  EXPECT_EQ(nan, 2 * (514 * 514 - 512 * 512));
  source_.close();
  tycho::test::write_bytes(tmp("s.mib"), tycho::test::mib_bytes(mib_options{}, random_frames(1, 256 * 256, 12, 8)));
  expect_refused(tmp("s.mib"), "quad_gap_px = 2\n", TYCHO_ERR_INVALID_ARGUMENT, {"quad_gap_px", "2x2 quad", "1x1"});
}

// The scan's shape: the .hdr's ScanX/ScanY, else its frames per trigger; the config's replaces
// them; one that does not fit the frames is refused; without any, more than one frame is refused.
TEST_F(MibSource, ScanShapeFromTheHdrOrTheConfig) {
  const auto frames = random_frames(8, 256 * 256, 12, 3);
  tycho::test::write_bytes(tmp("scan.mib"), tycho::test::mib_bytes(mib_options{}, frames));
  expect_refused(tmp("scan.mib"), "", TYCHO_ERR_INVALID_ARGUMENT,
                 {tmp("scan.mib"), "8 frames", "does not record the scan's shape", "scan_shape", "[4, 2], [2, 4], [8, 1]"});
  tycho::test::write_hdr(tmp("scan.hdr"), {{"ScanX", "4"}, {"ScanY", "2"}, {"Frames per Trigger (Number)", "1"}});
  ASSERT_EQ(open(tmp("scan.mib")), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().scan_shape[0], 2);
  EXPECT_EQ(source_.info().scan_shape[1], 4);
  ASSERT_EQ(open(tmp("scan.mib"), "scan_shape = [8, 1]\n"), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().scan_shape[0], 8);
  tycho::test::write_hdr(tmp("scan.hdr"), {{"Frames in Acquisition (Number)", "8"}, {"Frames per Trigger (Number)", "4"}});
  ASSERT_EQ(open(tmp("scan.mib")), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().scan_shape[0], 2);
  EXPECT_EQ(source_.info().scan_shape[1], 4);
  tycho::test::write_hdr(tmp("scan.hdr"), {{"ScanX", "4"}, {"ScanY", "4"}});  // an interrupted scan
  expect_refused(tmp("scan.mib"), "", TYCHO_ERR_BAD_DATA, {"ScanY x ScanX [4, 4]", "8 frames", "scan_shape"});
  expect_refused(tmp("scan.mib"), "scan_shape = [3, 3]\n", TYCHO_ERR_INVALID_ARGUMENT, {"[3, 3]", "9 positions", "8 frames"});
}

// Crafted files: each refused at open or at the read that meets it, naming the file, the offset
// or frame, and what was expected; never a crash, a hang or a silent value.
TEST_F(MibSource, CraftedFilesAreRefused) {
  mib_options o;
  const auto frames = random_frames(4, 256 * 256, 12, 5);
  const std::string good = tycho::test::mib_bytes(o, frames);
  const int64_t stride = 384 + 256 * 256 * 2;
  const std::string f = tmp("x.mib");
  const std::string shape = "scan_shape = [4, 1]\n";

  // Truncated: the last frame cut short.
  tycho::test::write_bytes(f, good.substr(0, good.size() - 1000));
  expect_refused(f, shape, TYCHO_ERR_BAD_DATA, {f, "3 whole frames of 131456 bytes", "130456 bytes more", "truncated"});
  // Empty, and not a MIB file.
  tycho::test::write_bytes(f, "");
  expect_refused(f, shape, TYCHO_ERR_BAD_DATA, {f, "empty"});
  tycho::test::write_bytes(f, std::string(5000, 'x'));
  expect_refused(f, shape, TYCHO_ERR_BAD_DATA, {f, "offset 0", "\"MQ1,\""});
  // A bit flipped in frame 2's sequence number: refused by the read that meets it.
  std::string flipped = good;
  flipped[std::size_t(2 * stride + 9)] ^= 0x01;  // '3' -> '2'
  tycho::test::write_bytes(f, flipped);
  ASSERT_EQ(open(f, shape), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.read(0, 2).size(), std::size_t(2 * 256 * 256));
  std::vector<float> buf(std::size_t(2 * 256 * 256));
  int64_t dims[3] = {2, 256, 256};
  DLTensor t{};
  t.data = buf.data();
  t.device = {kDLCPU, 0};
  t.ndim = 3;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = dims;
  EXPECT_EQ(source_.vt->read(source_.src, 1, 2, &t), TYCHO_ERR_BAD_DATA);
  for (const std::string& part : std::vector<std::string>{f, "offset " + std::to_string(2 * stride), "frame 2", "sequence number 2", "expected 3"})
    EXPECT_NE(std::string(tycho::last_error()).find(part), std::string::npos) << part << " not in " << tycho::last_error();
  source_.close();
  // The last frame's header says another size: refused at open (the last header is checked).
  std::string resized = good;
  resized[std::size_t(3 * stride + 21)] = '5';  // X 0256 -> 0556
  tycho::test::write_bytes(f, resized);
  expect_refused(f, shape, TYCHO_ERR_BAD_DATA, {f, "frame 3", "the same shape"});
  // Oversized: a header declaring 65535 x 65535 U32 pixels in a small file.
  std::string huge = good.substr(0, std::size_t(stride));
  std::memcpy(&huge[20], "9999,9999", 9);
  tycho::test::write_bytes(f, huge);
  expect_refused(f, shape, TYCHO_ERR_BAD_DATA, {f, "0 whole frames", "9999 x 9999"});
  std::string wide = good.substr(0, std::size_t(stride));
  std::memcpy(&wide[20], "99999,001", 9);  // a 5-digit X
  tycho::test::write_bytes(f, wide);
  expect_refused(f, shape, TYCHO_ERR_BAD_DATA, {f, "99999 x"});
  // A header length beyond the frame, and a garbage length.
  std::string long_header = good;
  std::memcpy(&long_header[11], "99999", 5);
  tycho::test::write_bytes(f, long_header);
  expect_refused(f, shape, TYCHO_ERR_BAD_DATA, {f, "99999 bytes long"});
  std::string bad_digits = good;
  std::memcpy(&bad_digits[11], "00-84", 5);
  tycho::test::write_bytes(f, bad_digits);
  expect_refused(f, shape, TYCHO_ERR_BAD_DATA, {f, "header length (field 2)", "whole number"});
  // A pixel type tycho does not know, and RAW of a layout it does not decode.
  std::string type = good;
  std::memcpy(&type[30], "F32", 3);
  tycho::test::write_bytes(f, type);
  expect_refused(f, shape, TYCHO_ERR_UNSUPPORTED, {f, "\"F32\"", "U08, U16, U32"});
  mib_options raw;
  raw.type = "R64";
  raw.depth = 6;
  std::string odd = tycho::test::mib_bytes(raw, random_frames(1, 256 * 256, 6, 9));
  std::memcpy(&odd[17], "03", 2);  // 3 chips
  tycho::test::write_bytes(f, odd);
  expect_refused(f, "", TYCHO_ERR_UNSUPPORTED, {f, "RAW frames of 3 chips"});
  // A RAW frame without a counter depth anywhere.
  raw.extended = false;
  tycho::test::write_bytes(f, tycho::test::mib_bytes(raw, random_frames(1, 256 * 256, 6, 9)));
  expect_refused(f, "", TYCHO_ERR_BAD_DATA, {f, "counter depth 0", "neither the frame header nor the .hdr"});
  tycho::test::write_hdr(tmp("x.hdr"), {{"Counter Depth (number)", "6"}});
  EXPECT_EQ(open(f), TYCHO_OK) << tycho::last_error();
}

// The fuzz target's seeds (fuzz/corpus/mib, one frame each) are valid files: the fuzzer starts
// from inside the format.
TEST_F(MibSource, FuzzSeedsAreValidFiles) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(tycho::test::source_dir() + "/fuzz/corpus/mib")) {
    SCOPED_TRACE(e.path().string());
    ASSERT_EQ(open(e.path().string()), TYCHO_OK) << tycho::last_error();
    EXPECT_FALSE(source_.read(0, 1).empty());
    ++n;
  }
  EXPECT_EQ(n, 8);
}

// ../shared/data/realformats: every .mib RosettaSciIO reads gives its shape, dtype and values
// (exact checksums); RAW files, which RosettaSciIO refuses, decode to the processed acquisition
// of the same chip beside them (another exposure: correlation, not equality).
TEST_F(MibSource, RealFilesEqualRosettaSciIO) {
  if (!tycho::test::have_realformats()) GTEST_SKIP() << "../shared/data/realformats is absent: real-file checks skipped";
  const auto& files = tycho::test::realformats_reference().at("files");
  int checked = 0, raw_checked = 0;
  for (const auto& [key, ref] : files.items()) {
    const auto colon = key.find(".zip:");
    if (colon == std::string::npos) continue;
    SCOPED_TRACE(key);
    source_.close();
    const std::string zip = key.substr(0, colon + 4), member = key.substr(colon + 5);
    const std::string path = tycho::test::extract_realformat(zip, member, tmp_.string());
    ASSERT_FALSE(path.empty());
    const std::string hdr = member.substr(0, member.size() - 4) + ".hdr";
    tycho::test::extract_realformat(zip, hdr, tmp_.string());
    if (ref.contains("rosettasciio_refuses")) {
      // RAW: against the processed (U08) acquisition of the same depth and layout.
      std::string twin = member;
      twin.erase(twin.find("RAW"), 3);
      const std::string twin_path = tycho::test::extract_realformat(zip, twin, tmp_.string());
      tycho::test::extract_realformat(zip, twin.substr(0, twin.size() - 4) + ".hdr", tmp_.string());
      const std::string shape = member.find("_9_") != std::string::npos ? "scan_shape = [9, 1]\n" : "";
      ASSERT_EQ(open(path, shape), TYCHO_OK) << tycho::last_error();
      const auto raw = source_.read(0, 1);
      ASSERT_EQ(open(twin_path, shape), TYCHO_OK) << tycho::last_error();
      const auto counts = source_.read(0, 1);
      ASSERT_EQ(raw.size(), counts.size());
      double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
      for (std::size_t k = 0; k < raw.size(); ++k) {
        sa += raw[k], sb += counts[k], sab += double(raw[k]) * counts[k], saa += double(raw[k]) * raw[k],
            sbb += double(counts[k]) * counts[k];
      }
      const double n = double(raw.size());
      const double r = (sab - sa * sb / n) / std::sqrt((saa - sa * sa / n) * (sbb - sb * sb / n));
      EXPECT_GT(r, 0.98) << "RAW decoded against the counts of " << twin;
      EXPECT_NEAR(sa / sb, 1.0, 0.02);
      ++raw_checked;
      continue;
    }
    const auto shape = ref.at("shape").get<std::vector<int64_t>>();
    const int64_t rows = shape[shape.size() - 2], cols = shape.back();
    int64_t frames = 1;
    for (std::size_t a = 0; a + 2 < shape.size(); ++a) frames *= shape[a];
    // The scan shape RosettaSciIO chose (from the .hdr, or guessed from time stamps).
    const int64_t rx = shape.size() == 4 ? shape[0] : frames, ry = shape.size() == 4 ? shape[1] : 1;
    ASSERT_EQ(open(path, "scan_shape = [" + std::to_string(rx) + ", " + std::to_string(ry) + "]\n"), TYCHO_OK)
        << tycho::last_error();
    const tycho_dataset_info i = source_.info();
    EXPECT_EQ(i.detector_shape[0], rows);
    EXPECT_EQ(i.detector_shape[1], cols);
    const std::string dtype = ref.at("dtype");
    EXPECT_EQ(int(i.stored_dtype.bits), dtype == "uint8" ? 8 : dtype == ">u2" ? 16 : dtype == ">u4" ? 32 : -1) << dtype;
    tycho::test::expect_checksums(source_.read(0, frames), rows * cols, ref);
    ++checked;
  }
  EXPECT_EQ(checked, 20);
  EXPECT_EQ(raw_checked, 4);
  // Where the .hdr records the scan (ScanX/ScanY, frames per trigger), it is RosettaSciIO's.
  source_.close();
  const std::string zip = "Merlin_navigation4x2_signalNx256_ROI.zip";
  const std::string stem = "003_merlin_test_roi_sig256x64_nav4x2_hot_pixel_52x_39y";
  const std::string path = tycho::test::extract_realformat(zip, stem + ".mib", tmp_.string());
  tycho::test::extract_realformat(zip, stem + ".hdr", tmp_.string());
  ASSERT_EQ(open(path), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().scan_shape[0], 2);
  EXPECT_EQ(source_.info().scan_shape[1], 4);
}

}  // namespace
