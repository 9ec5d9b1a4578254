#include "tycho/host/evaluate.hpp"

#include <tycho/core/accuracy.hpp>
#include <tycho/core/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <complex>

#include "tycho/host/result_record.hpp"

namespace tycho::host {

namespace {
double scalar(const owned_array& a, const std::string& path) {
  if (a.count() < 1) fail(TYCHO_ERR_BAD_DATA, "'", path, "': array '", a.name, "' is empty");
  if (a.dtype.code == kDLFloat && a.dtype.bits == 64) return a.as<double>()[0];
  if (a.dtype.code == kDLFloat && a.dtype.bits == 32) return a.as<float>()[0];
  fail(TYCHO_ERR_BAD_DATA, "'", path, "': array '", a.name, "' must be float64 or float32");
}
void expect(const owned_array& a, const std::string& path, uint8_t code, uint8_t bits, size_t ndim) {
  if (a.dtype.code != code || a.dtype.bits != bits || a.shape.size() != ndim)
    fail(TYCHO_ERR_BAD_DATA, "'", path, "': array '", a.name, "' has the wrong dtype or rank (",
         a.shape.size(), "-D); expected ", ndim, "-D of ", code == kDLComplex ? "complex" : "float",
         int(bits));
}

// A truth file that records its scan (scan_shape, scan_step_A: the shared MoS2 truth does)
// must be covered by the result's scan, or the score is that of a few pixels: a result with 10
// positions over a 1 x 22 px field of view scored 0.98. Refuses a result with fewer positions
// or a field of view (the positions' extent) short of the truth scan's by more than a pixel.
void check_covers_truth_scan(const loaded_record& truth, const std::string& truth_path, const owned_array& positions,
                             double pixel_A, const std::string& result_path) {
  const auto has = [&](const char* name) {
    return std::any_of(truth.arrays.begin(), truth.arrays.end(), [&](const owned_array& a) { return a.name == name; });
  };
  if (!has("scan_shape") || !has("scan_step_A")) return;
  const owned_array& shape_a = truth.array("scan_shape", truth_path);
  const owned_array& step_a = truth.array("scan_step_A", truth_path);
  if (shape_a.count() != 2 || shape_a.dtype.code != kDLInt || shape_a.dtype.bits != 64)
    fail(TYCHO_ERR_BAD_DATA, "'", truth_path, "': array 'scan_shape' must hold 2 int64 values");
  const int64_t scan[2] = {shape_a.as<int64_t>()[0], shape_a.as<int64_t>()[1]};
  const double step[2] = {scalar(step_a, truth_path), step_a.count() > 1 ? step_a.as<double>()[1] : scalar(step_a, truth_path)};
  if (step_a.count() > 1 && step_a.dtype.bits != 64)
    fail(TYCHO_ERR_BAD_DATA, "'", truth_path, "': array 'scan_step_A' must be float64");
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
  const double need_px[2] = {double(scan[0] - 1) * step[0] / pixel_A, double(scan[1] - 1) * step[1] / pixel_A};
  const bool short_fov = !(extent_px[0] >= need_px[0] - 1.0 && extent_px[1] >= need_px[1] - 1.0);
  if (scan[0] < 1 || scan[1] < 1 || p < scan[0] * scan[1] || short_fov)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "'", result_path, "' does not cover the scan of the truth '", truth_path,
         "': its ", p, " positions span ", extent_px[0], " x ", extent_px[1], " px of ", pixel_A,
         " Å, the truth was scanned at ", scan[0], " x ", scan[1], " positions spanning ", need_px[0], " x ",
         need_px[1], " px; evaluate a reconstruction of the truth's whole scan");
}
}  // namespace

std::string evaluate_result(const registry& reg, const std::string& result_path,
                            const std::string& truth_path, double sigma_A, double fov_fraction) {
  auto result = load_record(format_for_path(reg, result_path), result_path);
  auto truth = load_record(format_for_path(reg, truth_path), truth_path);
  if (result.manifest_json.empty())
    fail(TYCHO_ERR_BAD_DATA, "'", result_path, "' has no manifest.json: not a tycho result");
  auto manifest = nlohmann::json::parse(result.manifest_json);
  double pixel = manifest.at("calibration").at("object_pixel_A").at(0).get<double>();

  const owned_array& object = result.array("object", result_path);
  const owned_array& positions = result.array("positions_px", result_path);
  const owned_array& phase = truth.array("phase", truth_path);
  const owned_array& origin = truth.array("scan_origin_A", truth_path);
  // complex64, or complex128 from a float64 run.
  const bool object64 = object.dtype.code == kDLComplex && object.dtype.bits == 128;
  expect(object, result_path, kDLComplex, object64 ? 128 : 64, 3);
  expect(positions, result_path, kDLFloat, 64, 2);
  expect(phase, truth_path, kDLFloat, 32, 2);
  if (positions.shape[1] != 2) fail(TYCHO_ERR_BAD_DATA, "'", result_path, "': array 'positions_px' must be (P, 2)");
  check_covers_truth_scan(truth, truth_path, positions, pixel, result_path);
  if (origin.count() != 2 || origin.dtype.bits != 64)
    fail(TYCHO_ERR_BAD_DATA, "'", truth_path, "': scan_origin_A must hold 2 float64 values");

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
  in.truth_phase = phase.as<float>();
  in.truth_shape[0] = phase.shape[0];
  in.truth_shape[1] = phase.shape[1];
  in.truth_pixel_A = scalar(truth.array("pixel_size_A", truth_path), truth_path);
  in.scan_origin_A[0] = origin.as<double>()[0];
  in.scan_origin_A[1] = origin.as<double>()[1];
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
