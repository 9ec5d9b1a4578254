// Small EMD 1.0 files for the tests, in emdfile's layout, with the HDF5 C API:
//
//   /                                          emd_group_type "file" (only if mark_file)
//   /datacube_root                             emd_group_type "root"
//   /datacube_root/datacube                    emd_group_type "array"
//   /datacube_root/datacube/data               the array
//   /datacube_root/metadatabundle              emd_group_type "metadatabundle" (if any metadata)
//   /datacube_root/metadatabundle/calibration  emd_group_type "metadata": R_/Q_pixel_size (double
//                                              datasets), R_/Q_pixel_units (string datasets)
//   /datacube_root/metadatabundle/microscope   emd_group_type "metadata": beam_energy_eV,
//                                              convergence_semiangle_mrad, C10_A (double datasets)
//
// Files with other layouts (calibrations as attributes, dim vectors, several arrays, unusual
// element types) are written by the tests that need them.
#pragma once

#include <hdf5.h>

#include <optional>
#include <string>
#include <vector>

namespace tycho::test {

enum class emd_element { float32, uint16 };

struct emd_calibration {
  double R_pixel_size = 0;
  std::string R_pixel_units = "A";
  double Q_pixel_size = 0;
  std::string Q_pixel_units = "A^-1";
};

struct emd_microscope {
  double beam_energy_eV = 0;
  double convergence_semiangle_mrad = 0;
  double C10_A = 0;
};

struct emd_file_spec {
  std::vector<hsize_t> dims;                  // of the array, any rank
  emd_element type = emd_element::float32;    // stored and in memory
  const void* values = nullptr;               // product(dims) elements of `type`, C order
  bool mark_file = false;                     // also mark the file itself as emd_group_type "file"
  std::optional<emd_calibration> calibration;
  std::optional<emd_microscope> microscope;
};

namespace emd_detail {

inline void string_attr(hid_t obj, const char* name, const char* value) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, &value);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

inline hid_t group(hid_t parent, const char* name, const char* emd_type) {
  hid_t g = H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g >= 0) string_attr(g, "emd_group_type", emd_type);
  return g;
}

inline bool number(hid_t group, const char* name, double value) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t ds = H5Dcreate2(group, name, H5T_NATIVE_DOUBLE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value);
  H5Dclose(ds);
  H5Sclose(s);
  return rc >= 0;
}

inline bool text(hid_t group, const char* name, const std::string& value) {
  const char* p = value.c_str();
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t ds = H5Dcreate2(group, name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &p);
  H5Dclose(ds);
  H5Sclose(s);
  H5Tclose(t);
  return rc >= 0;
}

}  // namespace emd_detail

// Writes `spec` to `path` (replacing it). Returns false with the reason in *why on failure.
inline bool write_emd_file(const std::string& path, const emd_file_spec& spec, std::string* why = nullptr) {
  using namespace emd_detail;
  auto fail = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return fail("cannot create " + path);
  if (spec.mark_file) string_attr(f, "emd_group_type", "file");
  hid_t root = group(f, "datacube_root", "root");
  hid_t cube = group(root, "datacube", "array");
  std::vector<hid_t> groups = {cube, root};  // closed in this order, innermost first

  const bool f32 = spec.type == emd_element::float32;
  hid_t space = H5Screate_simple(int(spec.dims.size()), spec.dims.data(), nullptr);
  hid_t d = H5Dcreate2(cube, "data", f32 ? H5T_IEEE_F32LE : H5T_STD_U16LE, space, H5P_DEFAULT, H5P_DEFAULT,
                       H5P_DEFAULT);
  bool ok = H5Dwrite(d, f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, spec.values) >= 0;
  H5Dclose(d);
  H5Sclose(space);

  if (ok && (spec.calibration || spec.microscope)) {
    hid_t meta = group(root, "metadatabundle", "metadatabundle");
    groups.insert(groups.begin(), meta);
    if (spec.calibration) {
      const emd_calibration& c = *spec.calibration;
      hid_t cal = group(meta, "calibration", "metadata");
      groups.insert(groups.begin(), cal);
      ok = number(cal, "R_pixel_size", c.R_pixel_size) && text(cal, "R_pixel_units", c.R_pixel_units) &&
           number(cal, "Q_pixel_size", c.Q_pixel_size) && text(cal, "Q_pixel_units", c.Q_pixel_units);
    }
    if (ok && spec.microscope) {
      const emd_microscope& m = *spec.microscope;
      hid_t mic = group(meta, "microscope", "metadata");
      groups.insert(groups.begin(), mic);
      ok = number(mic, "beam_energy_eV", m.beam_energy_eV) &&
           number(mic, "convergence_semiangle_mrad", m.convergence_semiangle_mrad) && number(mic, "C10_A", m.C10_A);
    }
  }
  for (hid_t g : groups) H5Gclose(g);
  H5Fclose(f);  // after its groups: an open group would keep the file open
  return ok || fail("writing " + path + " failed");
}

}  // namespace tycho::test
