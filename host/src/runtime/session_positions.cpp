// The positions' own correction in the result file: the measured curvature scale of their steps
// (core::driver::curvature_scale) and the weighing of correct = "auto"
// (core::driver::position_weighing), written to the manifest's "position_correction" and read
// back by a resumed run (`tycho reconstruct --from`), which then steps as the uninterrupted run.

#include "runtime/session_state.hpp"

#include "tycho/host/log.hpp"

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
    s.drv->restore_weighing(w);
  } else if (due > 0 && due <= r.done) {
    log_info("session", cat("'", r.path, "' holds no weighing of the positions' corrections, due at iteration ", due,
                            " (their ", driver::position_trial_iterations, "th own step): they go on unweighed"));
  }
}

}  // namespace tycho::host
