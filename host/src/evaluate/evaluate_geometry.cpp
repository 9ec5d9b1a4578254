#include "evaluate/evaluate_geometry.hpp"

#include <tycho/core/error.hpp>

#include <algorithm>
#include <cmath>

namespace tycho::host {

namespace {
std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}
}  // namespace

result_geometry read_result_geometry(const nlohmann::json& manifest, const double* positions_px, int64_t n) {
  result_geometry r;
  const auto& cal = manifest.at("calibration");
  r.pixel_A = cal.at("object_pixel_A").at(0).get<double>();
  if (const auto& s = cal.value("scan_step_A", nlohmann::json()); s.is_array() && s.size() == 2 && s[0].is_number())
    r.scan_step_A = s[0].get<double>();
  if (const auto& o = cal.value("scan_origin_A", nlohmann::json()); o.is_array() && o.size() == 2 && o[0].is_number())
    r.scan_origin_A = std::array<double, 2>{o[0].get<double>(), o[1].get<double>()};
  if (manifest.contains("data"))
    if (const auto& s = manifest["data"].value("scan_shape", nlohmann::json()); s.is_array() && s.size() == 2)
      r.scan_shape = std::vector<int64_t>{s[0].get<int64_t>(), s[1].get<int64_t>()};
  for (int axis = 0; axis < 2; ++axis) {
    double lo = 1e300, hi = -1e300;
    for (int64_t k = 0; k < n; ++k) lo = std::min(lo, positions_px[2 * k + axis]), hi = std::max(hi, positions_px[2 * k + axis]);
    r.fov_A[axis] = n > 0 ? (hi - lo) * r.pixel_A : 0;
  }
  return r;
}

std::optional<std::string> scan_origin_mismatch(const result_geometry& r, const truth_file& t) {
  if (!r.scan_origin_A) return std::nullopt;
  const auto& o = *r.scan_origin_A;
  // Half a pixel or more: the result's grid is not the truth's; the registration search may
  // still find it, but the expected alignment is off.
  if (std::abs(o[0] - t.scan_origin_A[0]) < 0.5 * r.pixel_A && std::abs(o[1] - t.scan_origin_A[1]) < 0.5 * r.pixel_A)
    return std::nullopt;
  return "the result was laid out with scan_origin_A = [" + g(o[0]) + ", " + g(o[1]) + "] Å, the truth has [" +
         g(t.scan_origin_A[0]) + ", " + g(t.scan_origin_A[1]) +
         "] Å: the comparison aligns on the truth's origin and searches ±12 px around it";
}

std::optional<std::string> scan_step_mismatch(const result_geometry& r, const truth_file& t) {
  if (!r.scan_step_A || !t.scan_step_A || std::abs(*r.scan_step_A - *t.scan_step_A) <= 1e-3 * *t.scan_step_A)
    return std::nullopt;
  return "the result's scan step is " + g(*r.scan_step_A) + " Å, the truth's " + g(*t.scan_step_A) +
         " Å: the positions do not match the truth's scan";
}

std::optional<std::string> scan_shape_mismatch(const result_geometry& r, const truth_file& t) {
  if (!r.scan_shape || !t.scan_shape || *r.scan_shape == *t.scan_shape) return std::nullopt;
  const auto& a = *r.scan_shape;
  const auto& b = *t.scan_shape;
  return "the result's scan is " + std::to_string(a[0]) + " x " + std::to_string(a[1]) + " positions, the truth's " +
         std::to_string(b[0]) + " x " + std::to_string(b[1]) + ": only the overlap of the two scans is meaningful";
}

std::optional<std::string> field_of_view_mismatch(const result_geometry& r, const truth_file& t) {
  const double cell[2] = {double(t.phase.shape[0]) * t.pixel_size_A, double(t.phase.shape[1]) * t.pixel_size_A};
  if (r.fov_A[0] <= cell[0] && r.fov_A[1] <= cell[1]) return std::nullopt;
  return "the scanned field of view (" + g(r.fov_A[0]) + " x " + g(r.fov_A[1]) + " Å) is larger than the truth's cell (" +
         g(cell[0]) + " x " + g(cell[1]) + " Å): the truth is repeated periodically to cover it";
}

}  // namespace tycho::host
