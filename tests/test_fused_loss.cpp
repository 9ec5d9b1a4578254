// The losses' fused path, tycho_loss_vtable::evaluate_far_field (ABI 1.3): the loss formed from the
// far field and the chain rule back to it in one pass. Against evaluate on the intensity the ABI
// defines followed by the product G = Ψ · (dL/dI · scale): the gradient bit for bit and Σ L to
// float rounding, for the three pixel losses, float32 and float64, float32 and uint16 data, with
// and without a mask, one and three modes, a window smaller and one larger than the loop's 256-pixel
// chunk; the arguments it refuses; the SDK's entry. (The cpu engine with and without the path:
// test_precision.cpp and test_multislice_engine.cpp.)
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/sdk/loss.hpp>

#include <dlpack/dlpack.h>

#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"

namespace {

DLTensor host_tensor(void* data, DLDataType dtype, int ndim, int64_t* shape) {
  return DLTensor{data, {kDLCPU, 0}, ndim, dtype, shape, nullptr, 0};
}

// n patterns of M far fields (N0 × N1) and counts: a bright disc over a dark field, some pixels of
// the model exactly 0 (the unguarded amplitude loss's special case), a mask leaving out every 7th.
struct far_field_problem {
  int64_t n = 2, modes, n0, n1;
  std::vector<std::complex<double>> psi;  // (n, M, N0, N1), unnormalised
  std::vector<uint16_t> counts;           // (n, N0, N1)
  std::vector<uint8_t> mask;
  double intensity_scale, measured_scale;

  int64_t pixels() const { return n0 * n1; }

  far_field_problem(int64_t m, int64_t rows = 9, int64_t columns = 7, unsigned seed = 3)
      : modes(m), n0(rows), n1(columns) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    intensity_scale = 1.0 / double(pixels());
    double total = 0;
    for (int64_t k = 0; k < n * pixels(); ++k) {
      const int64_t p = k % pixels(), r = p / n1 - n0 / 2, c = p % n1 - n1 / 2;
      counts.push_back(uint16_t(std::floor((r * r + c * c <= 4 ? 300.0 : 5.0) * u(rng))));
      total += counts.back();
    }
    measured_scale = double(n) / total;
    for (int64_t k = 0; k < n * modes * pixels(); ++k)
      psi.push_back(k % 13 == 5 ? 0.0 : std::polar(std::sqrt(0.02 + u(rng)), 6.28 * u(rng)));
    for (int64_t p = 0; p < pixels(); ++p) mask.push_back(p % 7 == 2 ? 0 : 1);
  }
};

// A loss instance from a [reconstruct] table.
struct loss_instance {
  tycho::config_document doc;
  tycho_config cfg;
  const tycho_loss_vtable* vt;
  tycho_loss* loss = nullptr;
  loss_instance(const char* name, const std::string& toml)
      : doc(tycho::config_document::parse("[reconstruct]\n" + toml, "<test>", "")),
        cfg{&doc.table_at("reconstruct"), "[reconstruct]", ""},
        vt(tycho::test::plugins().find(TYCHO_COMPONENT_LOSS, name).as<tycho_loss_vtable>()) {
    EXPECT_EQ(vt->create(&cfg, &loss), TYCHO_OK) << tycho::last_error();
  }
  ~loss_instance() {
    if (loss != nullptr) vt->destroy(loss);
  }
};

struct case_result {
  double loss_fused = 0, loss_reference = 0;
  bool gradient_equal = false;
};

// evaluate_far_field against evaluate + the product, in precision Real, with data as float32 or
// uint16 counts.
template <class Real>
case_result compare(loss_instance& l, const far_field_problem& p, bool counts, bool masked) {
  using C = std::complex<Real>;
  const int64_t m = p.pixels(), total = p.n * p.modes * m;
  std::vector<C> psi(p.psi.begin(), p.psi.end()), fused(std::size_t(total), C(-7, -7));
  std::vector<float> measured(p.counts.begin(), p.counts.end());
  std::vector<uint16_t> u16 = p.counts;
  std::vector<uint8_t> mask = p.mask;
  int64_t field_shape[4] = {p.n, p.modes, p.n0, p.n1}, pattern_shape[3] = {p.n, p.n0, p.n1},
          mask_shape[2] = {p.n0, p.n1};
  const DLDataType complex_t{kDLComplex, uint8_t(16 * sizeof(Real)), 1}, real_t{kDLFloat, uint8_t(8 * sizeof(Real)), 1};
  DLTensor tpsi = host_tensor(psi.data(), complex_t, 4, field_shape);
  DLTensor tgrad = host_tensor(fused.data(), complex_t, 4, field_shape);
  DLTensor tmeas = counts ? host_tensor(u16.data(), {kDLUInt, 16, 1}, 3, pattern_shape)
                          : host_tensor(measured.data(), {kDLFloat, 32, 1}, 3, pattern_shape);
  DLTensor tmask = host_tensor(mask.data(), {kDLUInt, 8, 1}, 2, mask_shape);
  const double gradient_scale = 1.0 / double(m);
  case_result r;
  EXPECT_EQ(l.vt->evaluate_far_field(l.loss, &tpsi, p.intensity_scale, &tmeas, masked ? &tmask : nullptr,
                                     p.measured_scale, gradient_scale, &tgrad, &r.loss_fused, nullptr),
            TYCHO_OK)
      << tycho::last_error();

  // The reference: I as the ABI defines it (modes summed in order), evaluate, then the product.
  std::vector<Real> intensity(std::size_t(p.n * m), Real(0)), dloss(std::size_t(p.n * m));
  const Real is = Real(p.intensity_scale), gs = Real(gradient_scale);
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t k = 0; k < p.modes; ++k)
      for (int64_t q = 0; q < m; ++q) {
        const C w = psi[std::size_t((j * p.modes + k) * m + q)];
        const Real v = (w.real() * w.real() + w.imag() * w.imag()) * is;
        Real& i = intensity[std::size_t(j * m + q)];
        i = k == 0 ? v : i + v;
      }
  DLTensor ti = host_tensor(intensity.data(), real_t, 3, pattern_shape);
  DLTensor td = host_tensor(dloss.data(), real_t, 3, pattern_shape);
  DLTensor tf = host_tensor(measured.data(), {kDLFloat, 32, 1}, 3, pattern_shape);
  EXPECT_EQ(l.vt->evaluate(l.loss, &ti, &tf, masked ? &tmask : nullptr, p.measured_scale, &td, &r.loss_reference,
                           nullptr),
            TYCHO_OK)
      << tycho::last_error();
  std::vector<C> reference(static_cast<std::size_t>(total));
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t k = 0; k < p.modes; ++k)
      for (int64_t q = 0; q < m; ++q) {
        const std::size_t at = std::size_t((j * p.modes + k) * m + q);
        const Real f = dloss[std::size_t(j * m + q)] * gs;
        reference[at] = C(psi[at].real() * f, psi[at].imag() * f);
      }
  r.gradient_equal = std::memcmp(fused.data(), reference.data(), fused.size() * sizeof(C)) == 0;
  return r;
}

TEST(FusedLoss, EqualsEvaluateThenTheChainRule) {
  struct loss_case {
    const char* name;
    const char* toml;
  };
  for (const loss_case& c : {loss_case{"amplitude", ""}, loss_case{"amplitude", "amplitude_epsilon = 1e-2"},
                             loss_case{"intensity", ""}, loss_case{"poisson", ""}}) {
    loss_instance l(c.name, c.toml);
    ASSERT_NE(l.vt->evaluate_far_field, nullptr) << c.name;
    for (int64_t modes : {1, 3})
      for (int64_t rows : {9, 23}) {  // 63 pixels; 391 (more than one chunk of 256)
      far_field_problem p(modes, rows, rows == 9 ? 7 : 17);
      for (bool counts : {false, true})
        for (bool masked : {false, true}) {
          const std::string what = std::string(c.name) + " " + c.toml + " modes " + std::to_string(modes) +
                                   " pixels " + std::to_string(p.pixels()) +
                                   (counts ? " uint16" : " float32") + (masked ? " masked" : "");
          for (int f64 : {0, 1}) {
            const case_result r = f64 ? compare<double>(l, p, counts, masked) : compare<float>(l, p, counts, masked);
            EXPECT_TRUE(r.gradient_equal) << what << (f64 ? " float64" : " float32");
            EXPECT_GT(r.loss_reference, 0) << what;
            EXPECT_NEAR(r.loss_fused, r.loss_reference, (f64 ? 1e-13 : 1e-6) * r.loss_reference)
                << what << (f64 ? " float64" : " float32");
          }
        }
    }
  }
}

// What the adapter refuses, each with a message that names the argument.
TEST(FusedLoss, RefusesMismatchedArguments) {
  loss_instance l("amplitude", "");
  far_field_problem p(1);
  std::vector<std::complex<float>> psi(p.psi.begin(), p.psi.end()), grad(psi.size());
  std::vector<float> measured(p.counts.begin(), p.counts.end());
  int64_t field_shape[4] = {p.n, 1, p.n0, p.n1}, pattern_shape[3] = {p.n, p.n0, p.n1}, short_shape[3] = {p.n, p.n0, 1};
  int64_t grad64_shape[4] = {p.n, 1, p.n0, p.n1};
  DLTensor tpsi = host_tensor(psi.data(), {kDLComplex, 64, 1}, 4, field_shape);
  DLTensor tgrad = host_tensor(grad.data(), {kDLComplex, 64, 1}, 4, field_shape);
  DLTensor tmeas = host_tensor(measured.data(), {kDLFloat, 32, 1}, 3, pattern_shape);
  double sum = 0;
  auto call = [&](DLTensor* f, DLTensor* d, DLTensor* g, double is) {
    return l.vt->evaluate_far_field(l.loss, f, is, d, nullptr, p.measured_scale, 1.0, g, &sum, nullptr);
  };
  DLTensor short_meas = host_tensor(measured.data(), {kDLFloat, 32, 1}, 3, short_shape);
  EXPECT_EQ(call(&tpsi, &short_meas, &tgrad, 1.0), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("measured"), std::string::npos) << tycho::last_error();
  DLTensor grad64 = host_tensor(grad.data(), {kDLComplex, 128, 1}, 4, grad64_shape);
  EXPECT_NE(call(&tpsi, &tmeas, &grad64, 1.0), TYCHO_OK);
  EXPECT_NE(std::string(tycho::last_error()).find("gradient"), std::string::npos) << tycho::last_error();
  DLTensor as_real = host_tensor(psi.data(), {kDLFloat, 32, 1}, 4, field_shape);
  EXPECT_NE(call(&as_real, &tmeas, &tgrad, 1.0), TYCHO_OK);
  EXPECT_NE(std::string(tycho::last_error()).find("far_field"), std::string::npos) << tycho::last_error();
  int64_t no_modes[4] = {p.n, 0, p.n0, p.n1};
  DLTensor zero_modes = host_tensor(psi.data(), {kDLComplex, 64, 1}, 4, no_modes),
           zero_grad = host_tensor(grad.data(), {kDLComplex, 64, 1}, 4, no_modes);
  EXPECT_EQ(call(&zero_modes, &tmeas, &zero_grad, 1.0), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("M >= 1"), std::string::npos) << tycho::last_error();
  EXPECT_EQ(call(&tpsi, &tmeas, &tpsi, 1.0), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("distinct"), std::string::npos) << tycho::last_error();
  EXPECT_EQ(call(&tpsi, &tmeas, &tgrad, std::nan("")), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("finite"), std::string::npos) << tycho::last_error();
  EXPECT_EQ(call(&tpsi, &tmeas, &tgrad, 1.0), TYCHO_OK) << tycho::last_error();
  EXPECT_GT(sum, 0);
}

// A loss class without evaluate_far_field leaves the vtable's entry NULL (engines then call
// evaluate); one with it gets the trampoline.
struct plain_loss {
  explicit plain_loss(const tycho::sdk::config_view&) {}
  void evaluate(const tycho::sdk::loss_arguments&) const {}
};
struct fused_loss : plain_loss {
  using plain_loss::plain_loss;
  void evaluate_far_field(const tycho::sdk::far_field_arguments&) const {}
};
TEST(FusedLoss, TheSdkFillsTheEntryOnlyForAClassThatHasIt) {
  EXPECT_EQ(tycho::sdk::loss_vtable<plain_loss>("plain", TYCHO_DEVICE_BIT(kDLCPU))->evaluate_far_field, nullptr);
  EXPECT_NE(tycho::sdk::loss_vtable<fused_loss>("fused", TYCHO_DEVICE_BIT(kDLCPU))->evaluate_far_field, nullptr);
  EXPECT_EQ(tycho::sdk::loss_vtable<fused_loss>("fused", TYCHO_DEVICE_BIT(kDLCPU))->struct_size,
            sizeof(tycho_loss_vtable));
}

}  // namespace
