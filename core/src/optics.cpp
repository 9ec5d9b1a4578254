#include "tycho/core/optics.hpp"

#include <algorithm>
#include <cmath>

#include "tycho/core/fft_reference.hpp"

namespace tycho {

double wavelength_A(double energy_eV) {
  return 12.2643 / std::sqrt(energy_eV * (1.0 + 0.978476e-6 * energy_eV));
}

namespace {
// Spatial frequency of index i of an n-point DFT in natural order, in units of dk.
double freq(int64_t i, int64_t n) { return double(i < (n + 1) / 2 ? i : i - n); }
}  // namespace

std::vector<std::complex<float>> make_probe(const probe_optics& optics, const window_sampling& w,
                                            double total_intensity) {
  const int64_t n0 = w.n[0], n1 = w.n[1];
  const double lambda = wavelength_A(optics.energy_eV);
  const double k_cut = optics.semiangle_mrad * 1e-3 / lambda;  // aperture radius, Å⁻¹
  const double edge = std::max(w.dk_invA[0], w.dk_invA[1]);    // soft edge width, Å⁻¹
  std::vector<std::complex<double>> spectrum(std::size_t(n0 * n1));
  for (int64_t i = 0; i < n0; ++i) {
    double kx = freq(i, n0) * w.dk_invA[0];
    for (int64_t j = 0; j < n1; ++j) {
      double ky = freq(j, n1) * w.dk_invA[1];
      double k2 = kx * kx + ky * ky;
      double a = std::clamp((k_cut - std::sqrt(k2)) / edge + 0.5, 0.0, 1.0);
      double chi = M_PI * lambda * optics.C10_A * k2;
      spectrum[std::size_t(i * n1 + j)] = a * std::polar(1.0, -chi);
    }
  }
  auto real_space = dft2_reference(spectrum, n0, n1, /*inverse=*/true);
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

double probe_edge_fraction(const std::vector<std::complex<float>>& probe, int64_t n0, int64_t n1,
                           double margin) {
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

}  // namespace tycho
