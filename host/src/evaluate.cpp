#include "tycho/host/evaluate.hpp"

#include <tycho/core/accuracy.hpp>
#include <tycho/core/error.hpp>

#include <nlohmann/json.hpp>

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
