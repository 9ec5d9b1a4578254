// The scan's shape for a source whose file holds a flat stack of N frames (N, Qx, Qy) and may or
// may not record how they were scanned (a Merlin .mib, an EIGER/ARINA data file, a 3-D HDF5
// dataset, a DM 3-D stack, an EMPAD .raw). The config's `[data] scan_shape = [Rx, Ry]` (Rx rows
// of Ry positions, scan order C over them: Ry the fast axis) is checked against N; without it
// the shape the file records is used (checked too); with neither, the source refuses the data
// rather than guess, since a wrong shape silently scrambles a reconstruction.
//
// A source that offers the key declares it with scan_shape_setting() in its settings and lists
// "scan_shape" in its config keys. Header-only, no state: thread-safe. Errors: tycho::sdk::error
// (TYCHO_ERR_INVALID_ARGUMENT for the config's key, TYCHO_ERR_BAD_DATA for the file's shape).
#pragma once

#include <tycho/sdk.hpp>
#include <tycho/sdk/checked.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace tycho::sdk {

using scan_shape_t = std::array<int64_t, 2>;

// The typed declaration of the key, for a source's settings table.
inline tycho_setting scan_shape_setting() {
  return setting("scan_shape", TYCHO_SETTING_INTEGER_LIST, nullptr,
                 "[Rx, Ry]: the scan's rows and positions per row (Ry the fast axis), for a file holding a flat "
                 "stack of frames; must multiply to the number of frames; default: the shape the file records");
}

namespace detail {
// "e.g. [4, 2], [2, 4], [8, 1]": a few factor pairs of n nearest a square, for messages.
inline std::string factor_pairs_text(int64_t n) {
  if (n < 1) return "";
  int64_t best = 1;
  for (int64_t d = 1; d <= n / d; ++d)
    if (n % d == 0) best = d;
  std::string s = "e.g. ";
  if (best > 1) s += cat("[", n / best, ", ", best, "], [", best, ", ", n / best, "], ");
  return s + cat("[", n, ", 1]");
}
}  // namespace detail

// [data] scan_shape as two integers >= 1 whose product fits 64 bits; nullopt when absent.
inline std::optional<scan_shape_t> config_scan_shape(const config_view& cfg) {
  const auto first = cfg.get_int("scan_shape[0]");
  const std::string key = cat("config key 'scan_shape' in ", cfg.table_name());
  if (!first) {
    // Absent, or not an array of integers (an int look-up of a table key reports its type).
    int probe = 0;
    if (host()->config_get_bool(cfg.raw(), "scan_shape", &probe) == TYCHO_ERR_NOT_FOUND) return std::nullopt;
    fail(TYCHO_ERR_INVALID_ARGUMENT, key, " must be two integers [Rx, Ry] (scan rows, positions per row)");
  }
  const auto second = cfg.get_int("scan_shape[1]");
  const auto third = cfg.get_int("scan_shape[2]");
  if (!second || third)
    fail(TYCHO_ERR_INVALID_ARGUMENT, key, " must be two integers [Rx, Ry] (scan rows, positions per row), got ",
         second ? "more than two" : "one");
  const scan_shape_t s{*first, *second};
  if (s[0] < 1 || s[1] < 1 || !checked_mul(s[0], s[1]))
    fail(TYCHO_ERR_INVALID_ARGUMENT, key, " = [", s[0], ", ", s[1],
         "]: each must be at least 1 and their product at most 2^63");
  return s;
}

// The scan shape of `frames` frames held by `where` (the file, for messages): the config's
// scan_shape when given, else `recorded` (the file's own, named `recorded_from`, e.g. "its .hdr's
// ScanX/ScanY"), each checked to multiply to `frames`; else (1, 1) for a single frame. Refuses
// when neither gives one for several frames. A config
// shape that differs from the file's is used, with a warning logged by `component`.
inline scan_shape_t resolve_scan_shape(const config_view& cfg, int64_t frames, const std::optional<scan_shape_t>& recorded,
                                       const std::string& recorded_from, const std::string& where,
                                       const char* component) {
  const std::optional<scan_shape_t> given = config_scan_shape(cfg);
  if (given) {
    if (given->at(0) * given->at(1) != frames)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'scan_shape' in ", cfg.table_name(), " = [", given->at(0), ", ",
           given->at(1), "] makes ", given->at(0) * given->at(1), " positions, but '", where, "' holds ", frames,
           " frames: the shape must multiply to the frame count (", detail::factor_pairs_text(frames), ")");
    if (recorded && *recorded != *given)
      log(TYCHO_LOG_WARNING, component,
          cat("'", where, "': [data] scan_shape = [", given->at(0), ", ", given->at(1), "] replaces ", recorded_from,
              " [", recorded->at(0), ", ", recorded->at(1), "]"));
    return *given;
  }
  if (recorded) {
    const auto product = checked_mul(recorded->at(0), recorded->at(1));
    if (recorded->at(0) < 1 || recorded->at(1) < 1 || !product || *product != frames)
      fail(TYCHO_ERR_BAD_DATA, "'", where, "': ", recorded_from, " [", recorded->at(0), ", ", recorded->at(1),
           "] does not match the ", frames, " frames it holds; set [data] scan_shape = [Rx, Ry] (",
           detail::factor_pairs_text(frames), ")");
    return *recorded;
  }
  if (frames == 1) return {1, 1};  // one frame: one position, whatever was scanned
  fail(TYCHO_ERR_INVALID_ARGUMENT, "'", where, "' holds ", frames,
       " frames but does not record the scan's shape: set [data] scan_shape = [Rx, Ry] (scan rows, positions "
       "per row; ",
       detail::factor_pairs_text(frames), ")");
}

}  // namespace tycho::sdk
