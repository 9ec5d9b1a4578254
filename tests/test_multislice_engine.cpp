// The cpu engine's multislice, mixed-state and position-gradient model, called as the host calls
// it: float64 gradients by the object (every slice), the probe (every mode) and the probe
// positions against central differences of the loss; float32 against float64; and what core
// computes for it (tycho/core/multislice.hpp, position_correction.hpp).
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/core/multislice.hpp>
#include <tycho/core/exact_sum.hpp>
#include <tycho/core/position_correction.hpp>

#include <dlpack/dlpack.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "engine_under_test.hpp"

namespace {

using cd = std::complex<double>;

// A small non-degenerate problem with S slices and M modes: weak-phase slices with noise, a
// chirped Gaussian probe and higher modes, random counts, positions off the pixel grid.
struct layered_problem {
  static constexpr int64_t n0 = 20, n1 = 16, rx = 3, ry = 4, pad = 3;
  int64_t slices, modes, h = 0, w = 0, patterns = rx * ry;
  std::vector<float> targets;
  std::vector<double> positions;
  std::vector<cd> object, probe, propagator;
  int64_t target_shape[3], position_shape[2], object_shape[3], probe_shape[3], propagator_shape[2] = {n0, n1};
  DLTensor targets_t{}, positions_t{}, object_t{}, probe_t{}, propagator_t{};
  layered_problem(int64_t s, int64_t m) : slices(s), modes(m) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    h = 2 * pad + n0 + 3 * (rx - 1) + 2;
    w = 2 * pad + n1 + 3 * (ry - 1) + 2;
    for (int64_t i = 0; i < rx; ++i)
      for (int64_t j = 0; j < ry; ++j) {
        positions.push_back(double(pad + n0 / 2 + 3 * i) + 0.2 + 0.6 * u(rng));
        positions.push_back(double(pad + n1 / 2 + 3 * j) + 0.2 + 0.6 * u(rng));
      }
    std::vector<cd> coherent;
    for (int64_t a = 0; a < n0; ++a)
      for (int64_t b = 0; b < n1; ++b) {
        const double r2 = std::pow(double(a - n0 / 2) / n0, 2) + std::pow(double(b - n1 / 2) / n1, 2);
        coherent.push_back(std::exp(-14.0 * r2) * std::polar(1.0, 7.0 * r2));
      }
    probe = tycho::initial_probe_modes(coherent, n0, n1, modes, 0.3);
    for (int64_t k = 0; k < slices * h * w; ++k) object.push_back(std::polar(0.9 + 0.1 * u(rng), 0.6 * u(rng)));
    for (int64_t k = 0; k < patterns * n0 * n1; ++k) targets.push_back(float(10.0 * u(rng)));
    propagator = tycho::fresnel_propagator(n0, n1, 0.05, 0.06, 0.025, 12.0);
    int64_t ts[3] = {patterns, n0, n1}, ps[2] = {patterns, 2}, os[3] = {slices, h, w}, pr[3] = {modes, n0, n1};
    std::copy(ts, ts + 3, target_shape);
    std::copy(ps, ps + 2, position_shape);
    std::copy(os, os + 3, object_shape);
    std::copy(pr, pr + 3, probe_shape);
    targets_t = {targets.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, target_shape, nullptr, 0};
    positions_t = {positions.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, position_shape, nullptr, 0};
    object_t = {object.data(), {kDLCPU, 0}, 3, {kDLComplex, 128, 1}, object_shape, nullptr, 0};
    probe_t = {probe.data(), {kDLCPU, 0}, 3, {kDLComplex, 128, 1}, probe_shape, nullptr, 0};
    propagator_t = {propagator.data(), {kDLCPU, 0}, 2, {kDLComplex, 128, 1}, propagator_shape, nullptr, 0};
  }
};

// The cpu engine on `p` in `precision`, with or without the position gradient.
class engine_under_test : public tycho::test::engine_under_test {
 public:
  // loss_far_field false: the loss without its fused path (tycho_loss_vtable::evaluate_far_field).
  // `more`: further [reconstruct] lines.
  engine_under_test(const layered_problem& p, const std::string& precision, bool position_gradient = true,
                    bool loss_far_field = true, const std::string& more = "")
      : tycho::test::engine_under_test("cpu", "precision = \"" + precision + "\"\nthreads = 2\n" + more,
                                       setup_of(p, position_gradient), "amplitude", loss_far_field) {}

 private:
  static tycho_engine_setup setup_of(const layered_problem& p, bool position_gradient) {
    tycho_engine_setup s{};
    s.targets = &p.targets_t;
    s.target_scale = 1.0 / (5.0 * double(p.n0 * p.n1));
    s.positions_px = &p.positions_t;
    s.object_init = &p.object_t;
    s.probe_init = &p.probe_t;
    s.slice_propagator = p.slices > 1 ? &p.propagator_t : nullptr;
    s.slice_thickness_A = p.slices > 1 ? 12.0 : 0.0;
    s.position_gradient = position_gradient ? 1 : 0;
    return s;
  }
};

std::vector<int64_t> all_patterns(const layered_problem& p) {
  std::vector<int64_t> idx(std::size_t(p.patterns));
  std::iota(idx.begin(), idx.end(), 0);
  return idx;
}

// The host reads the object gradient only inside a region covering the batch's windows
// (tycho_engine_vtable::set_gradient_region, compact batches): inside it the gradient is the
// whole-object path's bit for bit, in every slice, batch after batch, with any number of threads,
// with float sums and with the deterministic sums (whose object part is then only the region's);
// boxes outside the object or empty are refused.
TEST(MultisliceEngine, GradientRegionHoldsTheWholeObjectGradientInsideIt) {
  for (const int64_t slices : {int64_t(1), int64_t(2)})
  for (const std::string sums : {"deterministic = true\n", "deterministic = false\n"}) {
    SCOPED_TRACE(sums);
    layered_problem p(slices, 1);
    engine_under_test whole(p, "float32", true, true, sums), region(p, "float32", true, true, sums);
    // Batches of the first and of the last scan row: the windows' rows, and the region's boxes
    // (tile-like pieces of the windows' bounding box, one tile row split in two).
    const std::vector<std::vector<int64_t>> batches = {{0, 1, 2, 3}, {8, 9, 10, 11}, {5}};
    for (const auto& batch : batches) {
      int64_t lo[2] = {p.h, p.w}, hi[2] = {0, 0};
      for (int64_t j : batch)
        for (int a = 0; a < 2; ++a) {
          const int64_t n = a == 0 ? p.n0 : p.n1;
          const int64_t top = int64_t(std::floor(p.positions[std::size_t(2 * j + a)] - double(n / 2)));
          lo[a] = std::min(lo[a], top);
          hi[a] = std::max(hi[a], top + n);
        }
      const int64_t mid = (lo[1] + hi[1]) / 2;
      const std::vector<int64_t> boxes = {lo[0], hi[0], lo[1], mid, lo[0], hi[0], mid, hi[1]};
      ASSERT_EQ(region.set_region(boxes), TYCHO_OK) << tycho::last_error();
      EXPECT_EQ(whole.batch(batch), region.batch(batch));
      const auto a = whole.values(TYCHO_TENSOR_OBJECT_GRAD), b = region.values(TYCHO_TENSOR_OBJECT_GRAD);
      int64_t inside = 0, nonzero = 0;
      for (int64_t sl = 0; sl < slices; ++sl)
        for (int64_t r = lo[0]; r < hi[0]; ++r)
          for (int64_t c = lo[1]; c < hi[1]; ++c) {
            const std::size_t k = std::size_t((sl * p.h + r) * p.w + c);
            ASSERT_EQ(a[k], b[k]) << "slice " << sl << ", pixel " << r << ", " << c;
            ++inside;
            nonzero += a[k] != cd(0);
          }
      EXPECT_GT(nonzero, inside / 2);
      EXPECT_EQ(whole.bytes(TYCHO_TENSOR_PROBE_GRAD), region.bytes(TYCHO_TENSOR_PROBE_GRAD));
    }
    EXPECT_EQ(region.set_region({0, p.h + 1, 0, 4}), TYCHO_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tycho::last_error()).find("outside"), std::string::npos) << tycho::last_error();
    EXPECT_EQ(region.set_region({3, 3, 0, 4}), TYCHO_ERR_INVALID_ARGUMENT);
  }
}

// Several slices, one mode: the engine hands the exit wave's far field to the loss's fused path
// (evaluate_far_field) and back-propagates what it writes; without the path it forms the
// intensity, calls evaluate and multiplies. Both give the same gradient bits (object, probe,
// positions), in both precisions; the loss agrees to rounding (its sum's order differs).
TEST(MultisliceEngine, FusedLossGivesTheSameGradientBitsThroughTheSlices) {
  layered_problem p(3, 1);
  const auto idx = all_patterns(p);
  for (const char* precision : {"float32", "float64"}) {
    engine_under_test fused(p, precision), unfused(p, precision, true, false);
    ASSERT_TRUE(fused.ok() && unfused.ok()) << tycho::last_error();
    const double lf = fused.batch(idx), lu = unfused.batch(idx);
    EXPECT_GT(lu, 0);
    EXPECT_NEAR(lf, lu, (std::string(precision) == "float32" ? 1e-6 : 1e-13) * lu) << precision;
    for (auto id : {TYCHO_TENSOR_OBJECT_GRAD, TYCHO_TENSOR_PROBE_GRAD, TYCHO_TENSOR_POSITIONS_GRAD})
      EXPECT_TRUE(fused.bytes(id) == unfused.bytes(id)) << precision << " tensor " << int(id);
  }
}

// Central differences of the float64 loss along a random direction of the object (all slices),
// the probe (all modes): dL = 2 Re Σ conj(∂L/∂z*) δ; and along each position: dL/dr (only with
// position_gradient; without it a single-slice engine takes the grouped shift path, cpu_engine.hpp).
void check_gradients(int64_t slices, int64_t modes, bool position_gradient = true) {
  layered_problem p(slices, modes);
  // Exact offsets (shift_group_grid_px = 0): on the grid either shift path models a position at
  // its rounded offset, constant over the differences' 1e-5 px (the paths' agreement at the
  // rounded positions: tests/test_precision.cpp).
  engine_under_test e(p, "float64", position_gradient, true, "shift_group_grid_px = 0\n");
  ASSERT_TRUE(e.ok()) << tycho::last_error();
  const auto idx = all_patterns(p);
  std::mt19937 rng(5);
  std::normal_distribution<double> g(0.0, 1.0);
  for (auto [param, grad] : {std::pair{TYCHO_TENSOR_OBJECT, TYCHO_TENSOR_OBJECT_GRAD},
                             std::pair{TYCHO_TENSOR_PROBE, TYCHO_TENSOR_PROBE_GRAD}}) {
    e.batch(idx);
    const auto gradient = e.values(grad);
    DLTensor t = e.tensor(param);
    ASSERT_EQ(t.shape[0], param == TYCHO_TENSOR_OBJECT ? slices : modes);
    auto* z = static_cast<cd*>(t.data);
    const std::size_t n = gradient.size();
    std::vector<cd> delta(n), start(z, z + n);
    double predicted = 0, scale = 0;
    for (std::size_t k = 0; k < n; ++k) {
      delta[k] = {g(rng), g(rng)};
      predicted += 2 * std::real(std::conj(gradient[k]) * delta[k]);
      scale = std::max(scale, std::abs(start[k]));
    }
    const double eps = 1e-6 * scale;
    for (std::size_t k = 0; k < n; ++k) z[k] = start[k] + eps * delta[k];
    const double plus = e.batch(idx);
    for (std::size_t k = 0; k < n; ++k) z[k] = start[k] - eps * delta[k];
    const double minus = e.batch(idx);
    std::copy(start.begin(), start.end(), z);
    const double measured = (plus - minus) / (2 * eps);
    std::cout << "S " << slices << " M " << modes << (param == TYCHO_TENSOR_OBJECT ? " object" : " probe")
              << ": predicted " << predicted << ", relative " << std::abs(measured / predicted - 1) << "\n";
    EXPECT_NEAR(measured, predicted, 1e-6 * std::abs(predicted));
  }
  if (!position_gradient) return;
  // Positions: each pattern's loss depends on its own position only, so the batch loss's
  // derivative by r_j,a is pattern j's.
  e.batch(idx);
  DLTensor pg = e.tensor(TYCHO_TENSOR_POSITIONS_GRAD);
  const std::vector<double> gradient(static_cast<double*>(pg.data), static_cast<double*>(pg.data) + 2 * p.patterns);
  DLTensor pos = e.tensor(TYCHO_TENSOR_POSITIONS);
  auto* r = static_cast<double*>(pos.data);
  double worst = 0;
  for (int64_t j = 0; j < p.patterns; j += 5)
    for (int a = 0; a < 2; ++a) {
      const double start = r[2 * j + a], eps = 1e-5;
      r[2 * j + a] = start + eps;
      const double plus = e.batch(idx);
      r[2 * j + a] = start - eps;
      const double minus = e.batch(idx);
      r[2 * j + a] = start;
      const double measured = (plus - minus) / (2 * eps), predicted = gradient[std::size_t(2 * j + a)];
      worst = std::max(worst, std::abs(measured - predicted) / std::max(1e-12, std::abs(predicted)));
      EXPECT_NEAR(measured, predicted, 1e-5 * std::abs(predicted) + 1e-12) << "position " << j << " axis " << a;
    }
  std::cout << "S " << slices << " M " << modes << " positions: worst relative " << worst << "\n";
}

TEST(MultisliceEngine, OneSliceOneModeGradientsMatchFiniteDifferences) { check_gradients(1, 1); }
TEST(MultisliceEngine, SlicesGradientsMatchFiniteDifferences) { check_gradients(3, 1); }
TEST(MultisliceEngine, ModesGradientsMatchFiniteDifferences) { check_gradients(1, 3); }
TEST(MultisliceEngine, SlicesAndModesGradientsMatchFiniteDifferences) { check_gradients(3, 2); }
// Without the position gradient one slice takes the grouped shifts, with one mode and with several.
TEST(MultisliceEngine, GroupedShiftGradientsMatchFiniteDifferences) {
  check_gradients(1, 1, false);
  check_gradients(1, 3, false);
}

// float32 against float64 from the same state, three slices and two modes (measured: loss
// ≤ 1e-7, gradients ≤ 1e-6 relative 2-norm).
TEST(MultisliceEngine, Float32MatchesFloat64) {
  layered_problem p(3, 2);
  engine_under_test f32(p, "float32"), f64(p, "float64");
  ASSERT_TRUE(f32.ok() && f64.ok()) << tycho::last_error();
  const auto idx = all_patterns(p);
  const double l32 = f32.batch(idx), l64 = f64.batch(idx);
  EXPECT_NEAR(l32, l64, 1e-5 * l64);
  for (auto id : {TYCHO_TENSOR_OBJECT_GRAD, TYCHO_TENSOR_PROBE_GRAD}) {
    const auto a = f32.values(id), b = f64.values(id);
    double num = 0, den = 0;
    for (std::size_t k = 0; k < a.size(); ++k) {
      num += std::norm(a[k] - b[k]);
      den += std::norm(b[k]);
    }
    EXPECT_LT(std::sqrt(num / den), 1e-4) << int(id);
  }
}

// Zero-thickness slices are one slice: the product of the slices' transmissions, with an
// identity propagator, gives the same loss as their product in one slice.
TEST(MultisliceEngine, ZeroThicknessSlicesEqualTheirProduct) {
  layered_problem p(2, 2), q(1, 2);
  p.propagator.assign(p.propagator.size(), cd(1.0));
  const int64_t hw = p.h * p.w;
  for (int64_t k = 0; k < hw; ++k) q.object[std::size_t(k)] = p.object[std::size_t(k)] * p.object[std::size_t(hw + k)];
  std::copy(p.targets.begin(), p.targets.end(), q.targets.begin());  // the same data
  // The one slice's grouped shifts at the exact offsets (no grid), as the two slices' per position.
  engine_under_test a(p, "float64", false), b(q, "float64", false, true, "shift_group_grid_px = 0\n");
  ASSERT_TRUE(a.ok() && b.ok()) << tycho::last_error();
  const auto idx = all_patterns(p);
  const double la = a.batch(idx), lb = b.batch(idx);
  EXPECT_NEAR(la, lb, 1e-12 * lb);
}

// The problem's model intensity of pattern j with its probe centred at (c0, c1), written out
// from CONVENTIONS.md with plain DFTs (an implementation of its own): the shifted probe
// F⁻¹[F[P]·exp(−2πi k·δ/N)], each slice's product and the propagator between slices, the far
// field's |·|² summed over the modes, with the unitary transform's scale.
std::vector<double> reference_intensity(const layered_problem& p, int64_t j, double c0, double c1) {
  const int64_t n0 = p.n0, n1 = p.n1, m = n0 * n1;
  const double t0 = c0 - double(n0 / 2), t1 = c1 - double(n1 / 2);
  const int64_t i0 = int64_t(std::floor(t0)), j0 = int64_t(std::floor(t1));
  const double d0 = t0 - double(i0), d1 = t1 - double(j0);
  auto f = [](int64_t k, int64_t n) { return double(k < (n + 1) / 2 ? k : k - n); };
  auto dft = [&](const std::vector<cd>& x, double sign) {  // unnormalised, exp(sign 2πi k·x/N)
    std::vector<cd> y(std::size_t(m), cd(0));
    for (int64_t a = 0; a < n0; ++a)
      for (int64_t b = 0; b < n1; ++b)
        for (int64_t u = 0; u < n0; ++u)
          for (int64_t v = 0; v < n1; ++v)
            y[std::size_t(a * n1 + b)] += x[std::size_t(u * n1 + v)] *
                                          std::polar(1.0, sign * 2 * M_PI * (double(a * u) / n0 + double(b * v) / n1));
    return y;
  };
  (void)j;
  std::vector<double> I(std::size_t(m), 0.0);
  for (int64_t k = 0; k < p.modes; ++k) {
    std::vector<cd> P(p.probe.begin() + k * m, p.probe.begin() + (k + 1) * m);
    std::vector<cd> S = dft(P, -1);
    for (int64_t a = 0; a < n0; ++a)
      for (int64_t b = 0; b < n1; ++b)
        S[std::size_t(a * n1 + b)] *= std::polar(1.0 / double(m), -2 * M_PI * (f(a, n0) * d0 / n0 + f(b, n1) * d1 / n1));
    std::vector<cd> psi = dft(S, +1);
    for (int64_t sl = 0; sl < p.slices; ++sl) {
      for (int64_t a = 0; a < n0; ++a)
        for (int64_t b = 0; b < n1; ++b)
          psi[std::size_t(a * n1 + b)] *= p.object[std::size_t((sl * p.h + i0 + a) * p.w + j0 + b)];
      psi = dft(psi, -1);
      if (sl + 1 < p.slices) {
        for (int64_t q = 0; q < m; ++q) psi[std::size_t(q)] *= p.propagator[std::size_t(q)] / double(m);
        psi = dft(psi, +1);
      }
    }
    for (int64_t q = 0; q < m; ++q) I[std::size_t(q)] += std::norm(psi[std::size_t(q)]) / double(m);
  }
  return I;
}

// position_information (ABI 1.4): the Fisher information of each probe centre under Poisson
// counts, J_ab = Σ_k ∂_a λ ∂_b λ / λ with λ = c · I / target_scale, against central differences
// (ε = 1e-5 px) of a model written out independently (above), with one and several slices and
// modes; float32 to 1e-3. Indices outside the patterns and a count scale that is not a finite
// number > 0 are refused.
TEST(MultisliceEngine, PositionInformationIsThePoissonFisherInformationOfTheModel) {
  for (auto [slices, modes] : {std::pair<int64_t, int64_t>{1, 1}, {3, 1}, {2, 2}}) {
    layered_problem p(slices, modes);
    const double target_scale = 1.0 / (5.0 * double(p.n0 * p.n1));  // engine_under_test's setup
    const double counts = 40.0;  // counts per target unit
    const std::vector<int64_t> idx = {0, 5, 11};
    for (const char* precision : {"float64", "float32"}) {
      engine_under_test e(p, precision);
      ASSERT_TRUE(e.ok()) << tycho::last_error();
      std::vector<double> J;
      ASSERT_EQ(e.information(idx, counts, J), TYCHO_OK) << tycho::last_error();
      for (std::size_t i = 0; i < idx.size(); ++i) {
        const int64_t j = idx[i];
        const double c0 = p.positions[std::size_t(2 * j)], c1 = p.positions[std::size_t(2 * j + 1)];
        const double eps = 1e-5;
        const auto I = reference_intensity(p, j, c0, c1);
        const auto a0 = reference_intensity(p, j, c0 + eps, c1), b0 = reference_intensity(p, j, c0 - eps, c1);
        const auto a1 = reference_intensity(p, j, c0, c1 + eps), b1 = reference_intensity(p, j, c0, c1 - eps);
        double ref[3] = {0, 0, 0};
        for (std::size_t q = 0; q < I.size(); ++q) {
          const double s = counts / target_scale;
          const double g0 = s * (a0[q] - b0[q]) / (2 * eps), g1 = s * (a1[q] - b1[q]) / (2 * eps), lambda = s * I[q];
          ref[0] += g0 * g0 / lambda;
          ref[1] += g0 * g1 / lambda;
          ref[2] += g1 * g1 / lambda;
        }
        const double tol = std::string(precision) == "float64" ? 1e-6 : 1e-3;
        const double scale = std::max(ref[0], ref[2]);
        EXPECT_GT(ref[0], 0);
        EXPECT_GT(ref[2], 0);
        for (int c = 0; c < 3; ++c)
          EXPECT_NEAR(J[3 * i + std::size_t(c)], ref[c], tol * scale)
              << "S " << slices << " M " << modes << " " << precision << " pattern " << j << " entry " << c;
      }
    }
  }
  layered_problem p(1, 1);
  engine_under_test e(p, "float64");
  std::vector<double> J;
  EXPECT_EQ(e.information({p.patterns}, 1.0, J), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("outside"), std::string::npos) << tycho::last_error();
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    EXPECT_EQ(e.information({0}, bad, J), TYCHO_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(tycho::last_error()).find("counts_per_target_unit"), std::string::npos) << tycho::last_error();
  }
}

TEST(MultisliceEngine, PositionGradientOnlyWhenAskedFor) {
  layered_problem p(1, 1);
  engine_under_test e(p, "float32", false);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.get_status(TYCHO_TENSOR_POSITIONS_GRAD), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("no position gradient"), std::string::npos) << tycho::last_error();
  EXPECT_EQ(e.get_status(TYCHO_TENSOR_POSITIONS), TYCHO_OK);
}

// ---- core

TEST(Multislice, PropagatorIsTheFresnelPhase) {
  const int64_t n0 = 8, n1 = 6;
  const auto h = tycho::fresnel_propagator(n0, n1, 0.1, 0.2, 0.025, 20.0);
  ASSERT_EQ(h.size(), std::size_t(n0 * n1));
  EXPECT_EQ(h[0], cd(1.0));
  for (const cd& z : h) EXPECT_NEAR(std::abs(z), 1.0, 1e-15);
  // index (1, 5): k = (0.1, −0.2) Å⁻¹ (5 − 6 = −1 along axis 1)
  const double phase = -M_PI * 0.025 * 20.0 * (0.01 + 0.04);
  EXPECT_NEAR(std::arg(h[1 * n1 + 5]), phase, 1e-14);
  // thickness 0: the identity
  for (const cd& z : tycho::fresnel_propagator(n0, n1, 0.1, 0.2, 0.025, 0.0)) EXPECT_EQ(z, cd(1.0));
  EXPECT_THROW(tycho::fresnel_propagator(0, 4, 0.1, 0.1, 0.025, 1.0), tycho::error);
  EXPECT_THROW(tycho::fresnel_propagator(4, 4, 0.1, 0.1, NAN, 1.0), tycho::error);
}

double power(const cd* p, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += std::norm(p[k]);
  return s;
}

// `modes` modes of n pixels, each value complex normal (seeded): neither orthogonal nor ordered.
std::vector<cd> random_modes(int64_t modes, int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<cd> p(std::size_t(modes * n));
  for (auto& z : p) z = {g(rng), g(rng)};
  return p;
}

TEST(Multislice, InitialModesAreOrthogonalWithTheirShare) {
  layered_problem base(1, 1);
  const int64_t n0 = base.n0, n1 = base.n1, n = n0 * n1, modes = 5;
  const auto p = tycho::initial_probe_modes(base.probe, n0, n1, modes, 0.2);
  const double total = power(base.probe.data(), n);
  EXPECT_NEAR(power(p.data(), n), 0.8 * total, 1e-12);
  for (int64_t m = 1; m < modes; ++m) EXPECT_NEAR(power(p.data() + m * n, n), 0.05 * total, 1e-12) << m;
  for (int64_t a = 0; a < modes; ++a)
    for (int64_t b = a + 1; b < modes; ++b) {
      cd dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += std::conj(p[std::size_t(a * n + k)]) * p[std::size_t(b * n + k)];
      EXPECT_LT(std::abs(dot), 1e-12) << a << " " << b;
    }
  EXPECT_THROW(tycho::initial_probe_modes(base.probe, n0, n1, 0, 0.1), tycho::error);
  EXPECT_THROW(tycho::initial_probe_modes(base.probe, n0, n1, n + 1, 0.1), tycho::error);
}

// Orthogonalisation mixes the modes unitarily: the mixed state Σ|P_m⟩⟨P_m| (so every model
// intensity) is unchanged; the new modes are orthogonal, in decreasing power.
TEST(Multislice, OrthogonalisationKeepsTheMixedState) {
  const int64_t n = 40, modes = 4;
  const std::vector<cd> p = random_modes(modes, n, 3);
  std::vector<cd> q = p;
  tycho::orthogonalize_probe_modes(q.data(), modes, n);
  auto density = [&](const std::vector<cd>& x, int64_t i, int64_t j) {
    cd s = 0;
    for (int64_t m = 0; m < modes; ++m) s += x[std::size_t(m * n + i)] * std::conj(x[std::size_t(m * n + j)]);
    return s;
  };
  for (int64_t i = 0; i < n; i += 3)
    for (int64_t j = 0; j < n; j += 7) EXPECT_LT(std::abs(density(p, i, j) - density(q, i, j)), 1e-10);
  double previous = INFINITY;
  for (int64_t a = 0; a < modes; ++a) {
    const double pa = power(q.data() + a * n, n);
    EXPECT_LE(pa, previous);
    previous = pa;
    for (int64_t b = a + 1; b < modes; ++b) {
      cd dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += std::conj(q[std::size_t(a * n + k)]) * q[std::size_t(b * n + k)];
      EXPECT_LT(std::abs(dot), 1e-9) << a << " " << b;
    }
  }
}

// An optimizer keeps per-mode state (Adam's moments), so the orthogonalisation must not turn a
// mode it need not change: modes already orthonormal in decreasing power come back as they were
// (each eigenvector's free phase chosen on its own old mode), and nearly orthonormal ones move
// by about their small overlap, not by a global phase. Before, every mode came back turned by
// the phase of an off-diagonal entry, and a 3-mode run with Adam diverged.
TEST(Multislice, OrthogonalisationLeavesOrthonormalModesWhereTheyAre) {
  const int64_t n = 48, modes = 3;
  std::vector<cd> p = random_modes(modes, n, 11);
  tycho::orthogonalize_probe_modes(p.data(), modes, n);  // orthonormal, in decreasing power
  std::vector<cd> q = p;
  tycho::orthogonalize_probe_modes(q.data(), modes, n);
  for (std::size_t k = 0; k < p.size(); ++k) EXPECT_LT(std::abs(q[k] - p[k]), 1e-9 * std::sqrt(power(p.data(), n)));
  // A small admixture ε of mode 1 in mode 0 moves mode 0 by O(ε), not by a phase of O(1).
  std::vector<cd> r = p;
  const double eps = 1e-3;
  for (int64_t k = 0; k < n; ++k) r[std::size_t(k)] += eps * cd(0.6, 0.8) * p[std::size_t(n + k)];
  std::vector<cd> s = r;
  tycho::orthogonalize_probe_modes(s.data(), modes, n);
  for (int64_t m = 0; m < modes; ++m) {
    double moved = 0;
    for (int64_t k = 0; k < n; ++k) moved += std::norm(s[std::size_t(m * n + k)] - r[std::size_t(m * n + k)]);
    EXPECT_LT(std::sqrt(moved / power(r.data() + m * n, n)), 10 * eps) << "mode " << m;
  }
}

// The Gauss–Newton step of a position whose gradient is h·ε moves it by −rate·ε, the mean step
// is removed, steps are capped and positions stay in their bounds.
TEST(PositionCorrection, StepsAreCappedCentredAndBounded) {
  const double h[2] = {2.0, 4.0};
  std::vector<double> r = {10, 10, 20, 20, 30, 30};
  const std::vector<double> g = {2.0 * 0.1, 4.0 * -0.2, 2.0 * 0.3, 0.0, 2.0 * 5.0, 4.0 * 0.1};
  tycho::position_step_options o;
  o.rate = 1.0;
  o.max_step_px = 1.0;
  o.remove_mean_shift = false;
  o.lo[0] = o.lo[1] = 0;
  o.hi[0] = o.hi[1] = 100;
  tycho::step_positions(r.data(), g.data(), 3, h, o);
  EXPECT_DOUBLE_EQ(r[0], 9.9);
  EXPECT_DOUBLE_EQ(r[1], 10.2);
  EXPECT_DOUBLE_EQ(r[2], 19.7);
  EXPECT_DOUBLE_EQ(r[4], 29.0);  // capped at 1 px
  EXPECT_DOUBLE_EQ(r[5], 29.9);
  std::vector<double> c = {10, 10, 20, 20, 30, 30};
  o.remove_mean_shift = true;
  tycho::step_positions(c.data(), g.data(), 3, h, o);
  const double mean0 = (c[0] + c[2] + c[4]) / 3, mean1 = (c[1] + c[3] + c[5]) / 3;
  // The mean removed is of the steps rounded to the grid of tycho/core/exact_sum.hpp for 2^28 steps
  // of at most max_step_px = 1 (q = 2^-22 px), whose sum is exact on any number of ranks
  // (position_correction.cpp): at most q/2 from the steps' own mean.
  const double q_half = tycho::exact_sum_quantum(1, std::ldexp(1.0, 28)) / 2;
  EXPECT_EQ(q_half, std::ldexp(1.0, -23));
  EXPECT_NEAR(mean0, 20.0, q_half);
  EXPECT_NEAR(mean1, 20.0, q_half);
  std::vector<double> edge = {0.5, 99.5};
  const std::vector<double> push = {100.0, -100.0};
  o.remove_mean_shift = false;
  tycho::step_positions(edge.data(), push.data(), 1, h, o);
  EXPECT_DOUBLE_EQ(edge[0], 0.0);
  EXPECT_DOUBLE_EQ(edge[1], 100.0);
  const std::vector<double> bad = {NAN, 0};
  EXPECT_THROW(tycho::step_positions(edge.data(), bad.data(), 1, h, o), tycho::error);
}

}  // namespace
