// What the runtime computes once for a multislice, mixed-state run and hands to an engine or
// applies between steps: the Fresnel propagator of one slice, the initial probe modes and
// their orthonormalisation. Pure functions, thread-safe, no allocation beyond their results.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace tycho {

// H(k) = exp(−i π λ Δz |k|²) on the (n0, n1) window's frequencies, FFT natural order
// (k_a = f(i)·dk_a, f(i) = i for i < (n+1)/2, else i − n), complex128 (docs/conventions.md,
// "Multislice"; Cowley & Moodie 1957, Kirkland 2010 §6.4). Throws tycho::error
// (TYCHO_ERR_INVALID_ARGUMENT) for a non-positive size or sampling, or a non-finite
// wavelength or thickness.
std::vector<std::complex<double>> fresnel_propagator(int64_t n0, int64_t n1, double dk0_invA, double dk1_invA,
                                                     double wavelength_A, double thickness_A);

// The initial modes of a mixed-state probe from one coherent probe P (n0·n1 values, C order):
// mode 0 is P; mode m ≥ 1 is P times a low-order polynomial of the window coordinates (x,
// y, xy, x² − y², ... about the probe's centre of intensity, in units of its rms width), made
// orthogonal to the modes before it. Powers: mode m ≥ 1 carries `share` / (M − 1) of the
// total, mode 0 the rest, so Σ_m Σ|P_m|² = Σ|P|² (Thibault & Menzel 2013 start from such
// modes; PtyPy and quantEM likewise). Returns M·n0·n1 values, (M, n0, n1) C order.
// Throws for M < 1, M > n0·n1, share outside [0, 1), or a probe of zero power.
std::vector<std::complex<double>> initial_probe_modes(const std::vector<std::complex<double>>& probe, int64_t n0,
                                                      int64_t n1, int64_t modes, double share);

// Orthonormalises the M modes of `probe` ((M, n) C order, n pixels each) in place: the
// eigenvectors of their Gram matrix G_ab = Σ conj(P_a)·P_b, in decreasing power. The mixed
// state Σ_m |P_m⟩⟨P_m| (so every model intensity) is unchanged: the new modes are a unitary
// mixture of the old ones (Thibault & Menzel 2013, eq. 6; Odstrčil et al. 2018). Double
// precision arithmetic whatever T; deterministic. M ≤ 64.
template <class T>
void orthogonalize_probe_modes(std::complex<T>* probe, int64_t modes, int64_t n);

// The interaction constant σ in rad/(V·Å) of electrons of wavelength λ (Å): a slice of
// projected potential V (V·Å) transmits exp(iσV). σ = 2π m e λ / h² with the relativistic mass
// m = γ m₀, γ = sqrt(1 + (λ_C/λ)²) (λ_C = h / (m₀c), the Compton wavelength), CODATA 2018
// constants (Kirkland 2010, "Advanced Computing in Electron Microscopy", eq. 5.6): 80 keV →
// 1.0087e-3, 200 keV → 7.2884e-4, 300 keV → 6.5262e-4. Throws tycho::error
// (TYCHO_ERR_INVALID_ARGUMENT) for a wavelength that is not a finite number > 0.
double interaction_constant_rad_per_VA(double wavelength_A);

}  // namespace tycho
