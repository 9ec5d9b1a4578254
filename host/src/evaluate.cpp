#include "tycho/host/evaluate.hpp"

#include <tycho/core/accuracy.hpp>
#include <tycho/core/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <complex>

#include "evaluate_geometry.hpp"
#include "truth_file.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/result_record.hpp"

namespace tycho::host {

namespace {
// A warning per way the result's scan differs from the truth's (evaluate_geometry.hpp).
void warn_geometry_mismatches(const nlohmann::json& manifest, const owned_array& positions, const truth_file& truth) {
  const result_geometry r = read_result_geometry(manifest, positions.as<double>(), positions.shape[0]);
  for (const auto& w : {scan_origin_mismatch(r, truth), scan_step_mismatch(r, truth), scan_shape_mismatch(r, truth),
                        field_of_view_mismatch(r, truth)})
    if (w) log_warning("evaluate", *w);
}
// A truth file that records its scan (scan_shape, scan_step_A: the shared MoS2 truth does)
// must be covered by the result's scan, or the score is that of a few pixels: a result with 10
// positions over a 1 x 22 px field of view scored 0.98. Refuses a result with fewer positions
// or a field of view (the positions' extent) short of the truth scan's by more than a pixel.
// (Smaller differences of origin, step or shape are warnings: warn_geometry_mismatches.)
void check_covers_truth_scan(const truth_file& truth, const std::string& truth_path, const owned_array& positions,
                             double pixel_A, const std::string& result_path) {
  if (!truth.scan_shape || !truth.scan_step_A) return;
  const int64_t scan[2] = {(*truth.scan_shape)[0], (*truth.scan_shape)[1]};
  const double step = *truth.scan_step_A;
  const int64_t p = positions.shape[0];
  double extent_px[2] = {0, 0};
  for (int a = 0; a < 2; ++a) {
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t k = 0; k < p; ++k) {
      lo = std::min(lo, positions.as<double>()[2 * k + a]);
      hi = std::max(hi, positions.as<double>()[2 * k + a]);
    }
    extent_px[a] = p > 0 ? hi - lo : 0.0;
  }
  const double need_px[2] = {double(scan[0] - 1) * step / pixel_A, double(scan[1] - 1) * step / pixel_A};
  const bool short_fov = !(extent_px[0] >= need_px[0] - 1.0 && extent_px[1] >= need_px[1] - 1.0);
  if (scan[0] < 1 || scan[1] < 1 || p < scan[0] * scan[1] || short_fov)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "'", result_path, "' does not cover the scan of the truth '", truth_path,
         "': its ", p, " positions span ", extent_px[0], " x ", extent_px[1], " px of ", pixel_A,
         " Å, the truth was scanned at ", scan[0], " x ", scan[1], " positions spanning ", need_px[0], " x ",
         need_px[1], " px; evaluate a reconstruction of the truth's whole scan");
}
void expect(const owned_array& a, const std::string& path, uint8_t code, uint8_t bits, size_t ndim) {
  if (a.dtype.code != code || a.dtype.bits != bits || a.shape.size() != ndim)
    fail(TYCHO_ERR_BAD_DATA, "'", path, "': array '", a.name, "' has the wrong dtype or rank (",
         a.shape.size(), "-D); expected ", ndim, "-D of ", code == kDLComplex ? "complex" : "float",
         int(bits));
}
}  // namespace

std::string evaluate_result(const registry& reg, const std::string& result_path,
                            const std::string& truth_path, double sigma_A, double fov_fraction) {
  auto result = load_record(format_for_path(reg, result_path), result_path);
  // Only the members the metric uses are read: others (metadata strings, ...) are ignored.
  const truth_file truth = read_truth_file(truth_path);
  if (result.manifest_json.empty())
    fail(TYCHO_ERR_BAD_DATA, "'", result_path, "' has no manifest.json: not a tycho result");
  auto manifest = nlohmann::json::parse(result.manifest_json);
  double pixel = manifest.at("calibration").at("object_pixel_A").at(0).get<double>();

  const owned_array& object = result.array("object", result_path);
  const owned_array& positions = result.array("positions_px", result_path);
  // complex64, or complex128 from a float64 run.
  const bool object64 = object.dtype.code == kDLComplex && object.dtype.bits == 128;
  expect(object, result_path, kDLComplex, object64 ? 128 : 64, 3);
  expect(positions, result_path, kDLFloat, 64, 2);
  if (positions.shape[1] != 2) fail(TYCHO_ERR_BAD_DATA, "'", result_path, "': array 'positions_px' must be (P, 2)");
  check_covers_truth_scan(truth, truth_path, positions, pixel, result_path);
  warn_geometry_mismatches(manifest, positions, truth);
  // The metric reads float32 phases: a float64 truth is converted.
  std::vector<float> phase(std::size_t(truth.phase.count()));
  for (std::size_t k = 0; k < phase.size(); ++k)
    phase[k] = truth.phase.dtype.bits == 64 ? float(truth.phase.as<double>()[k]) : truth.phase.as<float>()[k];

  accuracy_input in;
  if (object64)
    in.object64 = object.as<std::complex<double>>();  // the first slice
  else
    in.object = object.as<std::complex<float>>();
  in.object_shape[0] = object.shape[1];
  in.object_shape[1] = object.shape[2];
  in.object_pixel_A = pixel;
  in.positions_px = positions.as<double>();
  in.n_positions = positions.shape[0];
  in.truth_phase = phase.data();
  in.truth_shape[0] = truth.phase.shape[0];
  in.truth_shape[1] = truth.phase.shape[1];
  in.truth_pixel_A = truth.pixel_size_A;
  in.scan_origin_A[0] = truth.scan_origin_A[0];
  in.scan_origin_A[1] = truth.scan_origin_A[1];
  in.sigma_A = sigma_A;
  in.fov_fraction = fov_fraction;
  accuracy_result r = evaluate_accuracy(in);

  nlohmann::ordered_json j;
  j["result"] = result_path;
  j["truth"] = truth_path;
  j["pearson"] = r.pearson;
  j["rms_rad"] = r.rms_rad;
  j["shift_px"] = {r.shift_px[0], r.shift_px[1]};
  j["fov_px"] = {r.fov_shape[0], r.fov_shape[1]};
  j["sigma_A"] = sigma_A;
  j["iterations"] = manifest.at("history").at("iterations");
  return j.dump(2);
}

}  // namespace tycho::host
