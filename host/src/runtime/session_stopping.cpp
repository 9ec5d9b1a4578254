// The stopping rule's part of the session (iterations = "auto"): its settings, where it stands
// after each iteration, and what the manifest and the log say of it.

#include "runtime/session_state.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "runtime/loss_noise.hpp"
#include "tycho/host/log.hpp"

namespace tycho::host {

using namespace session_detail;

// 6b. iterations = "auto": the stopping rule's settings (runtime/stopping_rule.hpp) and where it
// stands after a resumed history.
void session::state::prepare_stopping(state& s, start& st) {
  const reconstruct_settings& settings = st.settings;
  // A resumed run whose rule halved its learning rates goes on at them, by the rule or for a count.
  if (st.resume && !st.resume->halved_at.empty()) {
    s.halved_at = st.resume->halved_at;
    s.set_halved_rates();
  }
  if (!settings.length.by_rule) return;
  stopping_settings& r = s.rule_settings;
  r.window = settings.length.stop_window;
  r.max_iterations = settings.length.max_iterations;
  r.halvings_left = settings.length.plateau_halvings;
  // A stage that starts later has its chance: the rule judges no window that began before it.
  r.earliest = r.window;
  auto after = [&](int64_t start, int64_t span, const std::string& what) {
    if (start <= 1) return;
    const int64_t e = start + std::max(span, r.window) - 1;
    if (e > r.earliest) {
      r.earliest = e;
      s.rule_waits_for = what;
    }
  };
  after(settings.object.first_iteration, 0,
        cat("[reconstruct.object] first_iteration = ", settings.object.first_iteration));
  after(settings.probe.first_iteration, 0,
        cat("[reconstruct.probe] first_iteration = ", settings.probe.first_iteration));
  if (settings.driver.positions.enabled)
    after(settings.driver.positions.first_iteration, 0,
          cat("[reconstruct.positions] first_iteration = ", settings.driver.positions.first_iteration));
  // The scan map: two of its steps at least in the window.
  if (s.refine_scan_map)
    after(settings.scan.first_iteration, 2 * settings.scan.every,
          cat("[reconstruct.positions] scan_map_first_iteration = ", settings.scan.first_iteration,
              " (every ", settings.scan.every, ")"));
  for (const constraint_binding& c : s.constraints.bindings()) {
    after(c.first_iteration, 0, cat(c.name, " first_iteration = ", c.first_iteration));
    if (c.last_iteration > 0) after(c.last_iteration + 1, 0, cat(c.name, " last_iteration = ", c.last_iteration));
  }
  // A decaying learning rate reaches its final value at schedule_iterations: the first window
  // judged is the schedules' last W iterations (their tail, where a cosine's rate is within 2× of
  // its final value), so a run whose loss has stopped falling by the schedules' end stops there,
  // as the fixed count it was tuned as. (Judged only after W more iterations at the final rate,
  // those iterations fit noise: MoS2 0.9305 at 100, 0.9300 at 120.)
  using shape = learning_rate_schedule::shape;
  if (settings.object.schedule.kind != shape::constant || settings.probe.schedule.kind != shape::constant ||
      (settings.driver.positions.enabled && settings.driver.positions.schedule.kind != shape::constant))
    after(settings.iterations - r.window + 1, 0,
          cat("iteration ", settings.iterations - r.window + 1, ", ", r.window,
              " before the learning-rate schedules' end (schedule_iterations = ", settings.iterations, ")"));
  // σ_c: from the counts (runtime/loss_noise.hpp), or the resumed run's own value.
  if (st.resume && st.resume->by_rule) {
    r.counting_noise = st.resume->counting_noise;
  } else {
    const DLDataType stored = s.data.info.stored_dtype;
    const bool counted = (stored.code == kDLUInt || stored.code == kDLInt) && s.data.mean_total_intensity > 0;
    std::optional<double> v;
    if (counted)
      v = loss_variance_per_pattern(s.loss_ref->as<tycho_loss_vtable>(), s.loss, s.measured_mean, s.padding.mask,
                                    s.data.n0, s.data.n1, 1.0 / s.data.mean_total_intensity);
    // Each rank's estimate from its own patterns, weighted by how many it holds.
    double held = v ? double(s.data.patterns) : 0.0, weighted = v ? *v * held : 0.0;
    if (s.par->world_size() > 1) {
      weighted = s.par->sum(weighted);
      held = s.par->sum(held);
    }
    r.counting_noise = held > 0 ? std::sqrt(weighted / held / double(s.data.all_patterns)) : 0.0;
  }
  // A resumed run's halvings: its learning rates as they were, and the rule a window after the last.
  if (!s.halved_at.empty()) {
    // No verdict comes before the rule's first window or a stage the run scheduled: a halving
    // there is not one a run makes.
    if (s.halved_at.front() < r.earliest) {
      const manifest_reader& m = st.resume->file.manifest;
      const std::string why = s.rule_waits_for.empty() ? cat("its window of ", r.window) : s.rule_waits_for;
      m.refuse("history.stopping.halved_at", m.find("history.stopping.halved_at"),
               cat("iterations from ", r.earliest, " on, the first the rule judges (", why, ")"));
    }
    r.halvings_left -= int64_t(s.halved_at.size());
    if (s.halved_at.back() + r.window > r.earliest) {
      r.earliest = s.halved_at.back() + r.window;
      s.rule_waits_for = cat("the learning rates' halving at iteration ", s.halved_at.back());
    }
  }
  s.sync_rule_with_scan_map();
  s.rule = stopping_state_of(s.loss_history, r);
  if (s.par->is_root())
    log_info("stopping",
             cat("iterations = \"auto\": the run ends when the fall of the loss a line through its last ", r.window,
                 " values predicts for the next ", r.window, " is below its noise: ",
                 r.counting_noise > 0 ? cat("the larger of its counting noise, ", r.counting_noise,
                                            ", and its scatter about the line")
                                      : std::string("its scatter about the line (the data are not counts: no "
                                                    "counting noise)"),
                 "; not before iteration ", r.earliest,
                 s.rule_waits_for.empty() ? std::string()
                                          : cat(" (", s.rule_waits_for, ", then ", r.window, " iterations)"),
                 s.refine_scan_map ? "; not before the scan map's refinement has converged" : "",
                 r.halvings_left > 0
                     ? cat("; at its first ", r.halvings_left, " verdicts it halves the object's and probe's learning "
                           "rates instead and judges again ", r.window, " iterations later (plateau_halvings = ",
                           settings.length.plateau_halvings, ")")
                     : std::string(),
                 "; at most ", r.max_iterations, " iterations"));
}

// The scan map's refinement is a stage that runs until it converges (core/scan_refinement.hpp):
// on the data of the validation matrix the loss had stopped falling by iteration 35 while the map
// still moved (an MoSe2 scan's step ratio 1.009 -> 1.023 by iteration 95; Pearson 0.80 at the
// plateau, 0.88 after). The rule waits for it and judges the windows ending from its last step on.
void session::state::sync_rule_with_scan_map() {
  const scan_refinement* r = refine_scan_map && drv ? drv->scan_refinement_state() : nullptr;
  if (r == nullptr) return;
  rule_settings.held = !r->converged();
  // correct = "after_scan_map": the positions' own steps start the iteration after the map
  // converged, and with the scale refined the probe's: a stage with a window of its own.
  const bool positions_follow = positions_follow_map, probe_follows = probe_follows_map;
  const bool positions_weighed = positions_weighed_map;
  const bool follows = positions_follow || probe_follows;
  const int64_t from = r->converged() ? r->converged_at() + (follows ? rule_settings.window : 0) : 0;
  if (r->converged() && from > rule_settings.earliest) {
    rule_settings.earliest = from;
    // What follows the map, in the rule's summary ("") and the log ("is "): one stage or both.
    auto stage = [&](const char* is) {
      return positions_follow && probe_follows ? cat("each position ", is, "corrected and the probe refined")
             : positions_follow                ? cat("each position ", is, "corrected")
                                               : cat("the probe ", is, "refined");
    };
    rule_waits_for = follows ? cat("the scan map's refinement, converged at iteration ", r->converged_at(), ", then ",
                                   stage(""), " from iteration ", r->converged_at() + 1)
                             : cat("the scan map's refinement, converged at iteration ", r->converged_at());
    if (par->is_root())
      log_info("stopping",
               follows ? cat("the scan map's refinement converged at iteration ", r->converged_at(), ": ", stage("is "),
                             " from iteration ", r->converged_at() + 1,
                             positions_follow ? (positions_weighed ? " ([reconstruct.positions] correct = \"auto\")"
                                                                   : " ([reconstruct.positions] correct = \"after_scan_map\")")
                                              : "",
                             probe_follows ? " (the scan's scale is refined: the probe waits for the map)" : "",
                             ", and the rule judges the loss from iteration ", from, " (", rule_settings.window,
                             " iterations of it)")
                       : cat("the scan map's refinement converged at iteration ", r->converged_at(),
                             ": the rule judges the loss from there"));
  }
  // correct = "auto" returned the positions to the map's: the object meets them anew, a stage of
  // its own (on the low-dose WSe2 matrix scan the run otherwise ended 2 iterations later, Pearson
  // 0.586 against 0.598 without the trial).
  const driver::position_weighing& w = drv->weighing();
  if (w.iteration > 0 && !w.kept && w.iteration + rule_settings.window > rule_settings.earliest) {
    rule_settings.earliest = w.iteration + rule_settings.window;
    rule_waits_for = cat(rule_waits_for, "; the positions returned to the scan map's at iteration ", w.iteration);
    if (par->is_root())
      log_info("stopping", cat("the positions returned to the scan map's at iteration ", w.iteration,
                               ": the rule judges the loss from iteration ", rule_settings.earliest));
  }
}

void session::state::advance_rule(bool may_halve) {
  sync_rule_with_scan_map();
  rule = stopping_state_of(loss_history, rule_settings);
  if (!rule.halve || !may_halve) return;
  // Reduce-on-plateau: a constant Adam rate leaves the object jittering about its minimum, the
  // loss flat or slowly rising (the validation matrix's partially coherent MoS2 scan: 2.733e-2 at
  // iteration 19, 2.80e-2 at 100 with every position held); a halved rate settles it further.
  const int64_t at = int64_t(loss_history.size());
  const loss_trend t = rule.last;
  halved_at.push_back(at);
  rule_settings.halvings_left -= 1;
  if (at + rule_settings.window > rule_settings.earliest) {
    rule_settings.earliest = at + rule_settings.window;
    rule_waits_for = cat("the learning rates' halving at iteration ", at);
  }
  set_halved_rates();
  if (par->is_root())
    log_info("stopping", cat("iteration ", at, ": the loss ",
                             t.rising() ? cat("rose (a line through the last ", rule_settings.window, " losses rises by ",
                                              -t.predicted_fall, ")")
                                        : cat("no longer falls (a fall of ", t.predicted_fall, " predicted for the next ",
                                              rule_settings.window, ")"),
                             " against its noise, ", t.noise, ": the object's and probe's learning rates are halved, now ",
                             drv->learning_rate_factor(), " of their settings (", halved_at.size(), " of ",
                             halved_at.size() + std::size_t(rule_settings.halvings_left),
                             " halvings, [reconstruct] plateau_halvings), and the rule judges again from iteration ",
                             rule_settings.earliest));
  rule = stopping_state_of(loss_history, rule_settings);
}

// history.stopping in the manifest (docs/file-format.md).
std::string session::state::stopping_json() const {
  nlohmann::ordered_json j;
  const int64_t done = int64_t(loss_history.size());
  if (!length.by_rule) {
    j["iterations"] = length.fixed;
    j["reason"] = end_reason.empty() ? (done >= length.fixed ? "fixed_count" : "running") : end_reason;
    return j.dump();
  }
  const stopping_state now = stopping_state_of(loss_history, rule_settings);
  j["iterations"] = "auto";
  // What ended the last run call (the rule, --stop-after, a fixed count asked for, a signal);
  // saved during one (a checkpoint) or before any: what the rule says of the history so far.
  j["reason"] = !end_reason.empty() ? end_reason : now.stop ? now.reason : std::string("running");
  j["max_iterations"] = rule_settings.max_iterations;
  j["window"] = rule_settings.window;
  j["earliest"] = rule_settings.earliest;
  j["waits_for"] = rule_waits_for;
  j["counting_noise"] = rule_settings.counting_noise;
  j["plateau_halvings"] = length.plateau_halvings;
  j["halved_at"] = halved_at;
  j["plateau_iteration"] = now.plateau > 0 ? nlohmann::ordered_json(now.plateau) : nlohmann::ordered_json();
  if (now.last.evaluated)
    j["trend"] = {{"predicted_fall", now.last.predicted_fall},
                  {"residual_sd", now.last.residual_sd},
                  {"noise", now.last.noise}};
  return j.dump();
}

bool session::stops_by_rule() const { return s_->length.by_rule; }

bool session::rule_has_ended() const {
  return s_->length.by_rule && stopping_state_of(s_->loss_history, s_->rule_settings).stop;
}

std::string session::stopping_summary() const {
  const state& s = *s_;
  const int64_t done = s.drv->iterations_done();
  std::string its = cat(done, done == 1 ? " iteration" : " iterations");
  if (!s.halved_at.empty()) {
    std::string list;
    for (std::size_t k = 0; k < s.halved_at.size(); ++k) list += cat(k ? ", " : "", s.halved_at[k]);
    its += cat(" (the learning rates halved after iteration", s.halved_at.size() > 1 ? "s " : " ", list, ")");
  }
  const loss_trend& t = s.rule.last;
  if (s.end_reason == "converged")
    return cat("stopped after ", its, ": converged (the fall a line through the last ", s.rule_settings.window,
               " losses predicts for the next ", s.rule_settings.window, ", ", t.predicted_fall,
               ", is below the loss's noise, ", t.noise, ")");
  if (s.end_reason == "rising")
    return cat("stopped after ", its, ": the loss rose (a line through the last ", s.rule_settings.window,
               " losses rises by ", -t.predicted_fall, " over the next ", s.rule_settings.window,
               ", more than its noise, ", t.noise, "): the run is unstable, its steps too large for these data or "
               "a stage pulling against the others; the result holds the last iteration, not the best: "
               "lower the learning rates or set a fixed count");
  if (s.end_reason == "max_iterations")
    return cat("stopped after ", its, ": [reconstruct] max_iterations = ", s.rule_settings.max_iterations,
               " reached while the loss was still falling by more than its noise (a fall of ", t.predicted_fall,
               " predicted for the next ", s.rule_settings.window, " iterations, noise ", t.noise, ")");
  if (s.end_reason == "stop_after")
    return cat("stopped after ", its, " as asked (--stop-after); the stopping rule has not ended the run: continue it "
               "with --from");
  if (s.end_reason == "fixed_count")
    return s.length.by_rule ? cat("ran ", its, " in all: a fixed count was asked for")
                            : cat("ran ", its, ": the fixed count ([reconstruct] iterations = ", s.length.fixed, ")");
  return cat(its, " done");
}

}  // namespace tycho::host
