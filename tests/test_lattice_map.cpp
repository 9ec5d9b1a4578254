// The scan's linear map from a crystal's lattice (core/lattice_map, issue 27): a thin hexagonal
// phase lattice scanned by a defocused probe over a raster that is turned, stretched and sheared,
// its patterns computed here (the probe's spectrum A e^{−iπλC10|k|²} shifted to each true
// position, times the transmission function, |FFT|²); the estimate must give the true map,
// isotropic scale included, which no loss-based step fixes for one slice.
#include <gtest/gtest.h>
#include <tycho/core/fftw_planner.hpp>
#include <tycho/core/lattice_map.hpp>
#include <tycho/core/scan_map.hpp>

#include <array>
#include <cmath>
#include <complex>
#include <cstdint>
#include <random>
#include <vector>

namespace {

constexpr double pi = 3.14159265358979323846;
using cplx = std::complex<double>;

struct synthetic_scan {
  tycho::lattice_block block;
  tycho::lattice_map_inputs inputs;
  tycho::scan_map truth;
};

// A 24 x 24 raster of 0.5 Å whose true positions are truth · n; 64² detector of 0.06 Å⁻¹,
// 80 kV (λ = 0.04176 Å), 25 mrad, C10 −150 Å. lattice: a hexagonal phase lattice of period
// 3.2 Å (three cosines of 0.3 rad), else one Gaussian bump (no lattice). dose: electrons per
// pattern (Poisson), 0 for none.
synthetic_scan simulate(const tycho::scan_map& truth, bool lattice, double dose) {
  const int64_t n = 64, rx = 24, ry = 24;
  const double dk = 0.06, lambda = 0.04176, alpha = 25e-3, C10 = -150, step = 0.5;
  const double dx = 1.0 / (double(n) * dk);  // the real-space pixel (the 3 x wider window's too)
  const double a = 3.2, g = 2.0 / (std::sqrt(3.0) * a);
  const double gv[3][2] = {{g, 0}, {g * std::cos(2 * pi / 3), g * std::sin(2 * pi / 3)},
                           {g * std::cos(4 * pi / 3), g * std::sin(4 * pi / 3)}};
  synthetic_scan s;
  s.truth = truth;
  s.inputs.step_A[0] = s.inputs.step_A[1] = step;
  s.inputs.dk_invA[0] = s.inputs.dk_invA[1] = dk;
  s.inputs.wavelength_A = lambda;
  s.inputs.semiangle_mrad = alpha * 1e3;
  s.inputs.C10_A = C10;
  const double radius_px[2] = {1.6 * alpha / lambda / dk, 1.6 * alpha / lambda / dk};
  s.block = tycho::lattice_block::make(rx, ry, n, n, radius_px, 32, int64_t(1) << 22);
  // The far field sampled 3 x finer (a window 3 x wider) and each detector pixel summing its 3 x 3
  // samples: a detector integrates over its pixels (as the matrix's abTEM simulations).
  const int64_t m = 3, nf = m * n;
  const double dkf = dk / double(m);
  std::vector<cplx> wave(std::size_t(nf * nf));
  tycho::fftw_transform_2d inverse(wave.data(), nf, nf, +1), forward(wave.data(), nf, nf, -1);
  std::vector<float> pattern(std::size_t(n * n));
  std::vector<double> binned(std::size_t(n * n));
  std::mt19937 rng(7);
  auto signed_index = [&](int64_t u) { return (u + nf / 2) % nf - nf / 2; };
  for (int64_t i = 0; i < rx; ++i)
    for (int64_t k = 0; k < ry; ++k) {
      const std::array<double, 2> r = truth.apply({double(i) * step, double(k) * step});
      // The probe's spectrum (CONVENTIONS.md: A e^{−iχ}, χ = πλC10|k|²).
      for (int64_t u = 0; u < nf; ++u)
        for (int64_t v = 0; v < nf; ++v) {
          const double k0 = double(signed_index(u)) * dkf, k1 = double(signed_index(v)) * dkf, kk = k0 * k0 + k1 * k1;
          const double A = std::sqrt(kk) * lambda <= alpha ? 1.0 : 0.0;
          wave[std::size_t(u * nf + v)] = A * std::polar(1.0, -pi * lambda * C10 * kk);
        }
      inverse.run();
      // The probe is centred on window pixel 0: pixel (u, v) lies at r + (signed index) dx.
      for (int64_t u = 0; u < nf; ++u)
        for (int64_t v = 0; v < nf; ++v) {
          const double x0 = r[0] + double(signed_index(u)) * dx, x1 = r[1] + double(signed_index(v)) * dx;
          double phi = 0;
          if (lattice) {
            for (const auto& gg : gv) phi += 0.3 * std::cos(2 * pi * (gg[0] * x0 + gg[1] * x1));
          } else {
            phi = 0.9 * std::exp(-((x0 - 3) * (x0 - 3) + (x1 - 2) * (x1 - 2)) / 0.5);
          }
          wave[std::size_t(u * nf + v)] *= std::polar(1.0, phi);
        }
      forward.run();
      std::fill(binned.begin(), binned.end(), 0.0);
      double total = 0;
      for (int64_t u = 0; u < nf; ++u)
        for (int64_t v = 0; v < nf; ++v) {
          const int64_t s0 = (signed_index(u) + 1 + m * n) / m - n, s1 = (signed_index(v) + 1 + m * n) / m - n;
          if (s0 < -n / 2 || s0 >= n / 2 || s1 < -n / 2 || s1 >= n / 2) continue;
          const double I = std::norm(wave[std::size_t(u * nf + v)]);
          binned[std::size_t(((s0 + n) % n) * n + (s1 + n) % n)] += I;
          total += I;
        }
      for (std::size_t j = 0; j < pattern.size(); ++j) {
        const double expected = binned[j] / total * (dose > 0 ? dose : 1.0);
        pattern[j] = float(dose > 0 ? double(std::poisson_distribution<int64_t>(expected)(rng)) : expected);
      }
      s.block.add(i, k, pattern.data());
    }
  return s;
}

TEST(LatticeMap, FindsATurnedStretchedShearedRasterScaleIncluded) {
  const tycho::scan_map truth = tycho::scan_map::from_parameters(20 * pi / 180, 1.04, 0.98, 0.02);
  synthetic_scan s = simulate(truth, true, 0);
  s.inputs.start = tycho::rotation_map(21 * pi / 180);  // the parallax's rotation, 1° off; the stated step
  const tycho::lattice_map_result r = tycho::estimate_lattice_map(s.block, s.inputs);
  ASSERT_TRUE(r.done) << r.why_not;
  const auto q = r.map.decompose(), t = truth.decompose();
  EXPECT_NEAR(std::sqrt(r.map.det()), std::sqrt(truth.det()), 0.003 * std::sqrt(truth.det()));
  EXPECT_NEAR(q.rotation_rad, t.rotation_rad, 0.2 * pi / 180);
  EXPECT_NEAR(q.scale0, t.scale0, 0.005);
  EXPECT_NEAR(q.scale1, t.scale1, 0.005);
  EXPECT_NEAR(q.shear, t.shear, 0.005);
  EXPECT_NEAR(r.C10_A[0], -150, 7.5);
  EXPECT_NEAR(r.C10_A[1], -150, 7.5);
  EXPECT_GT(r.lune_fit, 0.9);
}

TEST(LatticeMap, CountingNoiseLeavesTheScaleWithinAThirdOfAPercent) {
  const tycho::scan_map truth = tycho::scan_map::from_parameters(-70 * pi / 180, 0.97, 0.97, 0.0);
  synthetic_scan s = simulate(truth, true, 2e4);
  s.inputs.start = tycho::rotation_map(-70 * pi / 180);
  const tycho::lattice_map_result r = tycho::estimate_lattice_map(s.block, s.inputs);
  ASSERT_TRUE(r.done) << r.why_not;
  EXPECT_NEAR(std::sqrt(r.map.det()), 0.97, 0.003 * 0.97);
  EXPECT_GT(r.scale_sd, 0.0);  // the fit's own error bar, within what the estimate may use
  EXPECT_LT(r.scale_sd, tycho::lattice_scale_sd_max);
}

// A detector's gap (a row and a column through the bright field, zero in every pattern and
// masked) stays out of the fit: the same map as without it.
TEST(LatticeMap, MaskedPixelsStayOutOfTheFit) {
  const tycho::scan_map truth = tycho::scan_map::from_parameters(-70 * pi / 180, 0.97, 0.97, 0.0);
  synthetic_scan s = simulate(truth, true, 2e4);
  s.inputs.start = tycho::rotation_map(-70 * pi / 180);
  const int64_t n = s.block.detector[0];
  std::vector<uint8_t> valid(std::size_t(n * n), 1);
  for (int64_t u = 0; u < n; ++u) valid[std::size_t(u * n + 3)] = valid[std::size_t(2 * n + u)] = 0;
  const double radius_px[2] = {1.6 * 25e-3 / 0.04176 / 0.06, 1.6 * 25e-3 / 0.04176 / 0.06};
  tycho::lattice_block gapped = tycho::lattice_block::make(24, 24, n, n, radius_px, 32, int64_t(1) << 22, valid.data());
  ASSERT_LT(gapped.pixels.size(), s.block.pixels.size());
  // The gapped block's patterns from the full block's (the gap's pixels are simply not kept).
  std::vector<float> pattern(std::size_t(n * n));
  for (int64_t b = 0; b < 24 * 24; ++b) {
    std::fill(pattern.begin(), pattern.end(), 0.0f);
    for (std::size_t j = 0; j < s.block.pixels.size(); ++j)
      pattern[std::size_t(s.block.pixels[j])] = float(s.block.patterns[std::size_t(b) * s.block.pixels.size() + j]);
    gapped.add(b / 24, b % 24, pattern.data());
  }
  for (int64_t j : gapped.pixels) EXPECT_NE(valid[std::size_t(j)], 0);
  const tycho::lattice_map_result r = tycho::estimate_lattice_map(gapped, s.inputs);
  ASSERT_TRUE(r.done) << r.why_not;
  EXPECT_NEAR(std::sqrt(r.map.det()), 0.97, 0.003 * 0.97);
}

TEST(LatticeMap, NoLatticeIsSaidNotGuessed) {
  synthetic_scan s = simulate(tycho::scan_map{}, false, 2e4);
  s.inputs.start = tycho::scan_map{};
  const tycho::lattice_map_result r = tycho::estimate_lattice_map(s.block, s.inputs);
  EXPECT_FALSE(r.done);
  EXPECT_FALSE(r.why_not.empty());
}

TEST(LatticeMap, ABlockTooSmallIsSaid) {
  const double radius_px[2] = {10, 10};
  tycho::lattice_block b = tycho::lattice_block::make(6, 6, 32, 32, radius_px, 32, 1 << 20);
  tycho::lattice_map_inputs in;
  const tycho::lattice_map_result r = tycho::estimate_lattice_map(b, in);
  EXPECT_FALSE(r.done);
  EXPECT_NE(r.why_not.find("fewer than 8 x 8"), std::string::npos) << r.why_not;
}

}  // namespace
