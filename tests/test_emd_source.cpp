// The `emd` source, loaded through the host like any plugin: real values from the shipped MoS2
// files, reads that span scan rows, calibrations stored in other ways, and bad input.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/registry.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "emd_test_file.hpp"
#include "source_under_test.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;

namespace {

const std::string k_array = "/datacube_root/datacube/data";

// Writes the HDF5 files of the tests whose layout emd_test_file.hpp does not write (calibrations
// as attributes, dim vectors, several arrays, a compound element type), with the HDF5 C API.
class h5_writer {
 public:
  explicit h5_writer(const std::string& path)
      : file_(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {}
  ~h5_writer() {
    for (hid_t g : groups_) H5Gclose(g);
    H5Fclose(file_);  // after its groups: an open group would keep the file open
  }

  // Creates the group and its parents; marks it as an EMD group.
  hid_t group(const std::string& path, const char* emd_type = "array") {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t g = H5Gcreate2(file_, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    string_attr(g, "emd_group_type", emd_type);
    groups_.push_back(g);
    return g;
  }
  void dataset(const std::string& path, hid_t type, const std::vector<hsize_t>& dims,
               const void* data) {
    hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
    hid_t d = H5Dcreate2(file_, path.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(d);
    H5Sclose(space);
  }
  static void string_attr(hid_t obj, const char* name, const std::string& value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* p = value.c_str();
    H5Awrite(a, type, &p);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
  }
  static void double_attr(hid_t obj, const char* name, double value) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &value);
    H5Aclose(a);
    H5Sclose(space);
  }
  hid_t file() const { return file_; }
  h5_writer(const h5_writer&) = delete;
  h5_writer& operator=(const h5_writer&) = delete;

 private:
  hid_t file_;
  std::vector<hid_t> groups_;
};

class EmdSource : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    registry_ = new tycho::host::registry;
    registry_->load_directories({tycho::test::plugin_dir()});
  }
  static void TearDownTestSuite() {
    delete registry_;
    registry_ = nullptr;
  }
  void SetUp() override {
    tmp_ = fs::temp_directory_path() /
           ("tycho_emd_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    source_.close();
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  // Opens the source on a [data] table given as TOML lines.
  tycho_status open(const std::string& data_toml, const std::string& base_dir = "") {
    return source_.open(*registry_, "emd", data_toml, base_dir);
  }
  tycho_status open_path(const std::string& path) { return open("path = '" + path + "'\n"); }

  tycho_dataset_info info() { return source_.info(); }
  std::vector<float> read(int64_t first, int64_t count) { return source_.read(first, count); }

  std::string tmp(const std::string& name) const { return (tmp_ / name).string(); }

  static inline tycho::host::registry* registry_ = nullptr;
  tycho::test::source_under_test source_;
  fs::path tmp_;
};

std::string last_error() { return tycho::last_error(); }

TEST_F(EmdSource, CountsFileShapesTypeAndCalibrations) {
  const std::string file = tycho::test::example_data("mos2_80kV_32x24_counts.h5");
  ASSERT_EQ(open_path(file), TYCHO_OK) << last_error();
  tycho_dataset_info i = info();
  EXPECT_EQ(i.scan_shape[0], 32);
  EXPECT_EQ(i.scan_shape[1], 24);
  EXPECT_EQ(i.detector_shape[0], 96);
  EXPECT_EQ(i.detector_shape[1], 96);
  EXPECT_EQ(i.stored_dtype.code, kDLUInt);
  EXPECT_EQ(i.stored_dtype.bits, 16);
  EXPECT_EQ(i.stored_dtype.lanes, 1);
  EXPECT_DOUBLE_EQ(i.scan_step_A[0], 0.5);
  EXPECT_DOUBLE_EQ(i.scan_step_A[1], 0.5);
  EXPECT_DOUBLE_EQ(i.detector_pixel_invA[0], 0.06);
  EXPECT_DOUBLE_EQ(i.detector_pixel_invA[1], 0.06);
  EXPECT_DOUBLE_EQ(i.energy_eV, 80000.0);
  EXPECT_DOUBLE_EQ(i.semiangle_mrad, 25.0);
  EXPECT_DOUBLE_EQ(i.C10_A, -150.0);
  EXPECT_EQ(i.patterns_centred, 1);
  EXPECT_EQ(std::string(i.description), file + ":" + k_array);
}

TEST_F(EmdSource, CountsFilePatternsAreIntegerCountsCentred) {
  ASSERT_EQ(open_path(tycho::test::example_data("mos2_80kV_32x24_counts.h5")), TYCHO_OK)
      << last_error();
  const int64_t n = 32 * 24, px = 96 * 96;
  std::vector<float> all = read(0, n);
  std::vector<double> mean(px, 0.0);
  double total = 0;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t k = 0; k < px; ++k) {
      float v = all[size_t(p * px + k)];
      ASSERT_EQ(v, std::floor(v)) << "pattern " << p << " pixel " << k;
      ASSERT_GE(v, 0.0f);
      total += v;
      mean[size_t(k)] += v / double(n);
    }
  EXPECT_GT(total / n, 20000.0);
  EXPECT_LT(total / n, 30000.0);
  // Centred patterns: the bright-field disc (radius ≈ 10 px, flat-topped, so its brightest
  // pixel is wherever the noise puts it inside the disc) is centred on index 48 on both axes.
  double sum = 0, c0 = 0, c1 = 0;
  for (int64_t k = 0; k < px; ++k) {
    sum += mean[size_t(k)];
    c0 += double(k / 96) * mean[size_t(k)];
    c1 += double(k % 96) * mean[size_t(k)];
  }
  EXPECT_NEAR(c0 / sum, 48.0, 0.5);
  EXPECT_NEAR(c1 / sum, 48.0, 0.5);
  auto brightest = std::max_element(mean.begin(), mean.end()) - mean.begin();
  EXPECT_LE(std::hypot(double(brightest / 96) - 48.0, double(brightest % 96) - 48.0), 11.0);
}

TEST_F(EmdSource, ReadAcrossScanRowsEqualsReadsOneByOne) {
  ASSERT_EQ(open_path(tycho::test::example_data("mos2_80kV_32x24_counts.h5")), TYCHO_OK)
      << last_error();
  // [100, 150) starts inside row 4 (24 per row), covers row 5 whole and ends inside row 6.
  std::vector<float> block = read(100, 50);
  std::vector<float> single;
  for (int64_t p = 100; p < 150; ++p) {
    auto one = read(p, 1);
    single.insert(single.end(), one.begin(), one.end());
  }
  ASSERT_EQ(block.size(), single.size());
  EXPECT_EQ(std::memcmp(block.data(), single.data(), block.size() * sizeof(float)), 0);
  // And a read of whole rows only.
  std::vector<float> rows = read(120, 24);
  EXPECT_EQ(std::memcmp(rows.data(), block.data() + 20 * 96 * 96, rows.size() * sizeof(float)),
            0);
}

TEST_F(EmdSource, RelativePathAndExplicitDataset) {
  const std::string dir = tycho::test::source_dir() + "/examples/data";
  ASSERT_EQ(open("path = 'mos2_80kV_32x24_counts.h5'\n"
                 "dataset = 'datacube_root/datacube/data'\n",
                 dir),
            TYCHO_OK)
      << last_error();
  EXPECT_EQ(info().scan_shape[0], 32);
  EXPECT_NE(std::string(info().description).find(k_array), std::string::npos);
}

TEST_F(EmdSource, CleanFileIsFloat32FractionsOfTheBeam) {
  const std::string file = tycho::test::shared_data("mos2_80kV_32x24_clean.h5");
  if (!fs::exists(file)) GTEST_SKIP() << "shared data " << file << " not present";
  ASSERT_EQ(open_path(file), TYCHO_OK) << last_error();
  tycho_dataset_info i = info();
  EXPECT_EQ(i.stored_dtype.code, kDLFloat);
  EXPECT_EQ(i.stored_dtype.bits, 32);
  const int64_t n = i.scan_shape[0] * i.scan_shape[1], px = 96 * 96;
  std::vector<float> all = read(0, n);
  for (int64_t p = 0; p < n; ++p) {
    double s = 0;
    for (int64_t k = 0; k < px; ++k) s += all[size_t(p * px + k)];
    ASSERT_GT(s, 0.9) << "pattern " << p;
    ASSERT_LT(s, 1.05) << "pattern " << p;
  }
}

TEST_F(EmdSource, ReadOutOfRangeOrWrongShapeIsRefused) {
  ASSERT_EQ(open_path(tycho::test::example_data("mos2_80kV_32x24_counts.h5")), TYCHO_OK);
  std::vector<float> buf(10 * 96 * 96);
  int64_t shape[3] = {10, 96, 96};
  DLTensor t{};
  t.data = buf.data();
  t.device = {kDLCPU, 0};
  t.ndim = 3;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  EXPECT_EQ(source_.vt->read(source_.src, 760, 10, &t), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("768 patterns"), std::string::npos) << last_error();
  EXPECT_EQ(source_.vt->read(source_.src, 0, 5, &t), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("(10, 96, 96)"), std::string::npos) << last_error();
}

// The test binary and the plugin share libhdf5, so HDF5 can count what the plugin left open.
TEST_F(EmdSource, CloseAndFailedOpensLeaveNoHdf5HandlesOpen) {
  const std::string file = tycho::test::example_data("mos2_80kV_32x24_counts.h5");
  ASSERT_EQ(open_path(file), TYCHO_OK) << last_error();
  EXPECT_GT(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
  read(30, 40);
  source_.close();
  EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
  EXPECT_EQ(open("path = '" + file + "'\ndataset = '/datacube_root/metadatabundle'\n"),
            TYCHO_ERR_BAD_DATA);
  EXPECT_NE(last_error().find("is not a dataset"), std::string::npos) << last_error();
  EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

TEST_F(EmdSource, MissingFile) {
  const std::string file = tmp("no_such_file.h5");
  EXPECT_EQ(open_path(file), TYCHO_ERR_NOT_FOUND);
  EXPECT_NE(last_error().find("data file '" + file + "' does not exist"), std::string::npos)
      << last_error();
  EXPECT_EQ(source_.src, nullptr);
}

TEST_F(EmdSource, MissingDatasetListsTheArraysThatExist) {
  const std::string file = tycho::test::example_data("mos2_80kV_32x24_counts.h5");
  EXPECT_EQ(open("path = '" + file + "'\ndataset = '/datacube_root/nope/data'\n"),
            TYCHO_ERR_NOT_FOUND);
  std::string msg = last_error();
  EXPECT_NE(msg.find(file + ":/datacube_root/nope/data"), std::string::npos) << msg;
  EXPECT_NE(msg.find(k_array + " (32, 24, 96, 96)"), std::string::npos) << msg;
}

TEST_F(EmdSource, ThreeDimensionalArrayIsBadData) {
  const std::string file = tmp("cube3d.h5");
  std::vector<float> v(4 * 5 * 6, 1.0f);
  std::string why;
  ASSERT_TRUE(tycho::test::write_emd_file(file, {{4, 5, 6}, tycho::test::emd_element::float32, v.data()}, &why))
      << why;
  const std::string expected =
      "'" + file + ":" + k_array + "' has shape (4, 5, 6), expected a 4-D array (Rx, Ry, Qx, Qy)";
  EXPECT_EQ(open_path(file), TYCHO_ERR_BAD_DATA);
  EXPECT_NE(last_error().find(expected), std::string::npos) << last_error();
  EXPECT_EQ(open("path = '" + file + "'\ndataset = '" + k_array + "'\n"), TYCHO_ERR_BAD_DATA);
  EXPECT_NE(last_error().find(expected), std::string::npos) << last_error();
}

TEST_F(EmdSource, UnsupportedElementTypeIsBadData) {
  const std::string file = tmp("compound.h5");
  {
    h5_writer w(file);
    w.group("/datacube_root", "root");
    w.group("/datacube_root/datacube");
    hid_t pair = H5Tcreate(H5T_COMPOUND, 2 * sizeof(float));
    H5Tinsert(pair, "re", 0, H5T_NATIVE_FLOAT);
    H5Tinsert(pair, "im", sizeof(float), H5T_NATIVE_FLOAT);
    std::vector<float> v(2 * 16, 0.0f);
    w.dataset(k_array, pair, {2, 2, 2, 2}, v.data());
    H5Tclose(pair);
  }
  EXPECT_EQ(open_path(file), TYCHO_ERR_BAD_DATA);
  EXPECT_NE(last_error().find(file + ":" + k_array + "' has element type compound"),
            std::string::npos)
      << last_error();
}

TEST_F(EmdSource, FileThatIsNotHdf5IsBadData) {
  const std::string file = tmp("notes.h5");
  std::ofstream(file) << "this is not an HDF5 file\n";
  EXPECT_EQ(open_path(file), TYCHO_ERR_BAD_DATA);
  EXPECT_NE(last_error().find("'" + file + "' is not an HDF5 file"), std::string::npos)
      << last_error();
}

// Calibrations as attributes of the calibration group (older writers), in nm and mrad, and a
// uint8 array converted to float on read.
TEST_F(EmdSource, AttributeCalibrationsConvertedOrLeftUnknown) {
  const std::string file = tmp("attrs.h5");
  std::vector<uint8_t> v(2 * 3 * 4 * 4);
  for (size_t k = 0; k < v.size(); ++k) v[k] = uint8_t(k);
  {
    h5_writer w(file);
    w.group("/datacube_root", "root");
    w.group("/datacube_root/datacube");
    w.dataset(k_array, H5T_STD_U8LE, {2, 3, 4, 4}, v.data());
    w.group("/datacube_root/metadatabundle", "metadatabundle");
    hid_t cal = w.group("/datacube_root/metadatabundle/calibration", "metadata");
    h5_writer::double_attr(cal, "R_pixel_size", 0.05);
    h5_writer::string_attr(cal, "R_pixel_units", "nm");
    h5_writer::double_attr(cal, "Q_pixel_size", 2.5);
    h5_writer::string_attr(cal, "Q_pixel_units", "mrad");
    h5_writer::double_attr(cal, "beam_energy_eV", 300000.0);
  }
  ASSERT_EQ(open_path(file), TYCHO_OK) << last_error();
  tycho_dataset_info i = info();
  EXPECT_EQ(i.stored_dtype.code, kDLUInt);
  EXPECT_EQ(i.stored_dtype.bits, 8);
  EXPECT_DOUBLE_EQ(i.scan_step_A[0], 0.5);
  EXPECT_DOUBLE_EQ(i.scan_step_A[1], 0.5);
  EXPECT_TRUE(std::isnan(i.detector_pixel_invA[0]));
  EXPECT_TRUE(std::isnan(i.detector_pixel_invA[1]));
  EXPECT_DOUBLE_EQ(i.energy_eV, 300000.0);  // found in the calibration group
  EXPECT_TRUE(std::isnan(i.semiangle_mrad));
  EXPECT_TRUE(std::isnan(i.C10_A));
  std::vector<float> got = read(2, 3);  // spans rows 0 and 1 (3 per row)
  for (size_t k = 0; k < got.size(); ++k) ASSERT_EQ(got[k], float(v[2 * 16 + k]));
}

// No calibration group: the steps come from the dim vectors beside the array.
TEST_F(EmdSource, StepsFromDimVectorsWhenUncalibrated) {
  const std::string file = tmp("dims.h5");
  {
    h5_writer w(file);
    w.group("/datacube_root", "root");
    w.group("/datacube_root/datacube");
    std::vector<int16_t> v(2 * 2 * 2 * 2, -3);
    w.dataset(k_array, H5T_STD_I16LE, {2, 2, 2, 2}, v.data());
    const char* units[4] = {"nm", "A", "A^-1", "pixels"};
    const double steps[4] = {0.04, 0.7, 0.02, 1.0};
    for (int d = 0; d < 4; ++d) {
      double xs[2] = {1.0, 1.0 + steps[d]};
      std::string path = "/datacube_root/datacube/dim" + std::to_string(d);
      w.dataset(path, H5T_NATIVE_DOUBLE, {2}, xs);
      hid_t ds = H5Dopen2(w.file(), path.c_str(), H5P_DEFAULT);
      h5_writer::string_attr(ds, "units", units[d]);
      H5Dclose(ds);
    }
  }
  ASSERT_EQ(open_path(file), TYCHO_OK) << last_error();
  tycho_dataset_info i = info();
  EXPECT_EQ(i.stored_dtype.code, kDLInt);
  EXPECT_EQ(i.stored_dtype.bits, 16);
  EXPECT_NEAR(i.scan_step_A[0], 0.4, 1e-12);
  EXPECT_NEAR(i.scan_step_A[1], 0.7, 1e-12);
  EXPECT_NEAR(i.detector_pixel_invA[0], 0.02, 1e-12);
  EXPECT_TRUE(std::isnan(i.detector_pixel_invA[1]));
  EXPECT_TRUE(std::isnan(i.energy_eV));
  EXPECT_EQ(read(0, 4)[0], -3.0f);
}

TEST_F(EmdSource, SeveralArraysChooseTheFirstByName) {
  const std::string file = tmp("two.h5");
  {
    h5_writer w(file);
    std::vector<float> v(16, 0.0f);
    for (const char* root : {"/zeta_root", "/alpha_root"}) {
      w.group(root, "root");
      w.group(std::string(root) + "/datacube");
      w.dataset(std::string(root) + "/datacube/data", H5T_NATIVE_FLOAT, {2, 2, 2, 2}, v.data());
    }
  }
  ASSERT_EQ(open_path(file), TYCHO_OK) << last_error();
  EXPECT_EQ(std::string(info().description), file + ":/alpha_root/datacube/data");
}

}  // namespace
