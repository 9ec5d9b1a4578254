// The `emd` source component: 4D-STEM diffraction data and calibrations from EMD 1.0 files
// (HDF5, as written by emdfile / py4DSTEM), converted to float32 patterns on read.
#include <tycho/sdk.hpp>
#include <tycho/sdk/checked.hpp>
#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <tycho/sdk/hdf5/h5_guard.hpp>
#include <tycho/sdk/hdf5/h5_memory_type.hpp>

#include "emd_calibration.hpp"
#include "emd_locate.hpp"
#include <tycho/sdk/hdf5/h5_read.hpp>

using tycho::sdk::fail;
namespace emd = tycho::emd;
namespace h5 = tycho::h5;

namespace {

// The opened data set. Members are destroyed in reverse order: the dataset before the file.
struct emd_data {
  std::string file_name;
  std::string dataset_path;
  std::string description;  // "<file>:<dataset path>", pointed to by info.description
  h5::h5_id file;
  h5::h5_id dataset;
  int64_t scan[2] = {0, 0};      // Rx, Ry
  int64_t detector[2] = {0, 0};  // Qx, Qy
  tycho_dataset_info info{};
};

// `given` is the path as the config wrote it: a relative one gets a hint about where it resolved.
h5::h5_id open_file(const std::string& path, const std::string& given) {
  return h5::open_data_file(path, given, "the emd source reads EMD 1.0 / py4DSTEM .h5 / .emd files");
}

// Opens the array, checks it is 4-D with an integer or float element type, fills the shapes.
void open_array(emd_data& s) {
  s.dataset = h5::h5_id(H5Dopen2(s.file.get(), s.dataset_path.c_str(), H5P_DEFAULT));
  if (!s.dataset) fail(TYCHO_ERR_IO, "could not open '", s.description, "'");
  auto shape = h5::dataset_shape(s.dataset.get());
  if (shape.size() != 4)
    fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' has shape ", h5::shape_text(shape),
         ", expected a 4-D array (Rx, Ry, Qx, Qy)");
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d == 0; }))
    fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' has shape ", h5::shape_text(shape),
         ", which holds no patterns");
  h5::h5_id type(H5Dget_type(s.dataset.get()));
  auto dtype = type ? h5::dl_dtype(type.get()) : std::nullopt;
  if (!dtype)
    fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' has element type ",
         type ? h5::type_text(type.get()) : "unknown",
         ", expected integers or floats of 8 to 64 bits");
  s.scan[0] = shape[0];
  s.scan[1] = shape[1];
  s.detector[0] = shape[2];
  s.detector[1] = shape[3];
  tycho::sdk::check_data_shape(s.scan, s.detector, "'" + s.description + "'");
  s.info.stored_dtype = *dtype;
}

void fill_info(emd_data& s) {
  tycho_dataset_info& i = s.info;
  i.struct_size = sizeof(tycho_dataset_info);
  std::copy(std::begin(s.scan), std::end(s.scan), i.scan_shape);
  std::copy(std::begin(s.detector), std::end(s.detector), i.detector_shape);
  emd::read_calibrations(s.file.get(), s.file_name, s.dataset_path, i);
  i.patterns_centred = 1;  // EMD / py4DSTEM store patterns with zero frequency at N/2
  i.description = s.description.c_str();
}

// Reads patterns [first, first + n) as one hyperslab: either part of one scan row, or whole
// rows. The destination is C order over (Rx, Ry), as the file is, so the pieces are contiguous;
// its elements are HDF5's `memory_type` (float32, or the stored dtype).
void read_slab(const emd_data& s, int64_t first, int64_t n_rows, int64_t n_cols, hid_t memory_type, void* dst) {
  const int64_t ry = s.scan[1];
  hsize_t start[4] = {hsize_t(first / ry), hsize_t(first % ry), 0, 0};
  hsize_t count[4] = {hsize_t(n_rows), hsize_t(n_cols), hsize_t(s.detector[0]),
                      hsize_t(s.detector[1])};
  h5::h5_id file_space(H5Dget_space(s.dataset.get()));
  h5::h5_id mem_space(H5Screate_simple(4, count, nullptr));
  if (!file_space || !mem_space ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
      H5Dread(s.dataset.get(), memory_type, mem_space.get(), file_space.get(), H5P_DEFAULT, dst) < 0)
    fail(TYCHO_ERR_IO, "reading patterns [", first, ", ", first + n_rows * n_cols, ") of '",
         s.description, "' failed (the file may be truncated or use an unavailable filter)");
}

// The component, as tycho/sdk/source.hpp adapts it: every call under the HDF5 lock.
class emd_source {
 public:
  using call_scope = h5::h5_session;

  explicit emd_source(const tycho::sdk::config_view& config) {
    const std::string given = config.require_string("path");
    const std::string path = tycho::sdk::resolve_path(config.base_dir(), given);
    const std::optional<std::string> dataset = config.get_string("dataset");
    const auto open_into = [&](emd_data& t) {
      t.file_name = path;
      t.file = open_file(path, given);
      t.dataset_path = emd::locate_dataset(t.file.get(), path, dataset);
      t.description = path + ":" + t.dataset_path;
      open_array(t);
      fill_info(t);
    };
    // The same walk in a guard process first (under the adapter's HDF5 lock, call_scope): a
    // file that crashes libhdf5 is refused, not fatal.
    h5::guard_metadata_walk(path, [&] {
      emd_data scratch;
      open_into(scratch);
    });
    open_into(s_);
    tycho::sdk::log(TYCHO_LOG_INFO, "emd",
                    tycho::sdk::cat("opened '", s_.description, "': ", s_.scan[0], " x ", s_.scan[1],
                                    " patterns of ", s_.detector[0], " x ", s_.detector[1], " ",
                                    tycho::sdk::dtype_name(s_.info.stored_dtype)));
  }

  const tycho_dataset_info& info() const { return s_.info; }

  void read(int64_t first, int64_t count, float* out) const { read_as(first, count, H5T_NATIVE_FLOAT, 4, out); }

  // The stored values, unconverted (uint8, uint16, float16: the SDK offers these to the host).
  void read_stored(int64_t first, int64_t count, void* out) const {
    const h5::h5_id type = h5::memory_type_of(s_.info.stored_dtype);
    read_as(first, count, type.get(), s_.info.stored_dtype.bits / 8, out);
  }

 private:
  // Patterns [first, first + count) as `memory_type` elements of `element` bytes.
  void read_as(int64_t first, int64_t count, hid_t memory_type, int64_t element, void* dst) const {
    auto* out = static_cast<unsigned char*>(dst);
    const int64_t ry = s_.scan[1], pattern = s_.detector[0] * s_.detector[1] * element;
    int64_t pos = first;
    const int64_t end = first + count;
    // At most three reads: the rest of the first row, the whole rows, the start of the last.
    while (pos < end) {
      int64_t n = 0;
      if (pos % ry != 0 || end - pos < ry) {
        n = std::min(ry - pos % ry, end - pos);
        read_slab(s_, pos, 1, n, memory_type, out);
      } else {
        int64_t rows = (end - pos) / ry;
        n = rows * ry;
        read_slab(s_, pos, rows, ry, memory_type, out);
      }
      pos += n;
      out += n * pattern;
    }
  }

  emd_data s_;
};

// "source" is the host's key (which plugin to use); the emd source reads only these.
const char* const k_config_keys[] = {"path", "dataset", nullptr};

const tycho_setting k_settings[] = {
    tycho::sdk::setting("path", TYCHO_SETTING_STRING, nullptr,
                        "the HDF5 file (.h5, .emd), relative to the config file's folder; required"),
    tycho::sdk::setting("dataset", TYCHO_SETTING_STRING, nullptr,
                        "HDF5 path of the 4-D array (Rx, Ry, Qx, Qy); default: the file's emdfile array named data"),
    tycho::sdk::end_of_settings()};

const tycho_component k_components[] = {tycho::sdk::with_settings(
    tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "emd", "1.0.0",
                          "EMD 1.0 / py4DSTEM HDF5 4D-STEM data (integer or float arrays, calibrations from metadata)",
                          TYCHO_DEVICE_BIT(kDLCPU), k_config_keys, tycho::sdk::source_vtable<emd_source>("emd")),
    k_settings)};

}  // namespace

TYCHO_PLUGIN("emd", "1.0.0", k_components)
