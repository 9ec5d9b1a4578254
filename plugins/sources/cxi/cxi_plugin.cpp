// The `cxi` plugin: two HDF5 sources that read patterns whose positions the file lists.
//   cxi   CXI / NeXus NXcxi_ptycho ptychography files (cxi_source.cpp)
//   hdf5  any HDF5 dataset with an axis map, positions from another dataset (hdf5_source.cpp)
// Both convert patterns to float32 on read, or deliver uint8/uint16/float16 data as stored
// (tycho_dataset_info::reads_stored_dtype; pattern_reader.cpp), and hand out their positions
// through read_positions.
#include <tycho/sdk.hpp>
#include <tycho/sdk/scan_shape.hpp>
#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <cstring>
#include <memory>

#include <tycho/sdk/hdf5/h5_guard.hpp>
#include <tycho/sdk/hdf5/h5_handle.hpp>
#include "pattern_reader.hpp"
#include "source_state.hpp"

using tycho::sdk::fail;
namespace cxi = tycho::cxi;
namespace h5 = tycho::h5;

namespace {

// One of the two sources, as tycho/sdk/source.hpp adapts it: Open finds the arrays and
// calibrations; every call under the HDF5 lock.
template <void (*Open)(const tycho_config*, cxi::source_data&)>
class hdf5_file_source {
 public:
  using call_scope = h5::h5_session;

  explicit hdf5_file_source(const tycho::sdk::config_view& config) {
    // The same open in a guard process first: a file that crashes libhdf5 is refused, not fatal.
    h5::guard_metadata_walk(config.get_string("path").value_or("(no path)"), [&] {
      cxi::source_data scratch;
      Open(config.raw(), scratch);
    });
    Open(config.raw(), s_);
  }

  const tycho_dataset_info& info() const { return s_.info; }
  void read(int64_t first, int64_t count, float* dst) const {
    cxi::read_patterns(s_.dataset.get(), s_.layout, first, count, dst, s_.description);
  }
  // The stored values, unconverted (uint8, uint16, float16: the SDK offers these to the host).
  void read_stored(int64_t first, int64_t count, void* dst) const {
    cxi::read_stored_patterns(s_.dataset.get(), s_.layout, first, count, s_.info.stored_dtype, dst, s_.description);
  }
  const std::vector<double>& positions_A() const { return s_.positions_A; }
  // The file's detector mask (the cxi source's /entry_1/instrument_1/detector_1/mask), 1 = bad.
  const std::vector<uint8_t>& detector_mask() const { return s_.detector_mask; }

 private:
  cxi::source_data s_;
};
using cxi_source = hdf5_file_source<&cxi::open_cxi>;
using hdf5_source = hdf5_file_source<&cxi::open_hdf5>;

// "source", "scan_step_A" and "detector_pixel_invA" are the host's keys.
const char* const k_cxi_keys[] = {"path", "dataset", "translations", "translations_shape", "probe_position",
                                  "centred", nullptr};
const char* const k_hdf5_keys[] = {"path",           "dataset", "axes",       "positions_dataset",
                                   "positions_unit", "centred", "scan_shape", nullptr};

using tycho::sdk::setting;
const tycho_setting k_cxi_settings[] = {
    setting("path", TYCHO_SETTING_STRING, nullptr,
            "the HDF5 file (.cxi, .h5, .nxs), relative to the config file's folder; required"),
    setting("dataset", TYCHO_SETTING_STRING, nullptr,
            "the frames (N, Qx, Qy); default /entry_1/data_1/data, else /entry_1/instrument_1/detector_1/data"),
    setting("translations", TYCHO_SETTING_STRING, nullptr,
            "the sample translations, (N, 3) or (3, N), (x, y, z) in metres; default: the CXI paths"),
    setting("translations_shape", TYCHO_SETTING_STRING, nullptr,
            "\"N,3\" or \"3,N\": how the translations are stored; needed only when N = 3"),
    setting("probe_position", TYCHO_SETTING_STRING_LIST, "[\"-y\", \"-x\"]",
            "the probe position along object axis 0 and 1 as signed translation components (x, y, -x, -y)"),
    setting("centred", TYCHO_SETTING_BOOL, "true", "zero frequency at index N/2 of each frame"),
    tycho::sdk::end_of_settings()};
const tycho_setting k_hdf5_settings[] = {
    setting("path", TYCHO_SETTING_STRING, nullptr, "the HDF5 file, relative to the config file's folder; required"),
    setting("dataset", TYCHO_SETTING_STRING, nullptr, "the HDF5 path of the patterns; required"),
    setting("axes", TYCHO_SETTING_STRING_LIST, nullptr,
            "the role of each axis of the dataset (Rx, Ry, Qx, Qy, or P for a list); default: "
            "[\"Rx\", \"Ry\", \"Qx\", \"Qy\"] (4-D), [\"P\", \"Qx\", \"Qy\"] (3-D)"),
    setting("positions_dataset", TYCHO_SETTING_STRING, nullptr,
            "(P, 2) or (2, P) probe positions of the patterns in scan order; required for a list of patterns"),
    setting("positions_unit", TYCHO_SETTING_STRING, nullptr,
            "the unit of positions_dataset: A, nm, pm, um, mm or m; required with it"),
    setting("centred", TYCHO_SETTING_BOOL, "true", "zero frequency at index N/2 of each pattern"),
    tycho::sdk::scan_shape_setting(),
    tycho::sdk::end_of_settings()};

const tycho_component k_components[] = {
    tycho::sdk::with_settings(
        tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "cxi", "1.0.0",
                              "CXI / NeXus NXcxi_ptycho ptychography files (frames, translations in m, energy "
                              "in J, detector distance and pixel size)",
                              TYCHO_DEVICE_BIT(kDLCPU), k_cxi_keys, tycho::sdk::source_vtable<cxi_source>("cxi")),
        k_cxi_settings),
    tycho::sdk::with_settings(
        tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "hdf5", "1.0.0",
                              "any HDF5 dataset of patterns, axes in any order ([data] axes), positions from "
                              "another dataset; calibrations from the config",
                              TYCHO_DEVICE_BIT(kDLCPU), k_hdf5_keys, tycho::sdk::source_vtable<hdf5_source>("hdf5")),
        k_hdf5_settings),
};

}  // namespace

TYCHO_PLUGIN("cxi", "1.0.0", k_components)
