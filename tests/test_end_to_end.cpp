// The `tycho` command run exactly as a user runs it, on the real MoS2 data: reconstruct with
// the shipped example config, evaluate against the ground truth, read the result back (through
// the zip format plugin and through NumPy), and repeat a run bit for bit.
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/host/result_record.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <complex>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "run_command.hpp"
#include "built_in_plugins.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
using tycho::test::command_result;
using tycho::test::run_command;

namespace {

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }
std::string ground_truth() { return tycho::test::example_data("mos2_ground_truth.npz"); }

// A registry of the built-in plugins, to read results through the zip format as the host does.
using tycho::test::plugins;

using tycho::test::load_result;

bool is_png(const std::string& path) {
  static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::ifstream in(path, std::ios::binary);
  char head[8] = {};
  if (!in.read(head, 8)) return false;
  return std::memcmp(head, signature, 8) == 0;
}

struct progress_line {
  int64_t iteration, total;
  double loss, seconds;
};

// "iteration    3/100  loss 4.033776e-02  0.220 s/it"
std::vector<progress_line> progress_lines(const command_result& r) {
  static const std::regex re(
      R"(^iteration\s+(\d+)/(\d+)\s+loss\s+([-+0-9.eEinfINFa]+)\s+([0-9.]+) s/it$)");
  std::vector<progress_line> lines;
  for (const auto& line : r.out_lines()) {
    std::smatch m;
    if (std::regex_match(line, m, re))
      lines.push_back({std::stoll(m[1]), std::stoll(m[2]), std::stod(m[3]), std::stod(m[4])});
  }
  return lines;
}

class EndToEnd : public ::testing::Test {
 protected:
  command_result reconstruct(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", example_config()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv);
  }

  nlohmann::json evaluate(const std::string& result) {
    auto r = run_command({tycho::test::tycho_exe(), "evaluate", result, "--truth", ground_truth()});
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    try {
      return nlohmann::json::parse(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "evaluate did not print JSON: " << e.what() << "\n" << r.describe();
      return {};
    }
  }

  // A full run of the example config (100 iterations), its files, its progress lines, its loss
  // history and its accuracy; returns the Pearson correlation.
  double full_run_and_evaluate(const std::vector<std::string>& extra) {
    const std::string result = tmp_ / "result.zip";
    std::vector<std::string> args = {"-o", result};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = reconstruct(args);
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    if (!r.exited_with(0)) return NAN;

    // The result and its three previews, each announced on stdout.
    EXPECT_NE(r.out.find("wrote " + result + "\n"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::is_regular_file(result));
    for (const char* png : {"result.object_phase.png", "result.object_amplitude.png", "result.probe.png"}) {
      const std::string p = tmp_ / png;
      EXPECT_TRUE(is_png(p)) << p << " missing or not a PNG";
      EXPECT_NE(r.out.find("wrote " + p + "\n"), std::string::npos) << r.out;
    }

    // The summary after the files: iterations, time, final loss, where the result and sheet went.
    EXPECT_NE(r.out.find("done: 100 iterations in "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("; result in " + result + ", previews in " + std::string(tmp_ / "result.sheet.png") + "\n"),
              std::string::npos)
        << r.out;

    // One progress line per iteration: 1..100 of 100, finite positive losses.
    auto lines = progress_lines(r);
    EXPECT_EQ(lines.size(), 100u) << r.out;
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(lines[i].iteration, int64_t(i + 1));
      EXPECT_EQ(lines[i].total, 100);
      EXPECT_TRUE(std::isfinite(lines[i].loss) && lines[i].loss > 0) << lines[i].loss;
      EXPECT_GE(lines[i].seconds, 0.0);
    }

    // The loss history in the file: 100 values, the ones printed, decreasing overall.
    auto rec = load_result(result);
    const auto& history = rec.array("loss_history", result);
    EXPECT_EQ(history.dtype.code, kDLFloat);
    EXPECT_EQ(history.dtype.bits, 64);
    EXPECT_EQ(history.shape, std::vector<int64_t>{100});
    if (history.count() == 100 && history.dtype.bits == 64) {
      const double* h = history.as<double>();
      for (size_t i = 0; i < lines.size() && i < 100; ++i)
        EXPECT_NEAR(lines[i].loss, h[i], 1e-6 * std::abs(h[i])) << "iteration " << i + 1;
      EXPECT_LT(h[99], h[0]) << "loss did not decrease: first " << h[0] << ", last " << h[99];
      double best_late = h[90];
      for (int i = 90; i < 100; ++i) best_late = std::min(best_late, h[i]);
      EXPECT_LT(best_late, 0.5 * h[0]) << "first " << h[0] << ", best of the last ten " << best_late;
    }
    auto manifest = nlohmann::json::parse(rec.manifest_json);
    EXPECT_EQ(manifest.at("history").at("iterations"), 100);

    // The accuracy figure, as `tycho evaluate` prints it.
    auto j = evaluate(result);
    if (!j.is_object() || !j.contains("pearson")) {
      ADD_FAILURE() << "no pearson in " << j.dump();
      return NAN;
    }
    EXPECT_EQ(j.value("iterations", -1), 100) << j.dump();
    EXPECT_TRUE(j.at("pearson").is_number()) << j.dump();
    return j.at("pearson").get<double>();
  }

  tycho::test::temp_folder tmp_;
};

TEST_F(EndToEnd, CountsReachesAccuracy) {
  double pearson = full_run_and_evaluate({});
  EXPECT_GE(pearson, 0.90);  // ≈ 0.916 at the time of writing
  RecordProperty("pearson", std::to_string(pearson));
  std::cout << "counts: pearson " << pearson << "\n";
}

TEST_F(EndToEnd, CleanReachesAccuracy) {
  const std::string clean = tycho::test::shared_data("mos2_80kV_32x24_clean.h5");
  if (!fs::exists(clean)) GTEST_SKIP() << "shared data " << clean << " not present";
  double pearson = full_run_and_evaluate({"--set", "data.path=" + fs::canonical(clean).string()});
  EXPECT_GE(pearson, 0.97);  // ≈ 0.991 at the time of writing
  RecordProperty("pearson", std::to_string(pearson));
  std::cout << "clean: pearson " << pearson << "\n";
}

TEST_F(EndToEnd, NumpyLoadsResult) {
  const std::string& python = tycho::test::python_with_numpy();
  if (python.empty()) GTEST_SKIP() << "no python3 with numpy";
  auto r = reconstruct({"--iterations", "3", "-q", "-o", tmp_ / "result.zip"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(progress_lines(r).empty()) << "-q still printed progress:\n" << r.out;

  // Exactly what a user would type, in the result's folder.
  auto listed = run_command(
      {python, "-c", "import numpy; d = numpy.load('result.zip'); print(sorted(d.files))"}, {},
      tmp_.path().string());
  ASSERT_TRUE(listed.exited_with(0)) << listed.describe();
  for (const char* name : {"'object'", "'probe'", "'positions_px'", "'positions_A'", "'loss_history'"})
    EXPECT_NE(listed.out.find(name), std::string::npos) << name << " not in " << listed.out;

  // Shapes, dtypes and the manifest, as Python sees them.
  const char* script = R"PY(
import json, sys, zipfile
import numpy
d = numpy.load(sys.argv[1])
out = {"files": sorted(d.files), "arrays": {}}
for name in d.files:
    if name.endswith(".json"):
        continue
    a = d[name]
    out["arrays"][name] = {"dtype": str(a.dtype), "shape": list(a.shape),
                           "finite": bool(numpy.all(numpy.isfinite(a)))}
with zipfile.ZipFile(sys.argv[1]) as z:
    out["members"] = sorted(z.namelist())
    out["manifest"] = json.loads(z.read("manifest.json").decode("utf-8"))
print(json.dumps(out))
)PY";
  auto py = run_command({python, "-c", script, tmp_ / "result.zip"});
  ASSERT_TRUE(py.exited_with(0)) << py.describe();
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(py.out)) << py.out;
  const auto& a = j.at("arrays");
  ASSERT_TRUE(a.contains("object")) << j.dump();
  EXPECT_EQ(a["object"]["dtype"], "complex64");
  ASSERT_EQ(a["object"]["shape"].size(), 3u) << a["object"].dump();
  EXPECT_EQ(a["object"]["shape"][0], 1);
  EXPECT_GE(a["object"]["shape"][1].get<int64_t>(), 96);
  EXPECT_GE(a["object"]["shape"][2].get<int64_t>(), 96);
  EXPECT_EQ(a["probe"]["dtype"], "complex64");
  EXPECT_EQ(a["probe"]["shape"], nlohmann::json::parse("[1, 96, 96]"));
  EXPECT_EQ(a["positions_px"]["dtype"], "float64");
  EXPECT_EQ(a["positions_px"]["shape"], nlohmann::json::parse("[768, 2]"));
  EXPECT_EQ(a["positions_A"]["dtype"], "float64");
  EXPECT_EQ(a["positions_A"]["shape"], nlohmann::json::parse("[768, 2]"));
  EXPECT_EQ(a["loss_history"]["dtype"], "float64");
  EXPECT_EQ(a["loss_history"]["shape"], nlohmann::json::parse("[3]"));
  for (const auto& [name, info] : a.items()) EXPECT_TRUE(info["finite"].get<bool>()) << name;
  EXPECT_NE(std::find(j["members"].begin(), j["members"].end(), "manifest.json"), j["members"].end())
      << j["members"].dump();

  const auto& m = j.at("manifest");
  EXPECT_EQ(m.value("format_version", -1), 1) << m.dump();
  const auto& px = m.at("calibration").at("object_pixel_A");
  ASSERT_EQ(px.size(), 2u) << px.dump();
  EXPECT_NEAR(px[0].get<double>(), 0.1736111, 1e-6);
  EXPECT_NEAR(px[1].get<double>(), 0.1736111, 1e-6);
  EXPECT_EQ(m.at("history").at("iterations"), 3);
  EXPECT_EQ(m.at("history").at("loss").size(), 3u);
}

// The object of a 3-iteration run, bit for bit. The CPU engine plans FFTs with FFTW_ESTIMATE,
// the batches follow a seeded permutation and patterns go to threads by a static schedule, so
// runs repeat exactly, with one thread or with all.
TEST_F(EndToEnd, DeterministicRepeat) {
  std::vector<tycho::host::loaded_record> runs;
  for (const char* name : {"a.zip", "b.zip"}) {
    auto r = reconstruct({"--iterations", "3", "-q", "--set", "reconstruct.threads=1", "-o", tmp_ / name});
    ASSERT_TRUE(r.exited_with(0)) << r.describe();
    runs.push_back(load_result(tmp_ / name));
  }
  for (const char* name : {"object", "probe", "loss_history", "positions_px"}) {
    const auto& a = runs[0].array(name, "a.zip");
    const auto& b = runs[1].array(name, "b.zip");
    EXPECT_EQ(a.shape, b.shape) << name;
    EXPECT_TRUE(a.bytes == b.bytes) << name << " differs between two identical runs";
  }
}

// Same with the default (all) threads.
TEST_F(EndToEnd, DeterministicRepeatAllThreads) {
  std::vector<tycho::host::loaded_record> runs;
  for (const char* name : {"a.zip", "b.zip", "c.zip"}) {
    auto r = reconstruct({"--iterations", "3", "-q", "-o", tmp_ / name});
    ASSERT_TRUE(r.exited_with(0)) << r.describe();
    runs.push_back(load_result(tmp_ / name));
  }
  for (size_t k = 1; k < runs.size(); ++k) {
    const auto& a = runs[0].array("object", "a.zip");
    const auto& b = runs[k].array("object", "other");
    ASSERT_EQ(a.bytes.size(), b.bytes.size());
    float worst = 0;
    const auto* pa = a.as<std::complex<float>>();
    const auto* pb = b.as<std::complex<float>>();
    for (int64_t i = 0; i < a.count(); ++i) worst = std::max(worst, std::abs(pa[i] - pb[i]));
    EXPECT_TRUE(a.bytes == b.bytes) << "object of run " << k << " differs; max |Δ| = " << worst;
  }
}

}  // namespace

namespace {
// The default fft_planning = "measure": the first process measures the window's plans and keeps
// them as FFTW wisdom in $TYCHO_FFT_WISDOM_DIR, a second process makes the same plans from the
// file (and does not rewrite it), so the two results are bit for bit the same. A folder that
// cannot be made falls back to FFTW_ESTIMATE and the run still succeeds.
TEST_F(EndToEnd, MeasuredPlansComeFromTheWisdomFile) {
  const std::string wisdom = tmp_ / "wisdom";
  auto run = [&](const std::string& out, const std::string& dir) {
    return run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations", "2", "-q", "-o",
                        tmp_ / out},
                       {"TYCHO_FFT_WISDOM_DIR=" + dir});
  };
  auto a = run("a.zip", wisdom);
  ASSERT_TRUE(a.exited_with(0)) << a.describe();
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(wisdom))
    if (e.path().extension() == ".wisdom") files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << "one wisdom file (float32, 96 x 96) in " << wisdom;
  EXPECT_EQ(files[0].filename().string().rfind("fftw-f32-96x96-", 0), 0u) << files[0];
  std::ifstream in(files[0]);
  const std::string first((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(first.find("fftwf_wisdom"), std::string::npos) << first.substr(0, 200);
  const auto written = fs::last_write_time(files[0]);

  auto b = run("b.zip", wisdom);
  ASSERT_TRUE(b.exited_with(0)) << b.describe();
  EXPECT_EQ(fs::last_write_time(files[0]), written) << "the second run rewrote the wisdom file";
  auto ra = load_result(tmp_ / "a.zip"), rb = load_result(tmp_ / "b.zip");
  for (const char* name : {"object", "probe", "loss_history"})
    EXPECT_TRUE(ra.array(name, "a.zip").bytes == rb.array(name, "b.zip").bytes)
        << name << " differs between two runs with the same wisdom file";

  auto c = run("c.zip", "/proc/tycho-no-such-folder");
  EXPECT_TRUE(c.exited_with(0)) << c.describe();
}
}  // namespace
