// The scan's geometry by trial reconstructions (geometry_search.hpp).

#include "runtime/geometry_search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <tycho/core/error.hpp>

#include "geometry/time_plan.hpp"
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

// fold >= 0: the trial holds out that fold of geometry_search_folds (validation_fold) and its loss
// is the held-out patterns'.
geometry_trial run_trial(const config_document& config, registry& reg, double deg, bool transpose, int64_t seed,
                         int64_t fold, int64_t iterations, int64_t batch_size) {
  config_document c = config.clone();
  if (fold >= 0) {
    c.set_from_text(cat("reconstruct.validation_fraction=", 1.0 / double(geometry_search_folds)));
    c.set_from_text(cat("reconstruct.validation_fold=", fold));
  }
  c.set_from_text(cat("reconstruct.batch_size=", batch_size));
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
  if (fold >= 0) return {deg, transpose, seed, fold, trial.held_out_loss()};
  // The last iterations' mean: one iteration's loss scatters with its mini-batches; the same
  // seed for every candidate makes the comparison paired (the same batches).
  const std::vector<double>& L = trial.loss_history();
  const std::size_t n = std::clamp<std::size_t>(L.size() / 4, 1, 20);
  double sum = 0;
  for (std::size_t k = L.size() - n; k < L.size(); ++k) sum += L[k];
  return {deg, transpose, seed, fold, sum / double(n)};
}

std::string candidate_text(double deg, bool transpose) {
  return cat(std::round(deg * 100) / 100, "° (transpose ", transpose ? "true" : "false", ")");
}

int64_t candidate_count(const geometry_search_options& o) {
  return std::max<int64_t>(1, int64_t(std::llround(360.0 / o.step_deg)));
}

// The one-sided 95 % (99 %: strict) points of Student's t with 1 to 30 degrees of freedom; beyond,
// the normal distribution's (within 2 % of t's at 31).
double t_point(int64_t dof, bool strict) {
  static const double t95[] = {6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
                               1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
                               1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697};
  static const double t99[] = {31.821, 6.965, 4.541, 3.747, 3.365, 3.143, 2.998, 2.896, 2.821, 2.764,
                               2.718,  2.681, 2.650, 2.624, 2.602, 2.583, 2.567, 2.552, 2.539, 2.528,
                               2.518,  2.508, 2.500, 2.492, 2.485, 2.479, 2.473, 2.467, 2.462, 2.457};
  if (dof > 30) return strict ? 2.326 : 1.645;
  const int64_t k = std::max<int64_t>(dof, 1);
  return (strict ? t99 : t95)[k - 1];
}

// A seed other than `seed`, the extra-th (never overflowing).
int64_t other_seed(int64_t seed, int64_t extra) {
  return seed <= std::numeric_limits<int64_t>::max() - extra ? seed + extra : seed - extra;
}

// The vertex of the least-squares parabola y = a x² + b x + c through the points; NaN where it
// does not open upwards or fewer than three points span it. Normal equations on x centred and
// scaled (the offsets are degrees, the losses ~1e-2 with differences ~1e-6: well conditioned).
double parabola_vertex(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 3) return std::nan("");
  double m = 0, s = 0;
  for (double v : x) m += v / double(n);
  for (double v : x) s = std::max(s, std::abs(v - m));
  if (!(s > 0)) return std::nan("");
  // Σ over t = (x − m) / s of t^k and t^k y, k = 0..4 and 0..2.
  double T[5] = {0, 0, 0, 0, 0}, Y[3] = {0, 0, 0};
  for (std::size_t i = 0; i < n; ++i) {
    const double t = (x[i] - m) / s;
    double p = 1;
    for (int k = 0; k < 5; ++k) {
      if (k < 3) Y[k] += p * y[i];
      T[k] += p, p *= t;
    }
  }
  // Solve [[T4 T3 T2] [T3 T2 T1] [T2 T1 T0]] (a, b, c) = (Y2, Y1, Y0) by Cramer's rule.
  const auto det3 = [](double a, double b, double c, double d, double e, double f, double g, double h, double i) {
    return a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g);
  };
  const double D = det3(T[4], T[3], T[2], T[3], T[2], T[1], T[2], T[1], T[0]);
  if (!(std::abs(D) > 0)) return std::nan("");
  const double a = det3(Y[2], T[3], T[2], Y[1], T[2], T[1], Y[0], T[1], T[0]) / D;
  const double b = det3(T[4], Y[2], T[2], T[3], Y[1], T[1], T[2], Y[0], T[0]) / D;
  if (!(a > 0)) return std::nan("");
  return m + s * (-b / (2 * a));
}

// The rotation between the candidates, placed by trials whose loss is a smooth function of the
// angle: each takes the whole scan as one batch (geometry_search_placement_batch: where that
// gives the object enough steps and fits), so that no draw of mini-batches moves it. A mini-batch trial's loss scatters with the
// batches' draw by more than angles a few degrees apart differ: on graphene at 1,600 electrons a
// pattern (truth 111.45°) five seeds' lowest losses over 100°–130° every 5° lay anywhere from 105°
// to 125° and the vertex of three seeds' means at 118.2° (the run then 6.7° off, Pearson 0.27);
// one batch of the whole scan at 1.25° steps gives a loss smooth within 3·10⁻⁶ of 3.4·10⁻² whose
// vertex is 113.7° (hBN at 5,000 e/Å²: 59.3°, truth 60.05°), in 7 + 4 trials instead of 21. The
// losses a quarter step apart over ±3/4 step around the best, then an eighth and a sixteenth of
// a step either side of the lowest; the vertex of a parabola through those within a quarter step
// of the lowest, where it opens upwards and lies within that span, is the rotation; else the
// lowest's angle. Records the offsets (from the ranking's best) and losses in r.
template <class loss_of>
double fine_rotation(geometry_search_result& r, const geometry_trial& best, loss_of&& loss) {
  const double h = 0.25 * r.step_deg;
  const auto at = [&](double offset) {
    r.fine_offsets_deg.push_back(offset);
    r.fine_losses.push_back(loss(wrapped_deg(best.rotation_deg + offset)));
  };
  for (int j = -3; j <= 3; ++j) at(j * h);
  const auto lowest = [&] {
    std::size_t k = 0;
    for (std::size_t i = 1; i < r.fine_losses.size(); ++i)
      if (r.fine_losses[i] < r.fine_losses[k]) k = i;
    return k;
  };
  if (!std::isfinite(r.fine_losses[lowest()])) return best.rotation_deg;  // every trial failed: the ranking's
  const double centre = r.fine_offsets_deg[lowest()];
  for (double d : {-0.5 * h, -0.25 * h, 0.25 * h, 0.5 * h}) at(centre + d);
  const double low = r.fine_offsets_deg[lowest()];
  // Least squares y = a x² + b x + c over the points within a quarter step of the lowest (x from it).
  std::vector<double> x, y;
  for (std::size_t i = 0; i < r.fine_losses.size(); ++i)
    if (std::abs(r.fine_offsets_deg[i] - low) <= h + 1e-9 && std::isfinite(r.fine_losses[i]))
      x.push_back(r.fine_offsets_deg[i] - low), y.push_back(r.fine_losses[i]);
  const double vertex = parabola_vertex(x, y);
  return std::isfinite(vertex) && std::abs(vertex) <= h ? wrapped_deg(best.rotation_deg + low + vertex)
                                                        : wrapped_deg(best.rotation_deg + low);
}

// Student's t of the values' mean against 0; 0 where one is not finite (a failed trial: no verdict).
double t_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0, var = 0;
  for (double g : v) {
    if (!std::isfinite(g)) return 0;
    mean += g / double(v.size());
  }
  for (double g : v) var += (g - mean) * (g - mean) / double(v.size() - 1);
  const double se = std::sqrt(var / double(v.size()));
  return se > 0 ? mean / se : (mean > 0 ? HUGE_VAL : 0.0);
}

}  // namespace

geometry_search_options geometry_search_options_of(const preprocess_settings& pre, int64_t patterns,
                                                   int64_t batch_size) {
  geometry_search_options o;
  o.step_deg = pre.geometry_search_step_deg;
  o.iterations = pre.geometry_search_iterations;
  o.transpose_free = pre.transpose_auto;
  o.transpose = pre.transpose;
  o.patterns = patterns;
  o.batch_size = batch_size;
  return o;
}

int64_t geometry_search_trials(const geometry_search_options& o) {
  // The candidates, the best's two neighbours, the best and the runner-up with each replica seed,
  // each fold held out in turn, and the placement's.
  return candidate_count(o) * (o.transpose_free ? 2 : 1) + 2 + 2 * geometry_search_replicas * geometry_search_folds +
         (candidate_count(o) > 1 ? geometry_search_placement_trials : 0);
}

int64_t geometry_search_placement_batch(const geometry_search_options& o) {
  if (o.patterns <= 0) return o.batch_size;
  // As few batches as give the object geometry_search_placement_updates steps in the trial's
  // iterations (one with the default 200), each of at most geometry_search_placement_pixels.
  const int64_t batches = (geometry_search_placement_updates + std::max<int64_t>(o.iterations, 1) - 1) /
                          std::max<int64_t>(o.iterations, 1);
  int64_t batch = (o.patterns + batches - 1) / batches;
  if (o.detector_pixels > 0)
    batch = std::min(batch, std::max(o.batch_size, geometry_search_placement_pixels / o.detector_pixels));
  return std::max<int64_t>(1, std::min(o.patterns, batch));
}

double geometry_search_work(const geometry_search_options& o, int64_t detector_pixels) {
  return double(geometry_search_trials(o)) * double(o.iterations) * double(o.patterns) * double(detector_pixels);
}

std::string geometry_search_plan_line(const config_document& config, bool raster, int64_t patterns,
                                      int64_t detector_pixels, double seconds_per_iteration) {
  using mode = preprocess_settings::search_mode;
  const preprocess_settings pre = read_preprocess_settings(config.table_at("preprocess"), config.origin());
  if (!raster || !pre.rotation_auto || pre.geometry_search == mode::never) return "";
  const geometry_search_options o = geometry_search_options_of(pre, patterns, geometry_search_options{}.batch_size);
  const int64_t trials = geometry_search_trials(o);
  const double work = geometry_search_work(o, detector_pixels);
  std::string time;
  if (seconds_per_iteration > 0) {
    const double total = seconds_per_iteration * double(trials) * double(o.iterations);
    time = cat(" ~", duration_text(total));
  }
  const std::string trials_text = cat(trials, " trial reconstructions of ", o.iterations, " iterations", time);
  if (pre.geometry_search == mode::always)
    return cat("search   [preprocess] scan_geometry_search = true: ", trials_text,
               " before the run (docs/scan-geometry.md)");
  if (work > geometry_search_auto_max_work)
    return cat("search   [preprocess] scan_geometry_search = \"auto\": not run on this scan (", trials_text, " would be ",
               std::round(work / geometry_search_auto_max_work * 10) / 10,
               " times the work \"auto\" allows); where neither the parallax nor the curl measures the geometry the "
               "nominal raster is used");
  return cat("search   [preprocess] scan_geometry_search = \"auto\": where neither the parallax nor the curl measures "
             "the scan's geometry (low dose, weak contrast), ", trials_text, " before the run (docs/scan-geometry.md)");
}

geometry_search_result search_scan_geometry(const config_document& config, registry& reg,
                                            const geometry_search_options& o) {
  if (!(o.step_deg > 0) || o.iterations < 1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "scan geometry search: a step of ", o.step_deg, "° and ", o.iterations,
         " iterations: both must be > 0");
  const int64_t seed = *setting_value<int64_t>(config.table_at("reconstruct"), "reconstruct", "seed");
  // Batches that differ with the seed: where one would hold the whole scan, a quarter of it.
  const int64_t batch = o.patterns > 0 && o.batch_size >= o.patterns ? std::max<int64_t>(1, o.patterns / 4)
                                                                       : o.batch_size;
  quiet_log quiet;
  geometry_search_result r;
  std::vector<bool> transposes;
  if (o.transpose_free) transposes = {false, true};
  else transposes = {o.transpose};
  const int64_t steps = candidate_count(o);
  r.step_deg = 360.0 / double(steps);
  // A candidate whose trial fails (its loss not finite) ranks last; where every one fails, the
  // first's error is the run's (a config or data error, not the geometry's).
  std::string first_error;
  auto attempt = [&](double deg, bool t, int64_t s, int64_t fold, int64_t b) -> geometry_trial {
    try {
      return run_trial(config, reg, deg, t, s, fold, o.iterations, b);
    } catch (const tycho::error& e) {
      if (first_error.empty()) first_error = e.what();
      return {deg, t, s, fold, HUGE_VAL};
    }
  };
  auto trial = [&](double deg, bool t, int64_t s, int64_t fold = -1) {
    r.trials.push_back(attempt(deg, t, s, fold, batch));
    return r.trials.back();
  };
  for (bool t : transposes)
    for (int64_t k = 0; k < steps; ++k) trial(double(k) * r.step_deg, t, seed);
  bool any = false;
  for (const geometry_trial& t : r.trials) any = any || std::isfinite(t.loss);
  if (!any) fail(TYCHO_ERR_BAD_DATA, "scan geometry search: every trial reconstruction failed; the first: ", first_error);
  auto best_of = [&](auto&& admits) {
    const geometry_trial* best = nullptr;
    for (const geometry_trial& t : r.trials)
      if (t.seed == seed && t.fold < 0 && admits(t) && (best == nullptr || t.loss < best->loss)) best = &t;
    return best ? *best : geometry_trial{};
  };
  // Half a step either side of the best: the basin is about two steps wide (hBN: ±15°).
  const geometry_trial coarse = best_of([](const geometry_trial&) { return true; });
  for (double d : {-0.5 * r.step_deg, 0.5 * r.step_deg}) trial(wrapped_deg(coarse.rotation_deg + d), coarse.transpose, seed);
  const geometry_trial best = best_of([](const geometry_trial&) { return true; });
  r.transpose = best.transpose;
  r.rotation_deg = best.rotation_deg;
  const bool others = steps > 1 || transposes.size() > 1;
  const geometry_trial runner = best_of([&](const geometry_trial& t) {
    return t.transpose != best.transpose || angle_between(t.rotation_deg, best.rotation_deg) > r.step_deg + 1e-9;
  });
  r.runner_up_deg = runner.rotation_deg;
  r.runner_up_transpose = runner.transpose;
  // The check: the runner-up must predict patterns that no trial was fitted to worse than the
  // best. With each replica seed (not the ranking's) and each fold of the patterns held out in
  // turn, both trials' held-out loss; their gaps (the runner-up's less the best's, one per seed
  // and fold) must be positive beyond their scatter, a one-sided Student t test. The fitted loss
  // cannot serve: the best was chosen as the geometry that fits this data's noise best, and it
  // keeps fitting it with any seed (16 x 16 patterns of pure noise: the fitted gap's t = 3.4 over
  // ten seeds, the held-out gap's −2.7 — the geometry that fits the noise predicts it worse).
  for (int64_t extra = 1; others && extra <= geometry_search_replicas; ++extra) {
    const int64_t other = other_seed(seed, extra);
    for (int64_t fold = 0; fold < geometry_search_folds; ++fold) {
      const double a = trial(best.rotation_deg, best.transpose, other, fold).loss;
      const double b = trial(runner.rotation_deg, runner.transpose, other, fold).loss;
      r.gaps.push_back(b - a);
    }
  }
  r.t_critical = t_point(int64_t(r.gaps.size()) - 1, o.strict);
  r.t_statistic = t_of(r.gaps);
  r.conclusive = others && r.gaps.size() > 1 && r.t_statistic > r.t_critical;
  // Placed between the candidates only once the check has passed, and after it: the placement
  // chooses among angles by the fitted loss of this data's noise, and a check at the placed angle
  // inherits that choice (pure noise: a placed winner passed the held-out test at 99 %, t = 2.72,
  // where the candidates' winners of eight noise scans gave t <= 0.99).
  if (r.conclusive && steps > 1) {
    r.fine_batch = geometry_search_placement_batch(o);
    r.rotation_deg = fine_rotation(
        r, best, [&](double deg) { return attempt(deg, best.transpose, seed, -1, r.fine_batch).loss; });
  }
  double mean_gap = 0;
  for (double g : r.gaps) mean_gap += g / double(std::max<std::size_t>(r.gaps.size(), 1));
  r.summary = cat(r.trials.size() + r.fine_losses.size(), " trial reconstructions of ", o.iterations, " iterations (positions held",
                  batch != o.batch_size ? cat(", batches of ", batch) : std::string(), "), candidates every ",
                  std::round(r.step_deg * 100) / 100, "°: the lowest loss at ",
                  candidate_text(best.rotation_deg, best.transpose), ", ", best.loss,
                  r.fine_offsets_deg.empty() ? std::string()
                                             : cat(", placed at ", std::round(r.rotation_deg * 100) / 100, "° by ",
                                                   r.fine_losses.size(), " trials of ",
                                                   r.fine_batch >= o.patterns ? std::string("the whole scan as one batch")
                                                                              : cat("batches of ", r.fine_batch, " in a fixed draw"),
                                                   " around it"),
                  "; the best elsewhere ",
                  candidate_text(runner.rotation_deg, runner.transpose), ", ", runner.loss, "; with ",
                  geometry_search_replicas, " other seeds, each of ", geometry_search_folds,
                  " folds of the patterns held out in turn, the runner-up's held-out loss above the best's by ",
                  mean_gap, " on average over ", r.gaps.size(), ": t = ", r.t_statistic,
                  r.conclusive ? cat(" > ", r.t_critical, " (one-sided ", o.strict ? "99" : "95", " %): the search's geometry is taken")
                               : cat(" not > ", r.t_critical, " (one-sided ", o.strict ? "99" : "95", " %): the search is inconclusive"));
  return r;
}

}  // namespace tycho::host
