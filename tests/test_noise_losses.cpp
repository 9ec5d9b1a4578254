// The pixel losses `amplitude`, `intensity` and `poisson` (plugins/losses/amplitude_pixel.hpp,
// intensity_pixel.hpp, poisson_pixel.hpp) through their vtables, as an engine calls them: the
// value against the formula written out here, dL/dI against central finite differences of that
// value in float64, the mask, the guards of the amplitude and Poisson losses at I = 0, float32
// against float64, and the normalisations the docs promise (both noise models equal the
// unguarded amplitude loss to second order where they say).
// The end-to-end runs of each loss on the MoS2 counts are in test_noise_losses_end_to_end.cpp.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>

#include <dlpack/dlpack.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"

namespace {

const tycho_loss_vtable* loss_vt(const char* name) {
  return tycho::test::plugins().find(TYCHO_COMPONENT_LOSS, name).as<tycho_loss_vtable>();
}

DLTensor host_tensor(void* data, DLDataType dtype, int ndim, int64_t* shape) {
  return DLTensor{data, {kDLCPU, 0}, ndim, dtype, shape, nullptr, 0};
}

// n patterns of n0 × n1 pixels: counts D (a bright disc over a dark field with a few counts, as
// in the MoS2 data), s = 1 / mean total counts (as the engines pass it), a model I near s·D with
// some pixels exactly 0, a mask leaving out every 7th pixel.
struct problem {
  int64_t n = 2, n0 = 6, n1 = 5;
  std::vector<float> measured;
  std::vector<double> model;
  std::vector<uint8_t> mask;
  double scale = 0;

  int64_t pixels() const { return n0 * n1; }
  int64_t count() const { return n * n0 * n1; }

  explicit problem(unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    measured.resize(size_t(count()));
    model.resize(size_t(count()));
    mask.resize(size_t(pixels()));
    double total = 0;
    for (int64_t k = 0; k < count(); ++k) {
      const int64_t p = k % pixels(), r = p / n1 - n0 / 2, c = p % n1 - n1 / 2;
      const bool bright = r * r + c * c <= 2;
      measured[size_t(k)] = float(std::floor((bright ? 80.0 : 4.0) * u(rng)));  // zeros included
      total += measured[size_t(k)];
    }
    scale = double(n) / total;
    for (int64_t k = 0; k < count(); ++k)
      model[size_t(k)] = k % 11 == 3 ? 0.0 : scale * (measured[size_t(k)] + 0.5) * (0.6 + 0.8 * u(rng));
    for (int64_t p = 0; p < pixels(); ++p) mask[size_t(p)] = p % 7 == 2 ? 0 : 1;
  }
};

// A loss instance, created from a [reconstruct] table (empty: the defaults).
class loss_instance {
 public:
  loss_instance(const char* name, const std::string& reconstruct_toml = "")
      : doc_(tycho::config_document::parse("[reconstruct]\n" + reconstruct_toml, "<test>", "")),
        cfg_{&doc_.table_at("reconstruct"), "[reconstruct]", ""},
        vt_(loss_vt(name)) {
    status_ = vt_->create(&cfg_, &loss_);
  }
  ~loss_instance() {
    if (loss_ != nullptr) vt_->destroy(loss_);
  }
  loss_instance(const loss_instance&) = delete;
  loss_instance& operator=(const loss_instance&) = delete;
  tycho_status created() const { return status_; }

  // Σ L of `model` (float or double) against p's data; dL/dI into `grad`.
  template <class Real>
  double evaluate(const problem& p, const std::vector<Real>& model, std::vector<Real>& grad, bool masked = true) {
    int64_t shape[3] = {p.n, p.n0, p.n1}, mask_shape[2] = {p.n0, p.n1};
    const DLDataType real{kDLFloat, uint8_t(8 * sizeof(Real)), 1};
    grad.assign(model.size(), Real(-7));  // every pixel must be written
    auto m = model;
    auto d = p.measured;
    auto mask = p.mask;
    DLTensor tm = host_tensor(m.data(), real, 3, shape), tg = host_tensor(grad.data(), real, 3, shape);
    DLTensor td = host_tensor(d.data(), {kDLFloat, 32, 1}, 3, shape);
    DLTensor tmask = host_tensor(mask.data(), {kDLUInt, 8, 1}, 2, mask_shape);
    double sum = 0;
    const tycho_status s = vt_->evaluate(loss_, &tm, &td, masked ? &tmask : nullptr, p.scale, &tg, &sum, nullptr);
    EXPECT_EQ(s, TYCHO_OK) << tycho::last_error();
    return sum;
  }

 private:
  tycho::config_document doc_;
  tycho_config cfg_;
  const tycho_loss_vtable* vt_;
  tycho_loss* loss_ = nullptr;
  tycho_status status_ = TYCHO_OK;
};

// The formulas of the docs (docs/losses.md), written out in long double, per pixel.
long double intensity_formula(long double i, long double sd, int64_t pattern_pixels) {
  return (long double)(pattern_pixels) / 4 * (i - sd) * (i - sd);
}
long double amplitude_formula(long double i, long double sd, long double eps) {
  const long double d = std::sqrt(i + eps) - std::sqrt(std::max(sd, 0.0L) + eps);
  return d * d;
}
long double poisson_formula(long double i, long double sd, long double eps) {
  const long double m = std::max(i, 0.0L) + eps, d = std::max(sd, 0.0L) + eps;
  return 0.5L * (m - d - d * std::log(m / d));
}

long double formula_sum(const char* name, const problem& p, const std::vector<double>& model, double eps_rel) {
  long double sum = 0;
  for (int64_t k = 0; k < p.count(); ++k) {
    if (p.mask[size_t(k % p.pixels())] == 0) continue;
    const long double i = model[size_t(k)], sd = (long double)(p.measured[size_t(k)]) * p.scale;
    const std::string n = name;
    sum += n == "intensity"   ? intensity_formula(i, sd, p.pixels())
           : n == "amplitude" ? amplitude_formula(i, sd, eps_rel / p.pixels())
                              : poisson_formula(i, sd, eps_rel / p.pixels());
  }
  return sum;
}

// Value against the formula (1e-12 relative) and dL/dI against central differences of the loss
// itself in float64: max |FD − dL/dI| ≤ 1e-6 · max |dL/dI| over the pixels (measured: 3e-10 for
// intensity, 7e-11 for poisson, 1e-10 for amplitude). Steps h = 1e-5 · (|I| + s): the truncation stays ~1e-10.
void check_value_and_gradient(const char* name, const std::string& toml, double eps_rel) {
  const problem p(11);
  loss_instance loss(name, toml);
  ASSERT_EQ(loss.created(), TYCHO_OK) << tycho::last_error();
  std::vector<double> grad, unused;
  const double value = loss.evaluate(p, p.model, grad);
  const long double want = formula_sum(name, p, p.model, eps_rel);
  EXPECT_NEAR(value, double(want), 1e-12 * double(want)) << name;
  EXPECT_GT(value, 0.0) << name;
  double grad_max = 0, error_max = 0;
  for (double g : grad) grad_max = std::max(grad_max, std::abs(g));
  ASSERT_GT(grad_max, 0.0);
  for (int64_t k = 0; k < p.count(); ++k) {
    const double h = 1e-5 * (std::abs(p.model[size_t(k)]) + p.scale);
    if (p.model[size_t(k)] == 0) continue;  // the Poisson loss has a kink at 0 (I < 0 counts as 0); below
    auto up = p.model, down = p.model;
    up[size_t(k)] += h;
    down[size_t(k)] -= h;
    const double fd = (loss.evaluate(p, up, unused) - loss.evaluate(p, down, unused)) / (2 * h);
    error_max = std::max(error_max, std::abs(fd - grad[size_t(k)]));
  }
  EXPECT_LE(error_max, 1e-6 * grad_max) << name << ": finite differences differ from dL/dI";
  std::cout << name << ": max |FD − dL/dI| / max |dL/dI| = " << error_max / grad_max << "\n";
}

TEST(NoiseLosses, IntensityValueAndGradientAgreeWithFiniteDifferences) {
  check_value_and_gradient("intensity", "", 0);
}

// The amplitude loss without a guard (the default, (√I − √(sD))²), with the recipes' guard and
// with a large one.
TEST(NoiseLosses, AmplitudeValueAndGradientAgreeWithFiniteDifferences) {
  check_value_and_gradient("amplitude", "", 0);  // the declared default: no guard
  check_value_and_gradient("amplitude", "amplitude_epsilon = 1e-2\n", 1e-2);
  check_value_and_gradient("amplitude", "amplitude_epsilon = 0.5\n", 0.5);
}

TEST(NoiseLosses, PoissonValueAndGradientAgreeWithFiniteDifferences) {
  check_value_and_gradient("poisson", "", 1e-3);  // the declared default
  check_value_and_gradient("poisson", "poisson_epsilon = 0.5\n", 0.5);
}

// Masked pixels: dL/dI exactly 0 and nothing added, whatever they hold (inf, NaN); without a
// mask the same pixels count.
TEST(NoiseLosses, MaskedPixelsAddNothing) {
  for (const char* name : {"amplitude", "intensity", "poisson"}) {
    problem p(5);
    loss_instance loss(name);
    std::vector<double> grad, grad_bad, grad_all;
    const double clean = loss.evaluate(p, p.model, grad);
    auto bad = p.model;
    for (int64_t k = 0; k < p.count(); ++k)
      if (p.mask[size_t(k % p.pixels())] == 0) {
        bad[size_t(k)] = k % 2 ? std::numeric_limits<double>::infinity() : std::nan("");
        p.measured[size_t(k)] = std::numeric_limits<float>::infinity();
      }
    EXPECT_EQ(loss.evaluate(p, bad, grad_bad), clean) << name;
    for (int64_t k = 0; k < p.count(); ++k) {
      if (p.mask[size_t(k % p.pixels())] == 0) {
        EXPECT_EQ(grad_bad[size_t(k)], 0.0) << name << " pixel " << k;
      } else {
        EXPECT_EQ(grad_bad[size_t(k)], grad[size_t(k)]) << name << " pixel " << k;
      }
    }
    const problem q(5);
    EXPECT_GT(loss.evaluate(q, q.model, grad_all, /*masked=*/false), clean) << name;
  }
}

// I = 0: dL/dI = −½ sD / ε where counts were recorded and 0 where none were; the loss finite.
// The minimum lies at I = sD exactly (ε is added to model and data alike): L = 0, dL/dI = 0.
TEST(NoiseLosses, PoissonIsFiniteAtZeroIntensityAndExactAtTheFit) {
  const problem p(3);
  loss_instance loss("poisson");
  const double eps = 1e-3 / double(p.pixels());
  std::vector<double> zero(p.model.size(), 0.0), grad;
  const double at_zero = loss.evaluate(p, zero, grad, false);
  EXPECT_TRUE(std::isfinite(at_zero));
  int recorded = 0;
  for (int64_t k = 0; k < p.count(); ++k) {
    const double sd = double(p.measured[size_t(k)]) * p.scale;
    ASSERT_TRUE(std::isfinite(grad[size_t(k)])) << k;
    EXPECT_NEAR(grad[size_t(k)], -0.5 * sd / eps, 1e-12 * (1 + 0.5 * sd / eps)) << k;
    recorded += sd > 0;
  }
  EXPECT_GT(recorded, 10);
  EXPECT_LT(recorded, p.count()) << "the problem should have pixels without counts";
  // Float32 too: the same finite values.
  std::vector<float> zero32(p.model.size(), 0.f), grad32;
  EXPECT_TRUE(std::isfinite(loss.evaluate(p, zero32, grad32, false)));
  for (int64_t k = 0; k < p.count(); ++k) EXPECT_TRUE(std::isfinite(grad32[size_t(k)])) << k;

  std::vector<double> fit(p.model.size());
  for (int64_t k = 0; k < p.count(); ++k) fit[size_t(k)] = double(p.measured[size_t(k)]) * p.scale;
  EXPECT_EQ(loss.evaluate(p, fit, grad, false), 0.0);
  for (double g : grad) EXPECT_EQ(g, 0.0);
}

// The float32 path (the default precision, and the CUDA kernel's) against float64: the loss
// within 1e-5 relative, dL/dI within 1e-5 of the largest. Inputs exactly representable in both.
TEST(NoiseLosses, Float32AgreesWithFloat64) {
  for (const char* name : {"amplitude", "intensity", "poisson"}) {
    const problem p(7);
    std::vector<float> model32(p.model.begin(), p.model.end());
    const std::vector<double> model64(model32.begin(), model32.end());
    loss_instance loss(name);
    std::vector<double> g64;
    std::vector<float> g32;
    const double l64 = loss.evaluate(p, model64, g64), l32 = loss.evaluate(p, model32, g32);
    EXPECT_NEAR(l32, l64, 1e-5 * l64) << name;
    double gmax = 0;
    for (double g : g64) gmax = std::max(gmax, std::abs(g));
    for (size_t k = 0; k < g64.size(); ++k) EXPECT_NEAR(g32[k], g64[k], 1e-5 * gmax) << name << " pixel " << k;
  }
}

// The normalisations of docs/losses.md: near the fit (I = sD (1 + δ), δ = ±1e-3) the Poisson
// loss equals the unguarded amplitude loss pixel by pixel to second order (up to its guard ε),
// and the intensity loss equals it at a pixel of mean intensity (I ≈ 1 / (N0 N1)); ratios within
// 2e-3 and 1e-2. The guarded amplitude loss (ε = 1e-2 of the mean pixel, the recipes' guard) is
// lowered by sD / (sD + ε) near the fit, as the Poisson loss by its ε.
TEST(NoiseLosses, NormalisedLikeTheAmplitudeLossNearTheFit) {
  problem p(9);
  p.n = 1;
  p.n0 = 4;
  p.n1 = 4;
  p.measured.assign(16, 0.f);
  p.model.assign(16, 0.0);
  p.scale = 1.0 / (16 * 1000.0);  // 1000 counts per pixel: a pixel of mean intensity is 1/16
  for (int k = 0; k < 16; ++k) {
    p.measured[size_t(k)] = 1000.f;
    p.model[size_t(k)] = p.scale * 1000.0 * (k % 2 ? 1.001 : 0.999);
  }
  loss_instance amplitude("amplitude"), guarded("amplitude", "amplitude_epsilon = 1e-2\n"), poisson("poisson"),
      intensity("intensity");
  std::vector<double> g;
  const double a = amplitude.evaluate(p, p.model, g, false);
  EXPECT_NEAR(guarded.evaluate(p, p.model, g, false) / a, 1.0 / 1.01, 2e-3);
  // ε (1e-3 of the mean pixel intensity, here of sD) lowers the Poisson loss by sD / (sD + ε).
  EXPECT_NEAR(poisson.evaluate(p, p.model, g, false) / a, 1.0 / 1.001, 2e-3);
  EXPECT_NEAR(intensity.evaluate(p, p.model, g, false) / a, 1.0, 1e-2);
}

// I = 0 under the amplitude loss's guard: dL/dI = 1 − √(sD + ε)/√ε, finite; without the guard
// (the default, ε = 0) 0 there. The minimum at I = sD exactly: L = 0, dL/dI = 0.
TEST(NoiseLosses, AmplitudeIsFiniteAtZeroIntensityAndExactAtTheFit) {
  const problem p(3);
  loss_instance loss("amplitude", "amplitude_epsilon = 1e-2\n"), unguarded("amplitude");
  const double eps = 1e-2 / double(p.pixels());
  std::vector<double> zero(p.model.size(), 0.0), grad;
  EXPECT_TRUE(std::isfinite(loss.evaluate(p, zero, grad, false)));
  for (int64_t k = 0; k < p.count(); ++k) {
    const double sd = double(p.measured[size_t(k)]) * p.scale, want = 1 - std::sqrt((sd + eps) / eps);
    EXPECT_NEAR(grad[size_t(k)], want, 1e-12 * (1 + std::abs(want))) << k;
  }
  unguarded.evaluate(p, zero, grad, false);
  for (double g : grad) EXPECT_EQ(g, 0.0);

  std::vector<double> fit(p.model.size());
  for (int64_t k = 0; k < p.count(); ++k) fit[size_t(k)] = double(p.measured[size_t(k)]) * p.scale;
  EXPECT_EQ(loss.evaluate(p, fit, grad, false), 0.0);
  for (double g : grad) EXPECT_EQ(g, 0.0);
}

// A bad amplitude_epsilon is refused at create() with the key named; 0 is allowed (no guard).
TEST(NoiseLosses, AmplitudeEpsilonMustBeFiniteAndNotNegative) {
  for (const char* value : {"-1e-3", "nan", "inf", "1e7"}) {
    loss_instance loss("amplitude", std::string("amplitude_epsilon = ") + value + "\n");
    EXPECT_EQ(loss.created(), TYCHO_ERR_INVALID_ARGUMENT) << value;
    EXPECT_NE(std::string(tycho::last_error()).find("amplitude_epsilon"), std::string::npos) << tycho::last_error();
  }
  EXPECT_EQ(loss_instance("amplitude", "amplitude_epsilon = 0\n").created(), TYCHO_OK) << tycho::last_error();
}

// A bad poisson_epsilon is refused at create() with the key named (the host refuses it before,
// from the declared range: test_settings covers that path for every declared key).
TEST(NoiseLosses, PoissonEpsilonMustBePositive) {
  for (const char* value : {"0", "-1e-3"}) {
    loss_instance loss("poisson", std::string("poisson_epsilon = ") + value + "\n");
    EXPECT_EQ(loss.created(), TYCHO_ERR_INVALID_ARGUMENT) << value;
    EXPECT_NE(std::string(tycho::last_error()).find("poisson_epsilon"), std::string::npos) << tycho::last_error();
  }
}

}  // namespace
