// Position correction between iterations: each probe position moves against the gradient of
// its pattern's loss, dL/dr_j (the engine's TYCHO_TENSOR_POSITIONS_GRAD), by a Gauss–Newton step
//   Δr_j,a = −rate · (dL/dr_j,a) / h_a,   h_a = 2 · Σ_modes Σ|P_m|² · ⟨Σ_s |∂O_s/∂x_a|²⟩
// where ⟨·⟩ is the mean over the scanned part of the object. Moving the probe by ε over the
// object changes the measured intensities as moving the object by −ε under the probe does
// (a shift of both only tilts the far field), so the curvature of L in r is that of the exit
// wave ψ = P·O(x + ε): 2 Σ |P|² |∂O/∂x|², here with the probe's power and the object's mean
// roughness. The step is then in pixels whatever the dose, probe power, loss scale or the
// specimen's contrast (as the object forms, h grows and the steps shrink). Each step is capped
// at max_step_px per axis, the mean step over all positions removed so the object cannot drift
// out of view, and the positions kept inside [lo, hi] per axis. Guizar-Sicairos & Fienup 2008,
// Maiden et al. 2012, Odstrčil et al. 2018 §2.4 take steps of this kind. Deterministic and
// stateless: a run resumed from its saved positions continues bit for bit.
#pragma once

#include <complex>
#include <cstdint>

namespace tycho {

struct position_step_options {
  double rate = 1.0;         // fraction of the Gauss–Newton step (the schedule's factor applied)
  double max_step_px = 1.0;  // largest move per iteration and axis, object pixels
  bool remove_mean_shift = true;
  double lo[2] = {0, 0}, hi[2] = {0, 0};  // allowed probe centres per axis, object pixels
};

// h_a (above) from the probe's M modes ((M, n0, n1) C order) and the object's S slices ((S, H, W)
// C order), the mean taken over rows [box_lo[0], box_hi[0]) and columns [box_lo[1], box_hi[1])
// (clamped to the object's interior), ∂/∂x by central differences.
template <class T>
void position_curvature(const std::complex<T>* probe, int64_t modes, int64_t n0, int64_t n1,
                        const std::complex<T>* object, int64_t slices, int64_t h, int64_t w, const int64_t box_lo[2],
                        const int64_t box_hi[2], double curvature[2]);

// Moves `count` positions ((count, 2) px, in place) by their gradients ((count, 2)). Throws for a
// non-finite gradient or curvature, before any position moves. One rank: position_steps, then
// move_positions with the mean of those steps.
void step_positions(double* positions, const double* gradient, int64_t count, const double h[2],
                      const position_step_options& options);

// The two halves of step_positions, for several ranks that share the mean step: the capped
// steps ((count, 2) px) of `count` positions and their sum per axis (add every rank's sums and
// counts to get the mean: the sums are of steps rounded to a grid of max_step_px · 2^-24 at most,
// so they add exactly, in any order, and the mean is the same bits on any number of ranks) ...
void position_steps(const double* gradient, int64_t count, const double h[2], const position_step_options& options,
                    double* steps, double sum[2]);
// ... then each position moves by its step minus `mean` (ignored without remove_mean_shift),
// kept inside [lo, hi].
void move_positions(double* positions, const double* steps, int64_t count, const double mean[2],
                    const position_step_options& options);

// A position's Fisher information from the data alone, without a model: two patterns of counts
// a and b recorded a scan step s apart differ by their expected patterns' change plus Poisson
// noise, so that
//   E[ Σ_k ((a_k − b_k)² − a_k − b_k) / m_k ] = Σ_k (λ_a,k − λ_b,k)² / m_k ≈ s² J_s
// with m the scan's mean pattern (≈ λ for a weak specimen) and J_s the information per Å² along
// the step (the Poisson Fisher information Σ (∂λ/∂r)²/λ, by its finite difference). The model's
// own J (the engine's, tycho_engine_vtable::position_information) is computed at the
// reconstructed object: early in a run its object has not formed and it understates J (the
// validation matrix at iteration 20: 0.5-0.9 of this one), at low dose the object holds noise
// and it overstates it (hBN at 1,000 electrons a pattern: 2.2 times; this one agrees with the
// Cramér-Rao bound of the true object within 2 %). Where the step is not small against the
// specimen's finest fringes the finite difference understates J (by sinc²: 0.64 for fringes of
// 2.8 steps), so the weighing it scales errs towards keeping the map's positions.
// Returns the sum over pixels k with valid[k] (null: all) and m_k > 0; `pixels` values each.
double pair_information(const float* a, const float* b, const double* mean, const uint8_t* valid, int64_t pixels);
double pair_information(const uint16_t* a, const uint16_t* b, const double* mean, const uint8_t* valid, int64_t pixels);

}  // namespace tycho
