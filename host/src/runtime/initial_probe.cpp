#include "initial_probe.hpp"

#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/host/log.hpp>
#include <tycho/sdk/npy.hpp>
#include <tycho/sdk/hdf5/h5_guard.hpp>
#include <tycho/sdk/hdf5/h5_handle.hpp>
#include <tycho/sdk/hdf5/h5_read.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/npy_file.hpp"
#include "settings/config_read.hpp"

namespace tycho::host {

namespace {

using cd = std::complex<double>;
namespace fs = std::filesystem;

const char* const k_probe_datasets[] = {"/entry_1/instrument_1/source_1/illumination",
                                        "/entry_1/instrument_1/source_1/probe"};

// The first (N0, N1) plane of an (N0, N1) or (M, N0, N1) shape; throws otherwise.
void check_shape(const std::vector<int64_t>& shape, int64_t n0, int64_t n1, const std::string& where) {
  const bool plane = shape.size() == 2 && shape[0] == n0 && shape[1] == n1;
  const bool modes = shape.size() == 3 && shape[0] >= 1 && shape[1] == n0 && shape[2] == n1;
  if (!plane && !modes)
    fail(TYCHO_ERR_BAD_DATA, where, " has shape ", sdk::npy::shape_text(shape), ", expected the probe on the run's window: (",
         n0, ", ", n1, ") or (modes, ", n0, ", ", n1, "); a probe from a file is used on the detector's own window ",
         "(no binning, cropping or padding that changes it)");
}

std::vector<cd> read_npy_probe(const std::string& path, int64_t n0, int64_t n1) {
  npy_file file(path, "[reconstruct.probe] initial");
  const std::string& where = file.where();
  const sdk::npy::header& h = file.header();
  const bool known = h.dtype && ((h.dtype->code == kDLComplex && (h.dtype->bits == 64 || h.dtype->bits == 128)) ||
                                 (h.dtype->code == kDLFloat && (h.dtype->bits == 32 || h.dtype->bits == 64)));
  if (!known || h.big_endian || h.fortran_order)
    fail(TYCHO_ERR_BAD_DATA, where, " holds '", h.descr, "'", h.fortran_order ? " in Fortran order" : "",
         ", expected a little-endian C-order complex64, complex128, float32 or float64 probe");
  check_shape(h.shape, n0, n1, where);
  const std::size_t n = std::size_t(n0 * n1), element = h.dtype->bits / 8;
  std::vector<unsigned char> bytes(n * element);  // the first mode only
  file.read(bytes.data(), bytes.size());
  std::vector<cd> p(n);
  for (std::size_t k = 0; k < n; ++k) {
    const unsigned char* b = bytes.data() + k * element;
    if (h.dtype->code == kDLComplex && h.dtype->bits == 64) {
      float v[2];
      std::memcpy(v, b, 8);
      p[k] = cd(v[0], v[1]);
    } else if (h.dtype->code == kDLComplex) {
      double v[2];
      std::memcpy(v, b, 16);
      p[k] = cd(v[0], v[1]);
    } else if (h.dtype->bits == 32) {
      float v;
      std::memcpy(&v, b, 4);
      p[k] = v;
    } else {
      double v;
      std::memcpy(&v, b, 8);
      p[k] = v;
    }
  }
  return p;
}

std::vector<cd> read_hdf5_probe(const std::string& path, const std::string& given, std::optional<std::string> dataset,
                                int64_t n0, int64_t n1) {
  h5::h5_session session;
  h5::h5_id file = h5::open_data_file(path, given, "[reconstruct.probe] initial reads .npy files and HDF5 files");
  if (!dataset) {
    for (const char* c : k_probe_datasets)
      if (h5::open_object(file.get(), c)) {
        dataset = c;
        break;
      }
    if (!dataset)
      fail(TYCHO_ERR_NOT_FOUND, "'", path, "' has no probe: neither ", k_probe_datasets[0], " nor ", k_probe_datasets[1],
           " exists; set [reconstruct.probe] initial_dataset to its path");
  }
  const std::string where = "'" + path + ":" + *dataset + "'";
  h5::h5_id obj = h5::open_object(file.get(), *dataset);
  if (!obj || !h5::is_dataset(obj.get()))
    fail(TYCHO_ERR_NOT_FOUND, where, " is not a dataset ([reconstruct.probe] initial_dataset)");
  h5::h5_id ds(H5Dopen2(file.get(), dataset->c_str(), H5P_DEFAULT));
  if (!ds) fail(TYCHO_ERR_IO, "could not open ", where);
  check_shape(h5::dataset_shape(ds.get()), n0, n1, where);
  h5::h5_id type(H5Dget_type(ds.get()));
  const H5T_class_t cls = type ? H5Tget_class(type.get()) : H5T_NO_CLASS;
  bool complex = false;
  if (cls == H5T_COMPOUND) {
    const int members = H5Tget_nmembers(type.get());
    complex = members == 2 && H5Tget_member_index(type.get(), "r") >= 0 && H5Tget_member_index(type.get(), "i") >= 0;
    for (int m = 0; complex && m < 2; ++m) {
      h5::h5_id mt(H5Tget_member_type(type.get(), unsigned(m)));
      complex = mt && H5Tget_class(mt.get()) == H5T_FLOAT;
    }
  }
  if (!complex && cls != H5T_FLOAT)
    fail(TYCHO_ERR_BAD_DATA, where, " holds ", type ? h5::type_text(type.get()) : "unknown",
         " values, expected a complex probe (a compound of two floats \"r\" and \"i\", as h5py writes complex64 and ",
         "complex128) or a real one");
  // The first mode: a hyperslab of the first (N0, N1) plane.
  const std::vector<int64_t> shape = h5::dataset_shape(ds.get());
  std::vector<hsize_t> start(shape.size(), 0), count(shape.begin(), shape.end());
  if (shape.size() == 3) count[0] = 1;
  h5::h5_id space(H5Dget_space(ds.get()));
  h5::h5_id memory(H5Screate_simple(int(shape.size()), count.data(), nullptr));
  if (!space || !memory ||
      H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0)
    fail(TYCHO_ERR_IO, "could not select the first mode of ", where);
  std::vector<cd> p(std::size_t(n0 * n1));
  herr_t st;
  if (complex) {
    h5::h5_id mem_type(H5Tcreate(H5T_COMPOUND, sizeof(cd)));
    if (!mem_type || H5Tinsert(mem_type.get(), "r", 0, H5T_NATIVE_DOUBLE) < 0 ||
        H5Tinsert(mem_type.get(), "i", sizeof(double), H5T_NATIVE_DOUBLE) < 0)
      fail(TYCHO_ERR_IO, "could not make the memory type to read ", where);
    st = H5Dread(ds.get(), mem_type.get(), memory.get(), space.get(), H5P_DEFAULT, p.data());
  } else {
    std::vector<double> real(p.size());
    st = H5Dread(ds.get(), H5T_NATIVE_DOUBLE, memory.get(), space.get(), H5P_DEFAULT, real.data());
    std::copy(real.begin(), real.end(), p.begin());
  }
  if (st < 0) fail(TYCHO_ERR_IO, "could not read ", where);
  return p;
}

}  // namespace

std::optional<std::string> initial_probe_path(const toml::table& probe_t, const std::string& base_dir) {
  const auto given = read_key<std::string>(probe_t, "initial", "reconstruct.probe");
  const auto dataset = read_key<std::string>(probe_t, "initial_dataset", "reconstruct.probe");
  if (!given || *given == "model") {
    if (dataset)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.probe] initial_dataset needs initial = the HDF5 file that holds it");
    return std::nullopt;
  }
  const std::string path = resolve_path(base_dir, *given);
  if (!fs::is_regular_file(path))
    fail(TYCHO_ERR_NOT_FOUND, "[reconstruct.probe] initial = \"", *given, "\": '", path,
         "' is not a file (expected \"model\", an .npy probe or an HDF5 file such as a CXI file with an illumination)");
  if (is_npy(path) && dataset)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.probe] initial_dataset names a dataset, but '", path,
         "' is an .npy file");
  return path;
}

std::optional<std::vector<std::complex<float>>> initial_probe_from_file(const toml::table& probe_t,
                                                                        const std::string& base_dir, int64_t n0,
                                                                        int64_t n1) {
  const std::optional<std::string> checked = initial_probe_path(probe_t, base_dir);
  if (!checked) return std::nullopt;
  const std::string& path = *checked;
  const std::string given = *read_key<std::string>(probe_t, "initial", "reconstruct.probe");
  const auto dataset = read_key<std::string>(probe_t, "initial_dataset", "reconstruct.probe");
  std::vector<cd> p;
  try {
    if (is_npy(path)) {
      p = read_npy_probe(path, n0, n1);
    } else {
      // A file that crashes libhdf5 is refused, not fatal: the same read in a guard process first.
      h5::guard_metadata_walk(path, [&] { read_hdf5_probe(path, given, dataset, n0, n1); });
      p = read_hdf5_probe(path, given, dataset, n0, n1);
    }
  } catch (const sdk::error& e) {
    // The SDK's readers (npy, HDF5) throw its own type: the runtime's, with the same status.
    throw tycho::error(e.status, e.what());
  }
  double power = 0;
  for (const cd& v : p) {
    if (!std::isfinite(v.real()) || !std::isfinite(v.imag()))
      fail(TYCHO_ERR_BAD_DATA, "the probe in '", path, "' holds a non-finite value");
    power += std::norm(v);
  }
  if (!(power > 0)) fail(TYCHO_ERR_BAD_DATA, "the probe in '", path, "' is zero everywhere");
  const double scale = 1.0 / std::sqrt(power);
  std::vector<std::complex<float>> out(p.size());
  for (std::size_t k = 0; k < p.size(); ++k) out[k] = std::complex<float>(p[k] * scale);
  log_info("session", cat("initial probe from '", path, dataset ? ":" + *dataset : std::string(), "' (", n0, " x ", n1,
                          ")"));
  return out;
}

}  // namespace tycho::host
