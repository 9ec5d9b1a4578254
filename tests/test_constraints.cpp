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
#include <cmath>
#include <complex>
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

// linear = "drift": a drift linear in acquisition time (the beam sweeping axis 0 first) plus the
// residual is kept as it is; a scale along axis 0, which no such drift makes, is removed.
TEST(Constraints, PositionsDriftKeepsADriftAndRemovesAScale) {
  raster r;
  const auto res = r.residual();
  const double v[2] = {0.03, 0.018};  // px per acquired pattern
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) {
      const int k = i * 3 + j, acquired = j * 4 + i;
      for (int b = 0; b < 2; ++b)
        r.positions[std::size_t(2 * k + b)] = r.nominal[std::size_t(2 * k + b)] + v[b] * acquired + 0.5 + res[std::size_t(2 * k + b)];
    }
  const auto drifted = r.positions;
  auto kept = apply_affine(r, "linear = \"drift\"\nfast_axis = 0\n");
  for (int k = 0; k < 24; ++k) EXPECT_NEAR(kept[std::size_t(k)], drifted[std::size_t(k)], 1e-10) << k;
  // The same drift seen with the wrong fast axis is not a drift of that scan: the positions change.
  r.positions = drifted;
  auto other = apply_affine(r, "linear = \"drift\"\nfast_axis = 1\n");
  double moved = 0;
  for (int k = 0; k < 24; ++k) moved = std::max(moved, std::abs(other[std::size_t(k)] - drifted[std::size_t(k)]));
  EXPECT_GT(moved, 0.05);
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
