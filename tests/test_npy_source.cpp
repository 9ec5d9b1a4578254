// The `npy` source, loaded through the host like any plugin: the shipped MoS2 counts (read
// through the `emd` source) written as .npy and .npz, read back bit for bit; a full CLI
// reconstruction from the .npy; and bad input (3-D arrays, a missing member, Fortran order,
// big-endian data, a missing file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <tycho/core/array.hpp>
#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/host/result_record.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "source_under_test.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;

namespace {

constexpr int64_t k_patterns = 768;  // the MoS2 example: 32 x 24 positions of 96 x 96

// A .npy preamble (version 1.0) for `descr`, `shape`, C or Fortran order, padded to 64 bytes.
std::string npy_preamble(const std::string& descr, const std::vector<int64_t>& shape, bool fortran = false) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += shape.size() == 1 ? ",), }" : "), }";
  size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  std::string out("\x93NUMPY\x01\x00", 8);
  const size_t len = total - 10;
  out += char(len & 0xff);
  out += char(len >> 8);
  out += dict;
  out.append(total - out.size() - 1, ' ');
  return out + '\n';
}

void write_file(const std::string& path, const std::string& preamble, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(preamble.data(), std::streamsize(preamble.size()));
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
}

class NpySource : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() /
           ("tycho_npy_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    source_.close();
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  // Opens `source` on a [data] table given as TOML lines.
  tycho_status open(const std::string& data_toml, const char* source = "npy") {
    return source_.open(tycho::test::plugins(), source, data_toml, tmp_.string());
  }
  void close() { source_.close(); }

  tycho_dataset_info info() { return source_.info(); }
  std::vector<float> read(int64_t first, int64_t count) { return source_.read(first, count); }

  // The MoS2 counts through the emd source.
  std::vector<float> mos2(tycho_dataset_info* i = nullptr) {
    EXPECT_EQ(open("path = '" + tycho::test::example_data("mos2_80kV_32x24_counts.h5") + "'\n", "emd"),
              TYCHO_OK)
        << tycho::last_error();
    if (i) *i = info();
    auto v = read(0, k_patterns);
    close();
    return v;
  }

  std::string tmp(const std::string& name) const { return (tmp_ / name).string(); }

  // Expects open() to fail with `status` and a message holding each of `parts`.
  void expect_refused(const std::string& data_toml, tycho_status status, const std::vector<std::string>& parts) {
    EXPECT_EQ(open(data_toml), status) << tycho::last_error();
    const std::string msg = tycho::last_error();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }

  tycho::test::source_under_test source_;
  fs::path tmp_;
};

// A flat stack (N, Qx, Qy) with [data] scan_shape reads as the 4-D array; without the key, or
// with a shape that does not multiply to N, it is refused naming the key and the counts.
TEST_F(NpySource, StackWithScanShapeEqualsEmd) {
  const auto ref = mos2();
  write_file(tmp("stack.npy"), npy_preamble("<f4", {768, 96, 96}), ref.data(), ref.size() * 4);
  ASSERT_EQ(open("path = 'stack.npy'\nscan_shape = [32, 24]\n"), TYCHO_OK) << tycho::last_error();
  const auto i = info();
  EXPECT_EQ(i.scan_shape[0], 32);
  EXPECT_EQ(i.scan_shape[1], 24);
  EXPECT_EQ(i.detector_shape[0], 96);
  const auto all = read(0, k_patterns);
  ASSERT_EQ(all.size(), ref.size());
  EXPECT_EQ(std::memcmp(all.data(), ref.data(), ref.size() * 4), 0);
  close();
  expect_refused("path = 'stack.npy'\n", TYCHO_ERR_BAD_DATA, {"(768, 96, 96)", "scan_shape"});
  expect_refused("path = 'stack.npy'\nscan_shape = [24, 24]\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"'scan_shape'", "576 positions", "768 frames"});
  write_file(tmp("cube.npy"), npy_preamble("<f4", {32, 24, 96, 96}), ref.data(), ref.size() * 4);
  expect_refused("path = 'cube.npy'\nscan_shape = [32, 24]\n", TYCHO_ERR_BAD_DATA, {"3-D stack", "scan_shape"});
}

TEST_F(NpySource, NpyEqualsEmdBitForBit) {
  tycho_dataset_info emd_info{};
  const auto ref = mos2(&emd_info);
  write_file(tmp("counts.npy"), npy_preamble("<f4", {32, 24, 96, 96}), ref.data(), ref.size() * 4);
  ASSERT_EQ(open("path = 'counts.npy'\n"), TYCHO_OK) << tycho::last_error();
  const auto i = info();
  EXPECT_EQ(i.scan_shape[0], 32);
  EXPECT_EQ(i.scan_shape[1], 24);
  EXPECT_EQ(i.detector_shape[0], 96);
  EXPECT_EQ(i.detector_shape[1], 96);
  EXPECT_EQ(i.patterns_centred, 1);
  EXPECT_TRUE(std::isnan(i.scan_step_A[0]) && std::isnan(i.detector_pixel_invA[0]));
  EXPECT_TRUE(std::isnan(i.energy_eV));
  const auto all = read(0, k_patterns);
  ASSERT_EQ(all.size(), ref.size());
  EXPECT_EQ(std::memcmp(all.data(), ref.data(), ref.size() * 4), 0);
  // A piece in the middle, crossing a scan row.
  const int64_t px = 96 * 96;
  const auto part = read(23, 5);
  EXPECT_EQ(std::memcmp(part.data(), ref.data() + 23 * px, part.size() * 4), 0);
}

TEST_F(NpySource, NpzUint16EqualsEmdBitForBit) {
  const auto ref = mos2();
  std::vector<uint16_t> counts(ref.size());
  for (size_t k = 0; k < ref.size(); ++k) {
    ASSERT_TRUE(ref[k] >= 0 && ref[k] <= 65535 && ref[k] == std::floor(ref[k])) << ref[k];
    counts[k] = uint16_t(ref[k]);
  }
  // Through the zip format: stored (uncompressed) members, plus a 2-D array and a manifest.
  std::vector<tycho::owned_array> arrays;
  arrays.push_back(tycho::owned_array::from_vector("mask", {kDLUInt, 8, 1}, {96, 96},
                                                   std::vector<uint8_t>(96 * 96, 1)));
  arrays.push_back(tycho::owned_array::from_vector("counts", {kDLUInt, 16, 1}, {32, 24, 96, 96}, counts));
  tycho::host::save_record(tycho::test::plugins().find(TYCHO_COMPONENT_FORMAT, "zip"), arrays, "{}",
                           tmp("data.npz"), TYCHO_SAVE_OVERWRITE);

  for (const char* cfg : {"path = 'data.npz'\n", "path = 'data.npz'\narray = 'counts'\ncentred = false\n"}) {
    ASSERT_EQ(open(cfg), TYCHO_OK) << tycho::last_error();
    const auto i = info();
    EXPECT_EQ(i.stored_dtype.code, kDLUInt);
    EXPECT_EQ(i.stored_dtype.bits, 16);
    EXPECT_EQ(std::string(i.description), tmp("data.npz") + ":counts");
    const auto all = read(0, k_patterns);
    EXPECT_EQ(std::memcmp(all.data(), ref.data(), ref.size() * 4), 0);
    const auto part = read(700, 31);
    EXPECT_EQ(std::memcmp(part.data(), ref.data() + 700 * 96 * 96, part.size() * 4), 0);
  }
  EXPECT_EQ(info().patterns_centred, 0);
}

TEST_F(NpySource, DtypesConvert) {
  // float16 by hand: 1, -2, 0.5, 65504, the smallest subnormal, 0.
  const uint16_t half[6] = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x0000};
  write_file(tmp("h.npy"), npy_preamble("<f2", {1, 1, 2, 3}), half, sizeof(half));
  ASSERT_EQ(open("path = 'h.npy'\n"), TYCHO_OK) << tycho::last_error();
  auto v = read(0, 1);
  const std::vector<float> want = {1.f, -2.f, 0.5f, 65504.f, std::ldexp(1.f, -24), 0.f};
  EXPECT_EQ(v, want);

  const int32_t i32[4] = {-7, 0, 123456, 2};
  write_file(tmp("i.npy"), npy_preamble("<i4", {2, 1, 1, 2}), i32, sizeof(i32));
  ASSERT_EQ(open("path = 'i.npy'\n"), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(read(0, 2), (std::vector<float>{-7.f, 0.f, 123456.f, 2.f}));
  EXPECT_EQ(read(1, 1), (std::vector<float>{123456.f, 2.f}));

  const double f64[2] = {0.25, -1e3};
  write_file(tmp("d.npy"), npy_preamble("<f8", {1, 2, 1, 1}), f64, sizeof(f64));
  ASSERT_EQ(open("path = 'd.npy'\n"), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(read(0, 2), (std::vector<float>{0.25f, -1000.f}));
}

TEST_F(NpySource, CompressedNpz) {
  const std::string python = "/usr/bin/python3";
  auto r = tycho::test::run_command(
      {python, "-c",
       "import numpy as np, sys; a = np.arange(2*3*4*5, dtype='<u2').reshape(2, 3, 4, 5); "
       "np.savez_compressed(sys.argv[1], data=a, other=np.zeros(3))",
       tmp("c.npz")});
  if (!r.exited_with(0)) GTEST_SKIP() << "python3 with numpy is not available: " << r.describe();
  ASSERT_EQ(open("path = 'c.npz'\n"), TYCHO_OK) << tycho::last_error();
  auto v = read(2, 3);
  ASSERT_EQ(v.size(), 60u);
  for (size_t k = 0; k < v.size(); ++k) EXPECT_EQ(v[k], float(40 + k));
}

TEST_F(NpySource, BadInput) {
  const float zeros[4 * 5 * 6] = {};
  write_file(tmp("cube.npy"), npy_preamble("<f4", {4, 5, 6}), zeros, sizeof(zeros));
  expect_refused("path = 'cube.npy'\n", TYCHO_ERR_BAD_DATA,
                 {"cube.npy' has shape (4, 5, 6), expected a 4-D array (Rx, Ry, Qx, Qy)"});

  write_file(tmp("f.npy"), npy_preamble("<f4", {2, 2, 3, 5}, /*fortran=*/true), zeros, sizeof(zeros));
  expect_refused("path = 'f.npy'\n", TYCHO_ERR_BAD_DATA, {"f.npy'", "Fortran order"});

  write_file(tmp("be.npy"), npy_preamble(">f4", {2, 2, 3, 5}), zeros, sizeof(zeros));
  expect_refused("path = 'be.npy'\n", TYCHO_ERR_BAD_DATA, {"be.npy'", "big-endian"});

  write_file(tmp("c8.npy"), npy_preamble("<c8", {1, 1, 3, 5}), zeros, sizeof(zeros));
  expect_refused("path = 'c8.npy'\n", TYCHO_ERR_BAD_DATA, {"c8.npy'", "'<c8'", "uint16"});

  write_file(tmp("short.npy"), npy_preamble("<f4", {10, 10, 10, 10}), zeros, sizeof(zeros));
  expect_refused("path = 'short.npy'\n", TYCHO_ERR_BAD_DATA, {"short.npy'", "truncated"});

  expect_refused("path = 'nothing.npy'\n", TYCHO_ERR_NOT_FOUND, {"nothing.npy", "does not exist"});

  std::vector<tycho::owned_array> arrays;
  arrays.push_back(tycho::owned_array::from_vector("cube", {kDLFloat, 32, 1}, {4, 5, 6},
                                                   std::vector<float>(120, 0.f)));
  tycho::host::save_record(tycho::test::plugins().find(TYCHO_COMPONENT_FORMAT, "zip"), arrays, "{}",
                           tmp("x.npz"), TYCHO_SAVE_OVERWRITE);
  expect_refused("path = 'x.npz'\narray = 'data'\n", TYCHO_ERR_NOT_FOUND, {"x.npz' has no array 'data'", "'cube'"});
  expect_refused("path = 'x.npz'\narray = 'cube'\n", TYCHO_ERR_BAD_DATA,
                 {"x.npz:cube' has shape (4, 5, 6), expected a 4-D array (Rx, Ry, Qx, Qy)"});
  expect_refused("path = 'x.npz'\n", TYCHO_ERR_NOT_FOUND, {"x.npz' holds no 4-D array", "'cube' (4, 5, 6)"});
}

// The CLI end to end: the example config with the data from an .npy, calibrations on the
// command line; the same accuracy as from the EMD file.
TEST_F(NpySource, ReconstructFromNpy) {
  const auto ref = mos2();
  const std::string data = tmp("mos2.npy");
  write_file(data, npy_preamble("<f4", {32, 24, 96, 96}), ref.data(), ref.size() * 4);
  const std::string result = tmp("r.zip");
  auto r = tycho::test::run_command(
      {tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml", "--set",
       "data.source=\"npy\"", "--set", "data.path=" + data, "--set", "data.scan_step_A=0.5", "--set",
       "data.detector_pixel_invA=0.06", "--iterations", "100", "-o", result});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  auto ev = tycho::test::run_command({tycho::test::tycho_exe(), "evaluate", result, "--truth",
                                      tycho::test::example_data("mos2_ground_truth.npz")});
  ASSERT_TRUE(ev.exited_with(0)) << ev.describe();
  const double pearson = nlohmann::json::parse(ev.out).at("pearson").get<double>();
  EXPECT_GE(pearson, 0.90);
  RecordProperty("pearson", std::to_string(pearson));
}

// Bad input through the CLI: exit status 2 and a message naming the file and the array.
TEST_F(NpySource, CliRefusesBadInput) {
  const float zeros[4 * 5 * 6] = {};
  write_file(tmp("cube.npy"), npy_preamble("<f4", {4, 5, 6}), zeros, sizeof(zeros));
  write_file(tmp("f.npy"), npy_preamble("<f4", {2, 2, 3, 5}, true), zeros, sizeof(zeros));
  std::vector<tycho::owned_array> arrays;
  arrays.push_back(tycho::owned_array::from_vector("cube", {kDLFloat, 32, 1}, {1, 1, 2, 3},
                                                   std::vector<float>(6, 0.f)));
  tycho::host::save_record(tycho::test::plugins().find(TYCHO_COMPONENT_FORMAT, "zip"), arrays, "{}",
                           tmp("x.npz"), TYCHO_SAVE_OVERWRITE);
  struct bad_case {
    std::vector<std::string> set;
    std::vector<std::string> expect;
  };
  const std::vector<bad_case> cases = {
      {{"data.path=" + tmp("cube.npy")}, {"cube.npy' has shape (4, 5, 6)", "4-D"}},
      {{"data.path=" + tmp("f.npy")}, {"f.npy'", "Fortran order"}},
      {{"data.path=" + tmp("x.npz"), "data.array=\"data\""}, {"x.npz' has no array 'data'", "'cube'"}},
      {{"data.path=" + tmp("missing.npy")}, {"missing.npy' does not exist"}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct",
                                     tycho::test::source_dir() + "/examples/mos2.toml", "--set",
                                     "data.source=\"npy\"", "--set", "data.scan_step_A=0.5", "--set",
                                     "data.detector_pixel_invA=0.06", "--iterations", "1", "-o", tmp("bad.zip")};
    for (const auto& s : c.set) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    auto r = tycho::test::run_command(argv);
    EXPECT_TRUE(r.exited_with(2)) << r.describe();
    for (const auto& e : c.expect) EXPECT_NE(r.err.find(e), std::string::npos) << e << "\n" << r.describe();
  }
}

}  // namespace
