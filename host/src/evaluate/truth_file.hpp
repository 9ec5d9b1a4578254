// The ground truth of `tycho evaluate`: the members it uses from an .npz (or any zip of .npy
// members), read one by one, so that members it does not use (metadata strings, other arrays
// of a simulation) are never parsed and cannot refuse the file. Beyond the one phase every truth
// has, optional members enable more figures (../shared/data/*/README.md): a thick specimen's
// per-depth phases (si110), the phases and depths of separate layers (bilayer), the true scan
// positions (mos2_partial). A member a figure needs that is absent only leaves that figure out.
#pragma once

#include <tycho/core/array.hpp>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace tycho::host {

// A phase map in radians, float32, (h, w) C order (axis 0 = x = Rx), over the truth's cell.
struct truth_phase {
  std::string name;  // the member it came from, e.g. "phase_top"
  int64_t h = 0, w = 0;
  std::vector<float> values;
};

// One slab of a thick specimen: its phase and its depth range [z0, z1) from the entrance surface.
struct truth_slab {
  truth_phase phase;
  double z0_A = 0, z1_A = 0;
};

// One separate layer: its phase and the depth of its centre below the entrance surface.
struct truth_layer {
  std::string name;  // "top", "bottom"
  truth_phase phase;
  double depth_A = 0;
};

struct truth_file {
  // The phase of the main figures: 'phase', or 'phase_total' when there is no 'phase'.
  owned_array phase;                    // (H, W) float32 or float64, read as stored (C order)
  double pixel_size_A = 0;              // scalar
  double scan_origin_A[2] = {0, 0};     // (2,)
  // Optional: the scan the truth was simulated for, compared with the result's when present.
  std::optional<double> scan_step_A;    // scalar, or (2,) with equal values
  std::optional<std::vector<int64_t>> scan_shape;  // (2,) integers
  // Optional: the total phase that may exceed π (`phase_total`, (H, W)), scored high-passed and
  // unwrapped; its per-slab parts (`phase_slices` (G, H, W) with `slice_z_edges_A` (G, 2), else
  // `slice_thickness_A`, else `thickness_A` / G); each layer's phase (`phase_top`,
  // `phase_bottom`, (H, W)) with `layer_depths_A` (2,); the true and nominal scan positions
  // (`positions_true_A`, `positions_nominal_A`, (P, 2) Å, C order over the scan).
  std::optional<truth_phase> phase_total;
  std::vector<truth_slab> slabs;
  std::vector<truth_layer> layers;
  std::vector<double> positions_true_A, positions_nominal_A;  // 2P values each; empty: absent
  std::vector<std::string> ignored;     // members present and not used
  std::vector<std::string> warnings;    // members present that cannot be used, and why
};

// Reads `path`. Throws tycho::error naming the file and the member: TYCHO_ERR_NOT_FOUND for a
// missing file or required member (listing the members present), TYCHO_ERR_BAD_DATA for a
// member of the wrong dtype or shape (an optional phase whose (H, W) differs from the main
// phase's, positions not (P, 2), layer depths not 2 values), TYCHO_ERR_IO for an archive that
// cannot be read.
truth_file read_truth_file(const std::string& path);

}  // namespace tycho::host
