// [reconstruct.probe] initial (host/src/runtime/initial_probe.cpp): a probe from an .npy or from
// an HDF5 dataset (a CXI file's illumination, complex as h5py writes it), checked and scaled;
// everything else refused naming the file, the dataset and what was expected.
#include <gtest/gtest.h>
#include <unistd.h>

#include <tycho/core/error.hpp>
#include <tycho/sdk/npy.hpp>

#include <toml++/toml.h>

#include <cmath>
#include <complex>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../host/src/runtime/initial_probe.hpp"
#include "cxi_test_file.hpp"

namespace fs = std::filesystem;

namespace {

class ProbeFromFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tycho_probe_" + std::to_string(getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  template <class T>
  void write_npy(const std::string& name, DLDataType dtype, const std::vector<int64_t>& shape, const std::vector<T>& v) {
    std::ofstream f(path(name), std::ios::binary);
    const std::string h = tycho::sdk::npy::write_header(dtype, shape.data(), int(shape.size()));
    f.write(h.data(), std::streamsize(h.size()));
    f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
  }
  std::optional<std::vector<std::complex<float>>> load(const std::string& toml_text, int64_t n0 = 4, int64_t n1 = 6) {
    return tycho::host::initial_probe_from_file(toml::parse(toml_text), dir_.string(), n0, n1);
  }
  std::string refused(const std::string& toml_text, int64_t n0 = 4, int64_t n1 = 6) {
    try {
      load(toml_text, n0, n1);
    } catch (const tycho::error& e) {
      return e.what();
    }
    return "(no error)";
  }
  fs::path dir_;
};

std::vector<std::complex<float>> ramp(std::size_t n) {
  std::vector<std::complex<float>> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = {float(k + 1), -0.5f * float(k)};
  return v;
}

void expect_scaled(const std::vector<std::complex<float>>& got, const std::vector<std::complex<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  double power = 0, want_power = 0;
  for (const auto& v : want) want_power += std::norm(std::complex<double>(v));
  for (std::size_t k = 0; k < got.size(); ++k) {
    power += std::norm(std::complex<double>(got[k]));
    const std::complex<double> w = std::complex<double>(want[k]) / std::sqrt(want_power);
    EXPECT_NEAR(got[k].real(), w.real(), 1e-6) << k;
    EXPECT_NEAR(got[k].imag(), w.imag(), 1e-6) << k;
  }
  EXPECT_NEAR(power, 1.0, 1e-5);
}

TEST_F(ProbeFromFile, ModelByDefault) {
  EXPECT_FALSE(load(""));
  EXPECT_FALSE(load("initial = 'model'"));
  EXPECT_NE(refused("initial_dataset = '/x'").find("initial_dataset needs initial"), std::string::npos);
}

TEST_F(ProbeFromFile, NpyComplexAndItsFirstMode) {
  const auto p = ramp(2 * 4 * 6);
  write_npy("p.npy", {kDLComplex, 64, 1}, {2, 4, 6}, p);
  const auto got = load("initial = 'p.npy'");
  ASSERT_TRUE(got);
  expect_scaled(*got, {p.begin(), p.begin() + 24});
  // The window must match: the shapes named.
  const std::string m = refused("initial = 'p.npy'", 8, 6);
  EXPECT_NE(m.find("(2, 4, 6)"), std::string::npos) << m;
  EXPECT_NE(m.find("(8, 6)"), std::string::npos) << m;
  write_npy("i.npy", {kDLInt, 32, 1}, {4, 6}, std::vector<int32_t>(24, 1));
  EXPECT_NE(refused("initial = 'i.npy'").find("expected a little-endian C-order complex64"), std::string::npos);
  write_npy("zero.npy", {kDLFloat, 32, 1}, {4, 6}, std::vector<float>(24, 0.f));
  EXPECT_NE(refused("initial = 'zero.npy'").find("zero everywhere"), std::string::npos);
  EXPECT_NE(refused("initial = 'missing.npy'").find("is not a file"), std::string::npos);
}

// h5py's complex64: a compound of two float32 members "r" and "i", at the CXI path.
TEST_F(ProbeFromFile, CxiIlluminationAsH5pyWritesIt) {
  const auto p = ramp(24);
  {
    tycho::test::h5_file_writer w(path("scan.cxi"));
    hid_t t = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(t, "r", 0, H5T_IEEE_F32LE);
    H5Tinsert(t, "i", 4, H5T_IEEE_F32LE);
    hid_t m = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(m, "r", 0, H5T_NATIVE_FLOAT);
    H5Tinsert(m, "i", 4, H5T_NATIVE_FLOAT);
    w.dataset("/entry_1/instrument_1/source_1/illumination", t, m, {4, 6}, p.data());
    w.doubles("/other/real_probe", {1, 4, 6}, std::vector<double>(24, 2.0));
    w.doubles("/other/wrong", {5, 6}, std::vector<double>(30, 1.0));
    H5Tclose(t);
    H5Tclose(m);
  }
  const auto got = load("initial = 'scan.cxi'");
  ASSERT_TRUE(got);
  expect_scaled(*got, p);
  const auto real = load("initial = 'scan.cxi'\ninitial_dataset = '/other/real_probe'");
  ASSERT_TRUE(real);
  expect_scaled(*real, std::vector<std::complex<float>>(24, 2.0f));
  std::string m = refused("initial = 'scan.cxi'\ninitial_dataset = '/other/wrong'");
  EXPECT_NE(m.find(path("scan.cxi") + ":/other/wrong"), std::string::npos) << m;
  EXPECT_NE(m.find("(5, 6)"), std::string::npos) << m;
  m = refused("initial = 'scan.cxi'\ninitial_dataset = '/nothing'");
  EXPECT_NE(m.find("is not a dataset"), std::string::npos) << m;
  {
    tycho::test::h5_file_writer w(path("bare.h5"));
    w.number("/x", 1.0);
  }
  m = refused("initial = 'bare.h5'");
  EXPECT_NE(m.find("/entry_1/instrument_1/source_1/illumination"), std::string::npos) << m;
  std::ofstream(path("text.cxi")) << "not HDF5";
  EXPECT_NE(refused("initial = 'text.cxi'").find("text.cxi"), std::string::npos);
}

}  // namespace
