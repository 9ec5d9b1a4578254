// Patterns from an HDF5 dataset whose axes come in any order: an axis map names the role of each
// dataset axis (scan axes Rx, Ry, or P for a list of patterns; detector axes Qx, Qy), and reads
// return patterns in scan order (C order over Rx, Ry) as float32 (count, Qx, Qy).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <tycho/tycho_components.h>

#include <tycho/sdk/hdf5/h5_handle.hpp>

namespace tycho::cxi {

enum class axis_role { Rx, Ry, P, Qx, Qy };

const char* role_name(axis_role r);

struct pattern_layout {
  std::vector<axis_role> roles;  // one per dataset axis
  std::vector<int64_t> dims;     // the dataset's shape
  int64_t scan[2] = {0, 0};      // (Rx, Ry); a list of P patterns is (P, 1)
  int64_t detector[2] = {0, 0};  // (Qx, Qy)
};

// Checks `roles` against `dims` (4-D: Rx, Ry, Qx, Qy once each; 3-D: P, Qx, Qy once each; no
// empty axis) and fills the shapes. `what` names the dataset and `roles_from` where the roles
// came from, for the messages.
pattern_layout make_layout(const std::vector<axis_role>& roles, const std::vector<int64_t>& dims,
                           const std::string& what, const std::string& roles_from);

// The roles of "[Rx, Ry, Qx, Qy]"-style names; throws naming `key` on an unknown name.
std::vector<axis_role> parse_roles(const std::vector<std::string>& names, const std::string& key);

// "[Rx, Ry, Qx, Qy]"
std::string roles_text(const std::vector<axis_role>& roles);

// Reads patterns [first, first + count) of `dataset` (laid out as `layout`) into `dst`, float32
// (count, Qx, Qy) C-contiguous, converted by HDF5 from the stored type. Datasets in the
// canonical order (Rx, Ry, Qx, Qy) or (P, Qx, Qy) are read straight into `dst`; others through
// a staging buffer of at most about 16 MiB, transposed in memory. Run inside an h5_session.
void read_patterns(hid_t dataset, const pattern_layout& layout, int64_t first, int64_t count,
                   float* dst, const std::string& description);

// The same patterns in the dtype `stored` (uint8, uint16, float16 or float32: the dataset's
// stored dtype, tycho_dataset_info::reads_stored_dtype), unconverted, into `dst`.
void read_stored_patterns(hid_t dataset, const pattern_layout& layout, int64_t first, int64_t count,
                          DLDataType stored, void* dst, const std::string& description);

}  // namespace tycho::cxi
