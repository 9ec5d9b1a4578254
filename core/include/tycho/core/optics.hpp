// Electron optics: wavelength and the initial probe (CONVENTIONS.md, "Optics").
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace tycho {

// Relativistic electron wavelength in Å for a beam energy in eV:
// λ = 12.2643 / sqrt(E (1 + 0.978476e-6 E)). 80 keV → 0.041757 Å.
double wavelength_A(double energy_eV);

struct probe_optics {
  double energy_eV = 0;
  double semiangle_mrad = 0;
  double C10_A = 0;  // defocus aberration; C10 < 0 is underfocus (abTEM defocus = −C10)
};

// Reciprocal-space sampling of an (n0, n1) window: dk in Å⁻¹ per pixel along each axis.
struct window_sampling {
  int64_t n[2];
  double dk_invA[2];
  // Real-space pixel of the window, dx = 1 / (N · dk) Å.
  double dx_A(int axis) const { return 1.0 / (double(n[axis]) * dk_invA[axis]); }
};

// The probe in real space, (n0, n1) C order, centred in its window (fftshift of
// F⁻¹[A(k) exp(−i χ(k))], χ(k) = π λ C10 |k|², A the aperture of the semiangle with a
// one-pixel soft edge against ringing), scaled so that Σ|P|² = total_intensity (with the
// unitary DFT this is also Σ_k |F P|²).
std::vector<std::complex<float>> make_probe(const probe_optics& optics, const window_sampling& w,
                                            double total_intensity);

// Fraction of Σ|P|² that lies within `margin` (fraction of the window) of the window's edges:
// a probe with much intensity there wraps around the window.
double probe_edge_fraction(const std::vector<std::complex<float>>& probe, int64_t n0, int64_t n1,
                           double margin);

}  // namespace tycho
