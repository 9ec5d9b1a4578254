// Probe optics shared by the runtime and plugins, header-only (CONVENTIONS.md, "Optics"): the
// wavelength of electrons (relativistic) and of X-ray photons, the sampling of a detector window
// and the initial probe (a condenser aperture, a zone plate's annular pupil, or a pinhole). One
// formula in one place, so that the host's initial probe and a plugin's probe (the `simulate`
// source) are the same numbers. docs/xray.md describes the X-ray models.
//
//   tycho::sdk::probe_optics optics{80e3, 25.0, -150.0};
//   tycho::sdk::window_sampling w{{96, 96}, {0.06, 0.06}};
//   auto probe = tycho::sdk::make_probe(optics, w, 1.0);  // Σ|P|² = 1, centred in its window
//
// The initial probe's inverse transform runs on FFTW (double precision, libfftw3 and
// libfftw3_threads, which tycho::sdk links): a plain DFT took 27 s at 1024² and did not finish
// at 2048². dft2_reference stays as the independent check the tests compare against.
#pragma once

#include <fftw3.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <complex>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace tycho::sdk {

// Relativistic electron wavelength in Å for a beam energy in eV:
// λ = 12.2643 / sqrt(E (1 + 0.978476e-6 E)). 80 keV → 0.041757 Å.
inline double wavelength_A(double energy_eV) {
  return 12.2643 / std::sqrt(energy_eV * (1.0 + 0.978476e-6 * energy_eV));
}

// What the beam is made of: it decides the wavelength of an energy.
enum class radiation : int32_t { electron = 1, xray = 2 };  // the values of TYCHO_RADIATION_*

// hc in keV·Å (CODATA 2018: h c = 1.23984198e-6 eV·m): a photon of E keV has λ = 12.398420 / E Å.
constexpr double k_hc_keV_A = 12.39841984;

// Photon wavelength in Å for an energy in eV: λ = hc / E. 8 keV → 1.549802 Å.
inline double photon_wavelength_A(double energy_eV) { return k_hc_keV_A * 1e3 / energy_eV; }

// The wavelength of `kind` at `energy_eV`, Å.
inline double wavelength_A(double energy_eV, radiation kind) {
  return kind == radiation::xray ? photon_wavelength_A(energy_eV) : wavelength_A(energy_eV);
}

// How the initial probe is formed (docs/xray.md):
//   aperture  a disc (annulus with central_stop > 0) in the back focal plane: a condenser aperture
//             of semiangle_mrad, or a Fresnel zone plate of numerical aperture semiangle_mrad with
//             its central stop; the probe at the specimen is the focus propagated by C10
//   pinhole   a disc of diameter pinhole_diameter_A in real space, lit by a plane wave,
//             propagated by C10 to the specimen (Fresnel)
enum class probe_model : int32_t { aperture = 0, pinhole = 1 };

struct probe_optics {
  double energy_eV = 0;
  double semiangle_mrad = 0;
  double C10_A = 0;  // defocus aberration; C10 < 0 is underfocus (abTEM defocus = −C10)
  radiation kind = radiation::electron;
  probe_model model = probe_model::aperture;
  double central_stop = 0;        // aperture: blocked fraction of the pupil's radius, [0, 1)
  double pinhole_diameter_A = 0;  // pinhole: its diameter, Å
};

// The wavelength of the optics' radiation at its energy, Å.
inline double wavelength_A(const probe_optics& o) { return wavelength_A(o.energy_eV, o.kind); }

// Reciprocal-space sampling of an (n0, n1) window: dk in Å⁻¹ per pixel along each axis.
struct window_sampling {
  int64_t n[2];
  double dk_invA[2];
  // Real-space pixel of the window, dx = 1 / (N · dk) Å.
  double dx_A(int axis) const { return 1.0 / (double(n[axis]) * dk_invA[axis]); }
};

namespace detail {
constexpr double pi = 3.14159265358979323846;  // M_PI's value, without relying on M_PI

// 1-D DFT of `n` values at stride `stride`, via a precomputed twiddle table.
inline void dft1(std::complex<double>* data, int64_t n, int64_t stride, bool inverse,
                 std::vector<std::complex<double>>& scratch,
                 const std::vector<std::complex<double>>& tw) {
  for (int64_t k = 0; k < n; ++k) {
    std::complex<double> acc = 0;
    for (int64_t r = 0; r < n; ++r) {
      auto w = tw[std::size_t((k * r) % n)];
      acc += data[r * stride] * (inverse ? std::conj(w) : w);
    }
    scratch[std::size_t(k)] = acc;
  }
  for (int64_t k = 0; k < n; ++k) data[k * stride] = scratch[std::size_t(k)];
}
inline std::vector<std::complex<double>> twiddles(int64_t n) {
  std::vector<std::complex<double>> tw(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    tw[std::size_t(i)] = std::polar(1.0, -2.0 * pi * double(i) / double(n));
  return tw;
}
// Spatial frequency of index i of an n-point DFT in natural order, in units of dk.
inline double freq(int64_t i, int64_t n) { return double(i < (n + 1) / 2 ? i : i - n); }
}  // namespace detail

// A plain O(N·(n0+n1)) 2-D DFT in double precision for set-up work (the initial probe), so no
// FFT library is needed; engines use FFTW or cuFFT for the hot loop. (n0, n1) C order.
// Unitary scaling: forward exp(−2πi k·r) / sqrt(n0 n1), inverse exp(+2πi k·r) / sqrt(n0 n1).
inline std::vector<std::complex<double>> dft2_reference(const std::vector<std::complex<double>>& in,
                                                        int64_t n0, int64_t n1, bool inverse) {
  std::vector<std::complex<double>> out = in;
  std::vector<std::complex<double>> scratch(std::size_t(std::max(n0, n1)));
  auto tw0 = detail::twiddles(n0), tw1 = detail::twiddles(n1);
  for (int64_t i = 0; i < n0; ++i) detail::dft1(out.data() + i * n1, n1, 1, inverse, scratch, tw1);
  for (int64_t j = 0; j < n1; ++j) detail::dft1(out.data() + j, n0, n1, inverse, scratch, tw0);
  double s = 1.0 / std::sqrt(double(n0 * n1));
  for (auto& v : out) v *= s;
  return out;
}

// The same transform as dft2_reference, on FFTW: O(N log N). Thread-safe: FFTW's planner is
// made thread-safe once per process (fftw_make_planner_thread_safe), since the cpu engine and
// other threads may plan double-precision transforms at the same time. Throws
// std::invalid_argument for sizes below 1 or above INT_MAX (FFTW takes int sizes) and
// std::bad_alloc when FFTW cannot plan.
inline std::vector<std::complex<double>> dft2(const std::vector<std::complex<double>>& in, int64_t n0,
                                              int64_t n1, bool inverse) {
  if (n0 < 1 || n1 < 1 || n0 > INT_MAX || n1 > INT_MAX || in.size() != std::size_t(n0) * std::size_t(n1))
    throw std::invalid_argument("dft2: a " + std::to_string(n0) + " x " + std::to_string(n1) + " transform of " +
                                std::to_string(in.size()) + " values");
  static std::once_flag thread_safe;
  std::call_once(thread_safe, [] { fftw_make_planner_thread_safe(); });
  std::vector<std::complex<double>> src = in, out(in.size());
  auto* i = reinterpret_cast<fftw_complex*>(src.data());
  auto* o = reinterpret_cast<fftw_complex*>(out.data());
  // FFTW_ESTIMATE: no measuring runs, and the input is left as it is.
  fftw_plan plan = fftw_plan_dft_2d(int(n0), int(n1), i, o, inverse ? FFTW_BACKWARD : FFTW_FORWARD, FFTW_ESTIMATE);
  if (plan == nullptr) throw std::bad_alloc();
  fftw_execute(plan);
  fftw_destroy_plan(plan);
  const double s = 1.0 / std::sqrt(double(n0) * double(n1));
  for (auto& v : out) v *= s;
  return out;
}

// The probe in real space, (n0, n1) C order, centred in its window, scaled so that
// Σ|P|² = total_intensity (with the unitary DFT this is also Σ_k |F P|²):
//   aperture: fftshift(F⁻¹[A(k) exp(−i χ(k))]), χ(k) = π λ C10 |k|², A the disc of the semiangle
//             (less the central stop's disc) with a one-pixel soft edge against ringing;
//   pinhole:  F⁻¹[F[D] exp(−i π λ C10 |k|²)], D the centred disc of the pinhole's diameter (a
//             one-pixel soft edge): the pinhole's plane wave propagated by C10 (Fresnel).
//   measured: the aperture's formula with A(k) given as `amplitude` (optional): (n0, n1) in FFT
//             natural order (zero frequency at index 0), finite and ≥ 0, e.g. the square root
//             of a vacuum pattern; it replaces the model's disc (the pinhole's too). Throws
//             std::invalid_argument when it does not hold n0 · n1 values.
inline std::vector<std::complex<float>> make_probe(const probe_optics& optics,
                                                   const window_sampling& w,
                                                   double total_intensity,
                                                   const std::vector<double>* amplitude = nullptr) {
  const int64_t n0 = w.n[0], n1 = w.n[1];
  const double lambda = wavelength_A(optics);
  const double k_cut = optics.semiangle_mrad * 1e-3 / lambda;  // aperture radius, Å⁻¹
  const double k_stop = std::clamp(optics.central_stop, 0.0, 1.0) * k_cut;
  const double edge = std::max(w.dk_invA[0], w.dk_invA[1]);    // soft edge width, Å⁻¹
  const bool pinhole = optics.model == probe_model::pinhole && amplitude == nullptr;
  if (amplitude != nullptr && amplitude->size() != std::size_t(n0 * n1))
    throw std::invalid_argument("make_probe: an amplitude of " + std::to_string(amplitude->size()) +
                                " values for a " + std::to_string(n0) + " x " + std::to_string(n1) + " window");
  std::vector<std::complex<double>> spectrum(std::size_t(n0 * n1));
  if (pinhole) {
    // The disc in real space, centred at index 0 (the window's corner: fftshift comes last).
    const double radius = 0.5 * optics.pinhole_diameter_A;
    const double dx = std::min(w.dx_A(0), w.dx_A(1));
    std::vector<std::complex<double>> disc(spectrum.size());
    for (int64_t i = 0; i < n0; ++i)
      for (int64_t j = 0; j < n1; ++j) {
        const double x = detail::freq(i, n0) * w.dx_A(0), y = detail::freq(j, n1) * w.dx_A(1);
        disc[std::size_t(i * n1 + j)] = std::clamp((radius - std::hypot(x, y)) / dx + 0.5, 0.0, 1.0);
      }
    spectrum = dft2(disc, n0, n1, /*inverse=*/false);
  }
  for (int64_t i = 0; i < n0; ++i) {
    double kx = detail::freq(i, n0) * w.dk_invA[0];
    for (int64_t j = 0; j < n1; ++j) {
      double ky = detail::freq(j, n1) * w.dk_invA[1];
      double k2 = kx * kx + ky * ky;
      double chi = detail::pi * lambda * optics.C10_A * k2;
      auto& v = spectrum[std::size_t(i * n1 + j)];
      if (pinhole) {
        v *= std::polar(1.0, -chi);
      } else if (amplitude != nullptr) {
        v = (*amplitude)[std::size_t(i * n1 + j)] * std::polar(1.0, -chi);
      } else {
        const double k = std::sqrt(k2);
        double a = std::clamp((k_cut - k) / edge + 0.5, 0.0, 1.0);
        if (k_stop > 0) a *= std::clamp((k - k_stop) / edge + 0.5, 0.0, 1.0);
        v = a * std::polar(1.0, -chi);
      }
    }
  }
  auto real_space = dft2(spectrum, n0, n1, /*inverse=*/true);
  // Centre the probe in its window (fftshift), then normalise.
  std::vector<std::complex<float>> probe(spectrum.size());
  double power = 0;
  for (const auto& v : real_space) power += std::norm(v);
  double scale = power > 0 ? std::sqrt(total_intensity / power) : 0.0;
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j) {
      int64_t si = (i + n0 / 2) % n0, sj = (j + n1 / 2) % n1;
      probe[std::size_t(si * n1 + sj)] =
          std::complex<float>(real_space[std::size_t(i * n1 + j)] * scale);
    }
  return probe;
}

// Fraction of Σ|P|² that lies within `margin` (fraction of the window) of the window's edges:
// a probe with much intensity there wraps around the window.
inline double probe_edge_fraction(const std::vector<std::complex<float>>& probe, int64_t n0,
                                  int64_t n1, double margin) {
  int64_t m0 = std::max<int64_t>(1, int64_t(margin * double(n0)));
  int64_t m1 = std::max<int64_t>(1, int64_t(margin * double(n1)));
  double total = 0, edge = 0;
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j) {
      double p = std::norm(probe[std::size_t(i * n1 + j)]);
      total += p;
      if (i < m0 || i >= n0 - m0 || j < m1 || j >= n1 - m1) edge += p;
    }
  return total > 0 ? edge / total : 0.0;
}

}  // namespace tycho::sdk
