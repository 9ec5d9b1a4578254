// The ground truth of `tycho evaluate`: the members it uses from an .npz (or any zip of .npy
// members), read one by one, so that members it does not use (metadata strings, other arrays
// of a simulation) are never parsed and cannot refuse the file.
#pragma once

#include <tycho/core/array.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tycho::host {

struct truth_file {
  owned_array phase;                    // (H, W) float32 or float64, read as stored (C order)
  double pixel_size_A = 0;              // scalar
  double scan_origin_A[2] = {0, 0};     // (2,)
  // Optional: the scan the truth was simulated for, compared with the result's when present.
  std::optional<double> scan_step_A;    // scalar, or (2,) with equal values
  std::optional<std::vector<int64_t>> scan_shape;  // (2,) integers
  std::vector<std::string> ignored;     // members present and not used
};

// Reads `path`. Throws tycho::error naming the file and the member: TYCHO_ERR_NOT_FOUND for a
// missing file or required member (listing the members present), TYCHO_ERR_BAD_DATA for a
// member of the wrong dtype or shape, TYCHO_ERR_IO for an archive that cannot be read.
truth_file read_truth_file(const std::string& path);

}  // namespace tycho::host
