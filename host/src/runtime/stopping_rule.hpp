// [reconstruct] iterations = "auto": when a run has done what its data allow. A pure function of
// the loss history and the settings below, so that every rank (each holds the same global loss)
// stops at the same iteration, and a run resumed from its saved history (--from) stops where the
// uninterrupted run would. docs/config-reference.md ("When a run stops") states the rule.
//
// The rule, after iteration k ≥ max(W, earliest):
//   fit L_i = a + b·i by least squares over i = k−W+1 … k;
//   predicted fall F_k = −b·W (what the line gives over the next W iterations);
//   noise σ_k = max(σ_c, σ_r), σ_c the spread of an iteration's loss from the counts alone
//   (counting_noise, runtime/loss_noise.hpp), σ_r the losses' scatter about the line (W − 2
//   degrees of freedom);
//   the run ends at the first k with F_k < σ_k ("converged", or "rising" where F_k < −σ_k: the
//   loss rose by more than its noise), or at max_iterations.
// With halvings_left > 0 a verdict does not end the run: it asks for the learning rates to be
// halved (`halve`), and the session then raises `earliest` by a window (reduce-on-plateau).
// `earliest` keeps a stage the run has scheduled for later from being judged before it has had
// a window of its own (the session sets it: the last stage's start + W − 1); `held` keeps a stage
// that is still moving from being cut short (the scan map's refinement until it has converged: the
// session then raises `earliest` to the iteration it converged at).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tycho::host {

struct stopping_settings {
  int64_t window = 20;            // W: the trend is fitted over the last W losses and predicted W ahead
  int64_t max_iterations = 1000;  // the cap
  int64_t earliest = 0;           // not before this iteration (a stage scheduled later, plus W − 1)
  double counting_noise = 0;      // σ_c (0: unknown, the data are not counts)
  bool held = false;              // a stage is still moving: no verdict but the cap
  int64_t halvings_left = 0;      // verdicts that halve the learning rates instead of ending the run
};

// The least-squares line through the W losses ending at iteration k (1-based; k ≥ W).
struct loss_trend {
  double predicted_fall = 0;  // F = −slope · W
  double residual_sd = 0;     // σ_r
  double noise = 0;           // max(σ_c, σ_r)
  bool evaluated = false;
  bool flat() const { return evaluated && !(predicted_fall >= noise); }
  bool rising() const { return evaluated && predicted_fall < -noise; }  // rose by more than its noise
};
loss_trend fit_loss_trend(std::span<const double> history, int64_t k, int64_t window, double counting_noise);

// Where the rule stands after the iterations of a history.
struct stopping_state {
  int64_t plateau = 0;  // the iteration at which the loss stopped falling; 0: not yet
  bool stop = false;    // the run ends after these iterations: at the plateau, or at the cap
  bool halve = false;   // a verdict at `plateau` with halvings left: halve the learning rates, go on
  std::string reason;   // with stop: "converged", "rising" or "max_iterations"
  loss_trend last;      // the trend at the plateau, else at the last iteration judged
};
stopping_state stopping_state_of(std::span<const double> history, const stopping_settings& settings);

}  // namespace tycho::host
