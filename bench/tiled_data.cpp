#include "tiled_data.hpp"

#include <hdf5.h>

#include <array>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace tycho::bench {
namespace {

[[noreturn]] void h5_fail(const std::string& what) {
  throw std::runtime_error("tiled data set: " + what + " failed");
}

// Closes any HDF5 id on scope exit.
class h5 {
 public:
  explicit h5(hid_t id, const std::string& what) : id_(id) {
    if (id_ < 0) h5_fail(what);
  }
  ~h5() {
    if (id_ < 0) return;
    switch (H5Iget_type(id_)) {
      case H5I_FILE: H5Fclose(id_); break;
      case H5I_GROUP: H5Gclose(id_); break;
      case H5I_DATASET: H5Dclose(id_); break;
      case H5I_DATASPACE: H5Sclose(id_); break;
      case H5I_DATATYPE: H5Tclose(id_); break;
      case H5I_ATTR: H5Aclose(id_); break;
      default: break;
    }
  }
  h5(h5&& o) noexcept : id_(o.id_) { o.id_ = -1; }
  h5(const h5&) = delete;
  h5& operator=(const h5&) = delete;
  h5& operator=(h5&&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
};

void check(herr_t rc, const std::string& what) {
  if (rc < 0) h5_fail(what);
}

h5 utf8_string_type() {
  h5 t(H5Tcopy(H5T_C_S1), "H5Tcopy");
  check(H5Tset_size(t.get(), H5T_VARIABLE), "H5Tset_size");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "H5Tset_cset");
  return t;
}

void string_attribute(hid_t obj, const char* name, const char* value) {
  h5 type = utf8_string_type();
  h5 space(H5Screate(H5S_SCALAR), "H5Screate");
  h5 a(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
       std::string("attribute ") + name);
  check(H5Awrite(a.get(), type.get(), &value), std::string("writing attribute ") + name);
}

void int_attribute(hid_t obj, const char* name, int64_t value) {
  h5 space(H5Screate(H5S_SCALAR), "H5Screate");
  h5 a(H5Acreate2(obj, name, H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, H5P_DEFAULT),
       std::string("attribute ") + name);
  check(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), std::string("writing attribute ") + name);
}

// Scalar datasets, as emdfile writes metadata values.
void number_dataset(hid_t group, const char* name, double value) {
  h5 space(H5Screate(H5S_SCALAR), "H5Screate");
  h5 d(H5Dcreate2(group, name, H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
       std::string("dataset ") + name);
  check(H5Dwrite(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value),
        std::string("writing ") + name);
}

void string_dataset(hid_t group, const char* name, const char* value) {
  h5 type = utf8_string_type();
  h5 space(H5Screate(H5S_SCALAR), "H5Screate");
  h5 d(H5Dcreate2(group, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
       std::string("dataset ") + name);
  check(H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &value),
        std::string("writing ") + name);
}

h5 group(hid_t parent, const char* name, const char* emd_type) {
  h5 g(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), std::string("group ") + name);
  string_attribute(g.get(), "emd_group_type", emd_type);
  return g;
}

struct source_patterns {
  std::array<hsize_t, 4> shape{};
  std::vector<uint16_t> counts;
};

source_patterns read_source(const std::string& path) {
  h5 file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening '" + path + "'");
  h5 d(H5Dopen2(file.get(), "/datacube_root/datacube/data", H5P_DEFAULT),
       "opening '" + path + ":/datacube_root/datacube/data'");
  h5 space(H5Dget_space(d.get()), "H5Dget_space");
  if (H5Sget_simple_extent_ndims(space.get()) != 4)
    throw std::runtime_error("tiled data set: '" + path + "' does not hold a 4-D data cube");
  source_patterns s;
  H5Sget_simple_extent_dims(space.get(), s.shape.data(), nullptr);
  s.counts.resize(s.shape[0] * s.shape[1] * s.shape[2] * s.shape[3]);
  check(H5Dread(d.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.counts.data()),
        "reading '" + path + "'");
  return s;
}

void write_file(const source_patterns& src, const std::string& path, int64_t rx, int64_t ry) {
  const hsize_t q0 = src.shape[2], q1 = src.shape[3], m = q0 * q1;
  h5 file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "creating '" + path + "'");
  string_attribute(file.get(), "emd_group_type", "file");
  int_attribute(file.get(), "version_major", 1);
  int_attribute(file.get(), "version_minor", 0);
  string_attribute(file.get(), "authoring_program", "tycho_bench_cpu (tiled MoS2, timing only)");

  h5 root = group(file.get(), "datacube_root", "root");
  {
    h5 cube = group(root.get(), "datacube", "array");
    hsize_t dims[4] = {hsize_t(rx), hsize_t(ry), q0, q1};
    h5 space(H5Screate_simple(4, dims, nullptr), "H5Screate_simple");
    h5 data(H5Dcreate2(cube.get(), "data", H5T_STD_U16LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                       H5P_DEFAULT),
            "creating the data cube");
    string_attribute(data.get(), "units", "pixel intensity");
    // One scan row (ry patterns) at a time.
    std::vector<uint16_t> row(std::size_t(hsize_t(ry) * m));
    hsize_t count[4] = {1, hsize_t(ry), q0, q1};
    h5 mem(H5Screate_simple(4, count, nullptr), "H5Screate_simple");
    for (int64_t i = 0; i < rx; ++i) {
      const hsize_t si = hsize_t(i) % src.shape[0];
      for (int64_t j = 0; j < ry; ++j) {
        const hsize_t sj = hsize_t(j) % src.shape[1];
        const uint16_t* p = src.counts.data() + (si * src.shape[1] + sj) * m;
        std::copy(p, p + m, row.data() + hsize_t(j) * m);
      }
      hsize_t start[4] = {hsize_t(i), 0, 0, 0};
      check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr),
            "selecting a scan row");
      check(H5Dwrite(data.get(), H5T_NATIVE_UINT16, mem.get(), space.get(), H5P_DEFAULT, row.data()),
            "writing scan row " + std::to_string(i));
    }
  }
  h5 bundle = group(root.get(), "metadatabundle", "metadatabundle");
  {
    h5 cal = group(bundle.get(), "calibration", "metadata");
    number_dataset(cal.get(), "R_pixel_size", 0.5);
    string_dataset(cal.get(), "R_pixel_units", "A");
    number_dataset(cal.get(), "Q_pixel_size", 0.06);
    string_dataset(cal.get(), "Q_pixel_units", "A^-1");
    number_dataset(cal.get(), "QR_rotation_degrees", 0.0);
  }
  {
    h5 mic = group(bundle.get(), "microscope", "metadata");
    number_dataset(mic.get(), "beam_energy_eV", 80000.0);
    number_dataset(mic.get(), "convergence_semiangle_mrad", 25.0);
    number_dataset(mic.get(), "C10_A", -150.0);
  }
  check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "flushing '" + path + "'");
}

}  // namespace

void write_tiled_emd(const std::string& source, const std::string& dst, int64_t rx, int64_t ry) {
  source_patterns src = read_source(source);
  const std::string part = dst + ".part";
  try {
    write_file(src, part, rx, ry);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(part, ec);
    throw;
  }
  std::filesystem::rename(part, dst);
}

}  // namespace tycho::bench
