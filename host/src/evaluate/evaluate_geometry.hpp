// What `tycho evaluate` warns about when a result and its truth describe different scans: the
// figures are still computed (over the overlap, against the truth's origin), but a reader must
// know they are partial. One small check per property; each returns the warning or nothing.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "evaluate/truth_file.hpp"

namespace tycho::host {

// The result's scan and geometry, from its manifest and positions.
struct result_geometry {
  double pixel_A = 0;
  std::optional<double> scan_step_A;              // null for listed positions
  std::optional<std::vector<int64_t>> scan_shape;
  std::optional<std::array<double, 2>> scan_origin_A;
  double fov_A[2] = {0, 0};                       // extent of the probe centres, Å
};
result_geometry read_result_geometry(const nlohmann::json& manifest, const double* positions_px, int64_t n);

std::optional<std::string> scan_origin_mismatch(const result_geometry& r, const truth_file& t);
std::optional<std::string> scan_step_mismatch(const result_geometry& r, const truth_file& t);
std::optional<std::string> scan_shape_mismatch(const result_geometry& r, const truth_file& t);
std::optional<std::string> field_of_view_mismatch(const result_geometry& r, const truth_file& t);

}  // namespace tycho::host
