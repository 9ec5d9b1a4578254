// Bad input through the `tycho` command, as a user meets it: each run must end with exit
// status 2 (an error, not a crash or a signal), exactly one stderr line "tycho: error: ..." that
// names the thing and what was expected, and no result file. Plus plugins of another ABI in
// TYCHO_PLUGIN_PATH, which must not break a normal run.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <tycho/core/error.hpp>
#include <tycho/host/registry.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "emd_test_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
using tycho::test::command_result;
using tycho::test::run_command;

namespace {

const std::string k_array = "/datacube_root/datacube/data";

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }
std::string counts_file() { return tycho::test::example_data("mos2_80kV_32x24_counts.h5"); }
std::string test_plugin_dir() { return TYCHO_TEST_PLUGIN_DIR; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void replace_once(std::string& text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << "'" << from << "' not in the example config";
  text.replace(at, from.size(), to);
}

// A small HDF5 file in emdfile's layout: float32 array at /datacube_root/datacube/data.
void write_h5(const std::string& path, const std::vector<hsize_t>& dims, const std::vector<float>& values) {
  std::string why;
  ASSERT_TRUE(tycho::test::write_emd_file(path, {dims, tycho::test::emd_element::float32, values.data()}, &why))
      << why;
}

class BadInput : public ::testing::Test {
 protected:
  std::string result() const { return tmp_ / "result.zip"; }

  // `tycho reconstruct CONFIG --iterations 1 -o <tmp>/result.zip EXTRA...`
  command_result reconstruct(const std::string& config, const std::vector<std::string>& extra = {},
                             const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", config,
                                     "--iterations", "1", "-o", result()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv, env);
  }

  // The example config with the data path made absolute, as text to modify, written by
  // write_config into the temp folder (every run gives -o, so its [output] path is not used).
  std::string example_text() {
    std::string text = read_text(example_config());
    replace_once(text, "\"data/mos2_80kV_32x24_counts.h5\"", "\"" + counts_file() + "\"");
    return text;
  }
  std::string write_config(const std::string& text, const std::string& name = "run.toml") {
    return tmp_.write(name, text);
  }

  // Exit status 2; one "tycho: error:" line holding every `expected` substring; every other
  // stderr line is a log line; nothing named result* in the temp folder. Returns the message.
  std::string expect_error(const command_result& r, const std::vector<std::string>& expected) {
    EXPECT_TRUE(r.exited_with(2)) << r.describe();
    std::string message;
    int error_lines = 0;
    for (const auto& line : r.err_lines()) {
      if (line.rfind("tycho: error: ", 0) == 0) {
        ++error_lines;
        message = line;
      } else {
        EXPECT_EQ(line.rfind("[tycho ", 0), 0u)
            << "stderr line that is neither the error nor a log line: '" << line << "'\n" << r.describe();
      }
    }
    EXPECT_EQ(error_lines, 1) << r.describe();
    for (const auto& s : expected)
      EXPECT_NE(message.find(s), std::string::npos)
          << "'" << s << "' not in the message:\n  " << message << "\n" << r.describe();
    EXPECT_EQ(r.out.find("wrote "), std::string::npos) << r.out;
    for (const auto& name : tmp_.entries())
      EXPECT_NE(name.rfind("result", 0), 0u) << "a failed run left " << name;
    return message;
  }

  tycho::test::temp_folder tmp_;
};

// The example config runs as given with these tests' arguments: the failures below come from
// the one thing each test changes.
TEST_F(BadInput, ControlRunSucceeds) {
  auto r = reconstruct(write_config(example_text()), {"-q"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(fs::is_regular_file(result()));
  EXPECT_EQ(r.err.find("tycho: error"), std::string::npos) << r.err;
}

TEST_F(BadInput, MissingDataFile) {
  const std::string missing = tmp_ / "no_such_data.h5";
  std::string text = example_text();
  replace_once(text, counts_file(), missing);
  auto r = reconstruct(write_config(text));
  expect_error(r, {"data file '" + missing + "'", "does not exist"});
}

TEST_F(BadInput, MissingDataset) {
  auto r = reconstruct(example_config(), {"--set", "data.dataset=/nope/data"});
  auto msg = expect_error(r, {"/nope/data", "does not exist"});
  // and it says what the file does hold
  EXPECT_NE(msg.find(k_array + " (32, 24, 96, 96)"), std::string::npos) << msg;
}

TEST_F(BadInput, ThreeDimensionalArray) {
  const std::string file = tmp_ / "cube3d.h5";
  write_h5(file, {6, 32, 32}, std::vector<float>(6 * 32 * 32, 1.0f));
  auto r = reconstruct(example_config(),
                       {"--set", "data.path=" + file, "--set", "data.dataset=" + k_array});
  expect_error(r, {file + ":" + k_array, "(6, 32, 32)", "expected a 4-D array"});
}

TEST_F(BadInput, UnknownEngine) {
  auto r = reconstruct(example_config(), {"--set", "reconstruct.engine=cpux"});
  expect_error(r, {"unknown engine 'cpux'", "did you mean 'cpu'"});
}

TEST_F(BadInput, UnknownConfigKey) {
  std::string text = example_text();
  replace_once(text, "batch_size = 128", "batchsize = 64");
  const std::string config = write_config(text);
  auto r = reconstruct(config);
  expect_error(r, {config, "unknown key 'batchsize'", "[reconstruct]", "did you mean 'batch_size'"});
}

TEST_F(BadInput, UnknownTopLevelTable) {
  const std::string config = write_config(example_text() + "\n[reconstruction]\niterations = 5\n");
  auto r = reconstruct(config);
  expect_error(r, {config, "unknown key 'reconstruction'", "did you mean 'reconstruct'"});
}

TEST_F(BadInput, UnknownKeyFromCommandLine) {
  auto r = reconstruct(example_config(), {"--set", "optics.semiangle=25"});
  expect_error(r, {"unknown key 'semiangle'", "[optics]", "did you mean 'semiangle_mrad'"});
}

// TYCHO_PLUGIN_PATH holding plugins of another ABI: they are refused with a warning naming the
// file, and a normal run goes on with the built-ins.
TEST_F(BadInput, PluginOfAnotherAbiDoesNotBreakARun) {
  const std::string major2 = test_plugin_dir() + "/libtycho_plugin_abi_major2.so";
  ASSERT_TRUE(fs::exists(major2)) << major2 << " not built (tests/test_plugins.cmake)";
  auto r = reconstruct(example_config(), {"-q"}, {"TYCHO_PLUGIN_PATH=" + test_plugin_dir()});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(fs::is_regular_file(result()));
  bool warned = false;
  for (const auto& line : r.err_lines())
    if (line.find("refused plugin '" + major2 + "'") != std::string::npos) {
      warned = true;
      EXPECT_EQ(line.rfind("[tycho warning] ", 0), 0u) << line;
      EXPECT_NE(line.find("built for tycho ABI 2.0, this host has ABI 1." + std::to_string(TYCHO_ABI_VERSION_MINOR)),
                std::string::npos)
          << line;
    }
  EXPECT_TRUE(warned) << r.describe();
}

// Asking for what only the refused plugin would provide: not found, in the registry and the CLI.
TEST_F(BadInput, ComponentOfRefusedPluginIsNotFound) {
  tycho::host::registry reg;
  reg.load_directories({test_plugin_dir(), tycho::test::plugin_dir()});
  try {
    reg.find(TYCHO_COMPONENT_ENGINE, "abi2_engine");
    ADD_FAILURE() << "the engine of a refused plugin was found";
  } catch (const tycho::error& e) {
    EXPECT_EQ(e.status, TYCHO_ERR_NOT_FOUND) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown engine 'abi2_engine'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();  // lists what exists
  }
  auto r = reconstruct(example_config(), {"--set", "reconstruct.engine=abi2_engine"},
                       {"TYCHO_PLUGIN_PATH=" + test_plugin_dir()});
  expect_error(r, {"unknown engine 'abi2_engine'"});
}

// A small EMD file without calibrations (given on the command line) with a NaN in pattern 5:
// the pixel is masked (a warning), not refused; a negative value (a wrong dark subtraction) is
// refused, naming the pattern and the pixel.
TEST_F(BadInput, NonFinitePixelsAreMaskedNegativeOnesRefused) {
  const std::vector<hsize_t> dims = {4, 4, 32, 32};
  const size_t per_pattern = 32 * 32;
  std::vector<float> values(16 * per_pattern, 0.0f);
  // A bright disc in every pattern, so that the good file reconstructs.
  for (size_t p = 0; p < 16; ++p)
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < 32; ++j)
        if ((i - 16) * (i - 16) + (j - 16) * (j - 16) <= 64) values[p * per_pattern + size_t(i * 32 + j)] = 100.0f;
  values[5 * per_pattern + 16 * 32 + 17] = std::numeric_limits<float>::quiet_NaN();
  write_h5(tmp_ / "nan.h5", dims, values);
  values[5 * per_pattern + 16 * 32 + 17] = 100.0f;
  values[6 * per_pattern + 3 * 32 + 4] = -2.5f;
  write_h5(tmp_ / "negative.h5", dims, values);

  const std::vector<std::string> calibrations = {
      "--set", "data.scan_step_A=0.5",     "--set", "data.detector_pixel_invA=0.06",
      "--set", "optics.energy_eV=80000",   "--set", "optics.semiangle_mrad=25",
      "--set", "optics.C10_A=-50",         "-q"};
  // Relative data paths resolve against the config's folder.
  auto masked = reconstruct(write_config("[data]\nsource = \"emd\"\npath = \"nan.h5\"\n", "nan.toml"),
                            calibrations);
  ASSERT_TRUE(masked.exited_with(0)) << masked.describe();
  int warnings = 0;
  for (const auto& line : masked.err_lines())
    if (line.rfind("[tycho warning] preprocess: masked 1 of 1024 detector pixels", 0) == 0) {
      ++warnings;
      EXPECT_NE(line.find("(16, 17) = nan in pattern 5"), std::string::npos) << line;
    }
  EXPECT_EQ(warnings, 1) << masked.describe();
  for (const auto& name : tmp_.entries())
    if (name.rfind("result", 0) == 0) fs::remove(tmp_.path() / name);

  auto r = reconstruct(write_config("[data]\nsource = \"emd\"\npath = \"negative.h5\"\n", "negative.toml"),
                       calibrations);
  expect_error(r, {"negative.h5", "pattern 6", "pixel (3, 4)", "is negative (-2.5)", "expected intensities >= 0"});
}

// The refusals about the probe's window say which wavelength they used, what it came from (the
// radiation, the energy) and where each value came from: a config key (naming the file), the data
// file, or the default.
TEST_F(BadInput, ProbeDoesNotFitTheWindowDefocus) {
  auto r = reconstruct(example_config(), {"--set", "optics.C10_A=-3000"});
  expect_error(r, {"probe does not fit the window", "C10", "λ = 0.0417573 Å: electrons (the default: neither [optics] "
                   "radiation nor '", "says what the beam is) of 80000 eV ([optics] energy_eV in " + example_config(),
                   "semiangle 25 mrad ([optics] semiangle_mrad in", "detector pixel 0.06 Å⁻¹ (recorded in '"});
}

TEST_F(BadInput, ProbeDoesNotFitTheWindowAperture) {
  auto r = reconstruct(example_config(), {"--set", "optics.semiangle_mrad=200"});
  expect_error(r, {"does not fit", "200 mrad", "semiangle_mrad", "λ = 0.0417573 Å: electrons (the default",
                   "of 80000 eV ([optics] energy_eV in " + example_config()});
  // The energy from the file, X-rays named in the config: a photon's wavelength at 80 keV, and
  // each value's origin as it is.
  std::string text = example_text();
  replace_once(text, "energy_eV = 80e3\n", "radiation = \"xray\"\n");
  const std::string config = write_config(text);
  auto x = reconstruct(config, {"--set", "optics.semiangle_mrad=500"});
  expect_error(x, {"does not fit", "λ = 0.15498 Å: X-ray photons ([optics] radiation in " + config,
                   "of 80000 eV (recorded in '", "semiangle 500 mrad ([optics] semiangle_mrad in " + config});
}

TEST_F(BadInput, TomlSyntaxError) {
  std::string text = example_text();
  replace_once(text, "seed = 0", "seed = = 0");
  // 1-based line of the broken line
  const auto at = text.find("seed = = 0");
  const int line = 1 + int(std::count(text.begin(), text.begin() + std::ptrdiff_t(at), '\n'));
  const std::string config = write_config(text);
  auto r = reconstruct(config);
  expect_error(r, {config + ":" + std::to_string(line) + ":", "TOML syntax error"});
}

TEST_F(BadInput, WrongTypeQuoted) {
  auto r = reconstruct(example_config(), {"--set", "reconstruct.batch_size=\"big\""});
  expect_error(r, {"batch_size", "[reconstruct]", "integer"});
}

TEST_F(BadInput, WrongTypeBareWord) {
  auto r = reconstruct(example_config(), {"--set", "reconstruct.batch_size=big"});
  expect_error(r, {"batch_size", "[reconstruct]", "integer"});
}

TEST_F(BadInput, MissingConfigFile) {
  const std::string config = tmp_ / "absent.toml";
  auto r = reconstruct(config);
  expect_error(r, {"config file '" + config + "'", "cannot be opened"});
}

}  // namespace

// The helper these tests rely on tells an error exit from a crash.
namespace {
TEST(RunCommand, DistinguishesExitStatusSignalAndStreams) {
  auto ok = run_command({"sh", "-c", "echo out; echo err >&2; exit 2"});
  EXPECT_TRUE(ok.exited_with(2)) << ok.describe();
  EXPECT_FALSE(ok.signalled);
  EXPECT_EQ(ok.out, "out\n");
  EXPECT_EQ(ok.err, "err\n");
  auto crash = run_command({"sh", "-c", "kill -SEGV $$"});
  EXPECT_FALSE(crash.exited) << crash.describe();
  EXPECT_TRUE(crash.signalled) << crash.describe();
  EXPECT_EQ(crash.term_signal, SIGSEGV);
  EXPECT_NE(crash.status_text().find("signal 11"), std::string::npos) << crash.status_text();
  auto env = run_command({"sh", "-c", "printf %s \"$TYCHO_TEST_VALUE\"; pwd"}, {"TYCHO_TEST_VALUE=a b'c"}, "/");
  EXPECT_TRUE(env.exited_with(0)) << env.describe();
  EXPECT_EQ(env.out, "a b'c/\n");
}
}  // namespace
