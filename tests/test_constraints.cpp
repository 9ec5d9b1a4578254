// Constraints as components (ABI 1.3): the built-in ones change host tensors as documented
// (called through their vtables, as the driver does), refuse a device engine at create, and
// through the `tycho` command a [[reconstruct.constraints]] entry equals the runtime's
// shorthand key bit for bit, applies only within its iterations, and bad entries are refused
// naming the entry and the key.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/core/multislice.hpp>
#include <tycho/sdk/optics.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::run_command;
using cfloat = std::complex<float>;

const tycho_constraint_vtable* constraint(const char* name) {
  return tycho::test::plugins().find(TYCHO_COMPONENT_CONSTRAINT, name).as<tycho_constraint_vtable>();
}

tycho_constraint_setup host_setup() {
  tycho_constraint_setup s{};
  s.struct_size = sizeof(s);
  s.device = {kDLCPU, 0};
  s.pixel_A[0] = s.pixel_A[1] = 0.2;
  s.wavelength_A = 0.0418;  // 80 keV
  s.semiangle_mrad = 25;
  s.measured_power = 1.0;
  s.iterations = 10;
  return s;
}

// Object (1, 2, 3) and probe (modes, 8, 8) host tensors, complex64, and the state of one call.
struct tensors {
  std::vector<cfloat> object, probe;
  int64_t object_shape[3] = {1, 2, 3}, probe_shape[3] = {1, 8, 8};
  DLTensor o{}, p{};
  tycho_constraint_state state{};
  explicit tensors(int64_t modes) {
    probe_shape[0] = modes;
    object = {cfloat(3, 4), cfloat(0.3f, 0.4f), cfloat(0, 0), cfloat(0.6f, 0.8f), cfloat(-2, 0), cfloat(0, 0.05f)};
    probe.resize(std::size_t(modes * 64));
    for (std::size_t k = 0; k < probe.size(); ++k)
      probe[k] = cfloat(std::cos(0.7f * float(k)) + 0.1f * float(k % 5), std::sin(0.3f * float(k * k % 17)));
    o = DLTensor{object.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, object_shape, nullptr, 0};
    p = DLTensor{probe.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, probe_shape, nullptr, 0};
    state.struct_size = sizeof(state);
    state.object = &o;
    state.probe = &p;
    state.iteration = 1;
    state.batch = 0;
    state.batches = 1;
    state.object_rate_factor = state.probe_rate_factor = 1;  // the rates as set
  }
};

// Creates `name` with `setup`, applies it once to `t` and destroys it; returns acts_on.
uint32_t apply_once(const char* name, const tycho_constraint_setup& setup, tensors& t) {
  const auto* vt = constraint(name);
  tycho_constraint* c = nullptr;
  EXPECT_EQ(vt->create(&setup, &c), TYCHO_OK) << name;
  const uint32_t acts = vt->acts_on(c);
  EXPECT_EQ(vt->apply(c, &t.state), TYCHO_OK) << name;
  vt->destroy(c);
  return acts;
}

TEST(Constraints, ObjectAmplitudeClampsToTheRangeKeepingThePhase) {
  tensors t(1);
  const auto probe_before = t.probe;
  // Defaults: min 0, max 1 (no table: every key at its default).
  EXPECT_EQ(apply_once("object_amplitude", host_setup(), t), TYCHO_CONSTRAINT_OBJECT);
  EXPECT_NEAR(std::abs(t.object[0]), 1.0, 1e-7);             // 5 → 1
  EXPECT_NEAR(std::arg(t.object[0]), std::atan2(4.0, 3.0), 1e-6);
  EXPECT_EQ(t.object[1], cfloat(0.3f, 0.4f));                 // 0.5 stays
  EXPECT_EQ(t.object[2], cfloat(0, 0));                       // 0 stays with min = 0
  EXPECT_EQ(t.object[5], cfloat(0, 0.05f));
  EXPECT_NEAR(std::abs(t.object[4]), 1.0, 1e-7);
  EXPECT_EQ(t.probe, probe_before);                           // the probe is not touched
}

TEST(Constraints, ObjectPhaseAndProbePowerAndModes) {
  tensors t(3);
  EXPECT_EQ(apply_once("object_phase", host_setup(), t), TYCHO_CONSTRAINT_OBJECT);
  for (const cfloat& z : t.object) EXPECT_NEAR(std::abs(z), 1.0, 1e-7);
  EXPECT_EQ(t.object[2], cfloat(1, 0));  // 0 becomes 1

  tycho_constraint_setup s = host_setup();
  s.measured_power = 2.5;
  EXPECT_EQ(apply_once("probe_power", s, t), TYCHO_CONSTRAINT_PROBE);
  double power = 0;
  for (const cfloat& z : t.probe) power += std::norm(std::complex<double>(z));
  EXPECT_NEAR(power, 2.5, 2.5e-6);

  // The built-in component gives the runtime's orthonormalisation bit for bit.
  auto expected = t.probe;
  tycho::orthogonalize_probe_modes(expected.data(), 3, 64);
  EXPECT_EQ(apply_once("probe_orthogonal_modes", host_setup(), t), TYCHO_CONSTRAINT_PROBE);
  EXPECT_EQ(t.probe, expected);
}

TEST(Constraints, ProbeApertureLeavesNoPowerBeyondTheCutoff) {
  tensors t(2);
  tycho_constraint_setup s = host_setup();
  apply_once("probe_aperture", s, t);
  // Beyond 1.1 α/λ = 0.658 Å⁻¹ (the window's frequencies are multiples of 1/(8 · 0.2 Å)).
  const double cut = 1.1 * 25e-3 / 0.0418, dk = 1.0 / (8 * 0.2);
  double outside = 0, inside = 0;
  for (int m = 0; m < 2; ++m) {
    std::vector<std::complex<double>> mode(t.probe.begin() + m * 64, t.probe.begin() + (m + 1) * 64);
    const auto f = tycho::sdk::dft2(mode, 8, 8, false);
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) {
        const double k0 = (i < 4 ? i : i - 8) * dk, k1 = (j < 4 ? j : j - 8) * dk;
        (k0 * k0 + k1 * k1 > cut * cut ? outside : inside) += std::norm(f[std::size_t(i * 8 + j)]);
      }
  }
  EXPECT_LT(outside, 1e-12 * inside);
  EXPECT_GT(inside, 0.1);
}

// A host-only constraint refuses an engine on a GPU when it is created, naming itself and the device.
TEST(Constraints, HostConstraintsRefuseADeviceEngineAtCreate) {
  tycho_constraint_setup s = host_setup();
  s.device = {kDLCUDA, 0};
  tycho_constraint* c = nullptr;
  EXPECT_EQ(constraint("object_amplitude")->create(&s, &c), TYCHO_ERR_UNSUPPORTED);
  EXPECT_EQ(c, nullptr);
  const std::string why = tycho::last_error();
  EXPECT_NE(why.find("constraint 'object_amplitude' changes tensors on the CPU only; the engine keeps its tensors on "
                     "a CUDA device"),
            std::string::npos)
      << why;
  s.slice_thickness_A = 10;  // object_depth's own check passes
  for (const char* name : {"probe_centre", "object_tv", "object_depth", "object_potential"}) {
    EXPECT_EQ(constraint(name)->create(&s, &c), TYCHO_ERR_UNSUPPORTED) << name;
    EXPECT_NE(std::string(tycho::last_error()).find(std::string("constraint '") + name + "' changes tensors on the CPU only"),
              std::string::npos)
        << tycho::last_error();
  }
}

// positions_affine on a 4 x 3 raster (C order, steps 5 and 4 px): positions = map(nominal) +
// a residual orthogonal to every affine map.
struct raster {
  std::vector<double> nominal, positions;
  int64_t shape[2] = {12, 2};
  DLTensor nominal_t{}, positions_t{};
  raster() {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) {
        nominal.push_back(60.0 + 5.0 * i);
        nominal.push_back(70.0 + 4.0 * j);
      }
    positions = nominal;
    nominal_t = DLTensor{nominal.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, shape, nullptr, 0};
    positions_t = DLTensor{positions.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, shape, nullptr, 0};
  }
  // A residual with no affine part: project (1, n0, n1) out of a fixed pattern.
  std::vector<double> residual() const {
    std::vector<double> r(24);
    for (int k = 0; k < 24; ++k) r[std::size_t(k)] = 0.3 * std::sin(1.7 * k + 0.2) + 0.1 * std::cos(0.9 * k * k);
    for (int b = 0; b < 2; ++b)
      for (int pass = 0; pass < 3; ++pass) {  // Gram–Schmidt against 1, n0, n1 (centred), twice over
        for (int c = -1; c < 2; ++c) {
          double num = 0, den = 0;
          for (int j = 0; j < 12; ++j) {
            const double basis = c < 0 ? 1.0 : nominal[std::size_t(2 * j + c)] - (c == 0 ? 67.5 : 74.0);
            num += r[std::size_t(2 * j + b)] * basis;
            den += basis * basis;
          }
          for (int j = 0; j < 12; ++j) {
            const double basis = c < 0 ? 1.0 : nominal[std::size_t(2 * j + c)] - (c == 0 ? 67.5 : 74.0);
            r[std::size_t(2 * j + b)] -= num / den * basis;
          }
        }
      }
    return r;
  }
};

std::vector<double> apply_affine(raster& r, const std::string& toml_entry) {
  auto doc = tycho::config_document::parse(toml_entry, "<test>", "");
  tycho_config cfg{&doc.root(), "[[reconstruct.constraints]] 1 (positions_affine)", ""};
  tycho_constraint_setup s = host_setup();
  s.config = &cfg;
  s.nominal_positions = &r.nominal_t;
  const auto* vt = constraint("positions_affine");
  tycho_constraint* c = nullptr;
  EXPECT_EQ(vt->create(&s, &c), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(vt->acts_on(c), TYCHO_CONSTRAINT_POSITIONS);
  tycho_constraint_state st{};
  st.struct_size = sizeof(st);
  st.positions = &r.positions_t;
  st.iteration = 1;
  st.batch = -1;
  st.batches = 1;
  EXPECT_EQ(vt->apply(c, &st), TYCHO_OK) << tycho::last_error();
  vt->destroy(c);
  return r.positions;
}

TEST(Constraints, PositionsAffineKeepsTheMapAndWeighsTheResidual) {
  raster r;
  const auto res = r.residual();
  // A scale, rotation and shear plus a shift, and the residual.
  const double A[2][2] = {{1.01, 0.02}, {-0.015, 0.99}}, t[2] = {0.7, -0.4};
  std::vector<double> mapped(24);
  for (int j = 0; j < 12; ++j)
    for (int b = 0; b < 2; ++b)
      mapped[std::size_t(2 * j + b)] =
          A[b][0] * r.nominal[std::size_t(2 * j)] + A[b][1] * r.nominal[std::size_t(2 * j + 1)] + t[b];
  for (int k = 0; k < 24; ++k) r.positions[std::size_t(k)] = mapped[std::size_t(k)] + res[std::size_t(k)];
  const auto start = r.positions;
  auto same = apply_affine(r, "name = \"positions_affine\"\n");  // free map, residual kept
  for (int k = 0; k < 24; ++k) EXPECT_NEAR(same[std::size_t(k)], start[std::size_t(k)], 1e-10) << k;
  r.positions = start;
  auto half = apply_affine(r, "residual_weight = 0.5\n");
  for (int k = 0; k < 24; ++k)
    EXPECT_NEAR(half[std::size_t(k)], mapped[std::size_t(k)] + 0.5 * res[std::size_t(k)], 1e-10) << k;
  r.positions = start;
  auto nominal = apply_affine(r, "linear = \"nominal\"\nresidual_weight = 0\n");
  for (int j = 0; j < 12; ++j)  // the nominal geometry with the mean shift of the positions
    for (int b = 0; b < 2; ++b) {
      double mean_shift = 0;
      for (int i = 0; i < 12; ++i) mean_shift += (start[std::size_t(2 * i + b)] - r.nominal[std::size_t(2 * i + b)]) / 12;
      EXPECT_NEAR(nominal[std::size_t(2 * j + b)], r.nominal[std::size_t(2 * j + b)] + mean_shift, 1e-10);
    }
}

// The drift test's two halves, on whatever nominal grid `r` holds: its nominal positions drifted by
// `v` px per acquired pattern (the beam sweeping axis 0 first) plus the residual.
// linear = "drift" with fast_axis = 0 keeps them exactly; with fast_axis = 1 (not a drift of that
// scan) it moves them.
void expect_a_drift_kept(raster& r, const std::vector<double>& res, const double v[2]) {
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) {
      const int k = i * 3 + j, acquired = j * 4 + i;
      for (int b = 0; b < 2; ++b)
        r.positions[std::size_t(2 * k + b)] = r.nominal[std::size_t(2 * k + b)] + v[b] * acquired + 0.5 + res[std::size_t(2 * k + b)];
    }
  const auto drifted = r.positions;
  auto kept = apply_affine(r, "linear = \"drift\"\nfast_axis = 0\n");
  for (int k = 0; k < 24; ++k) EXPECT_NEAR(kept[std::size_t(k)], drifted[std::size_t(k)], 1e-10) << k;
  r.positions = drifted;
  auto other = apply_affine(r, "linear = \"drift\"\nfast_axis = 1\n");
  double moved = 0;
  for (int k = 0; k < 24; ++k) moved = std::max(moved, std::abs(other[std::size_t(k)] - drifted[std::size_t(k)]));
  EXPECT_GT(moved, 0.05);
}

// linear = "drift": a drift linear in acquisition time (the beam sweeping axis 0 first) plus the
// residual is kept as it is; a scale along axis 0, which no such drift makes, is removed.
TEST(Constraints, PositionsDriftKeepsADriftAndRemovesAScale) {
  raster r;
  const auto res = r.residual();
  const double v[2] = {0.03, 0.018};  // px per acquired pattern
  expect_a_drift_kept(r, res, v);
  // A 2 % scale along axis 0 about the centre: removed (axis 0 lies in the drift's family only as
  // the small g_fast part), the residual kept.
  for (int k = 0; k < 12; ++k) {
    r.positions[std::size_t(2 * k)] = 67.5 + 1.02 * (r.nominal[std::size_t(2 * k)] - 67.5) + res[std::size_t(2 * k)];
    r.positions[std::size_t(2 * k + 1)] = r.nominal[std::size_t(2 * k + 1)] + res[std::size_t(2 * k + 1)];
  }
  double err = 0, before = 0;
  for (int k = 0; k < 24; ++k)
    before = std::max(before, std::abs(r.positions[std::size_t(k)] - r.nominal[std::size_t(k)] - res[std::size_t(k)]));
  auto unscaled = apply_affine(r, "linear = \"drift\"\nfast_axis = 0\n");
  for (int k = 0; k < 24; ++k)
    err = std::max(err, std::abs(unscaled[std::size_t(k)] - r.nominal[std::size_t(k)] - res[std::size_t(k)]));
  EXPECT_LT(err, 0.25 * before) << "scale error before " << before << " px, after " << err << " px";
}

// The same drift on a raster the scan map turned (37°, as a parallax's rotation turns the nominal
// positions): the drift family is the turned grid's, so the drift is kept exactly and the wrong
// fast axis still moves the positions; a list in no grid's order is refused naming the rule.
TEST(Constraints, PositionsDriftOfATurnedRasterAndAShuffledList) {
  raster r;
  const auto res = r.residual();
  const double t = 37.0 * 3.14159265358979323846 / 180, c = std::cos(t), s = std::sin(t);
  for (int k = 0; k < 12; ++k) {
    const double a = r.nominal[std::size_t(2 * k)] - 67.5, b = r.nominal[std::size_t(2 * k + 1)] - 74.0;
    r.nominal[std::size_t(2 * k)] = 67.5 + c * a - s * b;
    r.nominal[std::size_t(2 * k + 1)] = 74.0 + s * a + c * b;
  }
  const double v[2] = {-0.021, 0.034};  // px per acquired pattern
  expect_a_drift_kept(r, res, v);
  // Patterns 1 and 2 swapped: the grid's positions, but not in any grid's listed order.
  std::swap(r.nominal[2], r.nominal[4]);
  std::swap(r.nominal[3], r.nominal[5]);
  auto doc = tycho::config_document::parse("linear = \"drift\"\n", "<test>", "");
  tycho_config cfg{&doc.root(), "[[reconstruct.constraints]] 1 (positions_affine)", ""};
  tycho_constraint_setup setup = host_setup();
  setup.config = &cfg;
  setup.nominal_positions = &r.nominal_t;
  tycho_constraint* made = nullptr;
  EXPECT_NE(constraint("positions_affine")->create(&setup, &made), TYCHO_OK);
  EXPECT_NE(std::string(tycho::last_error()).find("needs a raster scan of at least 2 x 2 positions listed in raster order"),
            std::string::npos)
      << tycho::last_error();
}

// ---- probe centring, total variation, depth, potential (issue 11)

using cdouble = std::complex<double>;
constexpr double k_pi = 3.14159265358979323846;

// Applies `name` configured by `toml_entry` once (one mini-batch of one) to object and probe
// host tensors of any complex dtype, the learning rates at `rate_factor` of their settings;
// returns acts_on.
template <class T>
uint32_t apply_entry(const char* name, const std::string& toml_entry, const tycho_constraint_setup& setup,
                     std::vector<std::complex<T>>& object, std::vector<int64_t> object_shape,
                     std::vector<std::complex<T>>& probe, std::vector<int64_t> probe_shape, double rate_factor = 1) {
  auto doc = tycho::config_document::parse(toml_entry, "<test>", "");
  tycho_config cfg{&doc.root(), "[[reconstruct.constraints]] 1", ""};
  tycho_constraint_setup s = setup;
  s.config = &cfg;
  tycho_constraint* c = nullptr;
  EXPECT_EQ(constraint(name)->create(&s, &c), TYCHO_OK) << name << ": " << tycho::last_error();
  if (c == nullptr) return 0;
  const DLDataType dt{kDLComplex, uint8_t(sizeof(std::complex<T>) * 8), 1};
  DLTensor o{object.data(), {kDLCPU, 0}, 3, dt, object_shape.data(), nullptr, 0};
  DLTensor p{probe.data(), {kDLCPU, 0}, 3, dt, probe_shape.data(), nullptr, 0};
  tycho_constraint_state st{};
  st.struct_size = sizeof(st);
  st.object = &o;
  st.probe = &p;
  st.iteration = 1;
  st.batch = 0;
  st.batches = 1;
  st.object_rate_factor = st.probe_rate_factor = rate_factor;
  const uint32_t acts = constraint(name)->acts_on(c);
  EXPECT_EQ(constraint(name)->apply(c, &st), TYCHO_OK) << name << ": " << tycho::last_error();
  constraint(name)->destroy(c);
  return acts;
}

// The plain centroid (index units) of Σ_m |P_m|² along both axes.
std::array<double, 2> intensity_centroid(const std::vector<cfloat>& probe, int64_t modes, int64_t n0, int64_t n1) {
  double total = 0, c0 = 0, c1 = 0;
  for (int64_t m = 0; m < modes; ++m)
    for (int64_t i = 0; i < n0; ++i)
      for (int64_t j = 0; j < n1; ++j) {
        const double v = std::norm(std::complex<double>(probe[std::size_t((m * n0 + i) * n1 + j)]));
        total += v;
        c0 += v * double(i);
        c1 += v * double(j);
      }
  return {c0 / total, c1 / total};
}

// A band-limited object (three plane waves on the 80 × 90 grid): its Fourier shift is exact, so
// the constrained object can be compared with the analytic one.
cdouble textured_object(double x, double y) {
  return 1.0 + 0.2 * std::polar(1.0, 2 * k_pi * (3 * x / 80 + 5 * y / 90)) + 0.1 * std::cos(2 * k_pi * 7 * y / 90) +
         cdouble(0, 0.05) * std::sin(2 * k_pi * 4 * x / 80);
}

// A two-mode probe 1.3 px down and 0.7 px left of the 64 × 64 window's centre comes back with its
// summed intensity's centroid within 0.01 px of (32, 32); the object moves by the same
// displacement, so the intensity of an exit wave does not change.
TEST(Constraints, ProbeCentreBringsADisplacedProbeBackAndShiftsTheObjectAlike) {
  const int64_t n = 64, h = 80, w = 90;
  const double off[2] = {1.3, -0.7};
  std::vector<cfloat> probe(std::size_t(2 * n * n)), object(std::size_t(h * w));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double x = double(i) - 32 - off[0], y = double(j) - 32 - off[1], r2 = x * x + y * y;
      const cdouble p0 = std::exp(-r2 / (2 * 16.0)) * std::polar(1.0, 0.02 * r2);  // a defocus-like chirp
      probe[std::size_t(i * n + j)] = cfloat(p0);
      probe[std::size_t(n * n + i * n + j)] = cfloat(0.3 * p0 * (x / 4.0));
    }
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) object[std::size_t(i * w + j)] = cfloat(textured_object(double(i), double(j)));
  const auto before = intensity_centroid(probe, 2, n, n);
  EXPECT_NEAR(before[0], 32 + off[0], 0.01);
  EXPECT_NEAR(before[1], 32 + off[1], 0.01);

  // The exit wave's intensity at a window origin (10, 12), with the unitary DFT.
  auto exit_intensity = [&](const std::vector<cfloat>& p, const std::vector<cfloat>& o) {
    std::vector<cdouble> psi(std::size_t(n * n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        psi[std::size_t(i * n + j)] = cdouble(p[std::size_t(i * n + j)]) * cdouble(o[std::size_t((i + 10) * w + j + 12)]);
    auto f = tycho::sdk::dft2(psi, n, n, false);
    std::vector<double> out(f.size());
    for (std::size_t k = 0; k < f.size(); ++k) out[k] = std::norm(f[k]);
    return out;
  };
  const auto intensity_before = exit_intensity(probe, object);
  const auto displaced = probe;

  // A tolerance beyond the offset (1.49 px × 0.2 Å = 0.30 Å): nothing moves.
  auto p_kept = probe, o_kept = object;
  apply_entry<float>("probe_centre", "tolerance_A = 0.35\n", host_setup(), o_kept, {1, h, w}, p_kept, {2, n, n});
  EXPECT_EQ(p_kept, probe);
  EXPECT_EQ(o_kept, object);

  EXPECT_EQ(apply_entry<float>("probe_centre", "", host_setup(), object, {1, h, w}, probe, {2, n, n}),
            TYCHO_CONSTRAINT_PROBE | TYCHO_CONSTRAINT_OBJECT);
  const auto after = intensity_centroid(probe, 2, n, n);
  EXPECT_NEAR(after[0], 32.0, 0.01);
  EXPECT_NEAR(after[1], 32.0, 0.01);
  double worst = 0;  // O(x) → O(x − s), s = −off
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j)
      worst = std::max(worst, std::abs(cdouble(object[std::size_t(i * w + j)]) -
                                       textured_object(double(i) + off[0], double(j) + off[1])));
  EXPECT_LT(worst, 2e-6);
  const auto intensity_after = exit_intensity(probe, object);
  double diff = 0, norm = 0;
  for (std::size_t k = 0; k < intensity_after.size(); ++k) {
    diff += std::abs(intensity_after[k] - intensity_before[k]);
    norm += intensity_before[k];
  }
  EXPECT_LT(diff, 1e-4 * norm) << "the model's intensity changed by " << diff / norm;

  // shift_object = false: the probe alone, and acts_on says so.
  std::vector<cfloat> o2 = {cfloat(1, 0)};
  auto p2 = displaced;
  EXPECT_EQ(apply_entry<float>("probe_centre", "shift_object = false\n", host_setup(), o2, {1, 1, 1}, p2, {2, n, n}),
            TYCHO_CONSTRAINT_PROBE);
  EXPECT_EQ(o2[0], cfloat(1, 0));
  const auto c2 = intensity_centroid(p2, 2, n, n);
  EXPECT_NEAR(c2[0], 32.0, 0.01);
  EXPECT_NEAR(c2[1], 32.0, 0.01);
}

double total_variation(const std::vector<cdouble>& u, int64_t h, int64_t w) {
  double tv = 0;
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) {
      const cdouble z = u[std::size_t(i * w + j)];
      const cdouble a = i < h - 1 ? u[std::size_t((i + 1) * w + j)] - z : 0.0;
      const cdouble b = j < w - 1 ? u[std::size_t(i * w + j + 1)] - z : 0.0;
      tv += std::sqrt(std::norm(a) + std::norm(b));
    }
  return tv;
}

double rms_difference(const std::vector<cdouble>& a, const std::vector<cdouble>& b) {
  double s = 0;
  for (std::size_t k = 0; k < a.size(); ++k) s += std::norm(a[k] - b[k]);
  return std::sqrt(s / double(a.size()));
}

// A piecewise-constant phase object (a disc of 0.5 rad, a square of 0.2 rad) with complex
// Gaussian noise of 0.05 per channel, float64: one step of weight 0.05 lowers its total variation
// and its RMS error against the clean object; weight 0 leaves it bit for bit.
TEST(Constraints, ObjectTvLowersTheVariationAndTheErrorOfANoisyObject) {
  const int64_t h = 64, w = 64;
  std::vector<cdouble> clean(std::size_t(h * w)), noisy(clean.size());
  uint64_t state = 12345;
  auto uniform = [&] {  // a fixed LCG, so the figures do not depend on the standard library
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (double(state >> 11) + 0.5) / 9007199254740992.0;
  };
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) {
      double phase = 0;
      if ((i - 24) * (i - 24) + (j - 22) * (j - 22) < 144) phase = 0.5;
      if (i > 40 && i < 56 && j > 36 && j < 58) phase = 0.2;
      const std::size_t k = std::size_t(i * w + j);
      clean[k] = std::polar(1.0, phase);
      const double r = 0.05 * std::sqrt(-2 * std::log(uniform())), t = 2 * k_pi * uniform();  // Box–Muller
      noisy[k] = clean[k] + std::polar(r, t);
    }
  std::vector<cdouble> probe(4, 1.0);
  auto same = noisy;
  apply_entry<double>("object_tv", "weight = 0\n", host_setup(), same, {1, h, w}, probe, {1, 2, 2});
  EXPECT_EQ(std::memcmp(same.data(), noisy.data(), noisy.size() * sizeof(cdouble)), 0);

  auto smooth = noisy;
  EXPECT_EQ(apply_entry<double>("object_tv", "weight = 0.05\n", host_setup(), smooth, {1, h, w}, probe, {1, 2, 2}),
            TYCHO_CONSTRAINT_OBJECT);
  const double tv0 = total_variation(noisy, h, w), tv1 = total_variation(smooth, h, w);
  const double e0 = rms_difference(noisy, clean), e1 = rms_difference(smooth, clean);
  std::cout << "object_tv: TV " << tv0 << " -> " << tv1 << ", RMS error " << e0 << " -> " << e1 << "\n";
  EXPECT_LT(tv1, 0.3 * tv0);
  EXPECT_LT(e1, 0.5 * e0);
}

// Six slices 10 Å apart whose ln O holds DCT-II modes 1 and 5 along the depth (cos(πk(s + ½)/6)):
// σ = 10 Å (one slice) and weight 0.8 multiply mode k by (1 − w) + w Σ_j g_j cos(πkj/6), to 1e-9;
// the mean stays. One slice is refused naming the constraint.
TEST(Constraints, ObjectDepthDampsTheDepthModesAsPredicted) {
  const int64_t slices = 6, n = 3;
  auto mode = [&](int k, int64_t s) { return std::cos(k_pi * k * (double(s) + 0.5) / double(slices)); };
  const cdouble mean(-0.01, 0.2), c1(0.02, 0.3), c5(-0.03, 0.15);
  std::vector<cdouble> object(std::size_t(slices * n)), probe(4, 1.0);
  for (int64_t s = 0; s < slices; ++s)
    for (int64_t k = 0; k < n; ++k)
      object[std::size_t(s * n + k)] = std::exp(mean + (1.0 + 0.1 * double(k)) * (c1 * mode(1, s) + c5 * mode(5, s)));
  tycho_constraint_setup setup = host_setup();
  setup.slice_thickness_A = 10;
  apply_entry<double>("object_depth", "sigma_A = 10\nweight = 0.8\n", setup, object, {slices, 1, n}, probe, {1, 2, 2});
  auto gain = [&](int k) {
    double num = 0, den = 0;
    for (int j = -4; j <= 4; ++j) {
      const double g = std::exp(-0.5 * j * j);
      num += g * std::cos(k_pi * k * j / double(slices));
      den += g;
    }
    return 0.2 + 0.8 * num / den;
  };
  EXPECT_LT(gain(5), 0.25);  // the depth's finest mode nearly gone, the coarsest kept
  EXPECT_GT(gain(1), 0.85);
  for (int64_t s = 0; s < slices; ++s)
    for (int64_t k = 0; k < n; ++k) {
      const cdouble expected = mean + (1.0 + 0.1 * double(k)) * (c1 * gain(1) * mode(1, s) + c5 * gain(5) * mode(5, s));
      const cdouble got = object[std::size_t(s * n + k)];
      EXPECT_NEAR(std::log(std::abs(got)), expected.real(), 1e-9) << s << " " << k;
      EXPECT_NEAR(std::arg(got), expected.imag(), 1e-9) << s << " " << k;
    }
  tycho_constraint* c = nullptr;
  tycho_constraint_setup one = host_setup();  // slice_thickness_A = 0: one slice
  EXPECT_EQ(constraint("object_depth")->create(&one, &c), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("constraint 'object_depth' smooths along the slices, and this run has one slice"),
            std::string::npos)
      << tycho::last_error();
}

// Four slices 5 Å apart of 16 x 16 px: ln O constant in depth is kept (only k_z = 0); a depth
// pattern (top half against bottom half) is removed where the band closes (k_r = 0, k_r ≥ 2α / λ)
// and kept in part within it, more where the band is wider; the default γ is the detector's
// largest angle over the aperture's (80 keV, 25 mrad, 0.2 Å pixels: 0.1045 / 0.025 = 4.2).
TEST(Constraints, ObjectMissingConeKeepsTheBandItCanTransfer) {
  const int64_t slices = 4, h = 16, w = 16, n = h * w;
  tycho_constraint_setup setup = host_setup();
  setup.slice_thickness_A = 5;
  auto depth = [](int64_t s) { return s < 2 ? 1.0 : -1.0; };  // the top half against the bottom
  std::vector<cdouble> probe(4, 1.0);
  {
    std::vector<cdouble> object(std::size_t(slices * n));
    for (int64_t s = 0; s < slices; ++s)
      for (int64_t k = 0; k < n; ++k) object[std::size_t(s * n + k)] = std::polar(1.0, 0.3 * std::sin(0.7 * double(k)));
    const auto before = object;
    apply_entry<double>("object_missing_cone", "", setup, object, {slices, h, w}, probe, {1, 2, 2});
    for (std::size_t k = 0; k < object.size(); ++k) EXPECT_LT(std::abs(object[k] - before[k]), 1e-12) << k;
  }
  auto kept = [&](const std::string& entry, double ky_cycles, double rate = 1) {  // the depth pattern's share left
    std::vector<cdouble> object(std::size_t(slices * n));
    for (int64_t s = 0; s < slices; ++s)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          object[std::size_t(s * n + y * w + x)] =
              std::polar(1.0, 0.2 * depth(s) * std::cos(2 * k_pi * ky_cycles * double(y) / double(h)));
    apply_entry<double>("object_missing_cone", entry, setup, object, {slices, h, w}, probe, {1, 2, 2}, rate);
    double num = 0, den = 0;
    for (int64_t s = 0; s < slices; ++s)
      for (int64_t y = 0; y < h; ++y) {
        const double want = 0.2 * depth(s) * std::cos(2 * k_pi * ky_cycles * double(y) / double(h));
        num += std::arg(object[std::size_t(s * n + y * w)]) * want;
        den += want * want;
      }
    return num / den;
  };
  // k_r in cycles over the 3.2 Å window: 1, 2 → 0.31, 0.63 Å⁻¹ (the band is widest at α / λ =
  // 0.60 Å⁻¹), 6 → 1.9 Å⁻¹, beyond 2α / λ = 1.2 Å⁻¹ where no depth information is transferred.
  EXPECT_NEAR(kept("", 0), 0.0, 1e-12);
  const double at1 = kept("", 1), at2 = kept("", 2);
  EXPECT_GT(at1, 0.2);
  EXPECT_GT(at2, at1);
  EXPECT_LT(at2, 1.0);
  EXPECT_NEAR(kept("", 6), 0.0, 1e-12);
  EXPECT_GT(kept("gamma = 20\n", 1), at1);   // a wider band keeps more
  EXPECT_LT(kept("gamma = 1\n", 1), at1);    // the default's (4.2) is wider than the bright field's
  // The pull follows the object's learning rate (ABI 1.5): at half the rate half of what the
  // filter removes is removed (ln O is filtered linearly), none while the object is not stepped,
  // and never more than at the rate as set.
  EXPECT_NEAR(kept("", 1, 0.5), 0.5 * (1 + at1), 1e-12);
  EXPECT_NEAR(kept("", 6, 0.25), 0.75, 1e-12);
  EXPECT_NEAR(kept("", 1, 0), 1.0, 1e-12);
  EXPECT_NEAR(kept("", 1, 3), at1, 1e-12);
  tycho_constraint* c = nullptr;
  tycho_constraint_setup one = host_setup();
  EXPECT_EQ(constraint("object_missing_cone")->create(&one, &c), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("this run has one slice"), std::string::npos) << tycho::last_error();
}

// The rate factors (ABI 1.5) as the SDK reads them: a host older than 1.5 (a state that ends
// before them) gets the pull as set; a non-finite or negative factor is refused, naming them.
TEST(Constraints, RateFactorsFromAnOlderHostAndBadOnesRefused) {
  const int64_t slices = 2, h = 4, w = 4, n = h * w;
  tycho_constraint_setup setup = host_setup();
  setup.slice_thickness_A = 5;
  std::vector<cdouble> start(std::size_t(slices * n)), probe(4, 1.0);
  for (int64_t k = 0; k < slices * n; ++k) start[std::size_t(k)] = std::polar(1.0, 0.1 * double(k % 7) * (k < n ? 1 : -1));
  auto run = [&](uint32_t struct_size, double factor, tycho_status expected) {
    std::vector<cdouble> object = start;
    int64_t oshape[3] = {slices, h, w}, pshape[3] = {1, 2, 2};
    DLTensor o{object.data(), {kDLCPU, 0}, 3, {kDLComplex, 128, 1}, oshape, nullptr, 0};
    DLTensor p{probe.data(), {kDLCPU, 0}, 3, {kDLComplex, 128, 1}, pshape, nullptr, 0};
    tycho_constraint_state st{};
    st.struct_size = struct_size;
    st.object = &o;
    st.probe = &p;
    st.iteration = 1;
    st.batches = 1;
    st.object_rate_factor = st.probe_rate_factor = factor;
    const auto* vt = constraint("object_missing_cone");
    tycho_constraint* c = nullptr;
    EXPECT_EQ(vt->create(&setup, &c), TYCHO_OK) << tycho::last_error();
    EXPECT_EQ(vt->apply(c, &st), expected) << tycho::last_error();
    vt->destroy(c);
    return object;
  };
  const auto full = run(sizeof(tycho_constraint_state), 1.0, TYCHO_OK);
  const auto older = run(uint32_t(offsetof(tycho_constraint_state, object_rate_factor)), 0.0, TYCHO_OK);
  EXPECT_EQ(older, full);  // the factors beyond an older host's struct are not read: the pull as set
  EXPECT_NE(full, start);
  EXPECT_EQ(run(sizeof(tycho_constraint_state), 0.0, TYCHO_OK), start);  // the object not stepped
  for (double bad : {std::nan(""), -0.5, HUGE_VAL}) {
    run(sizeof(tycho_constraint_state), bad, TYCHO_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tycho::last_error()).find("rate factors"), std::string::npos) << tycho::last_error();
  }
}

// |O| = 1 with the phase clipped at 0 ("zero") or shifted by the slice's minimum ("minimum"), per
// slice; the interaction constant of Kirkland's table (eq. 5.6).
TEST(Constraints, ObjectPotentialKeepsARealNonNegativePotential) {
  std::vector<cfloat> object = {std::polar(0.8f, -0.3f), std::polar(1.2f, 0.5f), std::polar(1.0f, 0.1f),
                                std::polar(0.9f, 0.4f), std::polar(1.0f, -0.2f), std::polar(1.1f, 0.7f)};
  std::vector<cfloat> probe(4, 1.0f);
  auto zero = object;
  EXPECT_EQ(apply_entry<float>("object_potential", "", host_setup(), zero, {2, 1, 3}, probe, {1, 2, 2}),
            TYCHO_CONSTRAINT_OBJECT);
  const float want_zero[6] = {0, 0.5f, 0.1f, 0.4f, 0, 0.7f};
  for (int k = 0; k < 6; ++k) {
    EXPECT_NEAR(std::abs(zero[std::size_t(k)]), 1.0f, 1e-6f) << k;
    EXPECT_NEAR(std::arg(zero[std::size_t(k)]), want_zero[k], 1e-6f) << k;
  }
  auto minimum = object;
  apply_entry<float>("object_potential", "reference = \"minimum\"\n", host_setup(), minimum, {2, 1, 3}, probe, {1, 2, 2});
  const float want_min[6] = {0, 0.8f, 0.4f, 0.6f, 0, 0.9f};
  for (int k = 0; k < 6; ++k) EXPECT_NEAR(std::arg(minimum[std::size_t(k)]), want_min[k], 1e-6f) << k;

  EXPECT_NEAR(tycho::interaction_constant_rad_per_VA(tycho::sdk::wavelength_A(200e3)), 7.2884e-4, 1e-8);
  EXPECT_NEAR(tycho::interaction_constant_rad_per_VA(tycho::sdk::wavelength_A(300e3)), 6.5262e-4, 1e-8);
  EXPECT_NEAR(tycho::interaction_constant_rad_per_VA(tycho::sdk::wavelength_A(80e3)), 1.0087e-3, 1e-7);
}

// ---- through the command

class ConstraintRuns : public ::testing::Test {
 protected:
  tycho::test::command_result reconstruct(const std::vector<std::string>& sets, const std::string& out) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml",
                                     "-q", "-o", (tmp_.path() / out).string(), "--set", "output.previews=false"};
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    return run_command(argv);
  }
  std::vector<unsigned char> bytes(const std::string& file, const char* array) {
    return tycho::test::load_result((tmp_.path() / file).string()).array(array, file).bytes;
  }
  tycho::test::temp_folder tmp_;
};

TEST_F(ConstraintRuns, AListEntryEqualsTheShorthandKeyBitForBit) {
  auto key = reconstruct({"reconstruct.iterations=2", "reconstruct.object.amplitude_max=1.0"}, "key.zip");
  ASSERT_TRUE(key.exited_with(0)) << key.describe();
  auto list = reconstruct({"reconstruct.iterations=2", "reconstruct.constraints=[{name=\"object_amplitude\", max=1.0}]"},
                          "list.zip");
  ASSERT_TRUE(list.exited_with(0)) << list.describe();
  auto none = reconstruct({"reconstruct.iterations=2"}, "none.zip");
  ASSERT_TRUE(none.exited_with(0)) << none.describe();
  for (const char* a : {"object", "probe", "loss_history"}) EXPECT_EQ(bytes("key.zip", a), bytes("list.zip", a)) << a;
  EXPECT_NE(bytes("key.zip", "object"), bytes("none.zip", "object"));  // the clamp did something
  // The manifest names the constraint among the components used.
  const auto manifest = nlohmann::json::parse(tycho::test::load_result((tmp_.path() / "list.zip").string()).manifest_json);
  int constraints = 0;
  for (const auto& c : manifest.at("provenance").at("components"))
    if (c.at("role") == "constraint") {
      ++constraints;
      EXPECT_EQ(c.at("kind"), "constraint");
      EXPECT_EQ(c.at("name"), "object_amplitude");
    }
  EXPECT_EQ(constraints, 1);
}

// [reconstruct.object] kind = "potential" is the constraint object_potential with its defaults,
// applied from the first iteration: bit for bit the list entry, and |O| = 1 with phases >= 0.
TEST_F(ConstraintRuns, ThePotentialKindIsTheObjectPotentialConstraint) {
  auto key = reconstruct({"reconstruct.iterations=2", "reconstruct.object.kind=\"potential\""}, "key.zip");
  ASSERT_TRUE(key.exited_with(0)) << key.describe();
  auto list = reconstruct({"reconstruct.iterations=2", "reconstruct.constraints=[{name=\"object_potential\"}]"},
                          "list.zip");
  ASSERT_TRUE(list.exited_with(0)) << list.describe();
  for (const char* a : {"object", "probe", "loss_history"}) EXPECT_EQ(bytes("key.zip", a), bytes("list.zip", a)) << a;
  auto rec = tycho::test::load_result((tmp_.path() / "key.zip").string());
  const auto& obj = rec.array("object", "key.zip");
  const auto* z = obj.as<cfloat>();
  double worst_modulus = 0, lowest_phase = 0;
  for (int64_t k = 0; k < obj.count(); ++k) {
    worst_modulus = std::max(worst_modulus, double(std::abs(std::abs(z[k]) - 1.0f)));
    lowest_phase = std::min(lowest_phase, double(std::arg(z[k])));
  }
  EXPECT_LT(worst_modulus, 1e-6);
  EXPECT_GE(lowest_phase, 0.0);
}

// object_phase within iterations [3, 3] of 3 leaves |O| = 1; within [2, 2] iteration 3 moves it off.
TEST_F(ConstraintRuns, AConstraintAppliesOnlyWithinItsIterations) {
  auto last = reconstruct({"reconstruct.iterations=3",
                           "reconstruct.constraints=[{name=\"object_phase\", first_iteration=3}]"},
                          "last.zip");
  ASSERT_TRUE(last.exited_with(0)) << last.describe();
  auto middle = reconstruct({"reconstruct.iterations=3",
                             "reconstruct.constraints=[{name=\"object_phase\", first_iteration=2, last_iteration=2}]"},
                            "middle.zip");
  ASSERT_TRUE(middle.exited_with(0)) << middle.describe();
  auto worst = [&](const char* file) {
    auto rec = tycho::test::load_result((tmp_.path() / file).string());
    const auto& obj = rec.array("object", file);
    const auto* z = obj.as<cfloat>();
    double w = 0;
    for (int64_t k = 0; k < obj.count(); ++k) w = std::max(w, std::abs(double(std::abs(z[k])) - 1.0));
    return w;
  };
  EXPECT_LT(worst("last.zip"), 1e-6);
  EXPECT_GT(worst("middle.zip"), 1e-3);
}

// 20 iterations of the MoS2 counts with the probe centred after every step keep the Pearson of
// the run without it to within 0.01 (measured 0.8993 with, 0.9020 without: the object follows
// the probe's centroid, which the run without it lets wander by 0.08 px, and evaluate registers
// by whole pixels only).
TEST_F(ConstraintRuns, ProbeCentreKeepsTheMos2Accuracy) {
  auto pearson = [&](const std::string& file) {
    auto r = run_command({tycho::test::tycho_exe(), "evaluate", (tmp_.path() / file).string(), "--truth",
                          tycho::test::example_data("mos2_ground_truth.npz")});
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    return nlohmann::json::parse(r.out).at("pearson").get<double>();
  };
  auto plain = reconstruct({"reconstruct.iterations=20"}, "plain.zip");
  ASSERT_TRUE(plain.exited_with(0)) << plain.describe();
  auto centred = reconstruct({"reconstruct.iterations=20", "reconstruct.constraints=[{name=\"probe_centre\"}]"},
                             "centred.zip");
  ASSERT_TRUE(centred.exited_with(0)) << centred.describe();
  const double without = pearson("plain.zip"), with = pearson("centred.zip");
  std::cout << "MoS2, 20 iterations: Pearson " << without << " without probe_centre, " << with << " with\n";
  EXPECT_GT(with, 0.85);
  EXPECT_GT(with, without - 0.01);
}

// The four constraints of issue 11's second round together, in a float64 run of two slices:
// the run completes and, object_potential listed last, every slice is exp(iφ) with φ ≥ 0.
TEST_F(ConstraintRuns, TheNewConstraintsRunTogetherInFloat64) {
  auto r = reconstruct({"reconstruct.iterations=2", "reconstruct.precision=\"float64\"", "reconstruct.slices=2",
                        "reconstruct.slice_thickness_A=5",
                        "reconstruct.constraints=[{name=\"probe_centre\", tolerance_A=0}, {name=\"object_tv\"}, "
                        "{name=\"object_depth\"}, {name=\"object_potential\"}]"},
                       "f64.zip");
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  auto rec = tycho::test::load_result((tmp_.path() / "f64.zip").string());
  const auto& obj = rec.array("object", "f64.zip");
  ASSERT_EQ(obj.count() % 2, 0);
  const auto* z = obj.as<std::complex<double>>();
  double amplitude_error = 0, lowest_phase = 0;
  for (int64_t k = 0; k < obj.count(); ++k) {
    amplitude_error = std::max(amplitude_error, std::abs(std::abs(z[k]) - 1.0));
    lowest_phase = std::min(lowest_phase, std::arg(z[k]));
  }
  EXPECT_LT(amplitude_error, 1e-12);
  EXPECT_EQ(lowest_phase, 0.0);
}

TEST_F(ConstraintRuns, BadEntriesAreRefusedNamingTheEntryAndTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"reconstruct.constraints=[{name=\"object_amplitud\"}]",
       "[[reconstruct.constraints]] 1 (object_amplitud): name = \"object_amplitud\": unknown constraint "
       "'object_amplitud'; did you mean 'object_amplitude'?"},
      {"reconstruct.constraints=[{name=\"probe_power\"}, {name=\"object_amplitude\", maks=1}]",
       "[[reconstruct.constraints]] 2 (object_amplitude): "},
      {"reconstruct.constraints=[{name=\"object_amplitude\", max=-1}]",
       "config key 'max' in [reconstruct.constraints] must be > 0 (declared by constraint 'object_amplitude'), got -1"},
      {"reconstruct.constraints=[{max=1}]", "[[reconstruct.constraints]] 1 has no 'name'"},
      {"reconstruct.constraints={name=\"object_phase\"}", "'reconstruct.constraints' must be a list of tables"},
      {"reconstruct.constraints=[{name=\"object_phase\", first_iteration=3, last_iteration=2}]",
       "last_iteration = 2 is before first_iteration = 3"},
      {"reconstruct.constraints=[{name=\"object_tv\", weight=-0.1}]",
       "config key 'weight' in [reconstruct.constraints] must be >= 0 (declared by constraint 'object_tv'), got -0.1"},
      {"reconstruct.constraints=[{name=\"object_tv\", iterations=0}]",
       "config key 'iterations' in [reconstruct.constraints] must be >= 1 and <= 1000, i.e. in [1, 1000] (declared by "
       "constraint 'object_tv'), got 0"},
      {"reconstruct.constraints=[{name=\"probe_centre\", tolerance_A=-1}]",
       "config key 'tolerance_A' in [reconstruct.constraints] must be >= 0 (declared by constraint 'probe_centre'), got -1"},
      {"reconstruct.constraints=[{name=\"object_depth\", weight=1.5}]",
       "config key 'weight' in [reconstruct.constraints] must be > 0 and <= 1, i.e. in (0, 1] (declared by constraint "
       "'object_depth'), got 1.5"},
      {"reconstruct.constraints=[{name=\"object_depth\"}]",  // the MoS2 recipe has one slice
       "[[reconstruct.constraints]] 1 (object_depth): constraint 'object_depth' smooths along the slices, and this run "
       "has one slice; leave it out, or set [reconstruct] slices > 1"},
      {"reconstruct.constraints=[{name=\"object_potential\", reference=\"vacuum\"}]", "'reference'"},
  };
  for (const auto& [set, expected] : cases) {
    auto r = reconstruct({set, "reconstruct.iterations=1"}, "bad.zip");
    EXPECT_TRUE(r.exited_with(2)) << set << "\n" << r.describe();
    EXPECT_NE(r.err.find(expected), std::string::npos) << set << "\n" << r.err;
  }
  // A constraint on positions without position correction does nothing, and says so.
  auto idle = reconstruct({"reconstruct.constraints=[{name=\"positions_affine\"}]", "reconstruct.iterations=1"},
                          "idle.zip");
  EXPECT_TRUE(idle.exited_with(0)) << idle.describe();
  EXPECT_NE(idle.err.find("[[reconstruct.constraints]] 1 (positions_affine): constrains the positions, which move only "
                          "with [reconstruct.positions] correct = true: it does nothing in this run"),
            std::string::npos)
      << idle.err;
  auto maks = reconstruct({cases[1].first, "reconstruct.iterations=1"}, "bad.zip");
  EXPECT_NE(maks.err.find("unknown key 'maks' in [reconstruct.constraints]; did you mean 'max'?"), std::string::npos)
      << maks.err;
}

}  // namespace
