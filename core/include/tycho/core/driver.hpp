// The iteration loop, once for every engine: epochs over a global permutation of the
// patterns, mini-batches, the gradient step through optimizer components.
#pragma once

#include <tycho/tycho_components.h>

#include "tycho/core/batch_plan.hpp"
#include "tycho/core/object_tiles.hpp"
#include "tycho/core/position_correction.hpp"
#include "tycho/core/scan_refinement.hpp"
#include "tycho/core/sharding.hpp"

#include <array>
#include <complex>
#include <cstdint>
#include <limits>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tycho {

// Throws tycho::error with the thread's last-error message if `s` is not TYCHO_OK.
void check_status(tycho_status s, const std::string& context);

struct engine_binding {
  const tycho_engine_vtable* vtable = nullptr;
  tycho_engine* instance = nullptr;
};

// The learning-rate factor per iteration: "constant" (1), "cosine" (from 1 down to
// final_fraction at the last iteration, Loshchilov & Hutter 2017), "exponential"
// (final_fraction^((it−1)/(total−1))).
struct learning_rate_schedule {
  enum class shape { constant, cosine, exponential };
  shape kind = shape::constant;
  double final_fraction = 0.1;
  int64_t total_iterations = 1;
  double factor(int64_t iteration) const;
  // Parses "constant" | "cosine" | "exponential"; errors name `key`.
  static shape parse(const std::string& name, const std::string& key);
};

struct optimizer_binding {
  const tycho_optimizer_vtable* vtable = nullptr;
  tycho_optimizer* instance = nullptr;
  tycho_tensor_id parameter;     // TYCHO_TENSOR_OBJECT or TYCHO_TENSOR_PROBE
  tycho_tensor_id gradient;      // its gradient
  int64_t first_iteration = 1;   // the parameter stays fixed before this iteration
  learning_rate_schedule schedule;
};

// A constraint component (tycho_constraint_vtable, ABI 1.3) as the driver applies it: after each
// mini-batch's optimizer steps when it acts on the object or probe, after each position step
// when it acts on the positions, from first_iteration to last_iteration. The driver does not own
// the instance (the session creates and destroys it).
struct constraint_binding {
  const tycho_constraint_vtable* vtable = nullptr;
  tycho_constraint* instance = nullptr;
  std::string name;              // for messages: "[[reconstruct.constraints]] 1 (object_amplitude)"
  uint32_t acts_on = 0;          // TYCHO_CONSTRAINT_* bits
  int64_t first_iteration = 1;
  int64_t last_iteration = 0;    // 0: to the run's end
};

// What a run of several ranks adds to an iteration: sums across the ranks, which the host
// implements over a reducer component. Every rank must receive bitwise the same sums, so the
// replicated object and probe stay identical.
class rank_collectives {
 public:
  virtual ~rank_collectives() = default;
  virtual void sum_in_place(DLTensor& tensor, void* stream) = 0;
  virtual double sum(double local) = 0;
};

// [reconstruct.positions]: the positions move once per iteration from that iteration on
// (tycho/core/position_correction.hpp). Needs a host engine created with position_gradient.
struct position_correction {
  bool enabled = false;
  int64_t first_iteration = 1;
  // Also wait for the scan map's refinement (set_scan_refinement) to converge: the positions move
  // from the iteration after its last step ([reconstruct.positions] correct = "after_scan_map").
  bool after_scan_map = false;
  // [reconstruct.positions] correct = "auto": after position_trial_iterations of their own steps
  // the positions' corrections are weighed against their counting noise, and kept only where
  // they exceed it (decide_positions, below). With or without after_scan_map.
  bool weigh_against_noise = false;
  // Counts per unit of the targets (1 for counted data; 0: not counts, nothing to weigh against).
  double counts_per_target_unit = 0;
  // The data's own measure of a position's information, tr J per pattern in the object's px⁻²
  // (pair_information, tycho/core/position_correction.hpp; the host computes it from neighbouring
  // patterns): the weighing scales the engine's J to it. NaN: the engine's J as it is.
  double data_information_px2 = std::numeric_limits<double>::quiet_NaN();
  learning_rate_schedule schedule;  // its factor scales step.rate
  position_step_options step;
};

struct driver_options {
  int64_t batch_size = 128;      // global mini-batch, positions
  uint64_t seed = 0;
  // Which patterns form a batch (tycho/core/batch_plan.hpp). compact: each batch a patch of the
  // scan, and the object's work per batch bounded by the patch (object_tiles.hpp): its gradient
  // formed, summed over the ranks and stepped only in the tiles under the batch's windows, each
  // tile with its own step count, where the engine's tensors are in host memory and the object's
  // optimizer takes boxes (TYCHO_OPTIMIZER_TAKES_BOXES); else the whole object, as random.
  batching batches = batching::random;
  // compact: every pattern's position ((P, 2) px, all ranks') where the run starts, for the
  // regions; and the data's own (before any correction or positions_from), for the blocks, so
  // that a resumed run has the blocks of the run it continues (empty: positions_px).
  std::vector<double> positions_px, block_positions_px;
  position_correction positions;
  // The probe's optimizer also waits for the scan map's refinement (set_scan_refinement) to
  // converge: it steps from the iteration after the map's last step. With the map's isotropic
  // scale free, a probe refined from the start settles with a scan 0.5–2 % small (the shared
  // si110, an exact raster: 1.0 % against 0.25 % with the probe held; docs/scan-geometry.md).
  bool probe_waits_for_scan_map = false;
  // Patterns held out of every batch (global indices, sorted, unique; held_out_patterns): they
  // never step the object or the probe, and held_out_loss() is their mean loss at the current
  // state — an estimate of how well the model predicts patterns it was not fitted to, which
  // fitting the noise cannot lower ([reconstruct] validation_fraction). In this version one rank
  // only, with the positions held (no per-position correction, no scan map refinement: a held-out
  // pattern has no gradient to move its position by).
  std::vector<int64_t> held_out;
  // Applied in this order (the runtime's own, from [reconstruct.object] amplitude_max and kind and
  // [reconstruct.probe] orthogonalize_modes, first; then [[reconstruct.constraints]]).
  std::vector<constraint_binding> constraints;
};

class driver {
 public:
  // n_patterns: all patterns of the run. With several ranks, `share` says which of them this
  // rank's engine holds (its targets are patterns [share.first, share.first + share.count),
  // indexed from 0) and `collectives` sums gradients and losses; both default to one rank.
  driver(engine_binding engine, std::vector<optimizer_binding> optimizers, int64_t n_patterns,
         driver_options options, shard share = {}, rank_collectives* collectives = nullptr);

  // One iteration (epoch): every pattern once, in the global batches of the batch plan
  // (batch_plan.hpp: batch_size each, one may be smaller), each rank computing its members of
  // each batch. Gradients are summed over the ranks and divided by the global batch size before
  // the optimizer step; an engine with deterministic sums has its integer sums summed instead
  // (the same bits on any number of ranks).
  // Returns the mean loss per pattern in the batches over all ranks.
  double run_iteration();
  int64_t iterations_done() const { return iterations_done_; }
  // The mean loss per held-out pattern (driver_options::held_out) at the current object, probe and
  // positions, nothing stepped; NaN where none are held out. A pass over them through the engine.
  double held_out_loss();
  // The patterns in the batches: all, less the held-out ones.
  int64_t patterns_in_batches() const { return n_patterns_ - int64_t(options_.held_out.size()); }
  int64_t patterns_total() const { return n_patterns_; }
  // Resuming a saved run: the next iteration is n + 1, with that epoch's permutation and
  // schedule factor, exactly as in a run that never stopped.
  void set_iterations_done(int64_t n) { iterations_done_ = n; }
  // Polled before every mini-batch but the first of an iteration; when it returns true,
  // run_iteration throws tycho::error(TYCHO_ERR_CANCELLED) and the iteration is incomplete
  // (the caller keeps its own copy of the last complete state). One rank only: several ranks
  // would stop in different batches and wait for each other.
  void set_stop_check(std::function<bool()> stop) { stop_ = std::move(stop); }
  // The scan map's refinement (scan_refinement.hpp): its global steps every few iterations, with
  // or without position correction; with it, the per-position steps keep only what no linear map
  // explains. The engine must have been created with a position gradient; on several ranks the
  // patterns must be sharded (each position's gradient has one owner).
  void set_scan_refinement(scan_refinement r);
  const scan_refinement* scan_refinement_state() const { return scan_enabled_ ? &scan_ : nullptr; }
  // A resumed run's refinement state (scan_refinement::restore); needs set_scan_refinement first.
  void restore_scan_refinement(const std::vector<double>& state, const std::string& origin) {
    if (scan_enabled_) scan_.restore(state, origin);
  }
  // How precisely the data place the probe positions, at the current object, probe and positions:
  // the Cramér–Rao bound, the rms over the patterns (every rank's) of each position's own,
  // rms_px[a] = √(mean_j (J_j⁻¹)_aa) in object pixels, J_j pattern j's Fisher information from the
  // engine's tycho_engine_vtable::position_information (Poisson counts,
  // position_correction::counts_per_target_unit counts per unit of the targets). Patterns whose J
  // is singular (a flat object under the probe: no information along some direction) are counted
  // apart and left out of the rms. nullopt when the engine gives no information or the data are
  // not counts.
  struct position_bound {
    std::array<double, 2> rms_px{};
    int64_t informed = 0, uninformed = 0;
  };
  std::optional<position_bound> position_bound_px();
  // Whether any position has moved by now (the scan map has stepped, or the positions' own
  // correction has begun): what the run's end reports a bound for.
  bool positions_moved() const;
  // The iteration after which the positions' own steps begin (or began) under these settings and
  // the scan map's state: first_iteration, or the iteration after the map converged with
  // after_scan_map; 0 where they do not (correction off, or the map has not converged yet).
  int64_t first_position_step() const;
  bool corrects_positions() const { return options_.positions.enabled; }
  // The positions' own steps divide each gradient by h_a (position_correction.hpp) times a scale
  // measured from the loss's curvature (measure_position_curvature) at their first step and again
  // 1, 4, 16, 64, ... iterations after it (as the object forms, h_a grows faster than the
  // curvature: on the shared jitter file the scale falls from 0.9 at iteration 1 to 0.02 at 257):
  // the first and the latest iteration measured at (0: not yet), the scale per axis, and the
  // patterns its median is over. A resumed run takes the file's, so that it continues bit for bit.
  struct curvature_scale {
    int64_t first = 0, iteration = 0;
    std::array<double, 2> scale{1.0, 1.0};
    int64_t patterns = 0;
  };
  const curvature_scale& position_curvature_scale() const { return curvature_; }
  // How many patterns the curvature's median is over: every k-th of the scan's (global indices 0,
  // k, 2k, ...; k = ceil(P / k_curvature_patterns)), the same on any number of ranks. A median of
  // a hundred or so is as good as one of all, and each measurement costs three passes over them
  // (over all P, 12 passes in the MoS2 example's first 20 iterations: +12 % of its CPU time; over
  // 256 of its 768, +4 %; over 128, +2 %).
  static constexpr int64_t k_curvature_patterns = 128;
  int64_t curvature_patterns() const;
  void restore_position_curvature_scale(const curvature_scale& c) { curvature_ = c; }
  // The refinement's reports since the last call (one line per global step, the positions'
  // curvature measurements and their weighing), for the log.
  std::vector<std::string> take_scan_log() { return std::exchange(scan_log_, {}); }
  // The weighing of the positions' own corrections (position_correction::weigh_against_noise):
  // the iteration it was made at (0: not yet), whether they were kept, the statistic
  //   χ²/2P = Σ_j Δ_jᵀ J_j Δ_j / 2P
  // over the P patterns of the curvature's sample (curvature_sample)
  // (Δ_j pattern j's correction beyond the scan map, J_j its Fisher information from the engine,
  // tycho_engine_vtable::position_information: 1 where the corrections are counting noise alone,
  // 1 + τ²⟨J⟩ with a true displacement of variance τ² per axis; kept when above 2, where the
  // displacements' variance exceeds the noise's and corrected positions are nearer the truth than
  // the map's), and the counting noise per axis √(2P / Σ tr J_j) in pixels. `statistic` is NaN
  // where there was nothing to weigh against (the data are not counts, or the engine gives no
  // information): the corrections are then kept.
  // information_ratio: the data's information over the engine's mean (the factor on every J_j,
  // position_correction::data_information_px2; 1 where the data give none).
  struct position_weighing {
    int64_t iteration = 0;
    bool kept = true;
    double statistic = 0, noise_px = 0;
    double information_ratio = 1;
  };
  static constexpr int64_t position_trial_iterations = 20;
  // The iteration the weighing is made after: the positions' position_trial_iterations-th own
  // step, counted from their first own step (position_curvature_scale().first once taken; until
  // then first_position_step()); 0 where there is none to make (not weighed, or their steps wait
  // for a map that has not converged).
  int64_t weighing_due() const;
  const position_weighing& weighing() const { return weighing_; }
  void restore_weighing(const position_weighing& w) { weighing_ = w; }
  // A factor on every optimizer's learning rate (with its schedule's): the host halves it where
  // its stopping rule finds the loss no longer falling ([reconstruct] plateau_halvings). 1 at start.
  void set_learning_rate_factor(double f) { learning_rate_factor_ = f; }
  double learning_rate_factor() const { return learning_rate_factor_; }
  // With several ranks and position correction: every pattern's position ((P, 2) px), gathered
  // after each correction step, so any rank can report them; empty before the first step and
  // on one rank (whose engine holds them all).
  const std::vector<double>& gathered_positions() const { return gathered_positions_; }
  // Whether each batch steps only the object's tiles under its windows (driver_options::batches),
  // and those tiles' step counts ((rows, cols) of tile_px tiles); nullptr when it does not.
  bool object_in_tiles() const { return tiles_ != nullptr; }
  const object_tiles* tiles() const { return tiles_.get(); }
  // Resuming: the tiles' saved step counts (throws unless they fit the tiles).
  void set_tile_steps(const std::vector<int64_t>& steps);

 private:
  // The constraints acting on any of `targets` (TYCHO_CONSTRAINT_* bits) whose iterations include
  // `epoch`; batch −1 after the position step.
  // rate_factor: the object's and the probe's learning rates as a share of their settings
  // (tycho_constraint_state::object_rate_factor, probe_rate_factor).
  void apply_constraints(uint32_t targets, int64_t epoch, int64_t batch, int64_t batches,
                         const double (&rate_factor)[2], void* stream);
  void correct_positions(int64_t epoch);
  // Whether the positions' own steps run after iteration `epoch` (from first_iteration; with
  // after_scan_map, once the map has converged).
  bool corrects_positions_after(int64_t epoch) const;
  // The engine gives tycho_engine_vtable::position_information (ABI 1.4, set).
  bool engine_informs_positions() const;
  // Its information for this rank's patterns `local` ((count, 3): J00, J01, J11 px⁻², Poisson
  // counts at position_correction::counts_per_target_unit).
  std::vector<double> position_information(const std::vector<int64_t>& local);
  void measure_position_curvature(int64_t epoch, const double h[2], const double hi[2]);
  // One in every curvature_stride() of the scan's patterns (global indices 0, k, 2k, ...): those
  // the curvature's median is over.
  int64_t curvature_stride() const;
  std::vector<int64_t> curvature_sample() const;
  // This rank's share of the sample, as its own (local) pattern indices, in order.
  std::vector<int64_t> curvature_sample_here() const;
  // This rank's first global pattern (0 on one rank): its local pattern j is global first + j.
  int64_t first_pattern_here() const { return share_.world_size > 1 ? share_.first : 0; }
  // The global patterns `global`, in batches of at most batch_size, through the engine, nothing
  // stepped (the positions' gradient of each; the rest of the gradient tensor is stale).
  // Returns their loss, summed (held_out_loss's pass; the curvature's discards it).
  double gradient_pass(const std::vector<int64_t>& global);
  // Runs the engine on the global patterns `global` (this rank's share of them).
  void compute_patterns(const int64_t* global, int64_t count, bool ends_pass, bool object_steps, double& loss,
                        void* stream);
  // Batch b of iteration `epoch` through the engine (this rank's share, the tiles it touches
  // marked, a fixed-point batch finished), its loss added to `loss`: the batch's global size.
  int64_t compute_batch(int64_t epoch, int64_t b, int64_t batches, bool object_steps, double& loss, void* stream);
  curvature_scale curvature_;
  bool said_positions_wait_ = false;  // correct = "auto" waiting for an object with structure: logged once
  double learning_rate_factor_ = 1.0;  // set_learning_rate_factor
  // The scan map's global step of iteration `epoch` (when due): positions and probe moved.
  void step_scan_map(int64_t epoch);
  // Turns the engine's position gradient on or off for this iteration's batches, where the
  // engine can (ABI 1.3 set_position_gradient) and the run asked for one at all.
  void want_position_gradient(bool on);
  // Deterministic sums: the engine's integer sums over the ranks, then its finish_batch (again
  // until the batch's sums settle on their grid).
  void finish_fixed_point_batch(const int64_t* indices, int64_t n, bool ends_iteration, double& loss, void* stream);
  // Several ranks: every rank's positions into gathered_positions_ (blocks summed with zeros).
  void gather_positions(void* stream);
  // Adds a mini-batch's probe gradient (summed over the ranks) into probe_gradient_.
  void add_probe_gradient(const DLTensor& grad);
  void setup_tiles();
  // Sums a host float64 array over the ranks, in place (position correction's small exchanges).
  void sum_host_doubles(std::vector<double>& values, void* stream);
  // compact batches: the tiles under batch (indices, count)'s windows into boxes_/box_steps_
  // (counting a step when the object's optimizer takes one), handed to the engine.
  void mark_region(const int64_t* indices, int64_t count, bool object_steps);
  // The object gradient summed over the ranks inside boxes_ only.
  void sum_region(DLTensor& grad, void* stream);
  // The positions the regions are drawn from, after a position step.
  void refresh_positions();
  engine_binding engine_;
  std::vector<optimizer_binding> optimizers_;
  int64_t n_patterns_;
  driver_options options_;
  shard share_;
  rank_collectives* collectives_;
  bool fixed_point_ = false;  // the engine keeps deterministic sums (TYCHO_TENSOR_FIXED_POINT_SUMS)
  std::vector<int64_t> local_indices_;
  std::vector<double> gathered_positions_;
  batch_plan plan_;
  // With held-out patterns: the patterns the plan's indices stand for (global, sorted), and the
  // current batch's global indices.
  std::vector<int64_t> in_batches_, batch_global_;
  // The plan over the patterns in the batches (their positions, for compact batches).
  static batch_plan plan_of(int64_t n_patterns, const driver_options& o);
  std::unique_ptr<object_tiles> tiles_;   // compact batches stepping tiles: the object's tiles
  int64_t window_[2] = {0, 0};            // the probe's window, px
  std::vector<int64_t> boxes_, box_steps_;
  std::vector<unsigned char> packed_;     // the region's gradient, summed over the ranks
  int64_t iterations_done_ = 0;
  std::function<bool()> stop_;
  scan_refinement scan_;
  bool scan_enabled_ = false;
  std::vector<std::string> scan_log_;
  position_weighing weighing_;
  void decide_positions(int64_t epoch);
  std::vector<std::complex<double>> probe_gradient_;  // this iteration's, when the map's step refines C10
  bool position_gradient_on_ = true;  // the engine's state (created with the gradient on, if at all)
};

}  // namespace tycho
