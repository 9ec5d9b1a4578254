// A reconstruction session: the configuration resolved, the data read, the components
// created from the registry, and the driver that runs iterations. The C API and the
// `tycho` command both sit on this class.
#pragma once

#include <tycho/core/array.hpp>
#include <tycho/core/config.hpp>
#include <tycho/tycho.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tycho/host/parallel.hpp"
#include "tycho/host/registry.hpp"

namespace tycho::host {

// The most iterations a run may be given ([reconstruct] iterations, --iterations): 1e9, far
// beyond any run and far below overflow.
inline constexpr int64_t k_most_iterations = 1'000'000'000;


// The precision a tensor's dtype computes in: "float32" for complex64 or float32, "float64" for
// complex128 or float64 (how the host reads an engine's precision from its object tensor).
std::string precision_of(DLDataType dtype);

// Returns false to stop the run after this iteration.
using progress_callback = std::function<bool(const tycho_progress&)>;

class session {
 public:
  // `resume_from`: a result file to continue (`tycho reconstruct --from`): the engine starts
  // from its object, probe and positions, the optimizers from its saved state, and iterations,
  // loss history and schedules continue where it stopped. The schedules span the file's
  // recorded total (history.schedule_iterations), which replaces [reconstruct] iterations; the
  // rest of the config applies as given. A file whose scan, window or object shape differs from
  // the config's data, or that is not a tycho result, is refused.
  //
  // `parallel`: this rank of a multi-rank run (it must outlive the session); NULL: the session
  // makes its own from the launcher's environment (parallel_context::create).
  session(config_document config, registry& reg, const std::string& resume_from = "",
          parallel_context* parallel = nullptr);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // Runs `iterations` more iterations, a fixed count; 0: the configured [reconstruct] iterations:
  // N, or with "auto" until the stopping rule ends the run (runtime/stopping_rule.hpp: the loss
  // has stopped falling by more than its noise, and any decay of the learning rates is done) or
  // max_iterations are done in all. Returns false if the callback stopped it. With several ranks
  // every rank calls it, with the same count (by the rule every rank stops at the same iteration).
  // Stops mid-way, throwing tycho::error, when:
  //   - an iteration's loss, or a value it left in the object, probe or optimizer state, is
  //     not finite (TYCHO_ERR_BAD_DATA, naming the iteration and the likely cause);
  //   - the stop check returns true (TYCHO_ERR_CANCELLED): one rank stops between mini-batches,
  //     several ranks at the end of the iteration in which any of them saw it.
  // Then stopped() is true and get(), save() and manifest_json() give the state after the last
  // complete iteration whose values were all finite (resumable with --from); run() refuses.
  bool run(int64_t iterations, const progress_callback& progress);
  // iterations = "auto": runs until the rule ends the run, or `at_most` more iterations are done
  // (`--stop-after`), whichever comes first; refused with a fixed count.
  bool run_by_rule(int64_t at_most, const progress_callback& progress);
  bool stops_by_rule() const;   // [reconstruct] iterations = "auto"
  bool rule_has_ended() const;  // "auto" and the rule has ended the run (a resumed file's history may have)
  // Why the last run() ended: "converged", "max_iterations", "fixed_count", "stop_after",
  // "callback", "signal", "non_finite" ("" before any); and a line saying so, with the figures.
  const std::string& end_reason() const;
  std::string stopping_summary() const;
  // `stop` is polled between mini-batches (one rank) or once per iteration (several ranks,
  // where every rank must set one): e.g. a flag set by a SIGINT handler. Not thread-safe:
  // set it before run().
  void set_stop_check(std::function<bool()> stop);
  bool stopped() const;
  // Several ranks: warns if a rank's object is not bitwise rank 0's (run() calls it at its end).
  void check_replicas() const;

  // A copy of one array of the result: any name of array_names(); TYCHO_ERR_NOT_FOUND naming
  // the available ones otherwise.
  owned_array get(const std::string& name) const;
  // Every array a saved result holds, in the file's order: "object", "probe", "positions_px",
  // "positions_A", "loss_history", "optimizer.<object|probe>.<array>" for each optimizer state
  // array (Adam's "m", "v"), "mask".
  std::vector<std::string> array_names() const;
  // The result as a record (arrays + manifest) saved through the configured format.
  void save(const std::string& path, tycho_save_mode mode) const;
  std::string manifest_json() const;
  // About how many bytes save() writes (the arrays; the manifest is small): for checking the
  // output folder's free space before the first iteration.
  uint64_t result_bytes() const;

  int64_t configured_iterations() const;  // the fixed count; with "auto", max_iterations
  std::string precision() const;          // "float32" or "float64": of the engine's object tensor
  int64_t iterations_done() const;        // counted over the whole run, resumed ones included
  std::string output_path() const;      // [output] path, relative to the current folder
  static std::string configured_output_path(const config_document& config);
  bool previews_enabled() const;
  const std::vector<double>& loss_history() const;
  // [reconstruct] validation_fraction > 0: the mean loss per held-out pattern at the end of the
  // last run() (patterns that never stepped the object or probe); NaN before, or where none are
  // held out. loss_history() is then over the patterns in the batches only.
  double held_out_loss() const;
  // The mean of the measured patterns this rank holds, after preprocessing and padding: (N0, N1)
  // FFT natural order like the targets, non-finite (bad) pixels as 0 (for the previews).
  const std::vector<double>& measured_mean_pattern() const;
  // The detector mask the loss uses, (N0, N1) FFT natural order, 1 = used; empty: every pixel.
  const std::vector<uint8_t>& detector_mask() const;
  double object_pixel_A(int axis) const;
  parallel_context& parallel() const;  // rank, world size; only rank 0 writes files

 private:
  bool run_iterations(int64_t n, const progress_callback& progress, bool by_rule);
  // Where the positions were refined and the data are counts: their Cramér–Rao bound at the
  // run's end, logged and kept for the manifest (run() calls it on every rank).
  void report_position_bound();
  // Held-out patterns: their loss at the run's end, logged and kept for the manifest.
  void report_held_out_loss();
  std::vector<std::string> optimizer_state_names() const;
  owned_array optimizer_state(const std::string& full_name) const;
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace tycho::host
