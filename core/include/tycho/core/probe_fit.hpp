// The defocus of a reconstructed probe: what the run found, against what was stated.
//
// A probe's spectrum is A(k) · exp(−iχ(k)) with χ = π λ C10 |k|² (CONVENTIONS.md) plus what the
// reconstruction added (other aberrations, a shift). Multiplying it by exp(+iπ λ c |k|²) undoes a
// defocus c: at c = C10 the phase is flat over the aperture and the probe comes to a focus, its
// peak intensity largest. So the fit is the c that maximises the peak of |F⁻¹[P̃ · e^{iπλc|k|²}]|²
// inside the aperture: no phase unwrapping, blind to a shift of the probe in its window, and a
// single smooth maximum near focus (a grid over the range, then a golden-section search).
#pragma once

#include <complex>
#include <cstdint>

namespace tycho {

struct probe_defocus_fit {
  bool done = false;
  double C10_A = 0;    // the fitted defocus
  double peak_gain = 0;  // peak intensity at the fit over that at the stated C10 (≥ 1 when the fit helps)
};

// probe: (n0, n1) C order, centred in its window (the engine's probe, one mode); dk_invA: the
// window's reciprocal pixel per axis; the aperture's semiangle (mrad) and wavelength (Å); the
// search covers [lo, hi] Å (lo < hi). Thread-safe (FFTW plans made under a lock).
template <class T>
probe_defocus_fit fit_probe_defocus(const std::complex<T>* probe, int64_t n0, int64_t n1, const double dk_invA[2],
                                    double wavelength_A, double semiangle_mrad, double stated_C10_A, double lo_A,
                                    double hi_A);

}  // namespace tycho

namespace tycho {

// The loss's slope along the probe's defocus: dL/dC10 = Σ_modes 2 Re Σ_r conj(g) · dP/dC10, with
// g = ∂L/∂P* the probe's gradient and dP/dC10 = F⁻¹[−iπλ|k|² · F P] (a change of defocus
// multiplies the spectrum by e^{−iπλΔC10|k|²}; CONVENTIONS.md). probe and gradient: (modes, n0,
// n1) C order, the probe centred in its window; the gradient in double (summed over batches).
template <class T>
double defocus_slope(const std::complex<T>* probe, const std::complex<double>* gradient, int64_t modes, int64_t n0,
                     int64_t n1, const double dk_invA[2], double wavelength_A);

// Changes every mode's defocus by delta_C10_A, in place: P ← F⁻¹[e^{−iπλΔC10|k|²} · F P].
template <class T>
void change_defocus(std::complex<T>* probe, int64_t modes, int64_t n0, int64_t n1, const double dk_invA[2],
                    double wavelength_A, double delta_C10_A);

}  // namespace tycho
