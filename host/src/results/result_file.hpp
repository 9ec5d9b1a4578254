// The one reader of tycho result files: `tycho evaluate`, `tycho reconstruct --from` and
// [data] positions_from all read a result through it, so that no command trusts what another
// refuses. A result file is untrusted input; before anything is inflated (zip format) its
// manifest and every .npy member's header are checked against each other:
//   - manifest.json: "format" is "tycho-result" (a prepared file is named as one), the format
//     version, the history's iteration counts, the scan, window, pixel, step, origin and padding
//     the shapes follow from, each optimizer's step count;
//   - each member's declared size is its .npy header's (a header that lies about its shape is
//     refused as such), and each shape is what the manifest implies: object (slices, H, W) with
//     (H, W) the raster's layout (listed positions: at most 2^31 px per axis), probe (modes, N0,
//     N1), positions (P, 2), loss_history (iterations,), mask (N0, N1), optimizer states as
//     their parameter, object_tile_steps (rows, cols) int64 as batching.tile_px tiles the object;
//     any other .npy member is refused. A member that would inflate to more (a
//     zip bomb) is refused here, in milliseconds;
// then the arrays are loaded through the format plugin and checked again (any format): dtypes,
// shapes, finite values, every probe window inside the object.
// Errors name the file, the member or key and what was expected (TYCHO_ERR_BAD_DATA;
// TYCHO_ERR_NOT_FOUND for a missing file).
#pragma once

#include <tycho/core/scan_map.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "results/manifest_reader.hpp"
#include "tycho/host/registry.hpp"
#include "tycho/host/result_record.hpp"

namespace tycho::host {

// The state one optimizer saved (manifest "optimizer_state.<parameter>").
struct saved_optimizer {
  std::string optimizer;            // the component's name
  int64_t steps = 0;                // checked: 0 to min(2^53, iterations x patterns)
  std::vector<std::string> arrays;  // its state arrays, saved as optimizer.<parameter>.<array>
};

struct result_file {
  std::string path;
  manifest_reader manifest;
  loaded_record record;
  int64_t iterations = 0;                         // history.iterations = loss_history's length
  std::optional<int64_t> schedule_iterations;     // absent in results of tychos before resuming
  std::array<int64_t, 2> scan_shape{}, window_shape{};
  std::array<double, 2> object_pixel_A{}, scan_step_A{}, scan_origin_A{};
  int64_t object_padding_px = 0;
  int64_t tile_px = 0;  // batching.tile_px: compact batches' tiles (object_tile_steps), 0 for none
  bool raster = true;  // a raster step is recorded: the object's shape follows from the calibration
  scan_map map;        // preprocess.scan_map.linear: the map the run laid its object out under (identity: none)
  std::optional<saved_optimizer> object_optimizer, probe_optimizer;  // when optimizer_state holds them

  int64_t patterns() const { return scan_shape[0] * scan_shape[1]; }
  const owned_array& array(const std::string& name) const { return record.array(name, path); }
  bool has(const std::string& name) const;
};

// Reads and checks `path` as a tycho result (see above). `role` names the file's use at the
// start of every message ("--from", "[data] positions_from"; "" for none); `use` says why it is
// read, in the message about a non-finite array ("resumed with --from").
result_file read_result_file(const registry& reg, const std::string& path, const std::string& role = "",
                             const std::string& use = "read as a tycho result");

// "complex64", "float32", "uint8": a dtype by name, for messages.
std::string dtype_name_of(DLDataType t);

}  // namespace tycho::host
