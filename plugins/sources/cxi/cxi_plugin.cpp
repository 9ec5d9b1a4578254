// The `cxi` plugin: two HDF5 sources that read patterns whose positions the file lists.
//   cxi   CXI / NeXus NXcxi_ptycho ptychography files (cxi_source.cpp)
//   hdf5  any HDF5 dataset with an axis map, positions from another dataset (hdf5_source.cpp)
// Both convert patterns to float32 on read (pattern_reader.cpp) and hand out their positions
// through read_positions.
#include <tycho/sdk.hpp>
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

template <void (*Open)(const tycho_config*, tycho_source&)>
tycho_status source_open(const tycho_config* cfg, tycho_source** out) {
  return tycho::sdk::guarded([&] {
    if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "source open() needs an output");
    *out = nullptr;
    h5::h5_session session;  // declared before the handles: they close inside it
    // The same open in a guard process first: a file that crashes libhdf5 is refused, not fatal.
    h5::guard_metadata_walk(tycho::sdk::config_view(cfg).get_string("path").value_or("(no path)"), [&] {
      tycho_source scratch;
      Open(cfg, scratch);
    });
    auto s = std::make_unique<tycho_source>();
    Open(cfg, *s);
    *out = s.release();
  });
}

tycho_status source_info(tycho_source* src, tycho_dataset_info* out) {
  return tycho::sdk::guarded([&] {
    if (src == nullptr || out == nullptr)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "source info() needs a source and an output");
    tycho::sdk::copy_dataset_info(src->info, out);
  });
}

tycho_status source_read(tycho_source* src, int64_t first, int64_t count, DLTensor* dst) {
  return tycho::sdk::guarded([&] {
    if (src == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "source read() needs a source");
    const tycho_source& s = *src;
    tycho::sdk::check_read_request(s.component.c_str(), s.description, s.layout.scan, s.layout.detector, first,
                                   count, dst);
    if (count == 0) return;
    h5::h5_session session;
    cxi::read_patterns(s.dataset.get(), s.layout, first, count, tycho::sdk::data_of<float>(*dst), s.description);
  });
}

tycho_status source_read_positions(tycho_source* src, DLTensor* dst) {
  if (src != nullptr && src->positions_A.empty())
    return tycho::sdk::report(TYCHO_ERR_UNSUPPORTED,
                              "'" + src->description + "' is a raster: its positions follow from [data] scan_step_A");
  return tycho::sdk::guarded([&] {
    if (src == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "source read_positions() needs a source");
    tycho::sdk::check_positions_request(src->component.c_str(), src->description, src->layout.scan, dst);
    std::memcpy(tycho::sdk::data_of<double>(*dst), src->positions_A.data(), src->positions_A.size() * sizeof(double));
  });
}

void source_close(tycho_source* src) {
  if (src == nullptr) return;
  tycho::sdk::guarded([&] {
    h5::h5_session session;
    delete src;
  });
}

const tycho_source_vtable k_cxi_vtable = {sizeof(tycho_source_vtable), TYCHO_ABI_VERSION,
                                          &source_open<&cxi::open_cxi>, &source_info, &source_read,
                                          &source_close, &source_read_positions};
const tycho_source_vtable k_hdf5_vtable = {sizeof(tycho_source_vtable), TYCHO_ABI_VERSION,
                                           &source_open<&cxi::open_hdf5>, &source_info, &source_read,
                                           &source_close, &source_read_positions};

// "source", "scan_step_A" and "detector_pixel_invA" are the host's keys.
const char* const k_cxi_keys[] = {"path", "dataset", "translations", "translations_shape", "probe_position",
                                  "centred", nullptr};
const char* const k_hdf5_keys[] = {"path", "dataset", "axes", "positions_dataset", "positions_unit", "centred",
                                   nullptr};

const tycho_component k_components[] = {
    tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "cxi", "1.0.0",
                          "CXI / NeXus NXcxi_ptycho ptychography files (frames, translations in m, energy "
                          "in J, detector distance and pixel size)",
                          TYCHO_DEVICE_BIT(kDLCPU), k_cxi_keys, &k_cxi_vtable),
    tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "hdf5", "1.0.0",
                          "any HDF5 dataset of patterns, axes in any order ([data] axes), positions from "
                          "another dataset; calibrations from the config",
                          TYCHO_DEVICE_BIT(kDLCPU), k_hdf5_keys, &k_hdf5_vtable),
};

}  // namespace

TYCHO_PLUGIN("cxi", "1.0.0", k_components)
