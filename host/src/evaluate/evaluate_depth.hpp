// Depth in `tycho evaluate`: a multislice result's slice s spans [s·dz, (s+1)·dz) below the
// entrance surface (z = 0, where C10 is defined), dz its slice thickness. These helpers find dz in
// the result and pair the result's slices with the truth's slabs and layers.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <vector>

#include "evaluate/truth_file.hpp"

namespace tycho::host {

// The result's slice thickness in Å: the manifest's calibration.slice_thickness_A (a number, or
// an array whose first value is taken), else slice_thickness_A in [reconstruct] of its saved
// config (config_toml); nullopt when neither holds a positive finite number.
std::optional<double> result_slice_thickness(const nlohmann::json& manifest);

// A depth range compared as one: the sum of some result slices against the sum of some slabs.
struct depth_group {
  double z0_A = 0, z1_A = 0;           // the range, from the coarser of the two partitions
  std::vector<int64_t> result_slices;  // indices into the result's slices
  std::vector<int64_t> truth_slabs;    // indices into truth_file::slabs
};

// The coarser partition sets the groups: with slices at least as thick as the mean slab, each
// result slice is a group holding the slabs whose centre lies in it; with thinner slices, each
// slab is a group holding the result slices whose centre lies in it. Groups missing either side
// (slices below the specimen, slabs beyond the result's depth) are left out.
std::vector<depth_group> group_by_depth(int64_t slices, double dz_A, const std::vector<truth_slab>& slabs);

// The result slice whose range holds `depth_A`: floor(depth / dz), clamped to [0, slices − 1].
int64_t slice_at_depth(int64_t slices, double dz_A, double depth_A);

}  // namespace tycho::host
