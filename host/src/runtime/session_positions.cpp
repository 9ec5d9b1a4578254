// The positions' own correction in the result file: the measured curvature scale of their steps
// (core::driver::curvature_scale) and the weighing of correct = "auto"
// (core::driver::position_weighing), written to the manifest's "position_correction" and read
// back by a resumed run (`tycho reconstruct --from`), which then steps as the uninterrupted run.

#include "runtime/session_state.hpp"

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
  if (m.find("position_correction.curvature_scale")) {
    driver::curvature_scale c;
    const auto v = m.numbers("position_correction.curvature_scale", 2, true, false, "the positions' curvature scale");
    c.scale = {v[0], v[1]};
    c.first = m.integer("position_correction.first_measured_at", 1, r.done);
    c.iteration = m.integer("position_correction.measured_at", c.first, r.done);
    c.patterns = m.integer("position_correction.patterns", 0, int64_t(1) << 40);
    s.drv->restore_position_curvature_scale(c);
  }
  // The weighing stands only for a run that weighs (correct = "auto"): another setting decides
  // for itself whether the positions move.
  if (s.positions_weighed_map && m.find("position_correction.weighing")) {
    driver::position_weighing w;
    w.iteration = m.integer("position_correction.weighing.iteration", 1, r.done);
    w.kept = m.boolean("position_correction.weighing.kept");
    w.statistic = m.number_or_null("position_correction.weighing.statistic", "the positions' weighing statistic");
    w.noise_px = m.number_or_null("position_correction.weighing.noise_A", "the positions' counting noise in Å") /
                 std::max(s.geometry.pixel_A[0], s.geometry.pixel_A[1]);
    s.drv->restore_weighing(w);
  }
}

}  // namespace tycho::host
