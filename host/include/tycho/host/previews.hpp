// PNG previews beside a result: object phase, object amplitude, probe amplitude (libpng).
#pragma once

#include <tycho/core/array.hpp>

#include <string>
#include <vector>

namespace tycho::host {

// Writes an 8-bit greyscale PNG of `values` (rows × cols, C order) mapped linearly from
// [lo, hi] to [0, 255]; atomically (temporary file, then rename).
void write_png_grey(const std::string& path, const std::vector<float>& values, int64_t rows,
                    int64_t cols, float lo, float hi);

// Writes <stem>.object_phase.png, <stem>.object_amplitude.png and <stem>.probe.png beside
// `result_path` (stem = the result's name without extension). The object's grey scale spans
// the 1st to 99th percentile inside the scanned field of view (from positions_px), so the
// unscanned border does not wash it out. Returns the paths written.
std::vector<std::string> write_previews(const std::string& result_path, const owned_array& object,
                                        const owned_array& probe, const owned_array& positions_px);

}  // namespace tycho::host
