// [reconstruct] iterations = "auto": when a run has done what its data allow. A pure function of
// the loss history and the settings below, so that every rank (each holds the same global loss)
// stops at the same iteration, and a run resumed from its saved history (--from) stops where the
// uninterrupted run would. docs/config-reference.md ("When a run stops") states the rule.
//
// The rule, after iteration k ≥ max(W, earliest):
//   fit L_i = a + b·i by least squares over i = k−W+1 … k;
//   predicted fall F_k = −b·W (what the line gives over the next W iterations);
//   noise σ_k = max(σ_c, σ_r), σ_c the loss's spread from the counts alone (counting_noise),
//   σ_r the losses' scatter about the line (W − 2 degrees of freedom);
//   the loss has stopped falling ("plateau") at the first k with F_k < σ_k.
// With constant learning rates the run ends there. When a schedule decays (cosine,
// exponential), the learning rates hold their full value until the plateau p and then decay over
// D(p) = max(2, ⌈p/2⌉) iterations, and the run ends at p + D(p) (a warmup-stable-decay schedule:
// the decay comes when the full rates have done their work). Either way it ends by
// max_iterations: without a plateau, a decaying run starts its decay at the last q with
// q + D(q) ≤ max_iterations, so that the cap still ends with the rates decayed.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tycho::host {

struct stopping_settings {
  int64_t window = 20;            // W: the trend is fitted over the last W losses and predicted W ahead
  int64_t max_iterations = 1000;  // the cap
  int64_t earliest = 0;           // no plateau before this iteration (a stage scheduled later, plus W)
  double counting_noise = 0;      // σ_c: the spread of an iteration's mean loss from the counts (0: unknown)
  bool decays = false;            // a learning-rate schedule decays: it runs after the plateau
};

// The least-squares line through the W losses ending at iteration k (1-based; k ≥ W).
struct loss_trend {
  double predicted_fall = 0;  // F = −slope · W
  double residual_sd = 0;     // σ_r
  double noise = 0;           // max(σ_c, σ_r)
  bool evaluated = false;
  bool flat() const { return evaluated && !(predicted_fall >= noise); }
};
loss_trend fit_loss_trend(std::span<const double> history, int64_t k, int64_t window, double counting_noise);

// D(p): the iterations the learning rates take to decay after a plateau at iteration p.
int64_t decay_iterations(int64_t plateau);

// Where the rule stands after the iterations of a history.
struct stopping_state {
  int64_t plateau = 0;     // the iteration at which the loss stopped falling; 0: not yet
  int64_t hold_until = 0;  // the schedules keep their full value through this iteration
  int64_t end = 0;         // the iteration the run ends at (max_iterations while the plateau is to come)
  bool stop = false;       // the history reaches `end`
  std::string reason;      // with stop: "converged" (a plateau) or "max_iterations"
  loss_trend last;         // the trend at the plateau, else at the last iteration evaluated
};
stopping_state stopping_state_of(std::span<const double> history, const stopping_settings& settings);

}  // namespace tycho::host
