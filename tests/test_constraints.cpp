// Constraints as components (ABI 1.3): the built-in ones change host tensors as documented
// (called through their vtables, as the driver does), refuse a device engine at create, and
// through the `tycho` command a [[reconstruct.constraints]] entry equals the runtime's
// shorthand key bit for bit, applies only within its iterations, and bad entries are refused
// naming the entry and the key.
#include <gtest/gtest.h>

#include <tycho/core/last_error.hpp>
#include <tycho/core/multislice.hpp>
#include <tycho/sdk/optics.hpp>

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
  auto maks = reconstruct({cases[1].first, "reconstruct.iterations=1"}, "bad.zip");
  EXPECT_NE(maks.err.find("unknown key 'maks' in [reconstruct.constraints]; did you mean 'max'?"), std::string::npos)
      << maks.err;
}

}  // namespace
