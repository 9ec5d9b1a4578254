// The session's iterations: run() and run_by_rule(), the kept state after each finite
// iteration, the stop check, the positions' Cramér–Rao bound at the end, and the replicas' check.

#include "runtime/session_state.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include <time.h>

#include <tycho/sdk/npy.hpp>
#include <nlohmann/json.hpp>

#include "tycho/host/log.hpp"
#include "tycho/host/progress.hpp"
#include "settings/settings_read.hpp"

namespace tycho::host {

using namespace session_detail;

namespace {
// The CPU time this process has used, all threads, s (the iterations' cost whatever else runs).
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// "[reconstruct.object] learning_rate = 0.005, [reconstruct.probe] learning_rate = (the default)"
std::string learning_rates_text(const config_document& doc) {
  std::string text;
  for (const char* which : {"object", "probe"}) {
    const std::string table = cat("reconstruct.", which);
    const auto lr = read_key<double>(doc.table_at(table), "learning_rate", table);
    text += cat(text.empty() ? "" : ", ", "[", table, "] learning_rate = ",
                lr ? cat(*lr) : std::string("(the optimizer's default)"));
  }
  return text;
}

// Why neither the weighing nor the bound can be computed where the engine lacks the ABI 1.4 call.
constexpr const char* k_no_position_information =
    "the engine gives no position information (tycho_engine_vtable::position_information)";

// The positions' weighing (correct = "auto"), for the log: what was measured and what follows, or
// why nothing could be (a NaN statistic: the data are not counts, or the engine gives no
// information).
std::string weighing_text(const driver::position_weighing& w, double pixel_A, int64_t patterns, bool counts) {
  if (!std::isfinite(w.statistic))
    return cat("iteration ", w.iteration, ": the positions' own corrections are kept unweighed: ",
               counts ? k_no_position_information : "the data are not counts, so their noise is unknown");
  return cat("iteration ", w.iteration, ": the positions' own corrections beyond the scan map are ", w.statistic,
             " times the variance their counting noise alone would give (Σ Δᵀ J Δ / 2P over the P = ", patterns,
             " patterns of the curvature's sample, J each position's Fisher information",
             w.information_ratio != 1
                 ? cat(", the engine's at the object so far scaled by ", w.information_ratio,
                       " to the data's own measure from neighbouring patterns, which it exceeded (noise the object "
                       "has fitted, or the finite difference's shortfall where the step is not small)")
                 : std::string(),
             std::isfinite(w.noise_px) ? cat("; the noise allows ", w.noise_px * pixel_A, " Å per axis")
                                       : std::string("; the data's neighbouring patterns differ by no more than their "
                                                     "noise: they place no position"),
             "): ",
             w.kept ? "above 2, the displacements found outweigh the noise; they are kept and corrected further"
                    : "not above 2, they are mostly noise; the positions return to the scan map's and are not "
                      "corrected one by one ([reconstruct.positions] correct = true keeps correcting them, unweighed)");
}
}  // namespace

namespace {
// Whether a kept array can take `view`'s values in place: the same dtype and shape.
bool holds_like(const owned_array& k, const DLTensor& view) {
  return k.dtype.code == view.dtype.code && k.dtype.bits == view.dtype.bits && k.dtype.lanes == view.dtype.lanes &&
         k.shape == std::vector<int64_t>(view.shape, view.shape + view.ndim);
}
}  // namespace

std::string session::state::keep_if_finite() {
  // 1. Check, without copying what the host can read in place.
  struct engine_array {
    const char* name;
    tycho_tensor_id id;
    owned_array* kept;
    owned_array fresh;  // a copy only for a tensor off the host (a GPU engine's)
  };
  engine_array arrays[2] = {{"object", TYCHO_TENSOR_OBJECT, &kept.object, {}},
                            {"probe", TYCHO_TENSOR_PROBE, &kept.probe, {}}};
  for (engine_array& a : arrays) {
    const DLTensor view = engine_tensor(a.id);
    if (view.device.device_type == kDLCPU && view.data != nullptr) {
      if (count_non_finite(view).count) return a.name;
    } else {
      a.fresh = read_engine_tensor(a.name, a.id);
      if (count_non_finite(a.fresh).count) return a.name;
    }
  }
  std::string bad;
  for_each_optimizer_array([&](const std::string& name, const DLTensor& view) {
    if (count_non_finite(view).count) bad = name;
    return !bad.empty();
  });
  if (!bad.empty()) return bad;
  // 2. Finite: into the kept arrays' buffers (reallocated only when a shape changed).
  for (engine_array& a : arrays) {
    if (!a.fresh.bytes.empty()) {
      *a.kept = std::move(a.fresh);
      continue;
    }
    owned_array& k = *a.kept;
    if (!holds_like(k, engine_tensor(a.id))) {
      k = read_engine_tensor(a.name, a.id);
      continue;
    }
    check_status(engine_ref->as<tycho_engine_vtable>()->read_tensor(engine, a.id, k.bytes.data(), k.bytes.size()),
                 "engine read_tensor");
  }
  std::size_t i = 0;
  bool same = true;
  for_each_optimizer_array([&](const std::string& name, const DLTensor& view) {
    owned_array* k = i < kept.optimizer_arrays.size() ? &kept.optimizer_arrays[i] : nullptr;
    if (k == nullptr || k->name != name || !holds_like(*k, view)) {
      same = false;
      return true;
    }
    std::memcpy(k->bytes.data(), static_cast<const char*>(view.data) + view.byte_offset, k->bytes.size());
    ++i;
    return false;
  });
  if (!same || i != kept.optimizer_arrays.size()) kept.optimizer_arrays = optimizer_arrays();
  if (drv->object_in_tiles()) kept.tile_steps = drv->tiles()->steps();
  kept.object_steps = optimizer_steps(object_opt_ref, object_opt);
  kept.probe_steps = optimizer_steps(probe_opt_ref, probe_opt);
  kept.iterations = drv->iterations_done();
  return "";
}

void session::set_stop_check(std::function<bool()> stop) {
  s_->stop_check = std::move(stop);
  // One rank stops between mini-batches (the kept state is the last complete iteration's);
  // several ranks agree at the end of each iteration instead (run()), so that none waits for the
  // others in a collective.
  s_->drv->set_stop_check(s_->par->world_size() == 1 ? s_->stop_check : std::function<bool()>());
}

bool session::stopped() const { return s_->stopped; }

const std::string& session::end_reason() const { return s_->end_reason; }

bool session::run(int64_t iterations, const progress_callback& progress) {
  if (iterations <= 0 && s_->length.by_rule)
    return run_iterations(std::max<int64_t>(s_->rule_settings.max_iterations - iterations_done(), 0), progress, true);
  return run_iterations(iterations > 0 ? iterations : s_->length.fixed, progress, false);
}

bool session::run_by_rule(int64_t at_most, const progress_callback& progress) {
  if (!s_->length.by_rule)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "this run has a fixed count ([reconstruct] iterations = ", s_->length.fixed,
         "): no stopping rule to run by");
  return run_iterations(at_most, progress, true);
}

bool session::run_iterations(int64_t n, const progress_callback& progress, bool by_rule) {
  state& s = *s_;
  if (s.stopped)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "this session stopped after iteration ", s.kept.iterations, " (", s.stop_reason,
         "): start a new one from its saved result");
  // Every rank must run as many iterations, or one waits forever for the others' sums. (By the
  // rule every rank stops at the same iteration: the rule reads the loss, which is global.)
  s.par->require_same(cat(n, by_rule ? " by the rule" : ""),
                      "the number of iterations to run (--iterations, --stop-after)");
  s.end_reason.clear();
  // Both counters of tycho_progress count over the session's whole life (resumed iterations
  // included): iteration k of this call reports (done + k) / (done + n), so a second run call
  // continues 4/6, 5/6, 6/6 after a first one of 3. By the rule, the total is the cap.
  const int64_t last = s.drv->iterations_done() + n;
  const bool several = s.par->world_size() > 1;
  auto stop_requested = [&] {
    if (!s.stop_check) return false;
    const bool mine = s.stop_check();
    return several ? s.par->sum(mine ? 1.0 : 0.0) > 0 : mine;  // every rank stops at the same iteration
  };
  auto interrupted = [&](const std::string& when) {
    s.end_reason = "signal";
    s.stop_at_kept(cat("interrupted ", when));
    fail(TYCHO_ERR_CANCELLED, "interrupted ", when, ": the state after iteration ", s.kept.iterations,
         " is kept");
  };
  if (by_rule && s.rule.stop) {  // a resumed run its rule has already ended
    s.end_reason = s.rule.reason;
    return true;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (stop_requested()) interrupted(cat("after iteration ", s.drv->iterations_done()));
    const int64_t iteration = s.drv->iterations_done() + 1;
    auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = process_cpu_seconds();
    double loss = 0;
    try {
      loss = s.drv->run_iteration();
    } catch (const error& e) {
      if (e.status == TYCHO_ERR_CANCELLED && s.stop_check) interrupted(cat("during iteration ", iteration));
      throw;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_secs = process_cpu_seconds() - cpu0;
    for (const std::string& line : s.drv->take_scan_log())
      if (s.par->is_root()) log_info("positions", line);
    if (const driver::position_weighing& w = s.drv->weighing(); w.iteration == iteration && s.par->is_root())
      log_info("positions", weighing_text(w, std::max(s.geometry.pixel_A[0], s.geometry.pixel_A[1]),
                                          s.drv->curvature_patterns(), s.data.has_counts()));
    // A non-finite loss, or NaN left in the state, would only spread: stop with the last state
    // that had neither.
    if (!std::isfinite(loss)) {
      s.end_reason = "non_finite";
      s.stop_at_kept(cat("the loss of iteration ", iteration, " is ", loss));
      fail(TYCHO_ERR_BAD_DATA, "the loss of iteration ", iteration, " is ", loss,
           ": the run diverged and stopped, keeping the state after iteration ", s.kept.iterations,
           " (the last with finite values). Likely cause: a learning rate too large for this data (",
           learning_rates_text(s.config), "); or [optics] values far from the data's (C10 = ", s.optics.C10_A,
           " Å, semiangle ", s.optics.semiangle_mrad, " mrad)");
    }
    if (const std::string bad = s.keep_if_finite(); !bad.empty()) {
      s.end_reason = "non_finite";
      s.stop_at_kept(cat("iteration ", iteration, " left non-finite values in the ", bad));
      fail(TYCHO_ERR_BAD_DATA, "iteration ", iteration, " left non-finite values in the ", bad,
           " (its loss was ", loss, "): the run diverged and stopped, keeping the state after iteration ",
           s.kept.iterations, " (the last with finite values). Likely cause: a learning rate too large for this "
           "data (", learning_rates_text(s.config), ")");
    }
    s.loss_history.push_back(loss);
    s.seconds_history.push_back(secs);
    s.cpu_seconds_history.push_back(cpu_secs);
    if (s.length.by_rule) s.advance_rule(by_rule);  // a fixed count halves no learning rate
    if (progress) {
      tycho_progress p{sizeof(tycho_progress), s.drv->iterations_done(), last, loss, secs};
      if (!progress(p)) {
        s.end_reason = "callback";
        return false;
      }
    }
    // The ranks hold the same global loss, so they reach the same verdict; agreeing on it costs one
    // small sum and keeps a rank from waiting for others that stopped, whatever the reducer's rounding.
    if (by_rule && (several ? s.par->sum(s.rule.stop ? 1.0 : 0.0) > 0 : s.rule.stop)) break;
  }
  s.end_reason = by_rule ? (s.rule.stop ? s.rule.reason : "stop_after") : "fixed_count";
  if (s.par->is_root()) log_info("stopping", stopping_summary());
  // The specimen or its twin: a thin specimen cannot tell them apart in the loss (phase_twin.hpp).
  if (s.par->is_root())
    if (const phase_skewness r = state::phase_check(s); r.done && std::string(state::phase_verdict(r)) == "twin")
      log_warning("result", cat("the object's phase is skewed negative (", r.skewness, ", ",
                                -r.skewness / r.standard_error,
                                " standard errors): the atoms show as phase minima, which is the specimen's twin "
                                "(point-reflected and conjugated, the scan turned 180°), most likely from a C10 "
                                "of the wrong sign: this run started from C10 = ",
                                s.optics.C10_A, " Å; state [optics] C10_A = ", -s.optics.C10_A,
                                " and run again (py4DSTEM's and abTEM's defocus is −C10)"));
  report_position_bound();
  report_held_out_loss();
  // correct = "auto" that ended before its weighing: say the corrections stand unweighed. From the
  // iteration of their first own step (later than configured where they waited for the object).
  const int64_t first_own_step = s.drv->position_curvature_scale().first;
  if (s.positions_weighed_map && s.drv->weighing().iteration == 0 && s.drv->weighing_due() > 0 &&
      first_own_step > 0 && s.par->is_root())
    log_info("positions", cat("the positions' own corrections (from iteration ", first_own_step,
                              ") were not weighed against their counting noise: the run ended at iteration ",
                              s.drv->iterations_done(), ", before iteration ", s.drv->weighing_due(),
                              " where they would be; they are kept unweighed (more iterations, or iterations = "
                              "\"auto\", let it decide)"));
  check_replicas();
  if (s.par->world_size() > 1) {
    const auto st = s.par->gradient_reduce_stats();
    double total = 0;
    for (double x : s.seconds_history) total += x;
    if (st.calls > 0)
      log_info("session", cat("gradient all-reduces (", s.par->reducer_name(), "): ", st.calls, " calls of ",
                              st.bytes / double(st.calls) / 1024.0, " KiB, ", st.seconds, " s in all (",
                              st.seconds / double(st.calls) * 1e3, " ms each; iterations took ", total, " s)"));
  }
  return true;
}

void session::report_held_out_loss() {
  state& s = *s_;
  const int64_t held = s.drv->patterns_total() - s.drv->patterns_in_batches();
  if (held == 0) return;
  s.held_out_loss = s.drv->held_out_loss();
  const double fitted = s.loss_history.empty() ? std::numeric_limits<double>::quiet_NaN() : s.loss_history.back();
  nlohmann::ordered_json j{{"fraction", double(held) / double(s.drv->patterns_total())},
                           {"patterns", held},
                           {"fold", s.validation_fold},
                           {"held_out_loss", s.held_out_loss},
                           {"last_iteration_loss", fitted}};
  s.validation_json = j.dump();
  if (s.par->is_root())
    log_info("validation", cat("the ", held, " held-out patterns' mean loss ", s.held_out_loss,
                               " (the last iteration's over the patterns in the batches ", fitted, ")"));
}

// Where the positions moved (the scan map stepped, or their own correction began) and the data
// are counts: how precisely the data place each position, at the run's end (the engine's Fisher
// information; the floor per-position correction can reach), logged and kept in the manifest.
// Where the positions were to move but no bound can be given, the log says why.
void session::report_position_bound() {
  state& s = *s_;
  s.positions_precision_json.clear();
  if (!(s.refine_scan_map || s.drv->corrects_positions())) return;  // the positions were never in play
  auto none = [&](const std::string& why) {
    if (s.par->is_root()) log_info("positions", cat("no Cramér-Rao bound for the positions: ", why));
  };
  if (!s.data.has_counts()) {
    none(cat("the data are not counts (the source stores them as ", sdk::npy::dtype_text(s.data.info.stored_dtype),
             "; the bound needs integer counts, or a prepared file made from them)"));
    return;
  }
  if (!s.drv->positions_moved()) {
    none(cat("no position has moved in this run's ", s.drv->iterations_done(), " iterations"));
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto bound = s.drv->position_bound_px();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!bound) {
    none(k_no_position_information);
    return;
  }
  const double A[2] = {bound->rms_px[0] * s.geometry.pixel_A[0], bound->rms_px[1] * s.geometry.pixel_A[1]};
  nlohmann::ordered_json j;
  j["cramer_rao_A"] = {std::isfinite(A[0]) ? nlohmann::ordered_json(A[0]) : nlohmann::ordered_json(),
                       std::isfinite(A[1]) ? nlohmann::ordered_json(A[1]) : nlohmann::ordered_json()};
  j["patterns"] = bound->informed;
  j["patterns_without_information"] = bound->uninformed;
  j["iteration"] = s.drv->iterations_done();
  s.positions_precision_json = j.dump();
  if (!s.par->is_root()) return;
  auto short_number = [](double v) {
    std::ostringstream o;
    o << std::setprecision(3) << v;
    return o.str();
  };
  log_info("positions",
           cat("the data place each probe position to ", short_number(A[0]), " Å and ", short_number(A[1]),
               " Å rms along the object's rows and columns: the Cramér-Rao bound, the smallest rms error any "
               "unbiased estimate of each position can have from these counts with the final object and probe (",
               bound->informed, " patterns",
               bound->uninformed > 0
                   ? cat("; ", bound->uninformed, " more hold no position information, a flat object under the probe")
                   : std::string(),
               "; computed in ", short_number(secs), " s)"));
}

void session::check_replicas() const {
  const state& s = *s_;
  if (s.par->world_size() == 1) return;
  // FNV-1a of the object's bytes: the ranks' copies must be bitwise equal (the reducer gives
  // every rank the same sums); a difference means rank 0's result is not every rank's.
  const owned_array obj = s.read_engine_tensor("object", TYCHO_TENSOR_OBJECT);
  const auto all = s.par->all_texts(std::to_string(fnv1a(obj.bytes)));
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      log_warning("session", cat("rank ", r, "'s object differs from rank 0's after ", s.drv->iterations_done(),
                                 " iterations: the reducer did not give every rank the same sums; the result is rank 0's"));
}

}  // namespace tycho::host
