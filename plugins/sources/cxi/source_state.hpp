// The opened data set, shared by the plugin's two sources (`cxi`, `hdf5`): they differ in how
// they find the arrays and calibrations (open), and read alike.
#pragma once

#include <tycho/tycho_components.h>

#include <cstdint>
#include <string>
#include <vector>

#include <tycho/sdk/hdf5/h5_handle.hpp>
#include "pattern_reader.hpp"

namespace tycho::cxi {

// Members are destroyed in reverse order: the dataset before the file.
struct source_data {
  std::string component;    // "cxi" or "hdf5", for messages
  std::string file_name;
  std::string dataset_path;
  std::string description;  // "<file>:<dataset path>", pointed to by info.description
  tycho::h5::h5_id file;
  tycho::h5::h5_id dataset;
  tycho::cxi::pattern_layout layout;
  std::vector<double> positions_A;  // (P, 2), Å; empty: a raster (read_positions unsupported)
  std::vector<uint8_t> detector_mask;  // (Qx, Qy), 1 = bad (the file's mask); empty: none
  tycho_dataset_info info{};
};

// Fill `s` (file, dataset, layout, positions, info) from the [data] table `cfg`, inside an
// h5_session. (cxi_source.cpp, hdf5_source.cpp)
void open_cxi(const tycho_config* cfg, source_data& s);
void open_hdf5(const tycho_config* cfg, source_data& s);

}  // namespace tycho::cxi
