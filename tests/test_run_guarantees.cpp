// What a run guarantees (docs/guarantees.md, issue 12), through the `tycho` command as a user
// meets it. A corpus of bad inputs, each generated here (no committed binaries), each asserting
// the exit status and the message, and that no run ends with exit status 0 and a non-finite
// value in its saved arrays:
//   - numbers at the config's edge: nan/inf, out of range (learning rates, Adam's epsilon, ...);
//   - a non-finite value during a run (a test-only optimizer writes NaN at a chosen step): the
//     run stops naming the iteration, saves the last finite state, exits 2;
//   - arrays read from files: a resumed result holding NaN, a prepared file with inf or negative
//     patterns, data scaled to 1e-40;
//   - outputs: never an input, never a folder / link / FIFO / device, never replaced silently;
//   - command-line numbers: a 20-digit count, "nan", negatives.
// Added test time: about 15 s on 2 cores (MoS2 runs of 1 to 3 iterations).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <tycho/host/result_record.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <complex>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "emd_test_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
using tycho::test::command_result;
using tycho::test::run_command;

namespace {

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }
std::string counts_file() { return tycho::test::example_data("mos2_80kV_32x24_counts.h5"); }

// Non-finite elements of every float or complex array of a saved record.
int64_t non_finite_values(const tycho::host::loaded_record& rec) {
  int64_t bad = 0;
  for (const auto& a : rec.arrays) {
    if (a.dtype.code != kDLFloat && a.dtype.code != kDLComplex) continue;
    const int64_t reals = a.count() * (a.dtype.code == kDLComplex ? 2 : 1);
    const int bits = a.dtype.code == kDLComplex ? a.dtype.bits / 2 : a.dtype.bits;
    for (int64_t k = 0; k < reals; ++k)
      bad += bits == 32 ? !std::isfinite(a.as<float>()[k]) : !std::isfinite(a.as<double>()[k]);
  }
  return bad;
}

// Saves `rec` (possibly changed) to `path` through the zip format.
void save_as(tycho::host::loaded_record rec, const std::string& path) {
  tycho::host::save_record(tycho::host::format_for_path(tycho::test::plugins(), path), rec.arrays, rec.manifest_json,
                           path, TYCHO_SAVE_OVERWRITE);
}

tycho::owned_array& array_of(tycho::host::loaded_record& rec, const std::string& name) {
  for (auto& a : rec.arrays)
    if (a.name == name) return a;
  throw std::runtime_error("no array " + name);
}

class RunGuarantees : public ::testing::Test {
 protected:
  // `tycho reconstruct mos2.toml --iterations N -q --set output.previews=false EXTRA...`
  command_result reconstruct(const std::vector<std::string>& extra, int iterations = 1,
                             const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations",
                                     std::to_string(iterations), "-q", "--set", "output.previews=false"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv, env);
  }

  // Exit status `code`, one "tycho: error:" line holding every `expected` substring (every other
  // stderr line a log line), nothing on stdout saying "wrote"; returns the message.
  std::string expect_error(const command_result& r, const std::vector<std::string>& expected, int code = 2) {
    EXPECT_TRUE(r.exited_with(code)) << r.describe();
    std::string message;
    int error_lines = 0;
    for (const auto& line : r.err_lines()) {
      if (line.rfind("tycho: error: ", 0) == 0) {
        ++error_lines;
        message = line;
      } else if (line.rfind("(tycho ", 0) != 0) {
        EXPECT_EQ(line.rfind("[tycho ", 0), 0u) << "stderr line that is neither the error nor a log line: '" << line
                                                << "'\n" << r.describe();
      }
    }
    EXPECT_EQ(error_lines, 1) << r.describe();
    for (const auto& s : expected)
      EXPECT_NE(message.find(s), std::string::npos) << "'" << s << "' not in the message:\n  " << message;
    EXPECT_EQ(r.out.find("wrote "), std::string::npos) << r.out;
    return message;
  }

  // A refused run leaves no result behind.
  void expect_no_file(const std::string& path) { EXPECT_FALSE(fs::exists(fs::symlink_status(path))) << path; }

  tycho::test::temp_folder tmp_;
};

// ---- numbers at the config's edge

struct config_case {
  const char* set;
  std::vector<std::string> expected;
};

TEST_F(RunGuarantees, ConfigNumbersAreFiniteAndInRange) {
  const std::vector<config_case> cases = {
      {"optics.C10_A=nan", {"'C10_A'", "[optics]", "finite number", "nan"}},
      {"optics.C10_A=inf", {"'C10_A'", "[optics]", "finite number", "inf"}},
      {"optics.semiangle_mrad=-inf", {"'semiangle_mrad'", "[optics]", "finite number", "-inf"}},
      {"optics.energy_eV=nan", {"'energy_eV'", "[optics]", "finite number"}},
      {"data.scan_step_A=inf", {"'scan_step_A'", "[data]", "finite number"}},
      {"reconstruct.object.learning_rate=inf", {"'learning_rate'", "[reconstruct.object]", "finite number"}},
      {"reconstruct.object.learning_rate=1e308", {"'learning_rate'", "[reconstruct.object]", "[0, 1000]", "1e+308"}},
      {"reconstruct.probe.learning_rate=-0.1", {"'learning_rate'", "[reconstruct.probe]", "[0, 1000]"}},
      {"reconstruct.object.epsilon=0", {"'epsilon'", "[reconstruct.object]", "(0, 1]", "got 0"}},
      {"reconstruct.object.beta1=1", {"'beta1'", "[reconstruct.object]", "[0, 1)"}},
      {"reconstruct.probe.beta2=nan", {"'beta2'", "[reconstruct.probe]", "finite number"}},
      {"reconstruct.object.final_learning_rate_fraction=nan", {"final_learning_rate_fraction", "finite number"}},
      {"reconstruct.object.amplitude_max=inf", {"'amplitude_max'", "finite number"}},
      {"output.checkpoint_every=-1", {"'checkpoint_every'", "[output]", "from 0"}},
  };
  const std::string out = tmp_ / "result.zip";
  for (const auto& c : cases) {
    SCOPED_TRACE(c.set);
    auto r = reconstruct({"--set", c.set, "-o", out});
    expect_error(r, c.expected);
    expect_no_file(out);
  }
  // SGD's momentum of 1 never decays.
  auto r = reconstruct({"--set", "reconstruct.probe.optimizer=\"sgd\"", "--set", "reconstruct.probe.momentum=1", "-o",
                        out});
  expect_error(r, {"'momentum'", "[reconstruct.probe]", "[0, 1)"});
}

// ---- a non-finite value during the run

class NonFiniteRun : public RunGuarantees {
 protected:
  // Three iterations of 6 mini-batches (768 patterns, batch 128); the object's optimizer writes
  // NaN into the object at its step `step`.
  command_result run_with_nan_at(int step, const std::string& out) {
    return reconstruct({"--set", "reconstruct.object.optimizer=\"nan_after\"", "--set",
                        "reconstruct.object.nan_at_step=" + std::to_string(step), "-o", out},
                       3, {"TYCHO_PLUGIN_PATH=" + std::string(TYCHO_TEST_PLUGIN_DIR)});
  }
  // The saved state is the one after `iterations` iterations, all finite.
  void expect_saved_state(const std::string& out, int64_t iterations) {
    ASSERT_TRUE(fs::is_regular_file(out));
    auto rec = tycho::test::load_result(out);
    EXPECT_EQ(non_finite_values(rec), 0) << "a stopped run saved non-finite values";
    EXPECT_EQ(rec.array("loss_history", out).count(), iterations);
    auto m = nlohmann::json::parse(rec.manifest_json);
    EXPECT_EQ(m.at("history").at("iterations"), iterations);
    EXPECT_EQ(m.at("history").at("schedule_iterations"), 3);
  }
};

// NaN in the first step of iteration 2: the loss of iteration 2 is NaN.
TEST_F(NonFiniteRun, NonFiniteLossStopsAndKeepsTheLastFiniteState) {
  const std::string out = tmp_ / "result.zip";
  auto r = run_with_nan_at(7, out);
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("tycho: error: the loss of iteration 2 is nan: the run diverged and stopped, keeping the "
                       "state after iteration 1"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Likely cause: a learning rate too large"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("saved that state to '" + out + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("wrote " + out + " (the state after iteration 1 of 3)"), std::string::npos) << r.out;
  expect_saved_state(out, 1);
}

// NaN in the last step of iteration 2: its loss was computed before, so it is finite, but the
// state it leaves is not.
TEST_F(NonFiniteRun, NonFiniteStateStopsAndKeepsTheLastFiniteState) {
  const std::string out = tmp_ / "result.zip";
  auto r = run_with_nan_at(12, out);
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("iteration 2 left non-finite values in the object"), std::string::npos) << r.err;
  expect_saved_state(out, 1);
}

// NaN in the first step: nothing finite was computed; the initial state is kept (0 iterations).
TEST_F(NonFiniteRun, NonFiniteFirstIterationKeepsTheInitialState) {
  const std::string out = tmp_ / "result.zip";
  auto r = run_with_nan_at(1, out);
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("the loss of iteration 1 is nan"), std::string::npos) << r.err;
  expect_saved_state(out, 0);
}

// ---- arrays read from files

TEST_F(RunGuarantees, ResumedFileHoldingNaNIsRefused) {
  const std::string good = tmp_ / "good.zip";
  auto r0 = reconstruct({"-o", good}, 1);
  ASSERT_TRUE(r0.exited_with(0)) << r0.describe();
  const auto rec = tycho::test::load_result(good);
  ASSERT_GT(rec.arrays.size(), 6u);
  for (const char* name : {"object", "probe", "optimizer.object.v", "optimizer.probe.m"}) {
    SCOPED_TRACE(name);
    auto bad = rec;
    auto& a = array_of(bad, name);
    ASSERT_EQ(a.dtype.code, kDLComplex);
    reinterpret_cast<float*>(a.bytes.data())[3] = std::numeric_limits<float>::quiet_NaN();
    const std::string from = tmp_ / (std::string("nan-") + name + ".zip");
    save_as(bad, from);
    const std::string out = tmp_ / "resumed.zip";
    auto r = reconstruct({"--from", from, "-o", out}, 1);
    expect_error(r, {"'" + from + "' (resumed with --from)", std::string("array '") + name + "'",
                     "holds 1 non-finite value (first: nan at element 1)", "expected finite numbers"});
    expect_no_file(out);
  }
}

TEST_F(RunGuarantees, PreparedFileWithInfOrNegativePatternsIsRefused) {
  const std::string prepared = tmp_ / "prepared.zip";
  // float32 patterns (the counts would be stored as uint16, which holds no inf or negative value)
  auto p = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "--save-raw-data", "-q", "--set",
                        "preprocess.integer_targets=false", "-o", prepared});
  ASSERT_TRUE(p.exited_with(0)) << p.describe();
  const auto rec = tycho::test::load_result(prepared);
  struct bad_value {
    float value;
    const char* text;
  };
  for (const bad_value v : {bad_value{std::numeric_limits<float>::infinity(), "is inf"},
                            bad_value{-3.0f, "is -3"}, bad_value{std::nanf(""), "is nan"}}) {
    SCOPED_TRACE(v.text);
    auto bad = rec;
    auto& a = array_of(bad, "patterns");
    // pattern 5, pixel (2, 7) of a 96 x 96 detector
    reinterpret_cast<float*>(a.bytes.data())[5 * 96 * 96 + 2 * 96 + 7] = v.value;
    const std::string from = tmp_ / "bad-prepared.zip";
    save_as(bad, from);
    const std::string out = tmp_ / "result.zip";
    auto r = run_command({tycho::test::tycho_exe(), "reconstruct", "--from", from, "--iterations", "1", "-q", "-o",
                          out});
    expect_error(r, {"'" + from + "': array 'patterns', pattern 5, pixel (2, 7) " + v.text,
                     "expected finite intensities >= 0"});
    expect_no_file(out);
  }
}

// Data in a unit 1e-40 times counts: float32 holds it only as subnormal numbers, and the model's
// scale (1 / mean) overflows float32. Refused, naming the data and the mean; the same data in
// counts runs.
TEST_F(RunGuarantees, DataScaledBelowFloat32IsRefused) {
  const size_t per = 32 * 32;
  std::vector<float> values(16 * per, 0.0f);
  for (size_t p = 0; p < 16; ++p)
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < 32; ++j)
        if ((i - 16) * (i - 16) + (j - 16) * (j - 16) <= 64) values[p * per + size_t(i * 32 + j)] = 100.0f;
  std::string why;
  ASSERT_TRUE(tycho::test::write_emd_file(tmp_ / "counts.h5",
                                          {{4, 4, 32, 32}, tycho::test::emd_element::float32, values.data()}, &why))
      << why;
  for (auto& v : values) v *= 1e-42f;  // 100 counts become 1e-40
  ASSERT_TRUE(tycho::test::write_emd_file(tmp_ / "tiny.h5",
                                          {{4, 4, 32, 32}, tycho::test::emd_element::float32, values.data()}, &why))
      << why;
  auto run = [&](const std::string& file) {
    return run_command({tycho::test::tycho_exe(), "reconstruct", tmp_.write("run.toml", "[data]\nsource = \"emd\"\n"),
                        "--set", "data.path=" + file, "--set", "data.scan_step_A=0.5", "--set",
                        "data.detector_pixel_invA=0.06", "--set", "optics.energy_eV=80000", "--set",
                        "optics.semiangle_mrad=25", "--set", "optics.C10_A=-50", "--iterations", "1", "-q", "--set",
                        "output.previews=false", "-o", tmp_ / "result.zip"});
  };
  auto tiny = run(tmp_ / "tiny.h5");
  expect_error(tiny, {"tiny.h5", "the mean intensity is", "per detector pixel", "float32's smallest normal number",
                      "give the data in counts"});
  expect_no_file(tmp_ / "result.zip");
  auto counts = run(tmp_ / "counts.h5");
  ASSERT_TRUE(counts.exited_with(0)) << counts.describe();
  EXPECT_EQ(non_finite_values(tycho::test::load_result(tmp_ / "result.zip")), 0);
}

// ---- outputs

TEST_F(RunGuarantees, OutputNamingAnInputIsRefused) {
  const std::string data_copy = tmp_ / "data.h5";
  fs::copy_file(counts_file(), data_copy);
  const auto before = fs::file_size(data_copy);
  auto r = reconstruct({"--set", "data.path=" + data_copy, "-o", data_copy, "--overwrite"});
  expect_error(r, {"the result '" + data_copy + "' is an input of this run", "give another output file name"});
  EXPECT_EQ(fs::file_size(data_copy), before);

  // The config itself, and the --from file (even with --overwrite).
  const std::string config = tmp_ / "run.toml";
  fs::copy_file(example_config(), config);
  {
    std::string text;
    std::ifstream in(config);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    const std::string rel = "\"data/mos2_80kV_32x24_counts.h5\"";
    text.replace(text.find(rel), rel.size(), "\"" + counts_file() + "\"");
    std::ofstream(config) << text;
  }
  auto rc = run_command({tycho::test::tycho_exe(), "reconstruct", config, "-o", config, "--overwrite", "-q"});
  expect_error(rc, {"the result '" + config + "' is an input of this run"});

  const std::string a = tmp_ / "a.zip";
  ASSERT_TRUE(reconstruct({"-o", a}).exited_with(0));
  const auto a_bytes = fs::file_size(a);
  auto rf = reconstruct({"--from", a, "-o", a, "--overwrite"});
  expect_error(rf, {"the result '" + a + "' is an input of this run ('" + a + "')"});
  EXPECT_EQ(fs::file_size(a), a_bytes);

  // tycho preprocess: the data file is an input too.
  auto rp = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "--set", "data.path=" + data_copy,
                         "-o", data_copy, "--overwrite", "-q"});
  expect_error(rp, {"the prepared file '" + data_copy + "' is an input of this run"});
  EXPECT_EQ(fs::file_size(data_copy), before);
}

TEST_F(RunGuarantees, OutputThatIsNotARegularFileIsRefused) {
  const std::string target = tmp_.write("target.zip", "precious");
  const std::string link = tmp_ / "link.zip", fifo = tmp_ / "fifo.zip", folder = tmp_ / "folder";
  fs::create_symlink(target, link);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directory(folder);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {link, "is a symbolic link, not a regular file"},
      {fifo, "is a FIFO (named pipe), not a regular file"},
      {"/dev/null", "is a character device, not a regular file"},
      {folder, "is a folder; give a file name, e.g. '" + folder + "/result.zip'"}};
  for (const auto& [path, text] : cases) {
    SCOPED_TRACE(path);
    auto r = reconstruct({"-o", path, "--overwrite"});  // refused even when overwriting is asked for
    expect_error(r, {"the result '" + path + "' ", text});
  }
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  std::ifstream in(target);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "precious");
}

// Policy: an existing result is replaced only with --overwrite (or [output] overwrite = true).
TEST_F(RunGuarantees, ExistingResultIsReplacedOnlyWhenAsked) {
  const std::string out = tmp_ / "result.zip";
  ASSERT_TRUE(reconstruct({"-o", out}).exited_with(0));
  const auto first = tycho::test::load_result(out).manifest_json;
  auto again = reconstruct({"-o", out});
  expect_error(again, {"the result '" + out + "' already exists", "--overwrite", "[output] overwrite = true"});
  EXPECT_EQ(tycho::test::load_result(out).manifest_json, first);

  auto flag = reconstruct({"-o", out, "--overwrite", "--set", "reconstruct.seed=1"});
  ASSERT_TRUE(flag.exited_with(0)) << flag.describe();
  const auto second = tycho::test::load_result(out).manifest_json;
  EXPECT_NE(second, first);
  auto key = reconstruct({"-o", out, "--set", "output.overwrite=true", "--set", "reconstruct.seed=2"});
  ASSERT_TRUE(key.exited_with(0)) << key.describe();
  EXPECT_NE(tycho::test::load_result(out).manifest_json, second);

  // tycho preprocess follows the same policy.
  const std::string prepared = tmp_ / "prepared.zip";
  tmp_.write("prepared.zip", "not yet");
  auto pre = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "-q", "-o", prepared});
  expect_error(pre, {"the prepared file '" + prepared + "' already exists", "--overwrite"});
}

TEST_F(RunGuarantees, OutputFolderIsCheckedBeforeTheRun) {
  const std::string out = (tmp_.path() / "missing" / "result.zip").string();
  auto r = reconstruct({"-o", out});
  expect_error(r, {"the folder '" + (tmp_ / "missing") + "' of the result '" + out + "' does not exist"});
}

// ---- command-line numbers

TEST_F(RunGuarantees, CommandLineNumbersAreRangeChecked) {
  const std::string out = tmp_ / "result.zip";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--iterations", "99999999999999999999"},
       "--iterations: expected a whole number from 1 to 1000000000, got '99999999999999999999'"},
      {{"--stop-after", "99999999999999999999"}, "--stop-after: expected a whole number from 1 to 1000000000"},
      {{"--stop-after", "-3"}, "--stop-after: expected a whole number from 1 to 1000000000, got '-3'"},
      {{"--stop-after", "2x"}, "--stop-after: expected a whole number from 1 to 1000000000, got '2x'"},
      {{"--devices", "0,99999999999999999999"}, "--devices: expected a whole number from 0 to 65535"},
  };
  for (const auto& [args, text] : cases) {
    SCOPED_TRACE(args[1]);
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", example_config(), "-o", out};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_command(argv);
    EXPECT_TRUE(r.exited_with(2)) << r.describe();
    EXPECT_NE(r.err.find("tycho: error: " + text), std::string::npos) << r.describe();
    expect_no_file(out);
  }
  auto ev = run_command({tycho::test::tycho_exe(), "evaluate", out, "--truth", out, "--fov-fraction", "nan"});
  EXPECT_TRUE(ev.exited_with(2)) << ev.describe();
  EXPECT_NE(ev.err.find("--fov-fraction: expected a number in (0, 1], got 'nan'"), std::string::npos) << ev.err;
  auto plan = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--device-memory", "inf"});
  EXPECT_TRUE(plan.exited_with(2)) << plan.describe();
  EXPECT_NE(plan.err.find("--device-memory: expected a number in [0, 1000000000], got 'inf'"), std::string::npos)
      << plan.err;
}

}  // namespace
