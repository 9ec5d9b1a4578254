#include "tycho/host/preprocess.hpp"

#include <tycho/core/error.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "settings/config_read.hpp"
#include "data/detector_padding.hpp"
#include "geometry/scan_geometry_estimate.hpp"
#include "geometry/beam_optics.hpp"
#include "data/pattern_steps.hpp"
#include "data/preprocess_stage.hpp"
#include "tycho/host/log.hpp"
#include "settings/settings_read.hpp"

namespace tycho::host {

namespace {

constexpr double pi = 3.14159265358979323846;
const double nan = std::numeric_limits<double>::quiet_NaN();


std::string com_fit_name(com_fit_kind k) {
  return k == com_fit_kind::plane ? "plane" : k == com_fit_kind::constant ? "constant" : "none";
}

// Solves the 3 x 3 system A x = y by Gaussian elimination with partial pivoting; false when A is
// singular (relative to its largest entry).
bool solve3(std::array<std::array<double, 3>, 3> a, std::array<double, 3> y, std::array<double, 3>& x) {
  double scale = 0;
  for (const auto& row : a)
    for (double v : row) scale = std::max(scale, std::abs(v));
  if (!(scale > 0)) return false;
  for (int c = 0; c < 3; ++c) {
    int p = c;
    for (int r = c + 1; r < 3; ++r)
      if (std::abs(a[r][c]) > std::abs(a[p][c])) p = r;
    if (std::abs(a[p][c]) < 1e-12 * scale) return false;
    std::swap(a[p], a[c]);
    std::swap(y[p], y[c]);
    for (int r = c + 1; r < 3; ++r) {
      const double f = a[r][c] / a[c][c];
      for (int k = c; k < 3; ++k) a[r][k] -= f * a[c][k];
      y[r] -= f * y[c];
    }
  }
  for (int c = 2; c >= 0; --c) {
    double v = y[c];
    for (int k = c + 1; k < 3; ++k) v -= a[c][k] * x[k];
    x[c] = v / a[c][c];
  }
  return true;
}

}  // namespace

const std::vector<std::string>& preprocess_stage_keys() {
  static const std::vector<std::string> keys = {"com_fit",        "recentre",  "scan_rotation_deg",
                                                "scan_transpose", "scan_scale", "binning",   "crop_detector",
                                                "normalise",      "save_raw_data"};
  return keys;
}

void refuse_moving_masked_pixels(const dataset& d, const preprocess_settings& s) {
  if (d.bad_pixels.masked_pixels == 0) return;
  // A transpose (an exact permutation) carries the mask with the pixels (finish_preprocess_stage).
  if (s.recentre || s.binning != 1 || s.crop[0] > 0)
    fail(TYCHO_ERR_UNSUPPORTED, "data '", d.description, "' has ", d.bad_pixels.masked_pixels,
         " bad detector pixels (masked), and [preprocess] asks to move pixels (recentre, binning or crop_detector): ",
         "this version does not carry the mask through those steps; leave them out, or repair the data",
         d.bad_pixels.found.empty()
             ? std::string()
             : cat(" (", d.bad_pixels.found.size(), " of them found dead or hot in the data: [preprocess] ",
                   "detect_bad_pixels = false leaves them in, unmasked)"));
}

preprocess_settings read_preprocess_settings(const toml::table& pre, const std::string& origin) {
  preprocess_settings s;
  const std::string where = "preprocess";
  if (auto fit = read_key<std::string>(pre, "com_fit", where)) {
    if (*fit == "none") s.com_fit = com_fit_kind::none;
    else if (*fit == "constant") s.com_fit = com_fit_kind::constant;
    else if (*fit == "plane") s.com_fit = com_fit_kind::plane;
    else
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] com_fit = \"", *fit,
           "\": must be \"none\", \"constant\" or \"plane\"");
  }
  s.recentre = *setting_value<bool>(pre, where, "recentre");
  if (s.recentre && s.com_fit == com_fit_kind::none)
    fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] recentre = true shifts the patterns by the fitted ",
         "centre of mass: set com_fit = \"constant\" or \"plane\" (recentring on each pattern's own centre of mass ",
         "would erase the specimen's signal)");
  if (auto node = pre["scan_rotation_deg"]) {
    if (node.is_string() && *node.value<std::string>() == "auto") {
      s.rotation_auto = true;
    } else if (node.is_integer() || node.is_floating_point()) {
      // An integer a double cannot hold exactly (2^53 + 1) has no value<double>(): convert it.
      s.rotation_deg = node.is_integer() ? double(node.as_integer()->get()) : node.as_floating_point()->get();
      if (!std::isfinite(s.rotation_deg))
        fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] scan_rotation_deg must be finite");
    } else {
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] scan_rotation_deg must be a number (degrees) or \"auto\"");
    }
  }
  if (auto node = pre["scan_transpose"]) {
    if (node.is_boolean()) {
      s.transpose = *node.value<bool>();
    } else if (node.is_string() && *node.value<std::string>() == "auto") {
      if (!s.rotation_auto)
        fail(TYCHO_ERR_INVALID_ARGUMENT, origin,
             ": [preprocess] scan_transpose = \"auto\" is estimated with the rotation: set scan_rotation_deg = \"auto\" too");
      s.transpose_auto = true;
    } else {
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] scan_transpose must be true, false or \"auto\"");
    }
  } else if (s.rotation_auto) {
    s.transpose_auto = true;
  }
  // The default: the scan's geometry measured from the data, unless the rotation or the
  // transpose is stated (a stated transpose alone keeps the nominal rotation, as before).
  if (!pre["scan_rotation_deg"] && !pre["scan_transpose"]) {
    s.rotation_auto = s.transpose_auto = s.rotation_defaulted = true;
  }
  if (auto scale = read_key<std::string>(pre, "scan_scale", where)) {
    if (*scale == "lattice") s.scale_from_lattice = true;
    else if (*scale == "auto") s.scale_from_lattice = s.scale_auto = true;
    else if (*scale != "stated")
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] scan_scale = \"", *scale,
           "\": must be \"stated\", \"lattice\" or \"auto\"");
    if (s.scale_from_lattice && !s.scale_auto && pre["scan_rotation_deg"] && !s.rotation_auto)
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] scan_scale = \"lattice\" measures the whole map with ",
           "the rotation: leave scan_rotation_deg = \"auto\"");
  } else {
    s.scale_from_lattice = s.scale_auto = true;  // the default: "auto"
  }
  // "auto" with a stated rotation: the stated map, step included.
  if (s.scale_auto && !s.rotation_auto) s.scale_from_lattice = s.scale_auto = false;
  if (auto node = pre["scan_geometry_search"]) {
    if (node.is_boolean()) {
      s.geometry_search = *node.value<bool>() ? preprocess_settings::search_mode::always
                                              : preprocess_settings::search_mode::never;
    } else if (!(node.is_string() && *node.value<std::string>() == "auto")) {
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] scan_geometry_search must be true, false or \"auto\"");
    }
  }
  s.geometry_search_step_deg = *setting_value<double>(pre, where, "scan_geometry_search_step_deg");
  if (!(s.geometry_search_step_deg >= 1 && s.geometry_search_step_deg <= 90))
    fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] scan_geometry_search_step_deg = ",
         s.geometry_search_step_deg, ": must be a number of degrees from 1 to 90");
  s.geometry_search_iterations = *setting_value<int64_t>(pre, where, "scan_geometry_search_iterations");
  if (s.geometry_search_iterations < 4 || s.geometry_search_iterations > 100000)
    fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] scan_geometry_search_iterations = ",
         s.geometry_search_iterations, ": must be an integer from 4 to 100000");
  if (s.geometry_search == preprocess_settings::search_mode::always && !s.rotation_auto)
    fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] scan_geometry_search = true searches the rotation: ",
         "set scan_rotation_deg = \"auto\" (a stated scan_transpose alone keeps the nominal rotation)");
  s.binning = *setting_value<int64_t>(pre, where, "binning");
  if (s.binning < 1) fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] binning must be >= 1, got ", s.binning);
  if (auto node = pre["crop_detector"]) {
    const toml::array* arr = node.as_array();
    if (!arr || arr->size() != 2 || !(*arr)[0].is_integer() || !(*arr)[1].is_integer() ||
        *(*arr)[0].value<int64_t>() < 1 || *(*arr)[1].value<int64_t>() < 1)
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin,
           ": [preprocess] crop_detector must be two positive integers [N0, N1], the cropped detector in pixels");
    s.crop = {*(*arr)[0].value<int64_t>(), *(*arr)[1].value<int64_t>()};
  }
  s.normalise = *setting_value<bool>(pre, where, "normalise");
  s.save_raw_data = *setting_value<bool>(pre, where, "save_raw_data");
  return s;
}

std::array<int64_t, 2> preprocessed_detector_shape(const preprocess_settings& s, int64_t n0, int64_t n1,
                                                   bool with_rotation) {
  std::array<int64_t, 2> n{n0, n1};
  if (s.crop[0] > 0) {
    if (s.crop[0] > n0 || s.crop[1] > n1)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] crop_detector = [", s.crop[0], ", ", s.crop[1],
           "] is larger than the ", n0, " x ", n1, " detector; cropping only shrinks it (to enlarge the window, ",
           "use pad_detector_to)");
    n = s.crop;
  }
  // A factor beyond the detector leaves no pixel: the crop remedy below would suggest [0, 0],
  // itself refused.
  if (s.binning > std::min(n[0], n[1]))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] binning = ", s.binning, " is larger than the ", n[0], " x ", n[1],
         " detector", s.crop[0] > 0 ? " (after crop_detector)" : "", "; expected a factor from 1 to ",
         std::min(n[0], n[1]), " that divides both sizes");
  if (s.binning > 1 && (n[0] % s.binning != 0 || n[1] % s.binning != 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] binning = ", s.binning, " does not divide the ", n[0], " x ", n[1],
         " detector", s.crop[0] > 0 ? " (after crop_detector)" : "",
         "; crop it to a multiple of ", s.binning, " with crop_detector = [", n[0] / s.binning * s.binning, ", ",
         n[1] / s.binning * s.binning, "]");
  n = {n[0] / s.binning, n[1] / s.binning};
  if (with_rotation && s.transpose) std::swap(n[0], n[1]);  // a rotation moves the positions, not the pixels
  return n;
}

// ---------------------------------------------------------------- centre of mass and its fit

com_fit_sums com_sums(const std::vector<double>& com, int64_t first, int64_t scan_ry) {
  com_fit_sums r;
  auto& s = r.s;
  const int64_t count = int64_t(com.size() / 2);
  for (int64_t l = 0; l < count; ++l) {
    const double c0 = com[std::size_t(2 * l)], c1 = com[std::size_t(2 * l + 1)];
    if (!std::isfinite(c0) || !std::isfinite(c1)) continue;
    const int64_t j = first + l;
    const double i = double(j / scan_ry), k = double(j % scan_ry);
    s[0] += 1;
    s[1] += i;
    s[2] += k;
    s[3] += i * i;
    s[4] += i * k;
    s[5] += k * k;
    const double c[2] = {c0, c1};
    for (int a = 0; a < 2; ++a) {
      s[6 + 4 * a] += c[a];
      s[7 + 4 * a] += i * c[a];
      s[8 + 4 * a] += k * c[a];
      s[9 + 4 * a] += c[a] * c[a];
    }
  }
  return r;
}

com_fit_result solve_com_fit(const com_fit_sums& sums, com_fit_kind kind) {
  const auto& s = sums.s;
  com_fit_result r;
  r.kind = kind;
  r.patterns = int64_t(s[0]);
  if (kind == com_fit_kind::none) return r;
  if (!(s[0] > 0)) fail(TYCHO_ERR_BAD_DATA, "[preprocess] com_fit: no pattern holds any intensity");
  for (int a = 0; a < 2; ++a) {
    const double sc = s[6 + 4 * a], sic = s[7 + 4 * a], skc = s[8 + 4 * a], scc = s[9 + 4 * a];
    std::array<double, 3> x{sc / s[0], 0, 0};
    if (kind == com_fit_kind::plane) {
      // Normal equations of c = a + b i + c k: [n Σi Σk; Σi Σii Σik; Σk Σik Σkk] x = [Σc Σic Σkc].
      const std::array<std::array<double, 3>, 3> m{{{s[0], s[1], s[2]}, {s[1], s[3], s[4]}, {s[2], s[4], s[5]}}};
      if (!solve3(m, {sc, sic, skc}, x))
        fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] com_fit = \"plane\" needs patterns with intensity at ",
             "two or more positions along each scan axis, not all on one line; use com_fit = \"constant\"");
    }
    r.coefficients[std::size_t(a)] = x;
    // Residual sum of squares of a least-squares fit: Σc² − xᵀ (Xᵀc).
    const double rss = scc - (x[0] * sc + x[1] * sic + x[2] * skc);
    r.rms_residual[std::size_t(a)] = std::sqrt(std::max(0.0, rss) / s[0]);
  }
  return r;
}

// ---------------------------------------------------------------- scan rotation from the COM curl

// The method of py4DSTEM (`_solve_for_center_of_mass_relative_rotation` in its phase-retrieval
// base class) and quantEM: the COM of a pattern is proportional to the projected electric field
// at the probe position, the gradient of the projected potential, a field without curl. Measured
// in detector axes that are rotated (and possibly transposed) against the scan axes, it acquires
// a curl; the rotation that makes the rotated field's curl smallest is the scan rotation. The
// curl is py4DSTEM's: central differences on the interior of the scan grid,
// curl = ∂c1/∂i − ∂c0/∂k, averaged in absolute value over the grid, for θ on a 1° grid over
// (−90°, 90°] and both transposes; we then refine the best angle on a 0.01° grid ± 1°. θ and
// θ + 180° give the same curl (the field changes sign), so the estimate stays in (−90°, 90°].
// Calls f(curl) with the signed curl at each interior position of the scan grid.
template <class F>
void each_curl(const std::vector<double>& com, int64_t rx, int64_t ry, double deg, bool transpose, F&& f) {
  const double t = deg * pi / 180.0, c = std::cos(t), s = std::sin(t);
  auto v = [&](int64_t i, int64_t k, int axis) {
    double a = com[std::size_t(2 * (i * ry + k))], b = com[std::size_t(2 * (i * ry + k) + 1)];
    if (!std::isfinite(a) || !std::isfinite(b)) a = b = 0;
    if (transpose) std::swap(a, b);
    return axis == 0 ? c * a - s * b : s * a + c * b;
  };
  for (int64_t i = 1; i + 1 < rx; ++i)
    for (int64_t k = 1; k + 1 < ry; ++k) {
      const double d1_di = 0.5 * (v(i + 1, k, 1) - v(i - 1, k, 1));
      const double d0_dk = 0.5 * (v(i, k + 1, 0) - v(i, k - 1, 0));
      f(d1_di - d0_dk);
    }
}

double com_curl(const std::vector<double>& com, int64_t rx, int64_t ry, double deg, bool transpose) {
  if (rx < 3 || ry < 3) return 0.0;
  double total = 0;
  each_curl(com, rx, ry, deg, transpose, [&](double c) { total += std::abs(c); });
  return total / double((rx - 2) * (ry - 2));
}

// The estimate's standard error (degrees), as a least-squares fit of θ would have it: near the
// estimate θ̂ the curl at position i is r_i + L_i δθ, where r_i is what no rotation removes (the
// noise, and the central differences' error on a field that varies within a scan step) and
// L_i = ∂curl_i/∂θ, the curl of the field turned a further 90° (d/dθ of R(θ) c is R(θ + 90°) c).
// Taking the r_i as independent, sd(θ̂) = rms(r) / (rms(L) √n) over the n interior positions.
// Neighbouring r_i share their differences, so this is a lower bound on the scatter; it is what
// makes the curl comparable with the parallax's rotation error (scan_geometry_estimate.cpp).
double com_curl_standard_error(const std::vector<double>& com, int64_t rx, int64_t ry, double deg, bool transpose) {
  double rr = 0, ll = 0;
  int64_t n = 0;
  each_curl(com, rx, ry, deg, transpose, [&](double c) {
    rr += c * c;
    ++n;
  });
  each_curl(com, rx, ry, deg + 90, transpose, [&](double c) { ll += c * c; });
  if (n == 0 || !(ll > 0)) return std::numeric_limits<double>::infinity();
  return std::sqrt(rr / ll / double(n)) * 180 / pi;  // rms(r) / (rms(L) √n) = √(Σr² / ΣL² / n)
}

rotation_estimate estimate_scan_rotation(const std::vector<double>& com, int64_t rx, int64_t ry, int transpose) {
  if (rx < 3 || ry < 3)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] scan_rotation_deg = \"auto\" needs a scan of at least 3 x 3 ",
         "positions (the curl takes differences between neighbours); this scan is ", rx, " x ", ry,
         ": give scan_rotation_deg");
  rotation_estimate best;
  best.done = true;
  best.curl = std::numeric_limits<double>::infinity();
  double best_other = std::numeric_limits<double>::infinity();
  for (int tr = 0; tr < 2; ++tr) {
    if (transpose >= 0 && tr != transpose) continue;
    double deg = 0, curl = std::numeric_limits<double>::infinity();
    for (int d = -89; d <= 90; ++d) {
      const double v = com_curl(com, rx, ry, d, tr == 1);
      if (v < curl) curl = v, deg = d;
      best.curl_max = std::max(best.curl_max, v);
    }
    const double centre = deg;
    for (int d = -100; d <= 100; ++d) {
      const double a = centre + 0.01 * d;
      const double v = com_curl(com, rx, ry, a, tr == 1);
      if (v < curl) curl = v, deg = a;
    }
    if (deg <= -90) deg += 180;
    if (deg > 90) deg -= 180;
    if (curl < best.curl) {
      if (std::isfinite(best.curl)) best_other = best.curl;
      best.curl = curl;
      best.deg = deg;
      best.transpose = tr == 1;
    } else {
      best_other = curl;
    }
  }
  best.curl_other = transpose >= 0 ? nan : best_other;
  best.curl_at_zero = com_curl(com, rx, ry, 0.0, best.transpose);
  best.sd_deg = com_curl_standard_error(com, rx, ry, best.deg, best.transpose);
  return best;
}

// ---------------------------------------------------------------- binning check

binning_optics resolve_binning_optics(const config_document& doc, const tycho_dataset_info& info) {
  binning_optics o;
  const toml::table& optics_t = doc.table_at("optics");
  const toml::table& data_t = doc.table_at("data");
  auto known = [&](const toml::table& t, const char* key, const char* table, double from_file, const char* what) {
    if (auto v = read_key<double>(t, key, table)) return *v;
    if (std::isfinite(from_file)) return from_file;
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] binning needs the ", what, " to check that the probe fits the ",
         "binned window, and neither the data nor the config give it; set '", key, "' in [", table, "]");
  };
  o.optics.energy_eV = known(optics_t, "energy_eV", "optics", info.energy_eV, "beam energy");
  resolve_probe_model(optics_t, info, info.description ? info.description : "the data", o.optics);  // X-ray too
  if (auto defocus = read_key<double>(optics_t, "defocus_A", "optics")) o.optics.C10_A = -*defocus;
  else if (auto c10 = read_key<double>(optics_t, "C10_A", "optics")) o.optics.C10_A = *c10;
  else o.optics.C10_A = std::isfinite(info.C10_A) ? info.C10_A : 0.0;
  const auto [dk, dk1] = resolve_detector_pixel_invA(data_t, info, info.description ? info.description : "the data",
                                                     sdk::wavelength_A(o.optics));
  o.dk_invA = {dk, dk1};
  if (!(o.optics.energy_eV > 0 && o.optics.semiangle_mrad > 0 && dk > 0 && dk1 > 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] binning: the energy, semiangle and detector pixel must be > 0");
  return o;
}

namespace {
// The window a run uses for an (n0, n1) detector: padded as [preprocess] asks (pad_detector_to
// only where it is at least the detector).
std::array<int64_t, 2> run_window(const config_document& doc, int64_t n0, int64_t n1) {
  detector_padding_request r = read_detector_padding(doc.table_at("preprocess"), doc.origin());
  if (r.pad && r.to[0] > 0 && (r.to[0] < n0 || r.to[1] < n1)) return {n0, n1};
  return padded_window(r, n0, n1);
}

double binned_edge_fraction(const config_document& doc, const binning_optics& o, int64_t n0, int64_t n1, int64_t f,
                            std::array<int64_t, 2>* window = nullptr) {
  const auto w = run_window(doc, n0 / f, n1 / f);
  if (window) *window = w;
  const sdk::window_sampling sampling{{w[0], w[1]}, {o.dk_invA[0] * double(f), o.dk_invA[1] * double(f)}};
  const auto probe = sdk::make_probe(o.optics, sampling, 1.0);
  return sdk::probe_edge_fraction(probe, w[0], w[1], binning_edge_margin);
}
}  // namespace

int64_t largest_allowed_binning(const config_document& doc, const binning_optics& o, int64_t n0, int64_t n1,
                                int64_t binning, double* edge_fraction) {
  int64_t allowed = 1;
  for (int64_t f = binning; f >= 2; --f) {
    if (n0 % f != 0 || n1 % f != 0) continue;
    const double e = binned_edge_fraction(doc, o, n0, n1, f);
    if (f == binning && edge_fraction) *edge_fraction = e;
    if (e <= binning_edge_fraction_max) {
      allowed = f;
      break;
    }
  }
  return allowed;
}

// ---------------------------------------------------------------- totals, shifts

namespace {
template <class T>
double total_of(const T* p, int64_t n0, int64_t n1, bool centred) {
  double sum = 0;
  if (!centred) {
    for (int64_t k = 0; k < n0 * n1; ++k) sum += p[k];
    return sum;
  }
  // Centred pixel (c0, c1) sits at FFT index ((c0 − ⌊n0/2⌋) mod n0, (c1 − ⌊n1/2⌋) mod n1).
  for (int64_t c0 = 0; c0 < n0; ++c0) {
    const T* row = p + ((c0 - n0 / 2 + n0) % n0) * n1;
    for (int64_t c1 = 0; c1 < n1; ++c1) sum += row[(c1 - n1 / 2 + n1) % n1];
  }
  return sum;
}
}  // namespace

double pattern_total(const float* p, int64_t n0, int64_t n1, bool centred) { return total_of(p, n0, n1, centred); }
double pattern_total(const uint16_t* p, int64_t n0, int64_t n1, bool centred) { return total_of(p, n0, n1, centred); }

void recompute_totals(dataset& d) {
  double total = 0;
  const int64_t m = d.n0 * d.n1;
  const bool counts = d.targets.empty() && !d.counts.empty();
  for (int64_t l = 0; l < d.patterns; ++l)
    total += counts ? pattern_total(d.counts.data() + l * m, d.n0, d.n1, d.info.patterns_centred != 0)
                    : pattern_total(d.targets.data() + l * m, d.n0, d.n1, d.info.patterns_centred != 0);
  d.total_intensity = total;
  d.mean_total_intensity = d.patterns > 0 ? total / double(d.patterns) : 0.0;
}

namespace {
// Row by row, each row as two copies (a rotation by ⌊n1/2⌋): the same permutation as the
// element-wise definition, out[((i + ⌊n0/2⌋) mod n0, (j + ⌊n1/2⌋) mod n1)] = in[i, j], without a
// modulo per pixel (which cost as much as reading the pattern from disk).
template <class T>
void fftshift_values(const T* in, T* out, int64_t n0, int64_t n1) {
  const int64_t h = n1 / 2;
  for (int64_t i = 0; i < n0; ++i) {
    const T* src = in + i * n1;
    T* dst = out + ((i + n0 / 2) % n0) * n1;
    std::copy(src + (n1 - h), src + n1, dst);  // out[j] = in[j - h + n1] for j < h
    std::copy(src, src + (n1 - h), dst + h);   // out[j] = in[j - h] for j >= h
  }
}
template <class In, class T>
void ifftshift_values(const In* in, T* out, int64_t n0, int64_t n1) {
  const int64_t h = n1 / 2;
  for (int64_t i = 0; i < n0; ++i) {
    const In* src = in + ((i + n0 / 2) % n0) * n1;
    T* dst = out + i * n1;
    std::copy(src + h, src + n1, dst);           // out[j] = in[j + h] for j < n1 − h
    std::copy(src, src + h, dst + (n1 - h));     // out[j] = in[j + h − n1] for j >= n1 − h
  }
}
}  // namespace

void fftshift_pattern(const float* in, float* out, int64_t n0, int64_t n1) { fftshift_values(in, out, n0, n1); }
void ifftshift_pattern(const float* in, float* out, int64_t n0, int64_t n1) { ifftshift_values(in, out, n0, n1); }
void fftshift_pattern(const uint16_t* in, uint16_t* out, int64_t n0, int64_t n1) { fftshift_values(in, out, n0, n1); }
void ifftshift_pattern(const uint16_t* in, uint16_t* out, int64_t n0, int64_t n1) { ifftshift_values(in, out, n0, n1); }
void ifftshift_pattern(const uint8_t* in, uint16_t* out, int64_t n0, int64_t n1) { ifftshift_values(in, out, n0, n1); }

// ---------------------------------------------------------------- the report

std::string preprocess_report::to_json() const {
  if (!active) return "";
  const preprocess_settings& s = settings;
  nlohmann::ordered_json j;
  j["com_fit"] = com_fit_name(s.com_fit);
  j["recentre"] = s.recentre;
  j["scan_rotation_deg"] = s.rotation_deg;
  j["scan_transpose"] = s.transpose;
  j["binning"] = s.binning;
  j["crop_detector"] = s.crop[0] > 0 ? nlohmann::ordered_json(s.crop) : nlohmann::ordered_json(nullptr);
  j["normalise"] = s.normalise;
  j["detector_shape_in"] = detector_in;
  j["detector_shape_out"] = detector_out;
  if (s.binning > 1) j["binning_offset_px"] = binning_offset_px;
  if (!com.empty() || fit.patterns > 0) {
    j["com_mean_px"] = com_mean;
    j["com_patterns"] = fit.patterns;
  }
  if (fit.kind != com_fit_kind::none) {
    j["com_fit_coefficients"] = {{"axis0", fit.coefficients[0]}, {"axis1", fit.coefficients[1]}};
    j["com_fit_rms_px"] = fit.rms_residual;
  }
  if (rotation.done) {
    j["rotation_estimate"] = {{"scan_rotation_deg", rotation.deg},
                              {"scan_transpose", rotation.transpose},
                              {"mean_abs_curl", rotation.curl},
                              {"mean_abs_curl_other_transpose",
                               std::isfinite(rotation.curl_other) ? nlohmann::ordered_json(rotation.curl_other)
                                                                  : nlohmann::ordered_json(nullptr)},
                              {"mean_abs_curl_at_0_deg", rotation.curl_at_zero},
                              {"mean_abs_curl_max", rotation.curl_max},
                              {"standard_error_deg", std::isfinite(rotation.sd_deg) ? nlohmann::ordered_json(rotation.sd_deg)
                                                                                    : nlohmann::ordered_json(nullptr)}};
  }
  if (geometry.done) {
    const scan_geometry_estimate& g = geometry;
    const auto q = g.map.decompose();
    auto number = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
    nlohmann::ordered_json m;
    m["source"] = g.source;
    m["linear"] = {{g.map.L[0][0], g.map.L[0][1]}, {g.map.L[1][0], g.map.L[1][1]}};
    m["rotation_deg"] = number(q.rotation_rad * 180 / pi);
    m["step_scale"] = {number(q.scale0), number(q.scale1)};
    m["shear"] = number(q.shear);
    m["transpose"] = g.transpose;
    if (g.parallax.done || !g.parallax.why_not.empty()) {
      const parallax_result& p = g.parallax;
      nlohmann::ordered_json pj;
      pj["done"] = p.done;
      if (p.done) {
        pj["shift_per_px"] = {{p.A[0][0], p.A[0][1]}, {p.A[1][0], p.A[1][1]}};
        pj["relative_error"] = p.relative_error;
        pj["aligned"] = p.aligned;
        if (p.aligned) pj["aligned_rotation_deg"] = p.aligned_rotation * 180 / pi;
        pj["rotation_sd_deg"] = p.rotation_sd * 180 / pi;
        pj["groups"] = p.groups;
        pj["pairs"] = p.pairs;
        pj["levels"] = p.levels;
        pj["scale_at_stated_C10"] = number(g.parallax_scale);
        pj["C10_at_nominal_step_A"] = number(g.parallax_C10_A);
        if (std::isfinite(g.C10_estimate_A)) pj["C10_estimate_A"] = g.C10_estimate_A;
        pj["C10_at_entrance_A"] = number(g.C10_entrance_A);
        pj["C10_sd_A"] = number(g.C10_sd_A);
      } else {
        pj["why_not"] = p.why_not;
      }
      m["parallax"] = pj;
    }
    if (g.lattice_tried) {
      const lattice_map_result& r = g.lattice;
      nlohmann::ordered_json lj;
      lj["used"] = std::isfinite(g.lattice_scale);
      if (std::isfinite(g.lattice_scale)) {
        lj["scale"] = g.lattice_scale;
        lj["applied"] = g.lattice_whole_map ? "whole map" : "scale";
      }
      if (!r.done) lj["why_not"] = r.why_not;
      lj["linear_patterns_frame"] = {{number(r.map.L[0][0]), number(r.map.L[0][1])}, {number(r.map.L[1][0]), number(r.map.L[1][1])}};
      lj["scan_frequencies_per_index"] = {{r.scan_frequency[0][0], r.scan_frequency[0][1]},
                                          {r.scan_frequency[1][0], r.scan_frequency[1][1]}};
      lj["lattice_invA"] = {{r.lattice_invA[0][0], r.lattice_invA[0][1]}, {r.lattice_invA[1][0], r.lattice_invA[1][1]}};
      lj["C10_from_lunes_A"] = {number(r.C10_A[0]), number(r.C10_A[1])};
      lj["peak_contrast"] = number(r.peak_contrast);
      lj["lune_fit"] = number(r.lune_fit);
      lj["scale_sd"] = number(r.scale_sd);
      m["lattice"] = lj;
    }
    if (std::isfinite(g.com_rotation_deg)) m["com_curl_rotation_deg"] = g.com_rotation_deg;
    if (std::isfinite(g.dpc_skewness)) m["dpc_skewness"] = g.dpc_skewness;
    if (!g.notes.empty()) m["notes"] = g.notes;
    j["scan_map"] = m;
  }
  if (s.recentre) j["recentre_shift_px"] = shift_range;
  if (s.normalise) j["normalised_to"] = normalised_to;
  return j.dump();
}

// ---------------------------------------------------------------- the stage

stage_plan plan_preprocess_stage(dataset& d, const config_document& doc, const rank_sum& sum_across_ranks,
                                 const pattern_feed& feed) {
  stage_plan plan;
  preprocess_report& rep = plan.report;
  rep.settings = read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
  preprocess_settings& s = rep.settings;
  rep.detector_in = {d.n0, d.n1};
  rep.detector_out = rep.detector_in;
  rep.active = s.active();
  const rank_sum sum = sum_across_ranks ? sum_across_ranks : rank_sum(sum_on_one_rank);
  const int64_t rx = d.info.scan_shape[0], ry = d.info.scan_shape[1];
  pattern_steps& steps = plan.steps;
  pattern_scratch scratch;
  // The default "auto" measures a raster scan; positions the source lists are taken as they are,
  // and a scan under 3 x 3 has no neighbours to compare (a stated "auto" refuses those).
  if (s.rotation_defaulted && (!d.positions_A.empty() || rx < 3 || ry < 3)) {
    s.rotation_auto = s.transpose_auto = false;
    log_info("preprocess", cat("the scan's geometry is not estimated (", !d.positions_A.empty()
                                                                          ? std::string("the source lists the positions")
                                                                          : cat("a ", rx, " x ", ry, " scan"),
                               "): the positions are used as they are ([preprocess] scan_rotation_deg = 0)"));
  }
  rep.active = s.active();

  // 1. crop, 2. binning: the shapes (checked), the binning's probe check, the log.
  const auto binned = preprocessed_detector_shape(s, d.n0, d.n1);  // checks the crop and the factor
  steps.set_shape(s, {d.n0, d.n1});
  if (steps.cropped != steps.in)
    log_info("preprocess", cat("detector ", d.n0, " x ", d.n1, " cropped to ", steps.cropped[0], " x ",
                               steps.cropped[1]));
  if (s.binning > 1) {
    const int64_t b = s.binning, c0 = steps.cropped[0], c1 = steps.cropped[1];
    const binning_optics o = resolve_binning_optics(doc, d.info);
    double edge = 0;
    const int64_t allowed = largest_allowed_binning(doc, o, c0, c1, b, &edge);
    if (allowed < b) {
      std::array<int64_t, 2> w{};
      binned_edge_fraction(doc, o, c0, c1, b, &w);
      auto r2 = [](double v) { return std::round(v * 100) / 100; };
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] binning = ", b, ": the probe would not fit the binned window: ",
           w[0], " x ", w[1], " pixels of ", o.dk_invA[0] * double(b), " Å⁻¹ span ",
           r2(1.0 / (o.dk_invA[0] * double(b))), " Å, and ", r2(edge * 100),
           " % of the initial probe's intensity lies within ", binning_edge_margin * 100,
           " % of the window's edge (binning allows at most ", binning_edge_fraction_max * 100,
           " %; C10 = ", o.optics.C10_A, " Å, semiangle ", o.optics.semiangle_mrad,
           " mrad); the largest binning factor allowed for these data is ", allowed,
           allowed == 1 ? " (no binning)" : "", ". Used: ",
           beam_provenance(doc.table_at("optics"), doc.table_at("data"), d.info,
                           d.description, doc.origin(), o.optics,
                           sdk::wavelength_A(o.optics), o.dk_invA[0]));
    }
    const int64_t m0 = binned[0], m1 = binned[1];
    // The zero frequency's bin: in-block index z of the zero-frequency pixel; the block's centre
    // lies (b − 1)/2 − z raw pixels from it.
    for (int a = 0; a < 2; ++a) {
      const int64_t nn = a == 0 ? c0 : c1, mm = a == 0 ? m0 : m1;
      rep.binning_offset_px[std::size_t(a)] = double(b - 1) / 2.0 - double(nn / 2 - b * (mm / 2));
    }
    log_info("preprocess", cat("detector ", c0, " x ", c1, " binned by ", b, " to ", m0, " x ", m1,
                               " (detector pixel ", o.dk_invA[0] * double(b), " Å⁻¹; the probe keeps ", edge * 100,
                               " % of its intensity near the window's edge)"));
  }
  const int64_t n0 = binned[0], n1 = binned[1];

  // 3. centre of mass of each pattern, px from the zero-frequency pixel, on the binned pattern;
  // with the scan's geometry to estimate, the bright field's virtual images for the parallax too.
  const geometry_optics optics = resolve_geometry_optics(doc, d.info, s.binning);
  std::optional<parallax_images> parallax;
  if (s.rotation_auto && optics.known() && rx >= 4 && ry >= 4) parallax = make_parallax_images(optics, rx, ry, n0, n1);
  // scan_scale = "lattice": the bright field of a central block kept for the lattice's map.
  std::optional<lattice_block> lattice;
  // "auto" with [data] fast_axis: the run's scan map holds the stated step along the fast axis
  // (a drift stretches only the slow one's), which the lattice's map would replace; the stated
  // step stays. (The shared jitter scan: 0.959 / 0.036 Å so, 0.939 / 0.064 Å from the lattice's
  // fast step, 1.1 % long.)
  const bool fast_axis_held = s.scale_auto && bool(read_key<int64_t>(doc.table_at("data"), "fast_axis", "data"));
  if (s.rotation_auto && s.scale_from_lattice && !fast_axis_held && optics.known() && rx >= 8 && ry >= 8 &&
      optics.slices == 1) {
    const double radius_stated = optics.semiangle_mrad * 1e-3 / optics.wavelength_A;
    const double radius_px[2] = {1.6 * radius_stated / optics.dk_invA[0], 1.6 * radius_stated / optics.dk_invA[1]};
    // Masked pixels stay out (with a mask, crop and binning are refused: it matches the pattern).
    const bool masked = !d.detector_mask.empty() && int64_t(d.detector_mask.size()) == n0 * n1;
    lattice = lattice_block::make(rx, ry, n0, n1, radius_px, 32, int64_t(1) << 22,
                                  masked ? d.detector_mask.data() : nullptr);
  }
  if (s.needs_com()) {
    rep.com.assign(std::size_t(2 * d.patterns), nan);
    feed([&](int64_t l, const float* raw) {
      const float* p = steps.shape(raw, scratch);
      const auto c = pattern_com(p, n0, n1);
      rep.com[std::size_t(2 * l)] = c[0];
      rep.com[std::size_t(2 * l + 1)] = c[1];
      const int64_t j = d.first + l;
      if (parallax && parallax->holds(j / ry, j % ry)) parallax->add(j / ry, j % ry, p);
      if (lattice && lattice->holds(j / ry, j % ry)) lattice->add(j / ry, j % ry, p);
    });
    // 4. the fit (for "none": the sums still give the mean, for the report).
    com_fit_sums sums = com_sums(rep.com, d.first, ry);
    sum(sums.s.data(), com_fit_sums::size);
    rep.fit = solve_com_fit(sums, s.com_fit);
    if (sums.s[0] > 0) rep.com_mean = {sums.s[6] / sums.s[0], sums.s[10] / sums.s[0]};
    if (s.com_fit != com_fit_kind::none)
      log_info("preprocess", cat("centre of mass (px from the detector centre): mean (", rep.com_mean[0], ", ",
                                 rep.com_mean[1], "); ", com_fit_name(s.com_fit), " fit axis 0: ",
                                 rep.fit.coefficients[0][0], " + ", rep.fit.coefficients[0][1], " i + ",
                                 rep.fit.coefficients[0][2], " k, axis 1: ", rep.fit.coefficients[1][0], " + ",
                                 rep.fit.coefficients[1][1], " i + ", rep.fit.coefficients[1][2],
                                 " k (rms residual ", rep.fit.rms_residual[0], ", ", rep.fit.rms_residual[1], " px)"));
  }

  // 5. the scan's geometry from the data, on the whole scan (every rank adds its patterns): the
  // COM field and the parallax images summed over the ranks (scan_geometry_estimate.hpp).
  if (s.rotation_auto) {
    const int64_t all = rx * ry;
    std::vector<double> field(std::size_t(3 * all), 0.0);  // (c0 − fit, c1 − fit, 1 if known)
    for (int64_t l = 0; l < d.patterns; ++l) {
      const int64_t j = d.first + l;
      const double c0 = rep.com[std::size_t(2 * l)], c1 = rep.com[std::size_t(2 * l + 1)];
      if (!std::isfinite(c0)) continue;
      const double i = double(j / ry), k = double(j % ry);
      const bool fitted = s.com_fit != com_fit_kind::none;
      field[std::size_t(2 * j)] = c0 - (fitted ? rep.fit.at(0, i, k) : rep.com_mean[0]);
      field[std::size_t(2 * j + 1)] = c1 - (fitted ? rep.fit.at(1, i, k) : rep.com_mean[1]);
      field[std::size_t(2 * all + j)] = 1;
    }
    sum(field.data(), int(field.size()));
    std::vector<double> com_field(field.begin(), field.begin() + 2 * all);
    for (int64_t j = 0; j < all; ++j)
      if (field[std::size_t(2 * all + j)] == 0) com_field[std::size_t(2 * j)] = com_field[std::size_t(2 * j + 1)] = nan;
    if (parallax) {
      sum(parallax->sums.data(), int(parallax->sums.size()));
      sum(parallax->seen.data(), int(parallax->seen.size()));
    }
    if (rx >= 3 && ry >= 3) rep.rotation = estimate_scan_rotation(com_field, rx, ry, s.transpose_auto ? -1 : int(s.transpose));
    rep.geometry = estimate_scan_geometry(com_field, rx, ry, parallax ? &*parallax : nullptr, optics,
                                          s.transpose_auto ? -1 : int(s.transpose),
                                          s.geometry_search != preprocess_settings::search_mode::never);
    parallax.reset();  // its images are not needed again
    if (fast_axis_held) {
      rep.geometry.notes.push_back("scan_scale = \"auto\": the lattice is not measured: the run holds the stated "
                                   "step along the fast axis ([data] fast_axis)");
    } else if (s.scale_from_lattice) {
      if (lattice) {
        sum(lattice->patterns.data(), int(lattice->patterns.size()));
        sum(lattice->seen.data(), int(lattice->seen.size()));
        apply_lattice_map(rep.geometry, *lattice, optics, !s.scale_auto);
        lattice.reset();  // the block (up to 32 MiB) is not needed again
      } else {
        // Several slices: the lunes' model is a thin specimen's (on the shared si110 and bilayer
        // it came out 0.8 % and 2.5 % off), and the run's map refines the scale itself.
        rep.geometry.notes.push_back(cat(lattice_note_head(!s.scale_auto, true), ": not measured (",
                                         !optics.known()     ? "the optics are not known"
                                         : optics.slices > 1 ? "several slices: the lattice's measurement models a thin "
                                                               "specimen, and the run's scan map refines the scale"
                                                             : "a scan of fewer than 8 x 8 positions",
                                         "): the stated step is kept"));
      }
    }
    for (const std::string& note : rep.geometry.notes) {
      if (note.rfind("warning: ", 0) == 0) log_warning("preprocess", note.substr(9));
      else log_info("preprocess", note);
    }
    const auto q = rep.geometry.map.decompose();
    s.rotation_deg = q.rotation_rad * 180 / pi == 0 ? 0.0 : -q.rotation_rad * 180 / pi;  // py4DSTEM's sign; no −0
    s.transpose = rep.geometry.transpose;
  } else {
    // Given: the rotation by py4DSTEM's convention (positions R(−θ) n), the transpose as given.
    rep.geometry.done = s.rotation_deg != 0;
    rep.geometry.source = "given";
    rep.geometry.map = rotation_map(-s.rotation_deg * pi / 180);
    rep.geometry.transpose = s.transpose;
  }

  // 6. recentre on the fitted COM, 7. the turns: resolved now; applied with the others below.
  steps.set_placement(s, rep.fit, ry);
  if (s.recentre) {
    rep.shift_range = {{{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()},
                        {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}}};
    for (int64_t l = 0; l < d.patterns; ++l) {
      const auto [s0, s1] = steps.shift(d.first + l);
      rep.shift_range[0] = {std::min(rep.shift_range[0][0], s0), std::max(rep.shift_range[0][1], s0)};
      rep.shift_range[1] = {std::min(rep.shift_range[1][0], s1), std::max(rep.shift_range[1][1], s1)};
    }
    if (d.patterns == 0) rep.shift_range = {};
    log_info("preprocess", cat("patterns recentred on the fitted centre of mass: shifts of ", rep.shift_range[0][0],
                               " to ", rep.shift_range[0][1], " px on axis 0, ", rep.shift_range[1][0], " to ",
                               rep.shift_range[1][1], " px on axis 1 (this rank's patterns)"));
  }
  if (s.transpose) log_info("preprocess", "patterns transposed (the detector's axes are swapped against the scan's)");
  plan.changes = steps.shapes() || steps.moves() || s.normalise;
  return plan;
}

void stage_plan::transform(const float* raw, int64_t local, int64_t first, float* out, pattern_scratch& scratch) const {
  steps.transform(raw, first + local, out, scratch);
}

double stage_plan::normalise_totals(const dataset& d, const pattern_feed& feed, const rank_sum& sum_across_ranks) {
  const rank_sum sum = sum_across_ranks ? sum_across_ranks : rank_sum(sum_on_one_rank);
  own_totals.assign(std::size_t(d.patterns), 0.0);
  const int64_t o0 = steps.out[0], o1 = steps.out[1];
  std::vector<float> out(std::size_t(o0 * o1));
  pattern_scratch scratch;
  feed([&](int64_t l, const float* raw) {
    steps.transform(raw, d.first + l, out.data(), scratch);
    own_totals[std::size_t(l)] = pattern_total(out.data(), o0, o1, d.info.patterns_centred != 0);
  });
  double tot[2] = {0, double(d.patterns)};
  for (int64_t l = 0; l < d.patterns; ++l) tot[0] += own_totals[std::size_t(l)];
  sum(tot, 2);
  report.normalised_to = tot[1] > 0 ? tot[0] / tot[1] : 0.0;
  log_info("preprocess", cat("every pattern scaled to the mean total intensity ", report.normalised_to));
  return report.normalised_to;
}

void finish_preprocess_stage(dataset& d, stage_plan& plan, bool recompute) {
  const preprocess_settings& s = plan.report.settings;
  if ((plan.steps.turns % 2 == 1) != s.transpose) {
    std::swap(d.info.detector_pixel_invA[0], d.info.detector_pixel_invA[1]);
    std::swap(d.info.detector_pixel_m[0], d.info.detector_pixel_m[1]);  // a far-field detector's, in metres
  }
  if (!d.detector_mask.empty() && (plan.steps.turns != 0 || plan.steps.transpose)) {
    std::vector<uint8_t> oriented(d.detector_mask.size());
    orient_mask(d.detector_mask.data(), d.n0, d.n1, oriented.data(), plan.steps.turns, plan.steps.transpose);
    d.detector_mask = std::move(oriented);
  }
  d.n0 = plan.steps.out[0];
  d.n1 = plan.steps.out[1];
  d.info.detector_shape[0] = d.n0;
  d.info.detector_shape[1] = d.n1;
  plan.report.detector_out = {d.n0, d.n1};
  // The COM, its fit and the rotation estimate alone leave the patterns (and the totals of the
  // bad-pixel masking) as they were.
  if (plan.changes && recompute) recompute_totals(d);
}

preprocess_report run_preprocess_stage(dataset& d, const config_document& doc, const rank_sum& sum_across_ranks,
                                       const pattern_feed& feed, stage_output output, pattern_steps* steps_out) {
  if (output == stage_output::in_place &&
      !read_preprocess_settings(doc.table_at("preprocess"), doc.origin()).active()) {
    preprocess_report rep;
    rep.settings = read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
    rep.detector_in = rep.detector_out = {d.n0, d.n1};
    return rep;
  }
  stage_plan plan = plan_preprocess_stage(d, doc, sum_across_ranks, feed);
  preprocess_report& rep = plan.report;
  const preprocess_settings& s = rep.settings;
  const rank_sum sum = sum_across_ranks ? sum_across_ranks : rank_sum(sum_on_one_rank);
  const pattern_steps& steps = plan.steps;
  pattern_scratch scratch;
  const int64_t o0 = steps.out[0], o1 = steps.out[1], m = o0 * o1;
  const bool changes = plan.changes;

  // Every pattern through the steps into the targets (float32; uint16 counts when asked, for
  // steps that keep whole counts: the caller checks that the values stay below 65536).
  std::vector<double> own;  // normalise: each pattern's total before it
  if (s.normalise) own.resize(std::size_t(d.patterns));
  const bool centred = d.info.patterns_centred != 0;
  if (output == stage_output::counts) {
    if (s.normalise)
      fail(TYCHO_ERR_INTERNAL, "the preprocessing stage normalises the patterns but was asked for uint16 counts");
    d.counts.resize(std::size_t(d.patterns * m));
    std::vector<float>().swap(d.targets);
    std::vector<float> out(static_cast<std::size_t>(m));
    feed([&](int64_t l, const float* raw) {
      steps.transform(raw, d.first + l, out.data(), scratch);
      uint16_t* c = d.counts.data() + l * m;
      for (int64_t k = 0; k < m; ++k) {
        const float v = out[std::size_t(k)];
        if (!(v >= 0.f && v <= 65535.f) || v != std::floor(v))
          fail(TYCHO_ERR_INTERNAL, "the preprocessing stage made pattern ", d.first + l, " hold ", v,
               ", not a uint16 count");
        c[k] = uint16_t(v);
      }
    });
  } else if (output == stage_output::in_place && d.targets.empty() && !d.counts.empty()) {
    // Counts held in memory (only_measures): at most a reordering of the pixels, exact on them.
    if (steps.shapes() || steps.recentre || s.normalise)
      fail(TYCHO_ERR_INTERNAL, "the preprocessing stage changes the values of patterns held as counts");
    if (steps.moves()) {
      std::vector<uint16_t> oriented(static_cast<std::size_t>(m));
      for (int64_t l = 0; l < d.patterns; ++l) {
        uint16_t* c = d.counts.data() + l * m;
        orient_counts(c, steps.binned[0], steps.binned[1], oriented.data(), steps.turns, steps.transpose);
        std::copy(oriented.begin(), oriented.end(), c);
      }
    }
  } else if (changes || output == stage_output::float32) {
    if (d.targets.size() < std::size_t(d.patterns * m)) d.targets.resize(std::size_t(d.patterns * m));
    // In place: pattern l's result (m ≤ the raw size) lands at or before its raw pixels, after
    // every earlier pattern's; transform() reads the raw pattern before it writes there.
    feed([&](int64_t l, const float* raw) {
      float* dst = d.targets.data() + l * m;
      steps.transform(raw, d.first + l, dst, scratch);
      if (s.normalise) own[std::size_t(l)] = pattern_total(dst, o0, o1, centred);
    });
    d.targets.resize(std::size_t(d.patterns * m));
    d.targets.shrink_to_fit();
  }

  // 8. normalise: every pattern's total becomes the scan's mean total.
  if (s.normalise) {
    double tot[2] = {0, double(d.patterns)};
    for (int64_t l = 0; l < d.patterns; ++l) tot[0] += own[std::size_t(l)];
    sum(tot, 2);
    rep.normalised_to = tot[1] > 0 ? tot[0] / tot[1] : 0.0;
    for (int64_t l = 0; l < d.patterns; ++l)
      normalise_pattern(d.targets.data() + l * m, m, own[std::size_t(l)], rep.normalised_to);
    log_info("preprocess", cat("every pattern scaled to the mean total intensity ", rep.normalised_to));
  }

  finish_preprocess_stage(d, plan, true);
  if (steps_out) *steps_out = steps;
  return rep;
}

preprocess_report preprocess_dataset(dataset& d, const config_document& doc, const rank_sum& sum_across_ranks) {
  // The scan in memory: d.targets (float32), or d.counts (uint16, read as counts: only for a
  // stage that only measures), each pattern handed over in place.
  const int64_t n = d.n0 * d.n1;
  const bool counts = d.targets.empty() && !d.counts.empty();
  const preprocess_settings s = read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
  if (counts && s.active() && !s.only_measures())
    fail(TYCHO_ERR_INTERNAL, "the preprocessing stage changes the patterns but they were read as counts");
  std::vector<float> pattern;
  const pattern_feed whole_scan = [&](const pattern_visitor& visit) {
    for (int64_t l = 0; l < d.patterns; ++l) {
      if (counts) {
        pattern.assign(d.counts.begin() + l * n, d.counts.begin() + (l + 1) * n);  // exact
        visit(l, pattern.data());
      } else {
        visit(l, d.targets.data() + l * n);
      }
    }
  };
  return run_preprocess_stage(d, doc, sum_across_ranks, whole_scan, stage_output::in_place);
}

}  // namespace tycho::host
