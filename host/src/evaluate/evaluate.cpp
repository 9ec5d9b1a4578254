#include "tycho/host/evaluate.hpp"

#include <tycho/core/accuracy.hpp>
#include <tycho/core/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <complex>

#include "data/finite_values.hpp"
#include "evaluate/evaluate_depth.hpp"
#include "evaluate/evaluate_geometry.hpp"
#include "evaluate/truth_file.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/result_record.hpp"
#include "results/result_file.hpp"

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

// The result's slices as complex128, (S, H, W) C order.
std::vector<std::complex<double>> slices_complex128(const owned_array& object, bool object64) {
  const std::size_t n = std::size_t(object.count());
  if (object64) return {object.as<std::complex<double>>(), object.as<std::complex<double>>() + n};
  const auto* z = object.as<std::complex<float>>();
  return {z, z + n};
}

// The result's positions in Å, (P, 2): positions_A when saved, else positions_px × the pixel.
std::vector<double> positions_in_A(const loaded_record& result, const owned_array& positions_px,
                                   const nlohmann::json& manifest) {
  for (const auto& a : result.arrays)
    if (a.name == "positions_A" && a.dtype.code == kDLFloat && a.dtype.bits == 64 && a.shape == positions_px.shape)
      return {a.as<double>(), a.as<double>() + a.count()};
  const auto& px = manifest.at("calibration").at("object_pixel_A");
  const double pixel[2] = {px.at(0).get<double>(), px.size() > 1 ? px.at(1).get<double>() : px.at(0).get<double>()};
  std::vector<double> v(positions_px.as<double>(), positions_px.as<double>() + positions_px.count());
  for (std::size_t k = 0; k < v.size(); ++k) v[k] *= pixel[k % 2];
  return v;
}

// The nominal raster the run started from, (P, 2) Å: the truth's positions_nominal_A, else
// scan_origin_A + (i, j) · scan_step_A over its scan_shape (C order); empty when unknown.
std::vector<double> nominal_positions(const truth_file& truth, int64_t p) {
  if (!truth.positions_nominal_A.empty()) return truth.positions_nominal_A;
  if (!truth.scan_shape || !truth.scan_step_A || (*truth.scan_shape)[0] * (*truth.scan_shape)[1] != p) return {};
  std::vector<double> v;
  for (int64_t i = 0; i < (*truth.scan_shape)[0]; ++i)
    for (int64_t j = 0; j < (*truth.scan_shape)[1]; ++j) {
      v.push_back(truth.scan_origin_A[0] + double(i) * *truth.scan_step_A);
      v.push_back(truth.scan_origin_A[1] + double(j) * *truth.scan_step_A);
    }
  return v;
}

// What is constant, for messages ("the object's local phase").
const char* constant_side(const accuracy_result& r) {
  return r.constant == constant_map::object ? "the result's map" : "the truth's map";
}

// The Pearson figure, or null (JSON has no NaN) where one map is constant over the field of view
// and the correlation is undefined: a per-depth or per-layer figure of an empty slab, with a
// warning naming it (the main figure refuses instead, check_defined).
nlohmann::ordered_json pearson_or_null(const accuracy_result& r, const std::string& what) {
  if (r.constant == constant_map::none) return r.pearson;
  log_warning("evaluate", cat(what, ": ", constant_side(r), " is constant over the field of view, so the correlation "
                                    "is undefined: pearson is null"));
  return nullptr;
}

nlohmann::ordered_json figures(const accuracy_result& r, const std::string& what) {
  return {{"pearson", pearson_or_null(r, what)}, {"rms_rad", r.rms_rad}, {"shift_px", {r.shift_px[0], r.shift_px[1]}}};
}

// Refuses an array holding NaN or inf, naming the file, the array and the first such element
// (a complex element when either part is): a figure computed from it is NaN or 0 (an object
// with one NaN pixel scored Pearson 0).
void expect_finite(const owned_array& a, const std::string& path, const char* expected) {
  const non_finite_count c = count_non_finite(a);
  if (c.count > 0)
    fail(TYCHO_ERR_BAD_DATA, "'", path, "': array '", a.name, "' holds ", c.count, " non-finite value",
         c.count == 1 ? "" : "s", " (first: ", c.first_value, " at element ", c.first, "); expected finite ",
         expected);
}

std::string evaluate_checked(const registry& reg, const std::string& result_path, const std::string& truth_path,
                             double sigma_A, double fov_fraction, std::optional<double> slice_thickness_A);
}  // namespace

std::string evaluate_result(const registry& reg, const std::string& result_path, const std::string& truth_path,
                            double sigma_A, double fov_fraction, std::optional<double> slice_thickness_A) {
  try {
    return evaluate_checked(reg, result_path, truth_path, sigma_A, fov_fraction, slice_thickness_A);
  } catch (const error& e) {
    // The metric's own refusals name neither file.
    const std::string text = e.what();
    if (text.rfind("accuracy: ", 0) != 0) throw;
    fail(e.status, "'", result_path, "' against the truth '", truth_path, "': ", text.substr(10));
  }
}

namespace {
std::string evaluate_checked(const registry& reg, const std::string& result_path, const std::string& truth_path,
                             double sigma_A, double fov_fraction, std::optional<double> slice_thickness_A) {
  // Read and checked as `tycho reconstruct --from` reads it (results/result_file.hpp): format
  // and version, every member's size against the manifest before anything is inflated, shapes,
  // finite values, the positions inside the object.
  const result_file file = read_result_file(reg, result_path, "", "evaluated");
  const loaded_record& result = file.record;
  const nlohmann::json& manifest = file.manifest.json();
  const truth_file truth = read_truth_file(truth_path);
  for (const auto& w : truth.warnings) log_warning("evaluate", "'" + truth_path + "': " + w);
  const double pixel = file.object_pixel_A[0];

  const owned_array& object = result.array("object", result_path);
  const owned_array& positions = result.array("positions_px", result_path);
  // complex64, or complex128 from a float64 run.
  const bool object64 = object.dtype.code == kDLComplex && object.dtype.bits == 128;
  expect(object, result_path, kDLComplex, object64 ? 128 : 64, 3);
  expect(positions, result_path, kDLFloat, 64, 2);
  if (positions.shape[1] != 2) fail(TYCHO_ERR_BAD_DATA, "'", result_path, "': array 'positions_px' must be (P, 2)");
  if (object.shape[0] < 1) fail(TYCHO_ERR_BAD_DATA, "'", result_path, "': array 'object' has no slices");
  if (object.shape[1] < 1 || object.shape[2] < 1)
    fail(TYCHO_ERR_BAD_DATA, "'", result_path, "': array 'object' is ", object.shape[0], " x ", object.shape[1], " x ",
         object.shape[2], "; expected slices of at least 1 x 1 pixels");
  expect_finite(object, result_path, "complex values");
  expect_finite(positions, result_path, "positions in pixels");
  check_covers_truth_scan(truth, truth_path, positions, pixel, result_path);
  warn_geometry_mismatches(manifest, positions, truth);
  const int64_t slices = object.shape[0], h = object.shape[1], w = object.shape[2];
  // The metric reads float32 phases: a float64 truth is converted.
  std::vector<float> phase(std::size_t(truth.phase.count()));
  for (std::size_t k = 0; k < phase.size(); ++k)
    phase[k] = truth.phase.dtype.bits == 64 ? float(truth.phase.as<double>()[k]) : truth.phase.as<float>()[k];

  // The geometry every figure shares; each figure sets its object and truth maps.
  accuracy_input geometry;
  geometry.object_shape[0] = h;
  geometry.object_shape[1] = w;
  geometry.object_pixel_A = pixel;
  geometry.positions_px = positions.as<double>();
  geometry.n_positions = positions.shape[0];
  geometry.truth_shape[0] = truth.phase.shape[0];
  geometry.truth_shape[1] = truth.phase.shape[1];
  geometry.truth_pixel_A = truth.pixel_size_A;
  geometry.scan_origin_A[0] = truth.scan_origin_A[0];
  geometry.scan_origin_A[1] = truth.scan_origin_A[1];
  geometry.sigma_A = sigma_A;
  geometry.fov_fraction = fov_fraction;
  auto local = [&](const std::complex<double>* z, const std::vector<float>& t) {
    accuracy_input in = geometry;
    in.object64 = z;
    in.truth_phase = t.data();
    return evaluate_accuracy(in);
  };
  auto high_passed = [&](const std::vector<double>& phi, const std::vector<float>& t) {
    accuracy_input in = geometry;
    in.metric = phase_metric::high_passed_phase;
    in.object_phase = phi.data();
    in.truth_phase = t.data();
    return evaluate_accuracy(in);
  };

  // The main figures: the local phase of the object's total transmission, the product of its
  // slices (a single slice as stored, so a one-slice result scores as it always did).
  const std::size_t plane = std::size_t(h * w);
  std::vector<std::complex<double>> z;  // the slices as complex128, when there are several
  accuracy_result r;
  if (slices == 1) {
    accuracy_input in = geometry;
    if (object64)
      in.object64 = object.as<std::complex<double>>();
    else
      in.object = object.as<std::complex<float>>();
    in.truth_phase = phase.data();
    r = evaluate_accuracy(in);
  } else {
    z = slices_complex128(object, object64);
    std::vector<std::complex<double>> product(z.begin(), z.begin() + std::ptrdiff_t(plane));
    for (int64_t s = 1; s < slices; ++s)
      for (std::size_t i = 0; i < plane; ++i) product[i] *= z[std::size_t(s) * plane + i];
    r = local(product.data(), phase);
  }
  auto slice_ptr = [&](int64_t s) {
    if (z.empty()) z = slices_complex128(object, object64);
    return z.data() + std::size_t(s) * plane;
  };

  nlohmann::ordered_json j;
  j["result"] = result_path;
  j["truth"] = truth_path;
  // A constant object (untouched, all zeros) or truth has no correlation to report: refused,
  // where it used to score pearson 0.0.
  if (r.constant != constant_map::none) {
    const bool of_object = r.constant == constant_map::object;
    fail(TYCHO_ERR_BAD_DATA, "'", of_object ? result_path : truth_path, "': the ", of_object ? "object" : "truth",
         "'s local phase is constant over the ", r.fov_shape[0], " x ", r.fov_shape[1],
         " px field of view compared, so its correlation with the ", of_object ? "truth" : "result",
         " is undefined: nothing to score (an untouched or empty ", of_object ? "object" : "truth", "?)");
  }
  j["pearson"] = r.pearson;
  j["rms_rad"] = r.rms_rad;
  j["shift_px"] = {r.shift_px[0], r.shift_px[1]};
  j["pearson_subpixel"] = r.subpixel_pearson;
  j["subpixel_shift_px"] = {r.subpixel_shift_px[0], r.subpixel_shift_px[1]};
  j["fov_px"] = {r.fov_shape[0], r.fov_shape[1]};
  j["sigma_A"] = sigma_A;
  j["iterations"] = file.iterations;

  // The slice thickness: the result's own, unless the command line gives one.
  std::optional<double> dz = result_slice_thickness(manifest);
  if (slice_thickness_A) {
    if (dz && std::abs(*dz - *slice_thickness_A) > 1e-6 * *dz)
      log_warning("evaluate", "'" + result_path + "' records slice_thickness_A = " + std::to_string(*dz) +
                                  " Å; --slice-thickness-A " + std::to_string(*slice_thickness_A) + " Å is used");
    dz = slice_thickness_A;
  }
  if (slices > 1) {
    j["slices"] = slices;
    j["slice_thickness_A"] = dz ? nlohmann::ordered_json(*dz) : nlohmann::ordered_json(nullptr);
  }
  const bool depths_known = slices == 1 || dz.has_value();
  if (!depths_known && (!truth.slabs.empty() || !truth.layers.empty()))
    log_warning("evaluate", "'" + result_path + "' has " + std::to_string(slices) +
                                " slices and records no slice thickness: the per-depth figures are left out; give "
                                "--slice-thickness-A");

  // A total phase that may exceed π: high-passed, unwrapped (the sum of the slices' phases).
  if (truth.phase_total) {
    const std::vector<double> phi = summed_slice_phases(slice_ptr(0), slices, h, w);
    j["total_phase"] = figures(high_passed(phi, truth.phase_total->values), "total_phase");
  }

  // Per depth: groups of result slices against groups of the truth's slabs, high-passed likewise.
  if (!truth.slabs.empty() && slices > 1 && dz) {
    nlohmann::ordered_json depths = nlohmann::ordered_json::array();
    for (const depth_group& g : group_by_depth(slices, *dz, truth.slabs)) {
      std::vector<std::complex<double>> zs;
      for (int64_t s : g.result_slices) zs.insert(zs.end(), slice_ptr(s), slice_ptr(s) + plane);
      std::vector<float> t(truth.slabs[0].phase.values.size(), 0.0f);
      for (int64_t k : g.truth_slabs)
        for (std::size_t i = 0; i < t.size(); ++i) t[i] += truth.slabs[std::size_t(k)].phase.values[i];
      const std::vector<double> phi = summed_slice_phases(zs.data(), int64_t(g.result_slices.size()), h, w);
      nlohmann::ordered_json d = {{"z_A", {g.z0_A, g.z1_A}}, {"slices", g.result_slices}, {"truth_slabs", g.truth_slabs}};
      d.update(figures(high_passed(phi, t), cat("the depths ", g.z0_A, " to ", g.z1_A, " Å")));
      depths.push_back(std::move(d));
    }
    j["depths"] = std::move(depths);
  }

  // Separate layers: the slice holding each layer's depth against that layer and the others.
  if (!truth.layers.empty() && depths_known) {
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const truth_layer& l : truth.layers) {
      const int64_t s = slice_at_depth(slices, dz.value_or(0.0), l.depth_A);
      if (slices > 1 && l.depth_A >= double(slices) * *dz)
        log_warning("evaluate", "layer '" + l.name + "' at " + std::to_string(l.depth_A) + " Å lies below the " +
                                    std::to_string(slices) + " slices of " + std::to_string(*dz) +
                                    " Å: it is compared with the last slice");
      nlohmann::ordered_json e = {{"layer", l.name}, {"depth_A", l.depth_A}, {"slice", s}};
      e.update(figures(local(slice_ptr(s), l.phase.values), cat("layer '", l.name, "'")));
      for (const truth_layer& other : truth.layers)  // two layers: one other
        if (&other != &l) {
          e["other_layer"] = other.name;
          e["pearson_other"] =
              pearson_or_null(local(slice_ptr(s), other.phase.values), cat("layer '", l.name, "' against '", other.name, "'"));
        }
      layers.push_back(std::move(e));
    }
    j["layers"] = std::move(layers);
  }

  // Scan positions: the result's (corrected) ones against the true ones, common translation removed.
  if (!truth.positions_true_A.empty()) {
    const int64_t p = positions.shape[0];
    if (int64_t(truth.positions_true_A.size()) != 2 * p)
      fail(TYCHO_ERR_BAD_DATA, "'", truth_path, "': 'positions_true_A' holds ", truth.positions_true_A.size() / 2,
           " positions; the result '", result_path, "' has ", p, ": expected (", p,
           ", 2), in the result's scan order");
    const std::vector<double> found = positions_in_A(result, positions, manifest);
    const position_error e = compare_positions(found.data(), truth.positions_true_A.data(), p);
    nlohmann::ordered_json pj = {{"rms_A", e.rms_A},
                                 {"max_A", e.max_A},
                                 {"mean_shift_A", {e.mean_shift_A[0], e.mean_shift_A[1]}}};
    const std::vector<double> nominal = nominal_positions(truth, p);
    pj["start_rms_A"] = nominal.empty() ? nlohmann::ordered_json(nullptr)
                                        : nlohmann::ordered_json(
                                              compare_positions(nominal.data(), truth.positions_true_A.data(), p).rms_A);
    j["positions"] = std::move(pj);
  }
  return j.dump(2);
}
}  // namespace

}  // namespace tycho::host
