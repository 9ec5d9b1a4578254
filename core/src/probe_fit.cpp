#include "tycho/core/probe_fit.hpp"

#include <fftw3.h>

#include "tycho/core/fftw_planner.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tycho {

namespace {
constexpr double pi = 3.14159265358979323846;

// |k|² of each pixel of an (n0, n1) window in FFT order.
std::vector<double> k_squared(int64_t n0, int64_t n1, const double dk_invA[2]) {
  std::vector<double> k2(std::size_t(n0 * n1));
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j) {
      const double f0 = double(i < (n0 + 1) / 2 ? i : i - n0) * dk_invA[0];
      const double f1 = double(j < (n1 + 1) / 2 ? j : j - n1) * dk_invA[1];
      k2[std::size_t(i * n1 + j)] = f0 * f0 + f1 * f1;
    }
  return k2;
}
}  // namespace

template <class T>
probe_defocus_fit fit_probe_defocus(const std::complex<T>* probe, int64_t n0, int64_t n1, const double dk_invA[2],
                                    double wavelength_A, double semiangle_mrad, double stated_C10_A, double lo_A,
                                    double hi_A) {
  probe_defocus_fit r;
  if (n0 < 4 || n1 < 4 || !(wavelength_A > 0) || !(semiangle_mrad > 0) || !(lo_A < hi_A)) return r;
  const std::size_t n = std::size_t(n0 * n1);
  std::vector<std::complex<double>> spectrum(n), work(n);
  for (std::size_t k = 0; k < n; ++k) spectrum[k] = std::complex<double>(probe[k]);
  fftw_transform_2d(spectrum.data(), n0, n1, FFTW_FORWARD).run();
  fftw_transform_2d inverse(work.data(), n0, n1, FFTW_BACKWARD);
  // |k|² per pixel, and the aperture (a little inside its edge, where the probe is reliable).
  const double k_aperture = 0.95 * semiangle_mrad * 1e-3 / wavelength_A;
  const std::vector<double> k2 = k_squared(n0, n1, dk_invA);
  std::vector<char> inside(n);
  for (std::size_t k = 0; k < n; ++k) inside[k] = std::sqrt(k2[k]) <= k_aperture;
  auto peak = [&](double c) {
    for (std::size_t k = 0; k < n; ++k)
      work[k] = inside[k] ? spectrum[k] * std::polar(1.0, pi * wavelength_A * c * k2[k]) : 0.0;
    inverse.run();
    double best = 0;
    for (const auto& v : work) best = std::max(best, std::norm(v));
    return best;
  };
  // A grid fine enough that the focus's peak (width ~ 1 / (λ k_aperture²) in C10) is not missed.
  const double width = 1.0 / (wavelength_A * k_aperture * k_aperture);
  const int steps = std::clamp(int(std::ceil((hi_A - lo_A) / (0.25 * width))), 8, 4000);
  double best_c = lo_A, best_v = -1;
  for (int s = 0; s <= steps; ++s) {
    const double c = lo_A + (hi_A - lo_A) * s / steps;
    const double v = peak(c);
    if (v > best_v) best_v = v, best_c = c;
  }
  // Golden section within one grid step either side.
  const double g = (std::sqrt(5.0) - 1) / 2;
  double a = best_c - (hi_A - lo_A) / steps, b = best_c + (hi_A - lo_A) / steps;
  double x1 = b - g * (b - a), x2 = a + g * (b - a), v1 = peak(x1), v2 = peak(x2);
  for (int it = 0; it < 40; ++it) {
    if (v1 > v2) {
      b = x2, x2 = x1, v2 = v1, x1 = b - g * (b - a), v1 = peak(x1);
    } else {
      a = x1, x1 = x2, v1 = v2, x2 = a + g * (b - a), v2 = peak(x2);
    }
  }
  r.C10_A = 0.5 * (a + b);
  const double at_fit = peak(r.C10_A), at_stated = peak(stated_C10_A);
  r.peak_gain = at_stated > 0 ? at_fit / at_stated : 0.0;
  r.done = std::isfinite(r.C10_A) && at_fit > 0;
  return r;
}

template probe_defocus_fit fit_probe_defocus<float>(const std::complex<float>*, int64_t, int64_t, const double[2],
                                                    double, double, double, double, double);
template probe_defocus_fit fit_probe_defocus<double>(const std::complex<double>*, int64_t, int64_t, const double[2],
                                                     double, double, double, double, double);

template <class T>
double defocus_slope(const std::complex<T>* probe, const std::complex<double>* gradient, int64_t modes, int64_t n0,
                     int64_t n1, const double dk_invA[2], double wavelength_A) {
  // Parseval: Σ_r conj(g) · F⁻¹[X] / N = Σ_k conj(F g) · X / N for the unnormalised transforms.
  const std::size_t n = std::size_t(n0 * n1);
  const std::vector<double> k2 = k_squared(n0, n1, dk_invA);
  std::vector<std::complex<double>> P(n), G(n);
  double slope = 0;
  for (int64_t m = 0; m < modes; ++m) {
    for (std::size_t k = 0; k < n; ++k) {
      P[k] = std::complex<double>(probe[std::size_t(m) * n + k]);
      G[k] = gradient[std::size_t(m) * n + k];
    }
    fftw_transform_2d(P.data(), n0, n1, FFTW_FORWARD).run();
    fftw_transform_2d(G.data(), n0, n1, FFTW_FORWARD).run();
    double s = 0;
    for (std::size_t k = 0; k < n; ++k)
      s += (std::conj(G[k]) * std::complex<double>(0, -pi * wavelength_A * k2[k]) * P[k]).real();
    slope += 2 * s / double(n);
  }
  return slope;
}

template <class T>
void change_defocus(std::complex<T>* probe, int64_t modes, int64_t n0, int64_t n1, const double dk_invA[2],
                    double wavelength_A, double delta_C10_A) {
  const std::size_t n = std::size_t(n0 * n1);
  const std::vector<double> k2 = k_squared(n0, n1, dk_invA);
  std::vector<std::complex<double>> P(n);
  for (int64_t m = 0; m < modes; ++m) {
    for (std::size_t k = 0; k < n; ++k) P[k] = std::complex<double>(probe[std::size_t(m) * n + k]);
    fftw_transform_2d(P.data(), n0, n1, FFTW_FORWARD).run();
    for (std::size_t k = 0; k < n; ++k) P[k] *= std::polar(1.0 / double(n), -pi * wavelength_A * delta_C10_A * k2[k]);
    fftw_transform_2d(P.data(), n0, n1, FFTW_BACKWARD).run();
    for (std::size_t k = 0; k < n; ++k) probe[std::size_t(m) * n + k] = std::complex<T>(P[k]);
  }
}

template double defocus_slope<float>(const std::complex<float>*, const std::complex<double>*, int64_t, int64_t, int64_t,
                                     const double[2], double);
template double defocus_slope<double>(const std::complex<double>*, const std::complex<double>*, int64_t, int64_t,
                                      int64_t, const double[2], double);
template void change_defocus<float>(std::complex<float>*, int64_t, int64_t, int64_t, const double[2], double, double);
template void change_defocus<double>(std::complex<double>*, int64_t, int64_t, int64_t, const double[2], double, double);

}  // namespace tycho
