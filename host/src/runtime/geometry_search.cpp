// The scan's geometry by trial reconstructions (geometry_search.hpp).

#include "runtime/geometry_search.hpp"

#include <algorithm>
#include <cmath>

#include <tycho/core/error.hpp>

#include "tycho/host/log.hpp"
#include "settings/settings_read.hpp"
#include "tycho/host/session.hpp"

namespace tycho::host {

namespace {

// Restores the log level the trials raised to errors (their sessions' information and advice would bury
// the run's own).
struct quiet_log {
  tycho_log_level was = log_level();
  quiet_log() {
    if (was < TYCHO_LOG_ERROR) set_log_level(TYCHO_LOG_ERROR);
  }
  ~quiet_log() { set_log_level(was); }
};

double wrapped_deg(double deg) {
  double d = std::fmod(deg, 360.0);
  if (d < 0) d += 360;
  return std::abs(d - 360) < 1e-9 ? 0.0 : d;
}

// The angle between two rotations, degrees in [0, 180].
double angle_between(double a, double b) {
  const double d = wrapped_deg(a - b);
  return std::min(d, 360 - d);
}

geometry_trial run_trial(const config_document& config, registry& reg, double deg, bool transpose, int64_t seed,
                         int64_t iterations) {
  config_document c = config.clone();
  c.set_from_text(cat("preprocess.scan_rotation_deg=", deg));
  c.set_from_text(cat("preprocess.scan_transpose=", transpose ? "true" : "false"));
  c.set_from_text("preprocess.scan_geometry_search=false");
  c.set_from_text(cat("reconstruct.iterations=", iterations));
  c.set_from_text(cat("reconstruct.seed=", seed));
  c.set_from_text("reconstruct.positions.correct=false");
  c.set_from_text("reconstruct.positions.refine_scan_map=false");
  c.set_from_text("output.previews=false");
  session trial(std::move(c), reg);
  trial.run(iterations, {});
  // The last iterations' mean: one iteration's loss scatters with its mini-batches; the same
  // seed for every candidate makes the comparison paired (the same batches).
  const std::vector<double>& L = trial.loss_history();
  const std::size_t n = std::clamp<std::size_t>(L.size() / 4, 1, 20);
  double sum = 0;
  for (std::size_t k = L.size() - n; k < L.size(); ++k) sum += L[k];
  return {deg, transpose, seed, sum / double(n)};
}

std::string candidate_text(double deg, bool transpose) {
  return cat(std::round(deg * 100) / 100, "° (transpose ", transpose ? "true" : "false", ")");
}

}  // namespace

geometry_search_result search_scan_geometry(const config_document& config, registry& reg,
                                            const geometry_search_options& o) {
  if (!(o.step_deg > 0) || o.iterations < 1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "scan geometry search: a step of ", o.step_deg, "° and ", o.iterations,
         " iterations: both must be > 0");
  const int64_t seed = *setting_value<int64_t>(config.table_at("reconstruct"), "reconstruct", "seed");
  quiet_log quiet;
  geometry_search_result r;
  std::vector<bool> transposes;
  if (o.transpose_free) transposes = {false, true};
  else transposes = {o.transpose};
  const int64_t steps = std::max<int64_t>(1, int64_t(std::llround(360.0 / o.step_deg)));
  for (bool t : transposes)
    for (int64_t k = 0; k < steps; ++k) r.trials.push_back(run_trial(config, reg, double(k) * 360.0 / double(steps), t, seed, o.iterations));
  auto best_of = [&](auto&& admits) {
    const geometry_trial* best = nullptr;
    for (const geometry_trial& t : r.trials)
      if (t.seed == seed && admits(t) && (best == nullptr || t.loss < best->loss)) best = &t;
    return best ? *best : geometry_trial{};
  };
  // Half a step either side of the best: the basin is about two steps wide (hBN: ±15°).
  const geometry_trial coarse = best_of([](const geometry_trial&) { return true; });
  const double half = 180.0 / double(steps);
  for (double d : {-half, half})
    r.trials.push_back(run_trial(config, reg, wrapped_deg(coarse.rotation_deg + d), coarse.transpose, seed, o.iterations));
  const geometry_trial best = best_of([](const geometry_trial&) { return true; });
  r.rotation_deg = best.rotation_deg;
  r.transpose = best.transpose;
  const double away = 360.0 / double(steps);
  const bool others = r.trials.size() > 3;
  const geometry_trial runner = best_of([&](const geometry_trial& t) {
    return t.transpose != best.transpose || angle_between(t.rotation_deg, best.rotation_deg) > away + 1e-9;
  });
  r.runner_up_deg = runner.rotation_deg;
  r.runner_up_transpose = runner.transpose;
  // The check: other mini-batches (other seeds) must rank the two the same way.
  r.conclusive = others;
  std::string replicas;
  for (int64_t extra : {1, 2}) {
    if (!others) break;
    const geometry_trial a = run_trial(config, reg, best.rotation_deg, best.transpose, seed + extra, o.iterations);
    const geometry_trial b = run_trial(config, reg, runner.rotation_deg, runner.transpose, seed + extra, o.iterations);
    r.trials.push_back(a);
    r.trials.push_back(b);
    r.conclusive = r.conclusive && a.loss < b.loss;
    replicas += cat(replicas.empty() ? "" : ", ", "seed ", seed + extra, ": ", a.loss, " against ", b.loss);
  }
  r.summary = cat(r.trials.size(), " trial reconstructions of ", o.iterations, " iterations (positions held), ",
                  "candidates every ", std::round(away * 100) / 100, "°: the lowest loss at ",
                  candidate_text(best.rotation_deg, best.transpose), ", ", best.loss, "; the best elsewhere ",
                  candidate_text(runner.rotation_deg, runner.transpose), ", ", runner.loss,
                  others ? cat("; with other mini-batches (", replicas, ")") : std::string(),
                  r.conclusive ? ": the same order, the search's geometry is taken"
                               : ": not the same order, the search is inconclusive");
  return r;
}

}  // namespace tycho::host
