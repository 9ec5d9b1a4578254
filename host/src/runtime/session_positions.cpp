// The positions' own correction in the result file: the measured curvature scale of their steps
// (core::driver::curvature_scale) and the weighing of correct = "auto"
// (core::driver::position_weighing), written to the manifest's "position_correction" and read
// back by a resumed run (`tycho reconstruct --from`), which then steps as the uninterrupted run.

#include "runtime/session_state.hpp"

#include "tycho/host/log.hpp"

#include <tycho/core/position_correction.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace tycho::host {

std::string session::state::position_correction_json(const state& s) {
  const driver::curvature_scale& c = s.drv->position_curvature_scale();
  const driver::position_weighing& w = s.drv->weighing();
  if (c.iteration == 0 && w.iteration == 0) return "";
  nlohmann::ordered_json p;
  if (c.iteration > 0) {
    p["curvature_scale"] = {c.scale[0], c.scale[1]};
    p["first_measured_at"] = c.first;
    p["measured_at"] = c.iteration;
    p["patterns"] = c.patterns;
  }
  if (w.iteration > 0) {
    nlohmann::ordered_json q;
    q["iteration"] = w.iteration;
    q["kept"] = w.kept;
    if (std::isfinite(w.statistic)) {
      q["statistic"] = w.statistic;
      q["noise_A"] = w.noise_px * std::max(s.geometry.pixel_A[0], s.geometry.pixel_A[1]);
      q["information_ratio"] = w.information_ratio;
    } else {
      q["statistic"] = nullptr;  // nothing to weigh against: kept
      q["noise_A"] = nullptr;
    }
    p["weighing"] = q;
  }
  return p.dump();
}

void session::state::restore_position_correction(state& s, const session_detail::resume_data& r) {
  const manifest_reader& m = r.file.manifest;
  if (const nlohmann::json* p = m.find("position_correction"); p != nullptr && !p->is_object())
    m.refuse("position_correction", p, "an object (the positions' correction state)");
  const int64_t first = s.drv->first_position_step();
  if (m.find("position_correction.curvature_scale")) {
    driver::curvature_scale c;
    const auto v = m.numbers("position_correction.curvature_scale", 2, true, false, "the positions' curvature scale");
    // The measured curvature over the object-roughness estimate: 0.015-1.2 on every data set so
    // far; far outside, the file was not written by a run.
    for (double x : v)
      if (!(x >= 1e-6 && x <= 1e6))
        m.refuse("position_correction.curvature_scale", m.find("position_correction.curvature_scale"),
                 "2 numbers from 1e-6 to 1e6 (the measured curvature over the object-roughness estimate)");
    c.scale = {v[0], v[1]};
    c.first = m.integer("position_correction.first_measured_at", 1, r.done);
    c.iteration = m.integer("position_correction.measured_at", c.first, r.done);
    c.patterns = m.integer("position_correction.patterns", s.drv->curvature_patterns(), s.drv->curvature_patterns());
    s.drv->restore_position_curvature_scale(c);
  } else if (first > 0 && first <= r.done) {
    log_info("session", cat("'", r.path, "' holds no measured curvature of the positions' steps (the manifest's "
                            "position_correction): it is measured afresh at the next step"));
  }
  // The weighing stands only for a run that weighs (correct = "auto"): another setting decides
  // for itself whether the positions move.
  if (!s.positions_weighed_map) return;
  const int64_t due = s.drv->weighing_due();
  if (m.find("position_correction.weighing")) {
    driver::position_weighing w;
    w.iteration = m.integer("position_correction.weighing.iteration", 1, r.done);
    if (w.iteration != due)
      m.refuse("position_correction.weighing.iteration", m.find("position_correction.weighing.iteration"),
               due > 0 ? cat(due, ", the positions' ", driver::position_trial_iterations, "th own step")
                       : std::string("no weighing: the positions' own steps wait for a scan map that had not converged"));
    w.kept = m.boolean("position_correction.weighing.kept");
    w.statistic = m.number_or_null("position_correction.weighing.statistic", "the positions' weighing statistic");
    const double noise_A = m.number_or_null("position_correction.weighing.noise_A", "the positions' counting noise in Å");
    if (std::isfinite(w.statistic) && w.statistic < 0)
      m.refuse("position_correction.weighing.statistic", m.find("position_correction.weighing.statistic"),
               "a number >= 0 (a sum of squares over their noise) or null");
    if (std::isfinite(noise_A) && !(noise_A > 0))
      m.refuse("position_correction.weighing.noise_A", m.find("position_correction.weighing.noise_A"),
               "a number > 0 or null");
    // The decision follows from the statistic: kept above 2, and where there was none to weigh.
    if (w.kept != (std::isfinite(w.statistic) ? w.statistic > 2 : true))
      m.refuse("position_correction.weighing.kept", m.find("position_correction.weighing.kept"),
               cat(std::isfinite(w.statistic) ? (w.statistic > 2 ? "true" : "false") : "true",
                   " (the decision its statistic makes: kept above 2, or with none)"));
    w.noise_px = noise_A / std::max(s.geometry.pixel_A[0], s.geometry.pixel_A[1]);
    // Written since the data's own information scales the engine's (absent before: 1).
    if (m.find("position_correction.weighing.information_ratio")) {
      w.information_ratio = m.number_or_null("position_correction.weighing.information_ratio",
                                             "the data's over the engine's information");
      if (!(w.information_ratio >= 0 && w.information_ratio <= 1))
        m.refuse("position_correction.weighing.information_ratio",
                 m.find("position_correction.weighing.information_ratio"),
                 "a number from 0 to 1 (the engine's information scaled down to the data's)");
    }
    s.drv->restore_weighing(w);
  } else if (due > 0 && due <= r.done) {
    log_info("session", cat("'", r.path, "' holds no weighing of the positions' corrections, due at iteration ", due,
                            " (their ", driver::position_trial_iterations, "th own step): they go on unweighed"));
  }
}

session::state::pair_information_sums session::state::neighbour_information(const state& s) {
  if (s.neighbour_sums) return *s.neighbour_sums;
  const dataset& d = s.data;
  const int64_t rx = d.info.scan_shape[0], ry = d.info.scan_shape[1], pixels = d.n0 * d.n1;
  const bool raster = d.positions_A.empty() && rx >= 2 && ry >= 2;
  const bool held = !d.targets.empty() || !d.counts.empty();
  const std::vector<double>& mean = s.measured_mean;
  const uint8_t* valid = d.detector_mask.size() == std::size_t(pixels) ? d.detector_mask.data() : nullptr;
  // Every pattern with its next neighbour along each axis where this rank holds both: one pass
  // over the patterns (at low dose each pair's estimate is mostly noise: on hBN at 1,000
  // electrons a pattern all 1,104 pairs give J to ±47 %, every other pattern's ±67 %).
  const int64_t end = d.first + d.patterns;
  std::vector<double> v(6, 0.0);  // per axis: Σ, Σ², pairs
  if (raster && held && d.has_counts() && mean.size() == std::size_t(pixels)) {
    auto pair = [&](int64_t a, int64_t b) {
      const std::size_t pa = std::size_t((a - d.first) * pixels), pb = std::size_t((b - d.first) * pixels);
      return d.counts.empty() ? pair_information(d.targets.data() + pa, d.targets.data() + pb, mean.data(), valid, pixels)
                              : pair_information(d.counts.data() + pa, d.counts.data() + pb, mean.data(), valid, pixels);
    };
    auto add = [&](int axis, double x) {
      v[std::size_t(3 * axis)] += x;
      v[std::size_t(3 * axis + 1)] += x * x;
      v[std::size_t(3 * axis + 2)] += 1;
    };
    for (int64_t j = d.first; j < end; ++j) {
      const int64_t i = j / ry, k = j % ry;
      if (i + 1 < rx && j + ry < end) add(0, pair(j, j + ry));
      if (k + 1 < ry && j + 1 < end) add(1, pair(j, j + 1));
    }
  }
  if (s.par->world_size() > 1 && s.par->sharding() != shard::mode::replicated) s.par->sum(v.data(), int(v.size()));
  pair_information_sums r;
  s.neighbour_sums = r;  // not measured, unless every axis has pairs
  for (int a = 0; a < 2; ++a) {
    const double n = v[std::size_t(3 * a + 2)];
    if (!(n > 1)) return r;
    r.mean[a] = v[std::size_t(3 * a)] / n;
    r.standard_error[a] = std::sqrt(std::max(0.0, v[std::size_t(3 * a + 1)] / n - r.mean[a] * r.mean[a]) / (n - 1));
  }
  r.measured = std::isfinite(r.mean[0]) && std::isfinite(r.mean[1]);
  s.neighbour_sums = r;
  return r;
}

double session::state::data_position_information(const state& s) {
  if (!(std::isfinite(s.geometry.step_A[0]) && std::isfinite(s.geometry.step_A[1]) && s.geometry.step_A[0] > 0 &&
        s.geometry.step_A[1] > 0))
    return std::nan("");  // every rank alike: no raster step
  const pair_information_sums n = neighbour_information(s);
  if (!n.measured) return std::nan("");
  const double J0 = n.mean[0] / (s.geometry.step_A[0] * s.geometry.step_A[0]);
  const double J1 = n.mean[1] / (s.geometry.step_A[1] * s.geometry.step_A[1]);
  // Differences within their noise measure no information: 0 (the corrections are then noise).
  return std::max(0.0, J0 + J1) * s.geometry.pixel_A[0] * s.geometry.pixel_A[1];
}

}  // namespace tycho::host
