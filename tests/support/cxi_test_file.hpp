// HDF5 files for the cxi and hdf5 source tests, written with the HDF5 C API: a small writer
// that creates datasets and attributes at any path (making the groups on the way), the MoS2
// counts read straight from the shipped EMD file, and a CXI file made from them.
#pragma once

#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "test_paths.hpp"

namespace tycho::test {

class h5_file_writer {
 public:
  // A new file at `path`; `append`: opens the existing one for writing instead.
  explicit h5_file_writer(const std::string& path, bool append = false)
      : file_(append ? H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)
                     : H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {}
  ~h5_file_writer() { H5Fclose(file_); }
  h5_file_writer(const h5_file_writer&) = delete;
  h5_file_writer& operator=(const h5_file_writer&) = delete;

  bool ok() const { return file_ >= 0; }

  // A dataset of `dims` (empty: a scalar) at `path`, stored as `file_type`, from `mem_type` data.
  void dataset(const std::string& path, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims,
               const void* data) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
    hid_t d = H5Dcreate2(file_, path.c_str(), file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(d);
    H5Sclose(space);
    H5Pclose(lcpl);
  }
  void doubles(const std::string& path, const std::vector<hsize_t>& dims, const std::vector<double>& v) {
    dataset(path, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, dims, v.data());
  }
  void number(const std::string& path, double v) { dataset(path, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {}, &v); }
  void u16(const std::string& path, const std::vector<hsize_t>& dims, const uint16_t* v) {
    dataset(path, H5T_STD_U16LE, H5T_NATIVE_UINT16, dims, v);
  }
  void u8(const std::string& path, const std::vector<hsize_t>& dims, const std::vector<uint8_t>& v) {
    dataset(path, H5T_STD_U8LE, H5T_NATIVE_UINT8, dims, v.data());
  }
  void string_attr(const std::string& path, const char* name, const std::string& value) {
    hid_t obj = H5Oopen(file_, path.c_str(), H5P_DEFAULT);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* p = value.c_str();
    H5Awrite(a, type, &p);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    H5Oclose(obj);
  }
  void soft_link(const std::string& target, const std::string& link) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Lcreate_soft(target.c_str(), file_, link.c_str(), lcpl, H5P_DEFAULT);
    H5Pclose(lcpl);
  }

 private:
  hid_t file_;
};

// The shipped MoS2 counts, (32, 24, 96, 96) uint16 in C order, read with HDF5 directly.
inline const std::vector<uint16_t>& mos2_counts() {
  static const std::vector<uint16_t> counts = [] {
    std::vector<uint16_t> v(std::size_t(32) * 24 * 96 * 96);
    hid_t f = H5Fopen(example_data("mos2_80kV_32x24_counts.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/datacube_root/datacube/data", H5P_DEFAULT);
    if (H5Dread(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) v.clear();
    H5Dclose(d);
    H5Fclose(f);
    return v;
  }();
  return counts;
}

// The relativistic electron wavelength in Å (the runtime's formula, docs/conventions.md).
inline double electron_wavelength_A(double energy_eV) {
  return 12.2643 / std::sqrt(energy_eV * (1.0 + 0.978476e-6 * energy_eV));
}

constexpr double k_joule_per_eV = 1.602176634e-19;

// How a CXI file of the MoS2 counts is written (SI units, as CXI stores them).
struct mos2_cxi_options {
  bool translations_frames_first = false;  // (N, 3) instead of (3, N)
  std::string translation_path = "/entry_1/sample_1/geometry_1/translation";
  std::string data_path = "/entry_1/data_1/data";
  bool energy = true, detector = true;
  std::optional<std::vector<uint8_t>> mask;  // (96, 96)
};

// The sample translation (x, y, z) in metres of MoS2 pattern (i, j): the probe sits at
// (i, j) · 0.5 Å along object axes (0, 1), and with the cxi source's default probe_position
// ["-y", "-x"] that is y = −i · 0.5 Å, x = −j · 0.5 Å.
inline std::vector<double> mos2_translations_m(bool frames_first) {
  const int64_t n = 32 * 24;
  std::vector<double> t(std::size_t(3 * n), 0.0);
  for (int64_t k = 0; k < n; ++k) {
    const double x = -double(k % 24) * 0.5e-10, y = -double(k / 24) * 0.5e-10;
    t[std::size_t(frames_first ? 3 * k : k)] = x;
    t[std::size_t(frames_first ? 3 * k + 1 : n + k)] = y;
  }
  return t;
}

// Detector geometry giving 0.06 Å⁻¹ pixels at 80 keV: dk = p / (z λ).
constexpr double k_mos2_distance_m = 0.25;
inline double mos2_pixel_m() { return 0.06 * k_mos2_distance_m * electron_wavelength_A(80e3); }

inline void write_mos2_cxi(const std::string& path, const mos2_cxi_options& o = {}) {
  h5_file_writer w(path);
  const auto& counts = mos2_counts();
  w.u16(o.data_path, {768, 96, 96}, counts.data());
  const bool first = o.translations_frames_first;
  w.doubles(o.translation_path, first ? std::vector<hsize_t>{768, 3} : std::vector<hsize_t>{3, 768},
            mos2_translations_m(first));
  if (o.energy) w.number("/entry_1/instrument_1/source_1/energy", 80e3 * k_joule_per_eV);
  if (o.detector) {
    w.number("/entry_1/instrument_1/detector_1/distance", k_mos2_distance_m);
    w.number("/entry_1/instrument_1/detector_1/x_pixel_size", mos2_pixel_m());
    w.number("/entry_1/instrument_1/detector_1/y_pixel_size", mos2_pixel_m());
  }
  if (o.mask) w.u8("/entry_1/instrument_1/detector_1/mask", {96, 96}, *o.mask);
}

}  // namespace tycho::test
