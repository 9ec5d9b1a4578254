#include "geometry/scan_geometry_estimate.hpp"

#include <tycho/core/error.hpp>

#include <fftw3.h>
#include <tycho/core/fftw_planner.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <mutex>

#include "settings/config_read.hpp"

namespace tycho::host {

namespace {
constexpr double pi = 3.14159265358979323846;

// Below this relative standard error, with shifts of at least min_parallax_shift scan steps
// across the bright-field disc, the parallax decides the map (parallax.hpp's relative_error); up
// to parallax_error_limit (a rotation within about 9°, which the reconstruction's refinement of
// the map then closes) when the centre-of-mass curl is noise-dominated.
constexpr double parallax_error_max = 0.05;
constexpr double parallax_error_limit = 0.15;
constexpr double min_parallax_shift = 1.0 / 3.0;
// The lattice's step ratio (log) or shear beyond which its whole map is taken (apply_lattice_map).
constexpr double lattice_anisotropy_taken = 0.05;
// How far the COM curl's rotation may lie from the parallax's before the log warns (degrees).
constexpr double rotation_disagreement_deg = 5.0;
// The COM curl's scatter on noisy data (1.26° on the MoS2 counts, 0.24° noise-free): a rotation
// within two of these, or two of its own standard errors where larger, of a quarter turn is
// taken as the quarter turn.
constexpr double com_rotation_sigma_deg = 1.0;

double wavelength_of(double energy_eV) {
  return 12.2643 / std::sqrt(energy_eV * (1 + 0.978476e-6 * energy_eV));
}

std::string deg(double rad) {
  const double d = std::round(rad * 180 / pi * 1000) / 1000;
  return cat(d == 0 ? 0.0 : d, "°");  // no −0
}


// The rotation nearest a map (its polar decomposition's), radians.
double nearest_rotation(const scan_map& m) {
  return std::atan2(m.L[1][0] - m.L[0][1], m.L[0][0] + m.L[1][1]);
}

// The transpose P (swap of the two rows) applied to a map, when asked.
scan_map transposed(const scan_map& m, bool t) {
  if (!t) return m;
  scan_map r;
  r.L = {{m.L[1], m.L[0]}};
  return r;
}
}  // namespace

geometry_optics resolve_geometry_optics(const config_document& doc, const tycho_dataset_info& info, int64_t binning) {
  geometry_optics o;
  const toml::table& optics_t = doc.table_at("optics");
  const toml::table& data_t = doc.table_at("data");
  auto value = [](const toml::table& t, const char* key, double from_file) {
    const auto v = t[key].value<double>();
    if (v && std::isfinite(*v)) return *v;
    return std::isfinite(from_file) ? from_file : 0.0;
  };
  const double energy = value(optics_t, "energy_eV", info.energy_eV);
  o.wavelength_A = energy > 0 ? wavelength_of(energy) : 0.0;
  o.semiangle_mrad = value(optics_t, "semiangle_mrad", info.semiangle_mrad);
  if (const auto d = optics_t["defocus_A"].value<double>(); d && std::isfinite(*d)) o.C10_A = -*d;
  else o.C10_A = value(optics_t, "C10_A", info.C10_A);
  // One value from the config serves both axes (as the session reads them); else the file's two.
  auto pair = [&](const char* key, const double* from_file, double* out) {
    const double a = value(data_t, key, from_file[0]);
    const double b = data_t.contains(key) || !(std::isfinite(from_file[1]) && from_file[1] > 0) ? a : from_file[1];
    out[0] = a;
    out[1] = b;
  };
  pair("detector_pixel_invA", info.detector_pixel_invA, o.dk_invA);
  o.dk_invA[0] *= double(binning);
  o.dk_invA[1] *= double(binning);
  pair("scan_step_A", info.scan_step_A, o.step_A);
  // Multislice: the parallax sees the defocus at the specimen's middle, C10 + z (C10 < 0 focuses
  // below the entrance), so the entrance's C10 is the measured one minus half the thickness.
  const toml::table& rec_t = doc.table_at("reconstruct");
  const auto slices = rec_t["slices"].value<int64_t>();
  const auto dz = rec_t["slice_thickness_A"].value<double>();
  if (slices && *slices > 1 && dz && std::isfinite(*dz) && *dz > 0) o.specimen_middle_A = 0.5 * double(*slices) * *dz;
  if (slices && *slices > 1) o.slices = *slices;
  return o;
}

parallax_images make_parallax_images(const geometry_optics& o, int64_t rx, int64_t ry, int64_t n0, int64_t n1) {
  // The bright field's radius in pixels (the larger axis), with a margin for the groups the
  // estimate then keeps only when they lie well inside the disc.
  const double radius = 1.1 * o.semiangle_mrad * 1e-3 / o.wavelength_A / std::min(o.dk_invA[0], o.dk_invA[1]);
  // Groups: at most about 24 across the disc (the estimate's cost), at least 8 (its statistics),
  // and small enough that neighbouring groups' images shift by at most about one scan step
  // (the first level's search then cannot alias a crystal's period).
  const double across = 2 * radius;
  int64_t group = int64_t(std::ceil(across / 24));
  const double step = std::min(o.step_A[0], o.step_A[1]);
  if (o.C10_A != 0 && step > 0) {
    const double shift_per_px = std::abs(o.wavelength_A * o.C10_A) * std::max(o.dk_invA[0], o.dk_invA[1]) / step;
    group = std::max(group, int64_t(1));
    const int64_t unaliased = std::max<int64_t>(1, int64_t(std::floor(1.0 / std::max(shift_per_px, 1e-12))));
    group = std::min(group, unaliased);
  }
  group = std::clamp<int64_t>(group, 1, std::max<int64_t>(1, int64_t(across / 8)));
  // A central block of at most 32 x 32 positions: enough for the shifts' statistics (the MoS2 example
  // is 32 x 24), and the groups' spectra (64 x 64 complex each, ~450 groups: 29 MiB) stay small
  // beside the scan's counts, which a run under a memory limit holds at the same time.
  return parallax_images::make(rx, ry, n0, n1, radius, group, 32);
}

double dpc_skewness(const std::vector<double>& com, int64_t rx, int64_t ry, double rotation_deg, bool transpose) {
  const int64_t m0 = 2 * rx, m1 = 2 * ry;
  std::vector<std::complex<double>> c0(std::size_t(m0 * m1)), c1(std::size_t(m0 * m1));
  const double t = rotation_deg * pi / 180, c = std::cos(t), s = std::sin(t);
  for (int64_t i = 0; i < rx; ++i)
    for (int64_t k = 0; k < ry; ++k) {
      double a = com[std::size_t(2 * (i * ry + k))], b = com[std::size_t(2 * (i * ry + k) + 1)];
      if (!std::isfinite(a) || !std::isfinite(b)) a = b = 0;
      if (transpose) std::swap(a, b);
      c0[std::size_t(i * m1 + k)] = c * a - s * b;
      c1[std::size_t(i * m1 + k)] = s * a + c * b;
    }
  fftw_transform_2d(c0.data(), m0, m1, FFTW_FORWARD).run();
  fftw_transform_2d(c1.data(), m0, m1, FFTW_FORWARD).run();
  // φ̂ = −i (q · Ĉ) / (2π |q|²): the potential whose gradient is the field (∇φ ↔ 2πi q φ̂).
  for (int64_t i = 0; i < m0; ++i) {
    const double q0 = double(i < (m0 + 1) / 2 ? i : i - m0) / double(m0);
    for (int64_t k = 0; k < m1; ++k) {
      const double q1 = double(k < (m1 + 1) / 2 ? k : k - m1) / double(m1);
      const double q2 = q0 * q0 + q1 * q1;
      const std::size_t j = std::size_t(i * m1 + k);
      c0[j] = q2 > 0 ? std::complex<double>(0, -1) * (q0 * c0[j] + q1 * c1[j]) / (2 * pi * q2) : 0.0;
    }
  }
  fftw_transform_2d(c0.data(), m0, m1, FFTW_BACKWARD).run();
  double mean = 0;
  for (int64_t i = 0; i < rx; ++i)
    for (int64_t k = 0; k < ry; ++k) mean += c0[std::size_t(i * m1 + k)].real();
  mean /= double(rx * ry);
  double m2 = 0, m3 = 0;
  for (int64_t i = 0; i < rx; ++i)
    for (int64_t k = 0; k < ry; ++k) {
      const double d = c0[std::size_t(i * m1 + k)].real() - mean;
      m2 += d * d;
      m3 += d * d * d;
    }
  m2 /= double(rx * ry);
  m3 /= double(rx * ry);
  return m2 > 0 ? m3 / std::pow(m2, 1.5) : 0.0;
}

scan_geometry_estimate estimate_scan_geometry(const std::vector<double>& com, int64_t rx, int64_t ry,
                                              const parallax_images* images, const geometry_optics& o,
                                              int transpose_given, bool search_follows) {
  scan_geometry_estimate e;
  e.done = true;
  // The COM curl (py4DSTEM's convention: θ turns detector vectors into scan ones, so the scan's
  // positions in the detector's frame are R(−θ) n).
  rotation_estimate curl;
  if (rx >= 3 && ry >= 3) curl = estimate_scan_rotation(com, rx, ry, transpose_given);
  if (curl.done) e.com_rotation_deg = curl.deg;

  // The parallax, where the optics are known and the probe defocused.
  bool parallax_usable = false;
  scan_map from_parallax;
  // No defocus stated (C10 = 0 from the config and the file): the parallax is still measured, its
  // first search without an expected shift, and the map worked out for C10 = −1 Å, so the
  // nominal step gives C10's magnitude. Its sign is assumed (underfocus): under- against
  // overfocus turns the map by 180° (L(−C10) = −L(C10)), and for a thin specimen the two explain
  // the data exactly alike (the twin: object and probe point-reflected and conjugated). The
  // integrated centre of mass's skewness, which decides the curl's 180° below, chose wrongly on
  // 4 of 7 defocused matrix scans (the defocused probe's blur and contrast transfer dominate it).
  const bool C10_stated = o.C10_A != 0;
  if (images != nullptr && o.known() && o.step_A[0] > 0 && o.step_A[1] > 0) {
    const double C10_used = C10_stated ? o.C10_A : -1.0;
    const double shift_per_px =
        C10_stated ? std::abs(o.wavelength_A * o.C10_A) * std::max(o.dk_invA[0], o.dk_invA[1]) /
                         std::min(o.step_A[0], o.step_A[1])
                   : 0.0;
    e.parallax = estimate_parallax(*images, shift_per_px);
    const parallax_result& p = e.parallax;
    if (!p.done) {
      e.notes.push_back(cat("parallax of the bright field not measured: ", p.why_not));
    } else {
      // L = −λ C10 · diag(dk) · A⁻¹ · diag(step)⁻¹ (parallax.hpp), in the patterns' frame.
      const double det_A = p.A[0][0] * p.A[1][1] - p.A[0][1] * p.A[1][0];
      const double inv[2][2] = {{p.A[1][1] / det_A, -p.A[0][1] / det_A}, {-p.A[1][0] / det_A, p.A[0][0] / det_A}};
      scan_map raw;
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
          raw.L[a][b] = -o.wavelength_A * C10_used * o.dk_invA[a] * inv[a][b] / o.step_A[b];
      const bool transpose = raw.det() < 0;
      from_parallax = transposed(raw, transpose);
      e.parallax_scale = std::sqrt(std::abs(raw.det()));
      e.parallax_C10_A = C10_used / e.parallax_scale;
      // The parallax measures the defocus at the depth its contrast lies at; the specimen's
      // middle is assumed, and the contrast may lie anywhere in the slices' span T (two thin
      // layers at its faces: the shared bilayer's put the depth 5.5 Å below the middle of 50 Å,
      // and the scan map, whose scale and C10 the loss hardly tells apart there, stayed 1.2 %
      // small from that start). That depth's spread over a uniform span, T / √12, joins the
      // parallax's own standard error.
      const double entrance_A = e.C10_entrance_A = e.parallax_C10_A - o.specimen_middle_A;
      e.C10_sd_A = std::hypot(p.relative_error * std::abs(e.parallax_C10_A), 2 * o.specimen_middle_A / std::sqrt(12.0));
      // A stated C10 gives way only to a precise estimate that disagrees with it by more than
      // that uncertainty (one that agrees says nothing the stated value did not); with none
      // stated, any estimate beats a focused probe (the low-dose WSe2 matrix scan, standard
      // error above 2 %: Pearson 0.21 from C10 = 0, 0.585 from the parallax's −100 Å).
      if (!C10_stated || (p.relative_error <= parallax_C10_error_max && std::abs(entrance_A - o.C10_A) > e.C10_sd_A))
        e.C10_estimate_A = entrance_A;
      const double radius_px = o.semiangle_mrad * 1e-3 / o.wavelength_A / std::max(o.dk_invA[0], o.dk_invA[1]);
      const double shortest = std::min(std::hypot(p.A[0][0], p.A[1][0]), std::hypot(p.A[0][1], p.A[1][1]));
      const double shift_across = shortest * radius_px;
      // Between the two limits the parallax gives way to the curl only where the curl's rotation
      // is the more precise (their standard errors, degrees).
      const bool curl_reliable = curl.done && curl.contrast() >= rotation_contrast_warn;
      const double parallax_sd_deg = p.rotation_sd * 180 / pi;
      const bool curl_better = curl_reliable && curl.sd_deg < parallax_sd_deg;
      if (p.relative_error > parallax_error_limit || (p.relative_error > parallax_error_max && curl_better)) {
        e.notes.push_back(cat("parallax of the bright field too uncertain (standard error ",
                              std::round(p.relative_error * 1000) / 10, " % > ",
                              (curl_better ? parallax_error_max : parallax_error_limit) * 100, " %",
                              curl_better ? cat(", and the centre-of-mass curl's rotation is the more precise: ±",
                                                std::round(curl.sd_deg * 100) / 100, "° against ±",
                                                std::round(parallax_sd_deg * 100) / 100, "°)")
                                          : std::string(")")));
      } else if (shift_across < min_parallax_shift) {
        e.notes.push_back(cat("parallax of the bright field too small to measure (", shift_across,
                              " scan steps across the disc; the probe is near focus)"));
      } else if (transpose_given >= 0 && bool(transpose_given) != transpose) {
        e.notes.push_back(cat("parallax of the bright field finds the detector ", transpose ? "" : "not ",
                              "transposed, but scan_transpose = ", transpose_given ? "true" : "false",
                              " is given: the parallax is not used"));
      } else {
        parallax_usable = true;
        e.transpose = transpose;
      }
      // With none stated, the sign came with the parallax's map: an estimate the geometry does not
      // use (too uncertain, too small, or against a given transpose) starts nothing.
      if (!C10_stated && !parallax_usable) e.C10_estimate_A = std::nan("");
    }
  }

  if (parallax_usable) {
    e.source = "parallax";
    // Only the rotation is applied: the parallax's scale is C10's as much as the step's, and its
    // step ratio and shear carry errors of about 1 % on crystals (the virtual images of a
    // lattice are not exact shifted copies), more than the reconstruction's own refinement of
    // the positions leaves. Within two standard errors of a quarter turn: the quarter turn.
    // The rotation nearest the map (the polar decomposition's, atan2(L10 − L01, L00 + L11)): on
    // crystals the parallax's scale carries a bias that differs along the detector's axes (by up
    // to 10 %, with the lattice's periods along them), which tilts a single column's direction by
    // degrees but leaves the nearest rotation within a few tenths of one.
    const auto q = from_parallax.decompose();
    const double sigma = std::max(e.parallax.rotation_sd, 1e-4);
    const double measured = nearest_rotation(from_parallax);
    double rotation = measured;
    const double nearest = (pi / 2) * std::round(rotation / (pi / 2));
    const bool snapped = std::abs(rotation - nearest) <= 2 * sigma;
    if (snapped) rotation = nearest;
    e.map = rotation_map(rotation);
    e.notes.push_back(cat("scan geometry from the parallax of the bright field (", e.parallax.groups, " groups, ",
                          e.parallax.pairs, " shifts, standard error ", std::round(e.parallax.relative_error * 1000) / 10,
                          " %",
                          e.parallax.aligned
                              ? cat("; all groups aligned at once: the pairs' rotation turned by ",
                                    deg(-e.parallax.aligned_rotation))
                              : cat("; the groups not aligned at once: ", e.parallax.not_aligned_because),
                          ", standard error ", deg(e.parallax.rotation_sd), "): rotation ",
                          deg(measured),
                          snapped ? cat(" (", deg(rotation), " within two standard errors)") : "",
                          ", transpose ", e.transpose ? "true" : "false", "; measured but not applied: step ratio ",
                          q.scale1 / q.scale0, ", shear ", q.shear, ", and a scale that corresponds to C10 = ",
                          e.parallax_C10_A, " Å at the nominal step",
                          C10_stated ? cat(" (stated ", o.C10_A, " Å)")
                                     : std::string(" (none stated: underfocus assumed, which the parallax cannot tell "
                                                   "from overfocus with the scan turned 180°; for an overfocused probe "
                                                   "state [optics] C10_A > 0)")));
    if (curl.done && curl.contrast() >= rotation_contrast_warn) {
      const double phi_curl = -curl.deg * pi / 180;
      const double diff = std::remainder(rotation - phi_curl, pi);  // modulo 180°
      if (std::abs(diff) * 180 / pi > rotation_disagreement_deg || curl.transpose != e.transpose)
        e.notes.push_back(cat("warning: the centre-of-mass curl finds rotation ", deg(phi_curl), " (mod 180°), transpose ",
                              curl.transpose ? "true" : "false", ": it disagrees with the parallax, which is used"));
    }
  } else if (curl.done && curl.contrast() >= rotation_contrast_warn) {
    e.source = "centre-of-mass curl";
    e.transpose = curl.transpose;
    // θ or θ + 180°: the integrated COM is positive on atoms at the right one.
    e.dpc_skewness = dpc_skewness(com, rx, ry, curl.deg, curl.transpose);
    double theta = curl.deg;
    if (e.dpc_skewness < 0) theta += 180;
    const double nearest = 90.0 * std::round(theta / 90.0);
    const double sigma = std::max(com_rotation_sigma_deg, curl.sd_deg);
    if (std::abs(theta - nearest) <= 2 * sigma) theta = nearest;
    e.map = rotation_map(-theta * pi / 180);
    e.notes.push_back(cat("scan rotation from the centre-of-mass curl: ", deg(-theta * pi / 180), " (curl estimate ",
                          curl.deg, "° ± ", std::round(curl.sd_deg * 100) / 100, "°, integrated COM skewness ",
                          e.dpc_skewness, " decides between it and +180°",
                          theta == nearest ? cat("; within ", std::round(2 * sigma * 100) / 100, "° of a quarter turn: the quarter turn")
                                           : std::string(),
                          "), transpose ",
                          e.transpose ? "true" : "false"));
  } else {
    e.source = "nominal";
    e.transpose = transpose_given > 0;
    e.notes.push_back(cat("warning: the scan's geometry could not be measured: ",
                          curl.done ? cat("the centre-of-mass curl varies by only ", std::round(curl.contrast() * 1000) / 10,
                                          " % over the angles (noise dominates)")
                                    : std::string("the scan is smaller than 3 x 3"),
                          " and the parallax is not usable; the nominal raster is used ",
                          search_follows ? "unless a run's trial reconstructions rank a geometry first ([preprocess] "
                                           "scan_geometry_search; or give"
                                         : "(give",
                          " scan_rotation_deg and scan_transpose if the scan is turned against the detector)"));
  }
  // Whatever was measured must be a map the positions can take (noise-only or non-finite data
  // can give none): else the nominal raster, said.
  bool finite = true;
  for (const auto& row : e.map.L)
    for (double v : row) finite = finite && std::isfinite(v);
  if (!finite || !(e.map.det() > 0)) {
    e.notes.push_back(cat("warning: the ", e.source, " estimate of the scan's geometry is not a usable map; ",
                          "the nominal raster is used (give scan_rotation_deg and scan_transpose)"));
    e.source = "nominal";
    e.map = scan_map{};
    e.transpose = transpose_given > 0;
    e.C10_estimate_A = std::nan("");
  }
  return e;
}

std::string lattice_note_head(bool asked, bool fallback) {
  const std::string mode = asked ? "scan_scale = \"lattice\"" : "scan_scale = \"auto\"";
  return fallback && asked ? "warning: " + mode : mode;
}

void apply_lattice_map(scan_geometry_estimate& e, const lattice_block& block, const geometry_optics& o, bool asked) {
  const std::string mode = lattice_note_head(asked, false), fallback = lattice_note_head(asked, true);
  lattice_map_inputs in;
  for (int a = 0; a < 2; ++a) {
    in.step_A[a] = o.step_A[a];
    in.dk_invA[a] = o.dk_invA[a];
  }
  in.wavelength_A = o.wavelength_A;
  in.semiangle_mrad = o.semiangle_mrad;
  in.start = transposed(e.map, e.transpose);  // the patterns' frame
  in.C10_A = std::isfinite(e.C10_estimate_A) ? e.C10_estimate_A : o.C10_A;
  e.lattice_tried = true;
  e.lattice = estimate_lattice_map(block, in);
  const lattice_map_result& r = e.lattice;
  const std::string kept = ": the stated step is kept";
  if (!r.done) {
    e.notes.push_back(cat(fallback, ": no lattice map (", r.why_not, ")", kept));
    return;
  }
  const scan_map m = transposed(r.map, e.transpose);
  const double turn = std::remainder(nearest_rotation(m) - nearest_rotation(e.map), 2 * pi);
  if (!(m.det() > 0)) {
    e.notes.push_back(cat(fallback, ": the lattice's map has the detector ",
                          e.transpose ? "not " : "", "transposed, against the estimate", kept));
    return;
  }
  if (std::abs(turn) > 5 * pi / 180) {
    e.notes.push_back(cat(fallback, ": the lattice's map is turned ", deg(turn),
                          " against the estimated rotation (more than 5°)", kept));
    return;
  }
  const double s = std::sqrt(m.det());
  if (std::abs(std::log(s)) > std::log(1.15)) {
    e.notes.push_back(cat(fallback, ": the lattice's map is ", s,
                          " times the stated step (more than 15 % off)", kept));
    return;
  }
  // The lattice's step ratio and shear carry about 1 % of error (the exact MoS2 raster: shear
  // −0.010; the jitter scan: the fast step 1.1 % long), and a start that far off costs the run's
  // refinement of the map more iterations than it has (MoS2 example, 100 iterations: Pearson
  // 0.919 from the lattice's whole map, 0.931 from its scale on the parallax's rotation). That
  // refinement pulls in a few per cent from the nominal raster (the 5 % step error: 0.870 so,
  // against 0.866 from the whole map) but not a drift's 17 % (the partially coherent MoS2 with a
  // 2 Å drift: 0.732, against 0.779). So the whole map where its anisotropy exceeds 5 %, else its
  // isotropic scale on the parallax's rotation (bench/RESULTS.md, session 19).
  const auto q = m.decompose();
  const double anisotropy = std::max(std::abs(std::log(q.scale1 / q.scale0)), std::abs(q.shear));
  const bool whole = anisotropy > lattice_anisotropy_taken;
  if (whole) {
    e.map = m;
  } else {
    for (auto& row : e.map.L)
      for (double& v : row) v *= s;
  }
  e.lattice_scale = s;
  e.lattice_whole_map = whole;
  // The parallax fixes C10 / step: at the lattice's scale its C10 is s times the nominal step's.
  if (std::isfinite(e.parallax_C10_A)) {
    if (std::isfinite(e.C10_estimate_A)) e.C10_estimate_A = s * e.parallax_C10_A - o.specimen_middle_A;
    if (std::isfinite(e.C10_entrance_A)) e.C10_entrance_A = s * e.parallax_C10_A - o.specimen_middle_A;
  }
  e.notes.push_back(cat(whole ? "scan map from the crystal's lattice (" : "scan map's isotropic scale from the crystal's lattice (", mode, "; peaks ", r.peak_contrast,
                        " x the spectrum's median, the lunes explain ", std::round(r.lune_fit * 1000) / 10,
                        " % of their signal): isotropic scale ", s, " ± ", r.scale_sd * s, " of the stated step, rotation ", deg(q.rotation_rad),
                        " (", deg(turn), " from the estimate), step scales ", q.scale0, ", ", q.scale1, ", shear ",
                        q.shear,
                        whole ? cat(" (anisotropy ", anisotropy, " > ", lattice_anisotropy_taken, ": the whole map)")
                              : cat(" (anisotropy ", anisotropy, " <= ", lattice_anisotropy_taken,
                                    ": the scale only, on the estimated rotation; the run refines the rest)"),
                        "; the lunes' phase ramps say C10 = ", r.C10_A[0], " and ", r.C10_A[1], " Å"));
}

}  // namespace tycho::host
