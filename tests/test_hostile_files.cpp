// Files crafted as a hostile user would (issue 12): shapes whose sizes overflow 64 bits or
// exceed any memory, positions that make an absurd object, a probe on a large detector. Every
// file is written by the test itself (HDF5 C API, small chunked datasets that declare huge
// shapes without storing them). Each case asserts the status and the message that names the
// file and array; through the `tycho` command, exit status 2 and no result.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <tycho/core/error.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/sdk/checked.hpp>
#include <tycho/sdk/optics.hpp>

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "emd_test_file.hpp"
#include "run_command.hpp"
#include "source_under_test.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::run_command;

const std::string k_array = "/datacube_root/datacube/data";

// An EMD file (emdfile's layout) whose 4-D float32 array declares `dims` but stores nothing:
// chunked, allocated on write, never written. A few KB whatever the shape.
void write_declared_emd(const std::string& path, const std::vector<hsize_t>& dims) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t root = tycho::test::emd_detail::group(f, "datacube_root", "root");
  hid_t cube = tycho::test::emd_detail::group(root, "datacube", "array");
  hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  ASSERT_GE(space, 0) << "HDF5 refused the dataspace";
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  std::vector<hsize_t> chunk(dims.size(), 1);
  H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
  hid_t d = H5Dcreate2(cube, "data", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  EXPECT_GE(d, 0) << "HDF5 refused the dataset";
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Gclose(cube);
  H5Gclose(root);
  H5Fclose(f);
}

std::string emd_data_toml(const std::string& path) { return "path = \"" + path + "\"\n"; }

// A reconstruct config on `data_path` with every calibration given, so that only the data's
// shape can fail.
std::string config_on(const std::string& data_path) {
  return "[data]\nsource = \"emd\"\npath = \"" + data_path +
         "\"\nscan_step_A = 0.3\ndetector_pixel_invA = 0.05\n"
         "[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 20\nC10_A = 0\n"
         "[reconstruct]\nengine = \"cpu\"\niterations = 1\n";
}

class HostileFiles : public ::testing::Test {
 protected:
  // `tycho reconstruct CONFIG -o <tmp>/result.zip`: exit status 2, one "tycho: error:" line
  // holding every `expected` piece, nothing written. Returns the error line.
  std::string expect_refused(const std::string& config_text, const std::vector<std::string>& expected,
                             const std::string& command = "reconstruct") {
    const std::string config = tmp_.write("run.toml", config_text);
    std::vector<std::string> argv = {tycho::test::tycho_exe(), command, config};
    if (command == "reconstruct") argv.insert(argv.end(), {"-q", "-o", tmp_ / "result.zip"});
    auto r = run_command(argv);
    EXPECT_TRUE(r.exited_with(2)) << r.describe();
    std::string message;
    for (const auto& line : r.err_lines())
      if (line.rfind("tycho: error: ", 0) == 0) message = line;
    for (const auto& piece : expected)
      EXPECT_NE(message.find(piece), std::string::npos) << "'" << piece << "' not in: " << message << "\n"
                                                        << r.describe();
    EXPECT_FALSE(std::filesystem::exists(tmp_ / "result.zip"));
    return message;
  }

  tycho::test::temp_folder tmp_;
  tycho::test::source_under_test source_;
};

TEST(CheckedSizes, ProductsThatOverflowAreRefused) {
  EXPECT_EQ(tycho::sdk::checked_mul(int64_t(1) << 31, int64_t(1) << 31), int64_t(1) << 62);
  EXPECT_EQ(tycho::sdk::checked_mul(int64_t(1) << 32, int64_t(1) << 31), std::nullopt);
  EXPECT_EQ(tycho::sdk::checked_mul(-1, 5), std::nullopt);
  EXPECT_EQ(tycho::sdk::checked_add(std::numeric_limits<int64_t>::max(), 1), std::nullopt);
  const int64_t dims[4] = {65536, 65536, 65536, 65536};  // 2^64 elements: wraps to 0 unchecked
  EXPECT_EQ(tycho::sdk::checked_product(dims, 4), std::nullopt);
  try {
    tycho::sdk::array_bytes_or_fail(dims, 4, 4, "'f.h5:/a'");
    ADD_FAILURE() << "no error";
  } catch (const tycho::sdk::error& e) {
    EXPECT_EQ(std::string(e.what()),
              "'f.h5:/a' has shape (65536, 65536, 65536, 65536), whose size in bytes (4 per element) exceeds 2^63: "
              "the file's shape is corrupt or crafted");
    EXPECT_EQ(e.status, TYCHO_ERR_BAD_DATA);
  }
  const int64_t negative[2] = {3, -9};
  EXPECT_THROW(tycho::sdk::array_bytes_or_fail(negative, 2, 4, "x"), tycho::sdk::error);
  EXPECT_EQ(tycho::sdk::array_bytes_or_fail(dims, 2, 4, "x"), int64_t(1) << 34);
}

// 2^62 float32 values: the element count fits int64, its bytes (and patterns × pixels × 4, the
// host's buffer size) do not. Unchecked, the product wrapped and HDF5 wrote past a small buffer.
TEST_F(HostileFiles, EmdShapeWhoseBytesOverflowIsRefusedAtOpen) {
  const std::string path = tmp_ / "overflow.h5";
  write_declared_emd(path, {65536, 65536, 32768, 32768});
  ASSERT_LT(std::filesystem::file_size(path), 64u * 1024u);
  EXPECT_EQ(source_.open(tycho::test::plugins(), "emd", emd_data_toml(path), ""), TYCHO_ERR_BAD_DATA);
  EXPECT_EQ(tycho::last_error(), "'" + path + ":" + k_array +
                                     "' declares 65536 x 65536 patterns of 32768 x 32768 pixels (shape (65536, 65536, "
                                     "32768, 32768)), whose size as float32 exceeds 2^63 bytes: the file's shape is "
                                     "corrupt or crafted");
  expect_refused(config_on(path), {path + ":" + k_array, "exceeds 2^63 bytes"});
  expect_refused(config_on(path), {path + ":" + k_array, "exceeds 2^63 bytes"}, "plan");
}

// The same through the generic hdf5 source, its axes in another order.
TEST_F(HostileFiles, Hdf5SourceShapeWhoseBytesOverflowIsRefused) {
  const std::string path = tmp_ / "overflow_axes.h5";
  write_declared_emd(path, {32768, 32768, 65536, 65536});
  const std::string toml = "path = \"" + path + "\"\ndataset = \"" + k_array +
                           "\"\naxes = [\"Qx\", \"Qy\", \"Rx\", \"Ry\"]\n";
  EXPECT_EQ(source_.open(tycho::test::plugins(), "hdf5", toml, ""), TYCHO_ERR_BAD_DATA);
  EXPECT_NE(std::string(tycho::last_error()).find("declares 65536 x 65536 patterns of 32768 x 32768 pixels"), std::string::npos)
      << tycho::last_error();
  EXPECT_NE(std::string(tycho::last_error()).find(path), std::string::npos) << tycho::last_error();
}

// 2^60 float32 values (4 EiB): sizes fit 64 bits, memory does not. Refused before the targets
// are allocated, naming the data and the bytes (no std::bad_alloc, no OOM kill).
TEST_F(HostileFiles, EmdLargerThanMemoryIsRefusedBeforeAllocating) {
  const std::string path = tmp_ / "huge.h5";
  write_declared_emd(path, {1048576, 1048576, 1024, 1024});
  expect_refused(config_on(path), {"data '" + path + ":" + k_array + "'", "1099511627776 patterns of 1024 x 1024",
                                   "4.00 EiB", "more than this machine's"});
  // A stage that changes the patterns reads them in chunks: refused before the first pass (which
  // used to walk the 2^40 declared patterns for hours).
  expect_refused(config_on(path) + "[preprocess]\nbinning = 2\n",
                 {"data '" + path + ":" + k_array + "'", "1099511627776 preprocessed patterns of 512 x 512",
                  "even as uint16 counts", "more than this machine's"});
}

// Listed positions 1e300 Å apart: the object size once wrapped to int64's minimum
// ("object H must be >= 1, got -9223372036854775679"); now the message says what spans what.
TEST(HostileGeometry, PositionsThatMakeAnAbsurdObjectAreRefused) {
  tycho::scan_geometry g{};
  g.scan_shape[0] = 2;
  g.scan_shape[1] = 1;
  g.step_A[0] = g.step_A[1] = 0.3;
  g.pixel_A[0] = g.pixel_A[1] = 0.2;
  g.window[0] = g.window[1] = 64;
  g.padding_px = 16;
  try {
    tycho::layout_object(g, {0.0, 0.0, 1e300, 0.0});
    ADD_FAILURE() << "no error";
  } catch (const tycho::error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("the object would be 5e+300 px along axis 0 (the listed positions span 5e+300 pixels of 0.2 Å",
                      0),
              0u)
        << m;
    EXPECT_NE(m.find("expected at most 2^31 px"), std::string::npos) << m;
  }
  g.step_A[0] = 1e12;  // a raster whose step is absurd
  EXPECT_THROW(tycho::layout_object(g), tycho::error);
  g.scan_shape[0] = g.scan_shape[1] = int64_t(1) << 32;  // P = 2^64 positions
  EXPECT_THROW(tycho::layout_object(g), tycho::error);
}

// The initial probe's transform (FFTW) equals the reference DFT within double rounding, at an
// even and an odd size; and a 2048² probe (which the reference DFT never finished) is made.
TEST(InitialProbe, FftEqualsTheReferenceDft) {
  for (auto [n0, n1] : {std::pair<int64_t, int64_t>{48, 40}, {33, 35}}) {
    std::vector<std::complex<double>> x(std::size_t(n0 * n1));
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = {std::sin(0.37 * double(k)), std::cos(1.1 * double(k) * double(k))};
    for (bool inverse : {false, true}) {
      const auto a = tycho::sdk::dft2(x, n0, n1, inverse);
      const auto b = tycho::sdk::dft2_reference(x, n0, n1, inverse);
      double worst = 0;
      for (std::size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
      EXPECT_LT(worst, 1e-12) << n0 << " x " << n1 << (inverse ? " inverse" : " forward");
    }
  }
}

TEST(InitialProbe, LargeDetectorProbeIsMade) {
  const tycho::sdk::probe_optics optics{80e3, 20.0, -50.0};
  const tycho::sdk::window_sampling w{{2048, 2048}, {0.01, 0.01}};
  const auto probe = tycho::sdk::make_probe(optics, w, 1.0);
  ASSERT_EQ(probe.size(), std::size_t(2048 * 2048));
  double power = 0;
  for (const auto& v : probe) power += std::norm(std::complex<double>(v));
  EXPECT_NEAR(power, 1.0, 1e-5);
  // Centred: the brightest pixel is the window's centre (no aberration but the defocus).
  std::size_t brightest = 0;
  for (std::size_t k = 1; k < probe.size(); ++k)
    if (std::norm(probe[k]) > std::norm(probe[brightest])) brightest = k;
  EXPECT_NEAR(double(brightest / 2048), 1024.0, 2.0);
  EXPECT_NEAR(double(brightest % 2048), 1024.0, 2.0);
}

}  // namespace
