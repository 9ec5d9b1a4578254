// Helpers every source plugin needs in the same form: resolving a config path, handing out the
// append-only tycho_dataset_info, and checking a read() or read_positions() request against the
// data set.
#pragma once

#include <tycho/sdk.hpp>
#include <tycho/sdk/checked.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>

namespace tycho::sdk {

// `path` from a config table, made absolute against the config file's folder (unless it is
// absolute already, or the config came from text with no folder).
inline std::string resolve_path(const std::string& base_dir, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_absolute() || base_dir.empty()) return p.string();
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

// Copies `info` into the caller's struct, append-only style: only the bytes both sides know.
// A zeroed struct_size means the caller's build matches this one (a value-initialised struct).
inline void copy_dataset_info(const tycho_dataset_info& info, tycho_dataset_info* out) {
  std::size_t n = out->struct_size == 0
                      ? sizeof(tycho_dataset_info)
                      : std::min<std::size_t>(out->struct_size, sizeof(tycho_dataset_info));
  tycho_dataset_info copy = info;
  copy.struct_size = static_cast<uint32_t>(n);
  std::memcpy(out, &copy, n);
}

// Throws unless patterns [first, first+count) exist in a (scan[0] x scan[1]) data set and `dst`
// is a host float32 (count, detector[0], detector[1]) array. `source` names the component.
inline void check_read_request(const char* source, const std::string& description,
                               const int64_t scan[2], const int64_t detector[2], int64_t first,
                               int64_t count, const DLTensor* dst) {
  const int64_t total = checked_mul(scan[0], scan[1]).value_or(-1);
  if (total < 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "'", description, "' declares ", scan[0], " x ", scan[1],
         " patterns, which is not a valid count");
  if (first < 0 || count < 0 || first > total || count > total - first)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "patterns [", first, ", ", first + count,
         ") are out of range: '", description, "' holds ", total, " patterns (", scan[0], " x ",
         scan[1], ")");
  expect_tensor(dst, "patterns", dtype_float32, 3);
  if (dst->device.device_type != kDLCPU && dst->device.device_type != kDLCUDAHost)
    fail(TYCHO_ERR_INVALID_ARGUMENT, source, " source: the patterns array must be in host memory");
  if (dst->shape[0] != count || dst->shape[1] != detector[0] || dst->shape[2] != detector[1])
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the patterns array has shape ", shape_string(*dst),
         ", expected (", count, ", ", detector[0], ", ", detector[1], ") to read ", count,
         " patterns of '", description, "'");
}

// Throws unless `dst` is a host float64 (scan[0]·scan[1], 2) array, as read_positions() takes.
inline void check_positions_request(const char* source, const std::string& description,
                                    const int64_t scan[2], const DLTensor* dst) {
  expect_tensor(dst, "positions", dtype_float64, 2);
  const int64_t total = checked_mul(scan[0], scan[1]).value_or(-1);
  if (dst->device.device_type != kDLCPU && dst->device.device_type != kDLCUDAHost)
    fail(TYCHO_ERR_INVALID_ARGUMENT, source, " source: the positions array must be in host memory");
  if (total < 0 || dst->shape[0] != total || dst->shape[1] != 2)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the positions array has shape ", shape_string(*dst),
         ", expected (", total, ", 2) for the positions of '", description, "'");
}

}  // namespace tycho::sdk
