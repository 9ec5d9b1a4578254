// Is a reconstructed object the specimen or its twin? For a thin specimen the data cannot tell:
// the object point-reflected and conjugated, with the probe reflected and conjugated and the scan
// turned 180°, gives every pattern exactly (|F[conj ψ(−r)]|² = |F[ψ](k)|²). Under- against
// overfocus is that twin (L(−C10) = −L(C10) for the scan's map), so a C10 stated with the wrong
// sign (conventions differ: py4DSTEM's and abTEM's "defocus" is −C10), or none stated and
// underfocus assumed for an overfocused probe, reconstructs the twin without any sign in the loss.
// What tells them apart is the specimen: electrons see a positive projected potential, so the
// object's phase peaks on the atoms and is skewed positive; the twin's is its negative.
//
// The test: the local phase φ = arg(O · conj(G_σ ⊛ O)) over a box (the scanned field), O the
// projected object (the slices' product), G_σ a Gaussian low-pass (removes the slow background
// and any phase ramp or wrap): `local_phase` of accuracy.hpp, what `tycho evaluate` scores; its skewness g = m3 / m2^{3/2}, and g's standard error under a
// symmetric (Gaussian) φ, √(6 / n_eff): for n independent samples √(6 / n) (Kendall & Stuart, The
// Advanced Theory of Statistics, vol. 1, 1977, §12.17); for a correlated image m3 is the mean of
// the third Hermite polynomial, whose covariance between two pixels is 6 ρ³ (Isserlis' theorem),
// so n_eff = N / Σ_τ ρ(τ)³, ρ the local phase's normalised autocorrelation over lags up to 2σ
// (a lattice's alternating correlations partly cancel; Σ ρ² counted a 6-px lattice as 27 pixels).
// Measured (bench/RESULTS.md, "Which one is the twin"): the specimens of 7 matrix scans at
// +0.3 to +2.7 (4 beyond 3 standard errors, 3 within), an overfocused MoSe2 scan's twin at
// −2.38 (13 standard errors), the MoS2 example's at −1.77 (7; both binned to 0.35 Å pixels).
#pragma once

#include <complex>
#include <cstdint>

namespace tycho {

struct phase_skewness {
  bool done = false;           // false: the box holds fewer than 64 pixels, or no phase varies
  double skewness = 0;         // g
  double standard_error = 0;   // √(6 / n_eff)
  double effective_pixels = 0; // n_eff
  int64_t pixels = 0;          // N, the box's pixels
};

// object: (slices, h, w) C order; box = {row0, row1, col0, col1} (half open, clamped to the
// object); sigma_px > 0: the low-pass's σ in pixels; bin ≥ 1: the projected object is averaged
// over bin × bin pixels first (the test needs atoms, not the finest pixels: a quarter of the
// memory and a sixteenth of the time at bin 2; `pixels` then counts binned pixels).
// Thread-safe; O(N σ² / bin⁴).
template <class T>
phase_skewness local_phase_skewness(const std::complex<T>* object, int64_t slices, int64_t h, int64_t w,
                                    const int64_t box[4], double sigma_px, int64_t bin = 1);

}  // namespace tycho
