// The session's state and what its parts share: session.cpp (the constructor's stages),
// session_config.cpp (the config's checks and settings), session_resume.cpp (--from a result),
// session_stopping.cpp (the stopping rule), session_run.cpp (the iterations) and
// session_results.cpp (the result arrays, manifest and save). Private to the runtime.
#pragma once

#include "tycho/host/session.hpp"

#include <tycho/core/driver.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/core/phase_twin.hpp>
#include <tycho/host/optics.hpp>
#include <tycho/sdk.hpp>
#include <tycho/sdk/optimizer.hpp>

#include <chrono>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "settings/config_read.hpp"
#include "settings/optics_settings.hpp"
#include "runtime/batching_choice.hpp"
#include "runtime/constraint_list.hpp"
#include "runtime/stopping_rule.hpp"
#include "results/result_file.hpp"
#include "tycho/host/dataset.hpp"
#include "tycho/host/log.hpp"
#include "data/finite_values.hpp"
#include "data/detector_padding.hpp"
#include "tycho/host/prepared.hpp"
#include "data/target_residency.hpp"
#include "data/target_stream.hpp"
#include "settings/iteration_settings.hpp"

namespace tycho::host {

// What session::state holds that the session's files share (named, not anonymous: the state
// is one type in every file that includes this).
namespace session_detail {

using cfloat = std::complex<float>;
inline constexpr DLDataType k_complex64{kDLComplex, 64, 1};
inline constexpr DLDataType k_float64{kDLFloat, 64, 1};

// [reconstruct] values, read and checked before any data is read.
struct parameter_settings {
  int64_t first_iteration = 1;
  learning_rate_schedule schedule;
};
struct reconstruct_settings {
  iteration_settings length;  // [reconstruct] iterations (a count or "auto"), max_iterations, stop_window
  int64_t iterations = 100;   // the schedules' length (schedule_iterations)
  bool float64 = false;  // [reconstruct] precision = "float64": complex128 object and probe
  int64_t slices = 1, probe_modes = 1;
  double slice_thickness_A = 0;  // > 0 when slices > 1
  double mode_power = 0.1;       // [reconstruct.probe] mode_power
  double max_position_step_A = 0.1;  // [reconstruct.positions] max_step_A (the driver's is in px)
  scan_refinement_options scan;      // [reconstruct.positions] refine_scan_map and its keys
  C10_refinement C10_mode = C10_refinement::auto_;  // [optics] refine_C10 (the start and scan.free[4])
  driver_options driver;
  double validation_fraction = 0;  // [reconstruct] validation_fraction (driver.held_out once the scan is known)
  int64_t validation_fold = 0;     // [reconstruct] validation_fold
  constraint_shorthands constraints;  // the runtime's keys that stand for built-in constraints
  parameter_settings object, probe;
};

// FNV-1a (64-bit) continued over `bytes` from `h`: a cheap fingerprint for comparing arrays
// across ranks (equal bytes, equal hash).
inline constexpr uint64_t k_fnv1a_start = 1469598103934665603ull;
inline uint64_t fnv1a(const std::vector<unsigned char>& bytes, uint64_t h = k_fnv1a_start) {
  for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

// Whether an optimizer component has the state functions appended to its vtable (an older
// plugin's vtable is shorter; an optimizer without state leaves them NULL).
inline bool has_state_functions(const tycho_optimizer_vtable* vt) {
  return vt->struct_size >= offsetof(tycho_optimizer_vtable, step_count) + sizeof(vt->step_count) &&
         vt->state_count != nullptr && vt->state_array != nullptr && vt->set_state != nullptr &&
         vt->step_count != nullptr;
}

// A result file to resume from (`tycho reconstruct --from`), read and checked as every result
// is (results/result_file.hpp); a resumed run needs its schedule's length and its optimizers'
// state besides.
struct resume_data {
  std::string path;
  result_file file;
  loaded_record& record;
  int64_t done = 0, total = 0;
  // A run of iterations = "auto" (history.stopping.iterations): its rule's keys and counting noise,
  // which the continued run keeps so that it stops where the uninterrupted run would.
  bool by_rule = false;
  int64_t count = 0;  // a fixed run's count (history.stopping.iterations; before the key, the total)
  int64_t max_iterations = 0, stop_window = 0;
  int64_t plateau_halvings = 0;  // history.stopping.plateau_halvings (0 in a file from before the key)
  std::vector<int64_t> halved_at;
  double counting_noise = 0;
  std::vector<int64_t> scan_shape, window_shape;
  explicit resume_data(result_file f)
      : path(f.path), file(std::move(f)), record(file.record), done(file.iterations),
        scan_shape(file.scan_shape.begin(), file.scan_shape.end()),
        window_shape(file.window_shape.begin(), file.window_shape.end()) {}
  resume_data(resume_data&& o) noexcept
      : path(std::move(o.path)), file(std::move(o.file)), record(file.record), done(o.done), total(o.total),
        by_rule(o.by_rule), count(o.count), max_iterations(o.max_iterations), stop_window(o.stop_window),
        plateau_halvings(o.plateau_halvings), halved_at(std::move(o.halved_at)), counting_noise(o.counting_noise),
        scan_shape(std::move(o.scan_shape)), window_shape(std::move(o.window_shape)) {}
};

// session_config.cpp: the config's checks and its [reconstruct] settings, before any data.
reconstruct_settings read_reconstruct_settings(const config_document& doc);
void validate_config(const config_document& doc, const registry& reg, bool engine_may_be_absent = false);

// session_resume.cpp: a result file to resume from, read, checked and restored.
resume_data load_resume(const std::string& path, const registry& reg);
void check_resume_shapes(const resume_data& r, const std::vector<int64_t>& scan, const std::vector<int64_t>& window,
                         const std::vector<int64_t>& object, const std::vector<int64_t>& probe, int64_t patterns,
                         bool float64);
void restore_optimizer(const resume_data& r, const char* which, const component_ref& ref, tycho_optimizer* opt);
void restore_tile_steps(const resume_data& r, driver& drv, int64_t object_steps);

// Seconds since t0, to the millisecond (for log lines).
double seconds_since(std::chrono::steady_clock::time_point t0);
}  // namespace session_detail

struct session::state {
  explicit state(config_document c) : config(std::move(c)) {}
  config_document config;
  registry* reg = nullptr;
  dataset data;
  detector_padding padding;  // of the detector to the window; its mask lives as long as the engine
  probe_optics optics;
  double wavelength_A = 0;
  window_sampling sampling{};
  scan_geometry geometry{};
  object_layout layout;
  int64_t iterations = 100;  // the schedules' length ([reconstruct] schedule_iterations)
  iteration_settings length;  // [reconstruct] iterations, max_iterations, stop_window
  // iterations = "auto": the stopping rule's settings, where it stands after loss_history, and what
  // keeps it from stopping early (the stage scheduled last), for the log and the manifest.
  stopping_settings rule_settings;
  stopping_state rule;
  std::string rule_waits_for;
  // The iterations after which the rule's verdicts halved the learning rates (plateau_halvings);
  // the driver's factor on them follows from it (set_halved_rates).
  std::vector<int64_t> halved_at;
  void set_halved_rates() { drv->set_learning_rate_factor(std::ldexp(1.0, -int(halved_at.size()))); }
  // Why the last run() ended: "converged", "max_iterations", "fixed_count", "stop_after",
  // "callback", "signal", "non_finite"; "" before any.
  std::string end_reason;
  double slice_thickness_A = 0;  // > 0 with several slices (the manifest's calibration)
  // The model's C10 less the optics' (C10 at the specimen's entrance surface, as a microscope
  // and abTEM state it): the multislice model applies each slice's potential at the slice's top,
  // so its specimen sits half a slice above the one it stands for, and its probe meets it as the
  // real probe would with C10 + dz / 2 (C10 < 0 focuses below the entrance). Measured on the
  // validation matrix's Si [110] (6 slices of 10.24 Å, the truth's positions, the probe held at
  // its C10): the loss is least at C10 = −95.0 Å for the truth's −100 Å (Pearson 0.9843 at
  // −94.88 Å against 0.9811 at −100 Å); the crystals' refined C10 sat 4–7 Å above the truth's.
  // 0 with one slice. The optics, the log and the result's C10 are the entrance surface's.
  double model_C10_shift_A() const { return 0.5 * slice_thickness_A; }
  std::vector<double> loss_history, seconds_history;
  std::vector<double> cpu_seconds_history;  // the process's CPU time per iteration (all its threads)

  const component_ref* engine_ref = nullptr;
  const component_ref* loss_ref = nullptr;
  const component_ref* format_ref = nullptr;
  const component_ref* object_opt_ref = nullptr;
  const component_ref* probe_opt_ref = nullptr;
  tycho_config reconstruct_cfg{}, object_cfg{}, probe_cfg{};
  tycho_loss* loss = nullptr;
  tycho_engine* engine = nullptr;
  tycho_optimizer* object_opt = nullptr;
  tycho_optimizer* probe_opt = nullptr;
  constraint_list constraints;  // [[reconstruct.constraints]] and the shorthands, created for the engine
  std::unique_ptr<driver> drv;

  batching_choice batches;  // [reconstruct] batching, resolved (create_engine)
  std::vector<uint16_t> targets_u16;  // the targets as integer counts (pack_integer_targets)
  std::string targets_dtype = "float32";
  // target_residency (target_residency.hpp): a prepared file's patterns member, and the stream
  // that reads each batch from it when the run reads from disk (declared before the engine's
  // destruction in ~state, so they outlive it).
  std::unique_ptr<stored_npy_member> patterns_member;
  std::unique_ptr<target_stream> stream;
  std::string residency = "device";
  std::unique_ptr<parallel_context> owned_parallel;  // when the caller gave none
  parallel_context* par = nullptr;
  std::vector<double> all_positions_px;  // (P, 2): every rank's, whichever patterns this one holds
  // The source's positions when [data] positions_from replaced them as the start: still the
  // nominal ones a constraint on the positions fits its map from (empty otherwise).
  std::vector<double> nominal_positions_px;
  // The data's own positions (what compact batches are cut from, the same in a resumed run).
  const std::vector<double>& data_positions_px() const {
    return nominal_positions_px.empty() ? layout.positions_px : nominal_positions_px;
  }
  std::string parallel_json;             // the ranks' reports, for the manifest
  std::string preprocess_json;           // what the preprocessing stage did, for the manifest
  std::string validation_json;  // the held-out patterns' loss at the run's end ("" when none are held out)
  double held_out_loss = std::numeric_limits<double>::quiet_NaN();  // NaN before a run's end
  int64_t validation_fold = 0;  // [reconstruct] validation_fold of the held-out patterns
  std::string positions_precision_json;   // the positions' Cramér–Rao bound at the run's end ("" when not measured)
  std::string initial_probe_json;        // where the initial probe came from, when not the model ("" otherwise)
  // What the first read of the data logged: a second read (the geometry search's) says only what differs.
  log_lines first_read_log;
  // correct = "auto": the positions' information from the data (data_position_information), NaN: none.
  double data_information_px2 = std::nan("");
  std::vector<double> measured_mean;     // (N0, N1) FFT order: this rank's mean pattern, for the previews

  // The state after the last iteration whose loss and arrays were all finite (issue 12): what
  // get() and save() give after a run stopped mid-way (a non-finite value, a signal), when the
  // engine's own state may be half an iteration on, or NaN.
  struct kept_state {
    owned_array object, probe;
    std::vector<owned_array> optimizer_arrays;  // "optimizer.<parameter>.<array>"
    std::vector<int64_t> tile_steps;            // the object's tiles' step counts (compact batches)
    int64_t object_steps = 0, probe_steps = 0;
    int64_t iterations = 0;
  } kept;
  bool stopped = false;     // a run stopped mid-way: the kept state is the session's state
  bool refine_scan_map = false;  // [reconstruct.positions] refine_scan_map, where this run can (engine, ranks)
  bool positions_follow_map = false;  // correct = "after_scan_map" with the map refined: positions corrected once it converged
  bool positions_weighed_map = false;  // correct = "auto" with the map refined: corrections beyond it weighed against their noise
  bool probe_follows_map = false;     // refine_scan_scale with the map refined: the probe refined once it converged
  std::string stop_reason;  // why, for a later run()
  std::function<bool()> stop_check;  // set_stop_check

  ~state() {
    if (object_opt) object_opt_ref->as<tycho_optimizer_vtable>()->destroy(object_opt);
    if (probe_opt) probe_opt_ref->as<tycho_optimizer_vtable>()->destroy(probe_opt);
    if (engine) engine_ref->as<tycho_engine_vtable>()->destroy(engine);
    if (loss) loss_ref->as<tycho_loss_vtable>()->destroy(loss);
  }

  DLTensor engine_tensor(tycho_tensor_id id) const {
    DLTensor t{};
    check_status(engine_ref->as<tycho_engine_vtable>()->get_tensor(engine, id, &t),
                 "engine get_tensor");
    return t;
  }

  // Calls f(name, view) for every state array of the optimizers that keep one, name =
  // "optimizer.<parameter>.<array>", view = the optimizer's own array (no copy); f returns true
  // to stop. The one walk behind the result's names, get() and the kept state.
  template <class F>
  void for_each_optimizer_array(F&& f) const {
    for (const auto& [which, ref, opt] : {std::tuple{"object", object_opt_ref, object_opt},
                                          std::tuple{"probe", probe_opt_ref, probe_opt}}) {
      const auto* vt = ref->template as<tycho_optimizer_vtable>();
      if (!session_detail::has_state_functions(vt)) continue;
      for (int64_t i = 0, n = vt->state_count(opt); i < n; ++i) {
        const char* name = nullptr;
        DLTensor view{};
        check_status(vt->state_array(opt, i, &name, &view), "optimizer state_array");
        if (f(cat("optimizer.", which, ".", name ? name : ""), view)) return;
      }
    }
  }
  // The optimizers' state arrays, host copies.
  std::vector<owned_array> optimizer_arrays() const {
    std::vector<owned_array> arrays;
    for_each_optimizer_array([&](const std::string& name, const DLTensor& view) {
      arrays.push_back(owned_array::copy_of(name, view));
      return false;
    });
    return arrays;
  }
  int64_t optimizer_steps(const component_ref* ref, tycho_optimizer* opt) const {
    const auto* vt = ref->as<tycho_optimizer_vtable>();
    return session_detail::has_state_functions(vt) ? vt->step_count(opt) : 0;
  }
  kept_state capture() const {
    kept_state k;
    k.object = read_engine_tensor("object", TYCHO_TENSOR_OBJECT);
    k.probe = read_engine_tensor("probe", TYCHO_TENSOR_PROBE);
    k.optimizer_arrays = optimizer_arrays();
    if (drv->object_in_tiles()) k.tile_steps = drv->tiles()->steps();
    k.object_steps = optimizer_steps(object_opt_ref, object_opt);
    k.probe_steps = optimizer_steps(probe_opt_ref, probe_opt);
    k.iterations = drv->iterations_done();
    return k;
  }
  // After an iteration: when every array of the state is finite the kept state becomes it and ""
  // is returned; otherwise the kept state stays as it was and the name of the first array holding
  // a NaN or an infinity is returned (session_run.cpp). The arrays are checked where they lie (a
  // host-resident engine tensor, the optimizers' arrays) and copied into the kept arrays' own
  // buffers, so a run holds one copy of its state beside the engine's, not two at each iteration
  // (tycho plan counts the one: "kept state").
  std::string keep_if_finite();
  // The first array of `k` holding a NaN or an infinity, "" if none.
  static std::string non_finite_array(const kept_state& k) {
    if (count_non_finite(k.object).count) return "object";
    if (count_non_finite(k.probe).count) return "probe";
    for (const auto& a : k.optimizer_arrays)
      if (count_non_finite(a).count) return a.name;
    return "";
  }
  // The run stops here: the session's state becomes the kept one, its history ends there.
  void stop_at_kept(std::string why) {
    stopped = true;
    stop_reason = std::move(why);
    loss_history.resize(std::size_t(kept.iterations));
    seconds_history.resize(std::size_t(kept.iterations));
    cpu_seconds_history.resize(std::size_t(kept.iterations));
    drv->set_iterations_done(kept.iterations);
  }

  // The constructor's stages, in order (session::session), and what they hand one another.
  struct start;
  static void open_config(state& s, const std::string& resume_from, parallel_context* parallel, start& st);
  static void read_data(state& s, start& st);
  static void search_geometry(state& s, start& st);
  static void resolve_geometry(state& s, start& st);
  static void create_engine(state& s, start& st);
  static void create_optimizers(state& s, start& st);
  static void restore_resumed(state& s, start& st);
  static void prepare_stopping(state& s, start& st);
  // After each iteration of an "auto" run: where the rule stands; in a run by the rule (not a
  // fixed count), a verdict with halvings left halves the learning rates ([reconstruct]
  // plateau_halvings).
  void advance_rule(bool may_halve = true);
  void sync_rule_with_scan_map();
  std::string stopping_json() const;
  static scan_refinement make_scan_refinement(state& s, const scan_refinement_options& o);
  static std::string probe_fit_json(const state& s);
  // The positions' own correction (session_positions.cpp): the manifest's "position_correction"
  // (the steps' measured curvature scale, the weighing of correct = "auto"; "" before either),
  // and a resumed run's restore of both, so that it continues as the uninterrupted run would.
  static std::string position_correction_json(const state& s);
  // correct = "auto": the positions' information from the data alone, tr J per pattern in the
  // object's px⁻² (pair_information over neighbouring patterns of the raster), which the weighing
  // scales the engine's J to; NaN where there is none (listed positions, streamed patterns, not
  // counts). Every rank calls it (a sum over the ranks).
  static double data_position_information(const state& s);
  // The mean over a raster's neighbouring pairs of pair_information (tycho/core/position_correction.hpp)
  // per scan axis, in counts² per count (s² J, s the step), and its standard error; not measured
  // where the data are not a raster of counts this rank holds.
  struct pair_information_sums {
    bool measured = false;
    double mean[2] = {0, 0}, standard_error[2] = {0, 0};
  };
  // Computed once per session (the scan geometry search's guard and the weighing both ask): the
  // sums do not change when the search's geometry reads the data again (a transpose permutes
  // every pattern's pixels alike, a rotation moves no pattern in the raster).
  static pair_information_sums neighbour_information(const state& s);
  mutable std::optional<pair_information_sums> neighbour_sums;
  static void restore_position_correction(state& s, const session_detail::resume_data& r);
  // The twin test of the object's local phase (tycho/core/phase_twin.hpp) over the scanned field,
  // for electrons: not done when not made; its verdict ("specimen", "twin", "undecided"); the
  // manifest's "phase_check" ("" when not done).
  static phase_skewness phase_check(const state& s);
  static const char* phase_verdict(const phase_skewness& r);
  static std::string phase_check_json(const state& s);
  static void describe_run(state& s, start& st);

  // A host copy of an engine tensor, wherever the engine keeps it.
  owned_array read_engine_tensor(const std::string& name, tycho_tensor_id id) const {
    DLTensor t = engine_tensor(id);
    owned_array a;
    a.name = name;
    a.dtype = t.dtype;
    a.shape.assign(t.shape, t.shape + t.ndim);
    a.bytes.resize(std::size_t(a.count()) * ((t.dtype.bits * t.dtype.lanes + 7u) / 8u));
    check_status(engine_ref->as<tycho_engine_vtable>()->read_tensor(engine, id, a.bytes.data(), a.bytes.size()),
                 "engine read_tensor");
    return a;
  }
};

// What the constructor's stages hand one another (session::session); gone once it returns.
struct session::state::start {
  std::optional<prepared_file> prepared;  // `--from` a prepared file: a fresh run from its data
  std::optional<session_detail::resume_data> resume;      // `--from` a result: its arrays, optimizer state, history
  session_detail::reconstruct_settings settings;
  std::vector<session_detail::cfloat> probe;  // the initial probe (modes), from the optics
  std::string engine_name, loss_name;
};

}  // namespace tycho::host
