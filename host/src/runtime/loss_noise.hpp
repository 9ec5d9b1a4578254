// The loss's spread from the counting noise alone: σ_c of the stopping rule
// (runtime/stopping_rule.hpp). Host-internal.
//
// For counted data the loss of a pattern at the truth fluctuates with the counts; its variance v
// per pattern is estimated by a parametric bootstrap through the run's own loss component, so
// that every loss (amplitude, intensity, Poisson, a plugin's) and its guards are covered alike:
// the truth is taken as the mean pattern λ (counts), `replicates` patterns of Poisson(λ) counts
// (the normal approximation, rounded, from 30 counts on) are drawn with a fixed seed, each is
// evaluated against the model I = s·λ, and v is their sample variance. The mean loss per pattern of an iteration over P patterns then has
// σ_c = √(v / P). (For the amplitude and Poisson losses at high counts each pixel adds s²/8 to v:
// (√D − √λ)² and the deviance / 4 are both χ²₁/4 there; at low counts less, and the bootstrap
// gives it without a formula per loss.)
#pragma once

#include <tycho/tycho_components.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace tycho::host {

// The replicates for a window of `pixels`: 128 (v to ±13 %, σ_c to ±6 %), fewer for windows over
// 2^16 pixels (at least 16), so the bootstrap draws at most ~2^23 counts (0.05 s for 128² pixels).
int64_t loss_noise_replicates(int64_t pixels);

// v, in the loss's units per pattern: `mean_counts` (n0 · n1, the targets' order and units),
// `mask` (n0 · n1, 1 = used; empty: all), `measured_scale` s (the engine's target scale).
// nullopt when the loss does not evaluate float32 host tensors (it returns an error).
std::optional<double> loss_variance_per_pattern(const tycho_loss_vtable* vt, tycho_loss* loss,
                                                const std::vector<double>& mean_counts,
                                                const std::vector<uint8_t>& mask, int64_t n0, int64_t n1,
                                                double measured_scale);

}  // namespace tycho::host
