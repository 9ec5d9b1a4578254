// The accuracy metric (core/include/tycho/core/accuracy.hpp) on a synthetic periodic crystal cut
// the way the MoS2 data set's scan is laid out, plus hand-checkable cases of its Gaussian filter.
#include <gtest/gtest.h>

#include <tycho/core/accuracy.hpp>
#include <tycho/core/fftw_planner.hpp>
#include <tycho/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <functional>
#include <numbers>
#include <random>
#include <string>
#include <vector>

namespace {

using cf = std::complex<float>;

constexpr int64_t kCell = 288;            // truth cell, pixels per side (as in the data set)
constexpr double kPx = 50.0 / 288.0;      // 0.1736111 Å, object pixel = truth pixel
constexpr int kRx = 32, kRy = 24;         // scan
constexpr double kStepA = 0.5;
constexpr double kOriginA[2] = {17.0, 19.0};
constexpr double kPos0[2] = {50.0, 45.0};  // object pixel of scan index (0, 0)
constexpr int64_t kH = 200, kW = 180;      // object shape
// round(origin / px - pos0) = round((97.92, 109.44) - (50, 45)): truth index - object index.
constexpr int64_t kShift[2] = {48, 64};

double unit(std::mt19937& g) { return double(g()) / 4294967296.0; }

int64_t wrap(int64_t i, int64_t n) { return ((i % n) + n) % n; }

// A disordered 2-D crystal: Gaussian atoms on a centred lattice (16 x 18 px), jittered by up to
// 1.5 px with random weights and 5% vacancies, so that no lattice translation reproduces it and
// registration has a single answer. Periodic on the cell; scaled to 0..1 rad.
const std::vector<float>& truth() {
  static const std::vector<float> phase = [] {
    std::vector<double> ph(size_t(kCell * kCell), 0.0);
    std::mt19937 g(12345);
    const double s = 2.0;  // atom σ, px
    for (int i = 0; i < 18; ++i)
      for (int j = 0; j < 16; ++j) {
        const double vacancy = unit(g), jr = unit(g), jc = unit(g), weight = 0.4 + 0.6 * unit(g);
        if (vacancy < 0.05) continue;
        const double r0 = i * 16 + 3.0 * (jr - 0.5), c0 = j * 18 + (i % 2) * 9 + 3.0 * (jc - 0.5);
        for (int64_t dr = -9; dr <= 9; ++dr)
          for (int64_t dc = -9; dc <= 9; ++dc) {
            const int64_t r = int64_t(std::floor(r0)) + dr, c = int64_t(std::floor(c0)) + dc;
            const double d2 = (r - r0) * (r - r0) + (c - c0) * (c - c0);
            const size_t at = size_t(wrap(r, kCell) * kCell + wrap(c, kCell));
            ph[at] += weight * std::exp(-d2 / (2 * s * s));
          }
      }
    double mn = ph[0], mx = ph[0];
    for (double v : ph) mn = std::min(mn, v), mx = std::max(mx, v);
    std::vector<float> out(ph.size());
    for (size_t k = 0; k < ph.size(); ++k) out[k] = float((ph[k] - mn) / (mx - mn));
    return out;
  }();
  return phase;
}

const std::vector<double>& positions() {
  static const std::vector<double> pos = [] {
    std::vector<double> p;
    for (int i = 0; i < kRx; ++i)
      for (int k = 0; k < kRy; ++k) {
        p.push_back(i * kStepA / kPx + kPos0[0]);
        p.push_back(k * kStepA / kPx + kPos0[1]);
      }
    return p;
  }();
  return pos;
}

// The object exp(i·truth) cut at truth index = object index + shift, times factor(r, c).
std::vector<cf> make_object(const int64_t shift[2],
                            const std::function<std::complex<double>(int64_t, int64_t)>& factor) {
  std::vector<cf> obj(size_t(kH * kW));
  for (int64_t r = 0; r < kH; ++r)
    for (int64_t c = 0; c < kW; ++c) {
      const int64_t tr = wrap(r + shift[0], kCell), tc = wrap(c + shift[1], kCell);
      const double t = truth()[size_t(tr * kCell + tc)];
      obj[size_t(r * kW + c)] = cf(std::polar(1.0, t) * factor(r, c));
    }
  return obj;
}

std::vector<cf> make_object() {
  return make_object(kShift, [](int64_t, int64_t) { return std::complex<double>(1.0); });
}

tycho::accuracy_input make_input(const std::vector<cf>& obj) {
  tycho::accuracy_input in;
  in.object = obj.data();
  in.object_shape[0] = kH;
  in.object_shape[1] = kW;
  in.object_pixel_A = kPx;
  in.positions_px = positions().data();
  in.n_positions = kRx * kRy;
  in.truth_phase = truth().data();
  in.truth_shape[0] = in.truth_shape[1] = kCell;
  in.truth_pixel_A = 0.1736111;  // as a file would round it: within the 1e-3 tolerance
  in.scan_origin_A[0] = kOriginA[0];
  in.scan_origin_A[1] = kOriginA[1];
  return in;
}

tycho_status status_of(const tycho::accuracy_input& in) {
  try {
    tycho::evaluate_accuracy(in);
  } catch (const tycho::error& e) {
    return e.status;
  }
  return TYCHO_OK;
}

}  // namespace

TEST(AccuracyFilter, KernelIsNormalisedAndTruncatedAtFourSigma) {
  const auto k = tycho::gaussian_kernel(0.5);  // r = int(4·0.5 + 0.5) = 2
  ASSERT_EQ(k.size(), 5u);
  double sum = 0.0;
  for (double v : k) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-15);
  EXPECT_NEAR(k[1] / k[2], std::exp(-2.0), 1e-15);  // exp(-x²/2σ²) at x = 1, σ = 0.5
  EXPECT_EQ(tycho::gaussian_kernel(11.52).size(), 2u * 46 + 1);
}

TEST(AccuracyFilter, DeltaImpulseGivesTheKernel) {
  const int64_t n = 41, mid = 20;
  const auto k = tycho::gaussian_kernel(3.0);  // 25 taps
  for (auto mode : {tycho::filter_boundary::wrap, tycho::filter_boundary::reflect}) {
    std::vector<std::complex<double>> img(size_t(n * n), 0.0);
    img[size_t(mid * n + mid)] = {0.0, 2.0};  // imaginary part filtered like the real part
    tycho::gaussian_filter_2d(img.data(), n, n, 3.0, mode);
    std::complex<double> sum = 0.0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) {
        const auto v = img[size_t(r * n + c)];
        sum += v;
        const int64_t kr = r - mid + 12, kc = c - mid + 12;
        const bool inside = kr >= 0 && kr < 25 && kc >= 0 && kc < 25;
        const double expect = inside ? 2.0 * k[size_t(kr)] * k[size_t(kc)] : 0.0;
        EXPECT_NEAR(v.real(), 0.0, 1e-15);
        EXPECT_NEAR(v.imag(), expect, 1e-15) << r << "," << c;
      }
    EXPECT_NEAR(sum.imag(), 2.0, 1e-13);
  }
}

// Kernel (σ = 2 px, 17 taps) wider than the 5-sample line: the edge rules repeat. Expected values
// from scipy.ndimage.gaussian_filter1d([1, 2, 0, 5, -1], 2.0, mode=...) (scipy 1.17).
TEST(AccuracyFilter, MatchesScipyOnShortLines) {
  const double reflect[5] = {1.3949912405891405, 1.424938899057008, 1.4367337601728003,
                             1.3978387388363007, 1.3454973613447512};
  const double wrapped[5] = {1.353504395015782, 1.3842569599259429, 1.4367337601728003,
                             1.4385206779673656, 1.3869842069181098};
  for (auto mode : {tycho::filter_boundary::reflect, tycho::filter_boundary::wrap}) {
    const double* expect = mode == tycho::filter_boundary::reflect ? reflect : wrapped;
    for (bool along_rows : {true, false}) {  // a 1x5 row and a 5x1 column
      std::vector<std::complex<double>> line = {1.0, 2.0, 0.0, 5.0, -1.0};
      tycho::gaussian_filter_2d(line.data(), along_rows ? 1 : 5, along_rows ? 5 : 1, 2.0, mode);
      for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(line[i].real(), expect[i], 1e-13) << i;
    }
  }
}

TEST(Accuracy, IdenticalObjectIsPerfect) {
  const auto obj = make_object();
  const auto res = tycho::evaluate_accuracy(make_input(obj));
  EXPECT_GT(res.pearson, 0.999);
  EXPECT_LT(res.rms_rad, 1e-3);
  EXPECT_EQ(res.shift_px[0], kShift[0]);
  EXPECT_EQ(res.shift_px[1], kShift[1]);
  // Rows: positions 50..139.28 px, inner 80% = 58.93..130.35 -> 59..130; cols 52..105.
  EXPECT_EQ(res.fov_shape[0], 72);
  EXPECT_EQ(res.fov_shape[1], 54);
}

TEST(Accuracy, ConstantPhaseAndRampAreIgnored) {
  const auto obj = make_object(kShift, [](int64_t r, int64_t c) {
    return std::polar(1.0, 1.3 + 0.02 * double(r) - 0.015 * double(c));
  });
  const auto res = tycho::evaluate_accuracy(make_input(obj));
  EXPECT_GT(res.pearson, 0.99);
  // The same case through an independent numpy/scipy.ndimage implementation of the README's
  // definition (gaussian_filter truncate=4, modes reflect/wrap, np.corrcoef over the 25x25 shifts).
  EXPECT_NEAR(res.pearson, 0.999988929674, 1e-9);
  EXPECT_NEAR(res.rms_rad, 0.00057264203443, 1e-9);
  EXPECT_EQ(res.shift_px[0], kShift[0]);
  EXPECT_EQ(res.shift_px[1], kShift[1]);
}

TEST(Accuracy, RegistrationFindsAnExtraOffset) {
  const int64_t shifted[2] = {kShift[0] + 3, kShift[1] - 2};
  const auto obj = make_object(shifted, [](int64_t, int64_t) { return std::complex<double>(1.0); });
  const auto res = tycho::evaluate_accuracy(make_input(obj));
  EXPECT_GT(res.pearson, 0.999);
  EXPECT_EQ(res.shift_px[0] - kShift[0], 3);
  EXPECT_EQ(res.shift_px[1] - kShift[1], -2);
}

// An object half a pixel and a quarter off the truth's grid (its phase the truth's moved through
// its Fourier transform): the integer registration (the README's metric) loses to it, the
// sub-pixel figure finds the fraction and a perfect correlation.
TEST(Accuracy, SubpixelRegistrationFindsAFractionalOffset) {
  std::vector<std::complex<double>> spectrum(truth().begin(), truth().end());
  tycho::fftw_transform_2d(spectrum.data(), kCell, kCell, -1).run();
  const double f[2] = {0.5, -0.25}, two_pi = 2 * std::acos(-1.0);
  for (int64_t u = 0; u < kCell; ++u)
    for (int64_t v = 0; v < kCell; ++v) {
      const double k0 = double(u <= kCell / 2 ? u : u - kCell) / double(kCell);
      const double k1 = double(v <= kCell / 2 ? v : v - kCell) / double(kCell);
      spectrum[size_t(u * kCell + v)] *= std::polar(1.0 / double(kCell * kCell), two_pi * (k0 * f[0] + k1 * f[1]));
    }
  tycho::fftw_transform_2d(spectrum.data(), kCell, kCell, +1).run();
  std::vector<cf> obj(size_t(kH * kW));
  for (int64_t r = 0; r < kH; ++r)
    for (int64_t c = 0; c < kW; ++c)
      obj[size_t(r * kW + c)] =
          cf(std::polar(1.0, spectrum[size_t(wrap(r + kShift[0], kCell) * kCell + wrap(c + kShift[1], kCell))].real()));
  const auto res = tycho::evaluate_accuracy(make_input(obj));
  EXPECT_LT(res.pearson, 0.99);
  EXPECT_GT(res.subpixel_pearson, 0.999);
  // The object at index x shows the truth at x + shift + f: the truth's map moved by f matches.
  EXPECT_NEAR(res.subpixel_shift_px[0], double(kShift[0]) + f[0], 1.0 / 32) << res.subpixel_shift_px[0];
  EXPECT_NEAR(res.subpixel_shift_px[1], double(kShift[1]) + f[1], 1.0 / 32) << res.subpixel_shift_px[1];
  // On the grid the fraction is 0 and the figure the integer one's.
  const auto on_grid = tycho::evaluate_accuracy(make_input(make_object()));
  EXPECT_NEAR(on_grid.subpixel_pearson, on_grid.pearson, 1e-6);
  EXPECT_NEAR(on_grid.subpixel_shift_px[0], double(kShift[0]), 1.0 / 32);
}

TEST(Accuracy, AmplitudeIsIgnored) {
  const double two_pi = 2.0 * std::numbers::pi;
  const auto obj = make_object(kShift, [&](int64_t r, int64_t c) {
    return std::complex<double>(1.0 + 0.5 * std::sin(two_pi * double(r) / 150.0) *
                                          std::cos(two_pi * double(c) / 120.0));
  });
  const auto res = tycho::evaluate_accuracy(make_input(obj));
  EXPECT_GT(res.pearson, 0.99);
  EXPECT_NEAR(res.pearson, 0.999959336464, 1e-9);  // numpy/scipy reference, as above
  EXPECT_NEAR(res.rms_rad, 0.00109600577041, 1e-9);
  EXPECT_EQ(res.shift_px[0], kShift[0]);
  EXPECT_EQ(res.shift_px[1], kShift[1]);
}

TEST(Accuracy, RandomPhaseIsUncorrelated) {
  std::mt19937 g(7);
  std::vector<cf> obj(size_t(kH * kW));
  for (auto& z : obj) z = std::polar(1.0f, float(2.0 * std::numbers::pi * (unit(g) - 0.5)));
  const auto res = tycho::evaluate_accuracy(make_input(obj));
  EXPECT_LT(res.pearson, 0.3);
  EXPECT_GT(res.rms_rad, 0.5);
}

// A flipped phase sign (the commonest convention bug) scores as anti-correlated where the
// geometry says the object lies. The full search maximises over 625 shifts of a crystal, and on
// one a sign-flipped lattice partly overlaps the true one (0.19 here), so only "far below a real
// match" can be asked of it.
TEST(Accuracy, ConjugatedObjectIsAnticorrelated) {
  auto obj = make_object();
  for (auto& z : obj) z = std::conj(z);
  auto in = make_input(obj);
  in.search_radius_px = 0;
  const auto fixed = tycho::evaluate_accuracy(in);
  EXPECT_LT(fixed.pearson, -0.99);
  EXPECT_EQ(fixed.shift_px[0], kShift[0]);
  EXPECT_EQ(fixed.shift_px[1], kShift[1]);
  in.search_radius_px = 12;
  EXPECT_LT(tycho::evaluate_accuracy(in).pearson, 0.3);
}

// An untouched initial object (all ones) has a constant local phase: no correlation, not NaN,
// said as such (result.constant: tycho evaluate refuses it), and the registration stays at the
// geometry's shift.
TEST(Accuracy, ConstantObjectScoresZero) {
  const std::vector<cf> ones(size_t(kH * kW), cf(1.0f));
  const auto res = tycho::evaluate_accuracy(make_input(ones));
  EXPECT_EQ(res.pearson, 0.0);
  EXPECT_EQ(res.constant, tycho::constant_map::object);
  EXPECT_EQ(tycho::evaluate_accuracy(make_input(make_object())).constant, tycho::constant_map::none);
  EXPECT_GT(res.rms_rad, 0.01);
  EXPECT_EQ(res.shift_px[0], kShift[0]);
  EXPECT_EQ(res.shift_px[1], kShift[1]);
}

TEST(Accuracy, RejectsMismatchedPixelSize) {
  const auto obj = make_object();
  auto in = make_input(obj);
  in.truth_pixel_A = kPx * 1.002;
  try {
    tycho::evaluate_accuracy(in);
    FAIL() << "no error";
  } catch (const tycho::error& e) {
    EXPECT_EQ(e.status, TYCHO_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("object pixel"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truth pixel"), std::string::npos) << e.what();
  }
}

TEST(Accuracy, RejectsBadInput) {
  const auto obj = make_object();
  const auto good = make_input(obj);
  EXPECT_EQ(status_of(good), TYCHO_OK);
  auto in = good;
  in.object = nullptr;
  EXPECT_EQ(status_of(in), TYCHO_ERR_INVALID_ARGUMENT);
  in = good;
  in.positions_px = nullptr;
  EXPECT_EQ(status_of(in), TYCHO_ERR_INVALID_ARGUMENT);
  in = good;
  in.truth_phase = nullptr;
  EXPECT_EQ(status_of(in), TYCHO_ERR_INVALID_ARGUMENT);
  in = good;
  in.truth_shape[1] = 0;
  EXPECT_EQ(status_of(in), TYCHO_ERR_INVALID_ARGUMENT);
  in = good;
  in.n_positions = 0;
  EXPECT_EQ(status_of(in), TYCHO_ERR_INVALID_ARGUMENT);
  in = good;
  in.fov_fraction = 0.0;
  EXPECT_EQ(status_of(in), TYCHO_ERR_INVALID_ARGUMENT);
  in = good;
  const double far[2] = {500.0, 500.0};  // a field of view entirely outside the object
  in.positions_px = far;
  in.n_positions = 1;
  EXPECT_EQ(status_of(in), TYCHO_ERR_INVALID_ARGUMENT);
}

// The high-passed metric compares unwrapped phases linearly: a constant drops out, a phase 4
// times the truth's (up to 4 rad, which a local phase would wrap) correlates perfectly, and its
// RMS error is exactly 3 times that of a flat object (whose error is the truth's high-passed
// phase itself).
TEST(AccuracyHighPassed, ScaledPhaseCorrelatesAndItsErrorScales) {
  std::vector<double> flat(size_t(kH * kW), 0.7), same(flat.size()), four(flat.size());
  const auto obj = make_object();
  for (size_t i = 0; i < obj.size(); ++i) {
    same[i] = 1.3 + std::arg(obj[i]);  // the truth (0..1 rad) cut at kShift
    four[i] = 4.0 * std::arg(obj[i]);
  }
  auto in = make_input(obj);
  in.object = nullptr;
  in.metric = tycho::phase_metric::high_passed_phase;
  in.object_phase = same.data();
  const auto r1 = tycho::evaluate_accuracy(in);
  EXPECT_GT(r1.pearson, 1.0 - 1e-9);
  EXPECT_LT(r1.rms_rad, 1e-6);
  EXPECT_EQ(r1.shift_px[0], kShift[0]);
  EXPECT_EQ(r1.shift_px[1], kShift[1]);
  in.object_phase = four.data();
  const auto r4 = tycho::evaluate_accuracy(in);
  EXPECT_GT(r4.pearson, 1.0 - 1e-9);
  in.object_phase = flat.data();
  const auto r0 = tycho::evaluate_accuracy(in);
  EXPECT_EQ(r0.pearson, 0.0);
  EXPECT_EQ(r0.shift_px[0], kShift[0]);
  EXPECT_NEAR(r4.rms_rad, 3.0 * r0.rms_rad, 1e-6 * r0.rms_rad);
  EXPECT_GT(r0.rms_rad, 0.05);
  // The metric and the object's kind must agree.
  in.metric = tycho::phase_metric::local_phase;
  EXPECT_EQ(status_of(in), TYCHO_ERR_INVALID_ARGUMENT);
  in.metric = tycho::phase_metric::high_passed_phase;
  in.object = obj.data();
  EXPECT_EQ(status_of(in), TYCHO_ERR_INVALID_ARGUMENT);  // two objects
}

TEST(AccuracyHighPassed, ConstantHasNoHighPassAndAnImpulseKeepsAllButTheCentralTap) {
  std::vector<double> c(7 * 9, 2.5);
  for (double v : tycho::high_passed_phase(c.data(), 7, 9, 1.5, tycho::filter_boundary::reflect))
    EXPECT_NEAR(v, 0.0, 1e-14);
  std::vector<double> d(21 * 21, 0.0);
  d[10 * 21 + 10] = 1.0;
  const auto hp = tycho::high_passed_phase(d.data(), 21, 21, 1.5, tycho::filter_boundary::wrap);
  const double k0 = tycho::gaussian_kernel(1.5)[6];  // r = int(4·1.5 + 0.5) = 6: the centre tap
  EXPECT_NEAR(hp[10 * 21 + 10], 1.0 - k0 * k0, 1e-15);
  EXPECT_NEAR(hp[10 * 21 + 11], -k0 * tycho::gaussian_kernel(1.5)[7], 1e-15);
}

// Three slices of 3 rad each plus a small pattern: the sum (9 rad and more) is recovered without
// wrapping, although every slice's own phase lies near π.
TEST(AccuracyHighPassed, SlicePhasesSumPastPi) {
  const int64_t h = 4, w = 5, n = h * w;
  std::vector<std::complex<double>> z(size_t(3 * n));
  std::vector<double> expect(size_t(n), 0.0);
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t i = 0; i < n; ++i) {
      const double phi = 3.0 + 0.4 * std::sin(double(i * (s + 1)));
      z[size_t(s * n + i)] = std::polar(0.9, phi);
      expect[size_t(i)] += phi;
    }
  const auto total = tycho::summed_slice_phases(z.data(), 3, h, w);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(total[size_t(i)], expect[size_t(i)], 1e-12) << i;
  EXPECT_THROW((void)tycho::summed_slice_phases(z.data(), 0, h, w), tycho::error);
}

// result = truth + a global shift + a jitter of length 0.05 Å with zero mean: the RMS and the
// largest error are the jitter's, the mean shift is the global one.
TEST(AccuracyPositions, ShiftIsRemovedAndTheJitterRemains) {
  std::mt19937 g(3);
  std::vector<double> truth(200), result(200);
  for (size_t k = 0; k < 100; ++k) {
    truth[2 * k] = 20.0 * unit(g);
    truth[2 * k + 1] = 20.0 * unit(g);
    const double sign = k % 2 == 0 ? 1.0 : -1.0;
    result[2 * k] = truth[2 * k] + 1.25 + sign * 0.03;
    result[2 * k + 1] = truth[2 * k + 1] - 0.5 - sign * 0.04;
  }
  const auto e = tycho::compare_positions(result.data(), truth.data(), 100);
  EXPECT_NEAR(e.rms_A, 0.05, 1e-12);
  EXPECT_NEAR(e.max_A, 0.05, 1e-12);
  EXPECT_NEAR(e.mean_shift_A[0], 1.25, 1e-12);
  EXPECT_NEAR(e.mean_shift_A[1], -0.5, 1e-12);
  result[7] = std::nan("");
  EXPECT_THROW((void)tycho::compare_positions(result.data(), truth.data(), 100), tycho::error);
  EXPECT_THROW((void)tycho::compare_positions(result.data(), truth.data(), 0), tycho::error);
}
