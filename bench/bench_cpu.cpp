// tycho_bench_cpu: time the `cpu` engine through a host session, as `tycho reconstruct` runs it.
//
// For each case it builds a configuration, creates a tycho::host::session, runs W warm-up
// iterations then T timed ones, takes each iteration's wall time from the progress callback
// and reports the median (and min, max) in µs per position·iteration = seconds / positions × 1e6.
// Cases: "mos2", the shipped 32 × 24 counts (96² window); "mos2-128", the same counts padded to a
// 128² window ([preprocess] pad_detector_to, masked pixels); "tiled", the same patterns tiled over
// a 128 × 128 scan (timing only: its physics is wrong). With several cases each runs in a fresh process
// (this program re-executed through /proc/self/exe), so the peak RSS reported is per case.
// The FFT floor: after every timed iteration, in the same process, on the same window, with the
// same thread count and the engine's own FFTW plans (plugins/engines/cpu/fft_plan.cpp, same planning),
// one forward and one inverse 2-D transform per position of the scan, threads over positions as
// the engine does — the two transforms per position no gradient model can avoid. Engine and floor
// are timed alternately (A/B/A/B), so a busy machine slows both; the ratio of their medians,
// engine / floor, is the figure to drive down.
// One JSON line per case is appended to bench/results.jsonl (see bench/RESULTS.md).
#include <tycho/core/config.hpp>
#include <tycho/host/log.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/host/session.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../plugins/engines/cpu/fft_plan.hpp"
#include "bench_record.hpp"
#include "tiled_data.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using clock_type = std::chrono::steady_clock;

const std::string k_source_dir = TYCHO_SOURCE_DIR;
const std::string k_mos2_file = k_source_dir + "/examples/data/mos2_80kV_32x24_counts.h5";
constexpr int64_t k_mos2_scan[2] = {32, 24};
constexpr double k_tiled_min_free_GB = 10.0;
const char* const k_tiled_note =
    "tiled: the MoS2 counts patterns repeated over a larger scan; the physics is wrong "
    "(patterns do not match their positions), the figure is for timing only";
const char* const k_mos2_128_note =
    "mos2-128: the MoS2 counts padded to a 128 x 128 window with masked pixels "
    "([preprocess] pad_detector_to), to time a 128-pixel window on real data";

struct options {
  std::string which = "all";
  int iterations = 10;
  int warmup = 2;
  int threads = 0;
  int batch = 128;
  std::string planning = "measure";  // the engine's default
  std::string precision = "float32";  // [reconstruct] precision
  bool reference = false;             // [reconstruct] shift_groups = false: four 2-D FFTs per position
  std::string deterministic = "false";  // [reconstruct] deterministic (the cpu engine default): float sums, or fixed-point ones
  int slices = 1;                     // [reconstruct] slices (slice_thickness_A = 2 Å)
  int modes = 1;                      // [reconstruct] probe_modes
  std::string jsonl = k_source_dir + "/bench/results.jsonl";
  bool no_record = false;
  bool keep = false;
  bool verbose = false;
  int tiled_scan = 0;  // 0: 128, or 64 when the temp folder has < 10 GB free
  std::string tmp_dir;
  // Internal, for the per-case child processes.
  std::string result_file;
  std::string tiled_file;
  int tiled_rx = 0, tiled_ry = 0;
};

struct case_spec {
  std::string name;
  std::string data_path;
  int64_t scan[2] = {0, 0};
  bool mos2_origin = false;  // place the scan on the ground truth's grid (as examples/mos2.toml)
  int64_t pad_to = 0;        // > 0: [preprocess] pad_detector_to = [pad_to, pad_to]
};

struct case_result {
  std::string name;
  int64_t scan[2] = {0, 0};
  int64_t detector[2] = {0, 0};
  int batch = 0;
  int threads = 0;
  std::string planning;
  std::string precision = "float32";
  bool reference = false;
  bool deterministic = false;
  int slices = 1, modes = 1;
  int warmup = 0;
  std::vector<double> seconds;  // the timed iterations
  std::vector<double> floor_seconds;  // the FFT floor after each timed iteration: 2 FFTs per position
  // CPU seconds of this process (all its threads) over the same spans: on a shared machine the
  // work done, where wall time also counts the waiting for a core.
  std::vector<double> cpu_seconds, floor_cpu_seconds;
  double setup_s = 0;           // session construction: data read, probe, engine (FFT plans)
  double final_loss = 0;
  double peak_MiB = 0;
  double other_load = 0;         // cores busy with other processes during the timed iterations

  int64_t positions() const { return scan[0] * scan[1]; }
  static double median_of(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  double median_s() const { return median_of(seconds); }
  double us(double s) const { return s / double(positions()) * 1e6; }
  double median_us() const { return us(median_s()); }
  double floor_us() const { return us(median_of(floor_seconds)); }
  double cpu_us() const { return us(median_of(cpu_seconds)); }
  double floor_cpu_us() const { return us(median_of(floor_cpu_seconds)); }
  double cpu_ratio() const { return median_of(cpu_seconds) / median_of(floor_cpu_seconds); }
  double ratio() const { return median_s() / median_of(floor_seconds); }
  double min_us() const { return us(*std::min_element(seconds.begin(), seconds.end())); }
  double max_us() const { return us(*std::max_element(seconds.begin(), seconds.end())); }
};

json to_json(const case_result& r) {
  return json{{"name", r.name},         {"scan", {r.scan[0], r.scan[1]}},
              {"detector", {r.detector[0], r.detector[1]}},
              {"batch", r.batch},       {"threads", r.threads},
              {"planning", r.planning}, {"precision", r.precision}, {"reference", r.reference},
              {"deterministic", r.deterministic},
              {"slices", r.slices},     {"modes", r.modes},
              {"warmup", r.warmup},
              {"seconds", r.seconds},   {"floor_seconds", r.floor_seconds},
              {"cpu_seconds", r.cpu_seconds},   {"floor_cpu_seconds", r.floor_cpu_seconds}, {"setup_s", r.setup_s},
              {"final_loss", r.final_loss}, {"peak_MiB", r.peak_MiB},
              {"other_load", r.other_load}};
}

case_result from_json(const json& j) {
  case_result r;
  r.name = j.at("name");
  for (int a = 0; a < 2; ++a) {
    r.scan[a] = j.at("scan").at(a);
    r.detector[a] = j.at("detector").at(a);
  }
  r.batch = j.at("batch");
  r.threads = j.at("threads");
  r.planning = j.at("planning");
  r.precision = j.value("precision", "float32");
  r.reference = j.value("reference", false);
  r.deterministic = j.value("deterministic", false);
  r.slices = j.value("slices", 1);
  r.modes = j.value("modes", 1);
  r.warmup = j.at("warmup");
  r.seconds = j.at("seconds").get<std::vector<double>>();
  r.floor_seconds = j.at("floor_seconds").get<std::vector<double>>();
  r.cpu_seconds = j.at("cpu_seconds").get<std::vector<double>>();
  r.floor_cpu_seconds = j.at("floor_cpu_seconds").get<std::vector<double>>();
  r.setup_s = j.at("setup_s");
  r.final_loss = j.at("final_loss");
  r.peak_MiB = j.at("peak_MiB");
  r.other_load = j.at("other_load");
  return r;
}

std::string toml_string(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

// The configuration of one case: examples/mos2.toml with an absolute data path, the engine's
// threads and FFT planning, and no output.
std::string config_text(const case_spec& c, const options& o, int threads) {
  std::string t;
  t += "[data]\nsource = \"emd\"\npath = " + toml_string(c.data_path) + "\n\n";
  t += "[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = -150.0\n\n";
  t += "[preprocess]\nobject_padding_px = 16\n";
  if (c.pad_to > 0) t += fmt::format("pad_detector_to = [{}, {}]\n", c.pad_to, c.pad_to);
  if (c.mos2_origin) t += "scan_origin_A = [17.0, 19.0]\n";
  t += fmt::format(
      "\n[reconstruct]\nengine = \"cpu\"\niterations = {}\nbatch_size = {}\nloss = \"amplitude\"\n"
      "seed = 0\nthreads = {}\nfft_planning = \"{}\"\nprecision = \"{}\"\nshift_groups = {}\ndeterministic = {}\n\n",
      o.warmup + o.iterations, o.batch, threads, o.planning, o.precision, o.reference ? "false" : "true",
      o.deterministic);
  if (o.slices > 1) t += fmt::format("slices = {}\nslice_thickness_A = 2.0\n", o.slices);
  if (o.modes > 1) t += fmt::format("probe_modes = {}\n", o.modes);
  t += "\n";
  t += "[reconstruct.object]\noptimizer = \"adam\"\nlearning_rate = 5e-3\n\n";
  t += "[reconstruct.probe]\noptimizer = \"adam\"\nlearning_rate = 5e-3\n\n";
  t += "[output]\npreviews = false\n";
  return t;
}

int resolved_threads(const options& o) { return o.threads > 0 ? o.threads : omp_get_max_threads(); }

// CPU seconds used so far by this process, all threads.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Seconds for `positions` forward + inverse transform pairs of an n0 x n1 window on `threads`
// threads (static schedule over positions, each thread its own buffers, as the engine). The
// buffers hold zeros: FFTW's time does not depend on the values (no data-dependent branches;
// zeros are neither subnormal nor NaN), and zeros stay zeros, so nothing needs refilling.
template <class Real>
struct fft_floor {
  tycho::cpu::fft_plan_2d<Real> plan;
  std::vector<tycho::cpu::fft_buffer<Real>> a, b;
  int threads;
  fft_floor(int64_t n0, int64_t n1, bool measure, int threads_)
      : plan(n0, n1, measure), threads(threads_) {
    for (int t = 0; t < threads; ++t) {
      a.push_back(tycho::cpu::make_fft_buffer<Real>(n0 * n1));
      b.push_back(tycho::cpu::make_fft_buffer<Real>(n0 * n1));
      std::fill(a.back().get(), a.back().get() + n0 * n1, std::complex<Real>(0));
      std::fill(b.back().get(), b.back().get() + n0 * n1, std::complex<Real>(0));
    }
  }
  double seconds(int64_t positions) {
    auto t0 = clock_type::now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < positions; ++i) {
      int t = omp_get_thread_num();
      plan.forward(a[std::size_t(t)].get(), b[std::size_t(t)].get());
      plan.backward(b[std::size_t(t)].get(), a[std::size_t(t)].get());
    }
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  }
};

// Runs one case in this process.
case_result run_case(const case_spec& c, const options& o) {
  case_result r;
  r.name = c.name + (o.slices > 1 || o.modes > 1 ? fmt::format(" S={} M={}", o.slices, o.modes) : std::string());
  r.scan[0] = c.scan[0];
  r.scan[1] = c.scan[1];
  r.batch = o.batch;
  r.threads = resolved_threads(o);
  r.planning = o.planning;
  r.precision = o.precision;
  r.reference = o.reference;
  r.deterministic = o.deterministic == "true";
  r.slices = o.slices;
  r.modes = o.modes;
  r.warmup = o.warmup;

  auto doc = tycho::config_document::parse(config_text(c, o, r.threads), "<tycho_bench_cpu:" + c.name + ">",
                                           k_source_dir + "/examples");
  auto t0 = clock_type::now();
  tycho::host::session session(std::move(doc), tycho::host::registry::global());
  r.setup_s = std::chrono::duration<double>(clock_type::now() - t0).count();

  auto positions = session.get("positions_px");
  if (positions.shape.empty() || positions.shape[0] != r.positions())
    throw std::runtime_error(fmt::format("case {}: the session has {} positions, expected {} x {}", c.name,
                                         positions.shape.empty() ? 0 : positions.shape[0], c.scan[0], c.scan[1]));
  auto probe = session.get("probe");
  r.detector[0] = probe.shape.at(probe.shape.size() - 2);
  r.detector[1] = probe.shape.at(probe.shape.size() - 1);

  const bool measure = o.planning == "measure";
  std::optional<fft_floor<float>> floor32;
  std::optional<fft_floor<double>> floor64;
  if (o.precision == "float64")
    floor64.emplace(r.detector[0], r.detector[1], measure, r.threads);
  else
    floor32.emplace(r.detector[0], r.detector[1], measure, r.threads);
  // The floor of S slices and M modes: S·M forward + inverse pairs per position (each mode's
  // wave crosses each slice once forward and once back).
  const int64_t pairs = r.positions() * int64_t(o.slices) * int64_t(o.modes);
  auto floor_seconds = [&] { return floor64 ? floor64->seconds(pairs) : floor32->seconds(pairs); };
  floor_seconds();  // warm-up: the floor's buffers and code in cache, as the engine's after its warm-up

  int done = 0;
  tycho::bench::cpu_sample timed_start = tycho::bench::sample_cpu();
  double cpu_mark = process_cpu_seconds();
  session.run(o.warmup + o.iterations, [&](const tycho_progress& p) {
    ++done;
    if (done > o.warmup) {
      r.seconds.push_back(p.seconds);
      const double c0 = process_cpu_seconds();
      r.cpu_seconds.push_back(c0 - cpu_mark);
      r.floor_seconds.push_back(floor_seconds());  // interleaved: engine, floor, engine, floor ...
      r.floor_cpu_seconds.push_back(process_cpu_seconds() - c0);
    }
    cpu_mark = process_cpu_seconds();
    r.final_loss = p.loss;
    if (done == o.warmup) timed_start = tycho::bench::sample_cpu();
    if (done == o.warmup + o.iterations)
      r.other_load = tycho::bench::other_cpu_load(timed_start, tycho::bench::sample_cpu());
    if (o.verbose)
      std::fprintf(stderr, "  %s iteration %d%s: %.4f s, loss %.6g\n", c.name.c_str(), done,
                   done <= o.warmup ? " (warm-up)" : "", p.seconds, p.loss);
    return true;
  });
  if (r.seconds.empty()) throw std::runtime_error("no timed iterations");
  if (!std::isfinite(r.final_loss)) throw std::runtime_error("case " + c.name + ": the loss is not finite");
  r.peak_MiB = tycho::bench::peak_rss_MiB();
  return r;
}

// Runs one case in a fresh copy of this program, for a per-case peak RSS.
case_result run_case_in_child(const case_spec& c, const options& o) {
  fs::path result = fs::path(o.tmp_dir) / fmt::format("result-{}-{}.json", c.name, ::getpid());
  // argv[0] is the real path: the runtime finds its plugin folder from the module's location,
  // which the loader reports as argv[0] for the main program.
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {exe, "--case", c.name,
                                   "--iterations", std::to_string(o.iterations),
                                   "--warmup", std::to_string(o.warmup),
                                   "--threads", std::to_string(o.threads),
                                   "--batch", std::to_string(o.batch),
                                   "--fft-planning", o.planning,
                                   "--precision", o.precision,
                                   "--deterministic", o.deterministic,
                                   "--tmp-dir", o.tmp_dir,
                                   "--no-record", "--result-file", result.string()};
  if (o.verbose) args.push_back("--verbose");
  if (o.reference) args.push_back("--reference");
  args.insert(args.end(), {"--slices", std::to_string(o.slices), "--modes", std::to_string(o.modes)});
  if (c.name == "tiled") {
    args.insert(args.end(), {"--tiled-file", c.data_path, "--tiled-rx", std::to_string(c.scan[0]),
                             "--tiled-ry", std::to_string(c.scan[1])});
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) throw std::runtime_error(fmt::format("could not start the case '{}' process (errno {})", c.name, rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::error_code ec;
    fs::remove(result, ec);
    throw std::runtime_error(fmt::format("case '{}' failed ({})", c.name,
                                         WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                                           : fmt::format("signal {}", WTERMSIG(status))));
  }
  std::ifstream in(result);
  json j = json::parse(in);
  in.close();
  fs::remove(result);
  return from_json(j);
}

// The tiled data set: reuses a complete file from an earlier --keep run, else writes it.
case_spec prepare_tiled(const options& o) {
  case_spec c;
  c.name = "tiled";
  if (!o.tiled_file.empty()) {  // given by the parent process
    c.data_path = o.tiled_file;
    c.scan[0] = o.tiled_rx;
    c.scan[1] = o.tiled_ry;
    return c;
  }
  int n = o.tiled_scan;
  if (n == 0) {
    double free_GB = double(fs::space(o.tmp_dir).available) / 1e9;
    n = free_GB >= k_tiled_min_free_GB ? 128 : 64;
    if (n != 128)
      std::fprintf(stderr, "tiled: only %.1f GB free in %s (< %.0f GB): using a 64 x 64 scan instead of 128 x 128\n",
                   free_GB, o.tmp_dir.c_str(), k_tiled_min_free_GB);
  }
  c.scan[0] = c.scan[1] = n;
  c.data_path = (fs::path(o.tmp_dir) / fmt::format("mos2_tiled_{}x{}.h5", n, n)).string();
  if (fs::exists(c.data_path)) {
    std::fprintf(stderr, "tiled: reusing %s\n", c.data_path.c_str());
  } else {
    double gb = double(n) * n * 96 * 96 * 2 / 1e9;
    std::fprintf(stderr, "tiled: writing %s (%d x %d scan, %.2f GB of uint16) ...\n", c.data_path.c_str(), n, n, gb);
    auto t0 = clock_type::now();
    tycho::bench::write_tiled_emd(k_mos2_file, c.data_path, n, n);
    std::fprintf(stderr, "tiled: written in %.1f s\n",
                 std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return c;
}

json record(const case_result& r, const tycho::bench::machine_info& m, const std::string& date,
            const std::string& commit) {
  json j;
  j["date"] = date;
  j["commit"] = commit;
  j["machine"] = {{"cpu", m.cpu}, {"cores", m.cores}, {"memory_GiB", std::round(m.memory_GiB * 10) / 10}};
  j["engine"] = "cpu";
  j["device"] = "cpu";
  j["case"] = r.name;
  j["detector"] = {r.detector[0], r.detector[1]};
  j["probe_modes"] = r.modes;
  j["slices"] = r.slices;
  j["scan_shape"] = {r.scan[0], r.scan[1]};
  j["batch"] = r.batch;
  j["threads"] = r.threads;
  j["fft_planning"] = r.planning;
  j["precision"] = r.precision;
  j["deterministic"] = r.deterministic;
  // Per position and mode; several slices always take the reference path (cpu_engine.hpp).
  j["transforms"] =
      r.reference || r.slices > 1 ? "reference: 4 per position" : "shift groups: 3 per position + 1 per group";
  j["us_per_position_iteration"] = std::round(r.median_us() * 100) / 100;
  j["fft_floor_us_per_position"] = std::round(r.floor_us() * 100) / 100;
  j["engine_over_fft_floor"] = std::round(r.ratio() * 1000) / 1000;
  j["cpu_us_per_position_iteration"] = std::round(r.cpu_us() * 100) / 100;
  j["fft_floor_cpu_us_per_position"] = std::round(r.floor_cpu_us() * 100) / 100;
  j["engine_over_fft_floor_cpu"] = std::round(r.cpu_ratio() * 1000) / 1000;
  if (const char* w = std::getenv("OMP_WAIT_POLICY")) j["omp_wait_policy"] = w;
  // What picks the engine's and the losses' loop build (AVX2 where the CPU has it, unless
  // TYCHO_CPU_SIMD=sse2: plugins/engines/cpu/pointwise.hpp).
#if defined(__x86_64__)
  j["cpu_avx2"] = __builtin_cpu_supports("avx2") != 0;
#endif
  if (const char* simd = std::getenv("TYCHO_CPU_SIMD")) j["tycho_cpu_simd"] = simd;
  j["us_min"] = std::round(r.min_us() * 100) / 100;
  j["us_max"] = std::round(r.max_us() * 100) / 100;
  j["iterations_timed"] = r.seconds.size();
  j["iterations_warmup"] = r.warmup;
  j["peak_memory_MiB"] = std::round(r.peak_MiB * 10) / 10;
  j["setup_seconds"] = std::round(r.setup_s * 1000) / 1000;
  // Mean cores taken by other processes while the timed iterations ran (the machine may be shared).
  j["other_cpu_load_cores"] = std::round(r.other_load * 100) / 100;
  if (r.name == "tiled") j["note"] = k_tiled_note;
  if (r.name == "mos2-128") j["note"] = k_mos2_128_note;
  return j;
}

// The table's columns, and the ones print_table adds for the FFT floor.
void print_table(const std::vector<case_result>& results, bool per_case_rss) {
  fmt::print("{:<8} {:>9} {:>8} {:>5} {:>7} {:>8} {:>9} {:>13} {:>9} {:>9} {:>10} {:>7} {:>9} {:>10} {:>7} {:>9} {:>8} "
             "{:>7}\n",
             "case", "scan", "detector", "batch", "threads", "fft", "precision", "median us/p.it", "min", "max",
             "FFT floor", "ratio", "cpu us", "cpu floor", "cpu rat", "peak MiB", "setup s", "others");
  for (const auto& r : results)
    fmt::print("{:<8} {:>9} {:>8} {:>5} {:>7} {:>8} {:>9} {:>13.1f} {:>9.1f} {:>9.1f} {:>10.1f} {:>7.2f} {:>9.1f} {:>10.1f} "
               "{:>7.2f} {:>9.0f} {:>8.2f} {:>7.2f}\n",
               r.name, fmt::format("{}x{}", r.scan[0], r.scan[1]), fmt::format("{}x{}", r.detector[0], r.detector[1]),
               r.batch, r.threads, r.planning, r.precision, r.median_us(), r.min_us(), r.max_us(), r.floor_us(),
               r.ratio(), r.cpu_us(), r.floor_cpu_us(), r.cpu_ratio(), r.peak_MiB, r.setup_s, r.other_load);
  fmt::print("us/p.it = wall seconds of one iteration / positions x 1e6: median (min, max) of {} timed "
             "iterations after {} warm-up.\n",
             results.empty() ? 0 : results.front().seconds.size(), results.empty() ? 0 : results.front().warmup);
  fmt::print("FFT floor: us per position of one forward + one inverse FFTW transform of the window (the engine's "
             "plans, same threads), median of one pass after each timed iteration; ratio = engine median / floor median.\n");
  fmt::print("cpu us, cpu floor, cpu rat: the same with this process's CPU time (all threads) instead of wall time: "
             "the work, on a machine shared with others (with OMP_WAIT_POLICY=passive, idle threads spend none).\n");
  fmt::print("others: mean CPU cores busy with other processes during the timed iterations "
             "(from /proc/stat); well above 0 means the figures are skewed.\n");
  fmt::print("peak MiB: getrusage ru_maxrss, {}.\n",
             per_case_rss ? "each case in its own process"
                          : "of this whole process (it includes writing the tiled file, if done here)");
  for (const auto& r : results)
    if (r.name == "tiled") fmt::print("note: {}.\n", k_tiled_note);
  for (const auto& r : results)
    if (r.name == "mos2-128") fmt::print("note: {}.\n", k_mos2_128_note);
}

int run(const options& o) {
  if (o.warmup < 0 || o.iterations < 1) throw std::runtime_error("--iterations must be >= 1 and --warmup >= 0");
  fs::create_directories(o.tmp_dir);
  std::vector<std::string> names =
      o.which == "all" ? std::vector<std::string>{"mos2", "mos2-128", "tiled"} : std::vector<std::string>{o.which};
  const bool children = names.size() > 1;

  std::vector<case_spec> specs;
  bool made_tiled = false;
  for (const auto& name : names) {
    if (name == "mos2") {
      specs.push_back({"mos2", k_mos2_file, {k_mos2_scan[0], k_mos2_scan[1]}, true, 0});
    } else if (name == "mos2-128") {
      specs.push_back({"mos2-128", k_mos2_file, {k_mos2_scan[0], k_mos2_scan[1]}, true, 128});
    } else {
      specs.push_back(prepare_tiled(o));
      made_tiled = o.tiled_file.empty();
    }
  }

  std::vector<case_result> results;
  std::string failure;
  for (const auto& c : specs) {
    try {
      if (o.result_file.empty())
        std::fprintf(stderr, "%s: %lld x %lld scan, %d warm-up + %d timed iterations, %d threads, fft %s, %s ...\n",
                     c.name.c_str(), (long long)c.scan[0], (long long)c.scan[1], o.warmup, o.iterations,
                     resolved_threads(o), o.planning.c_str(), o.precision.c_str());
      results.push_back(children ? run_case_in_child(c, o) : run_case(c, o));
    } catch (const std::exception& e) {
      failure += fmt::format("{}{}", failure.empty() ? "" : "; ", e.what());
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }
  if (made_tiled && !o.keep) {
    std::error_code ec;
    fs::remove(specs.back().data_path, ec);  // the tiled spec is the last one
  }

  if (!o.result_file.empty()) {  // a child: hand the result to the parent
    if (results.size() != 1) return 1;
    std::ofstream out(o.result_file);
    out << to_json(results.front()).dump() << '\n';
    return out ? 0 : 1;
  }

  print_table(results, children);
  if (!o.no_record && !results.empty()) {
    auto machine = tycho::bench::this_machine();
    std::string date = tycho::bench::iso_utc_now(), commit = tycho::bench::git_commit(k_source_dir);
    for (const auto& r : results) tycho::bench::append_line(o.jsonl, record(r, machine, date, commit).dump());
    fmt::print("recorded {} line(s) in {}\n", results.size(), o.jsonl);
  }
  return failure.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  o.tmp_dir = (fs::temp_directory_path() / "tycho-bench").string();
  CLI::App app{"Time the tycho cpu engine: median µs per position·iteration on the MoS2 data set "
               "and on a larger tiled scan (see bench/RESULTS.md)."};
  app.add_option("--case", o.which, "mos2 | mos2-128 | tiled | all")
      ->check(CLI::IsMember({"mos2", "mos2-128", "tiled", "all"}))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->capture_default_str();
  app.add_option("--iterations,-T", o.iterations, "timed iterations")->capture_default_str();
  app.add_option("--warmup,-W", o.warmup, "warm-up iterations before timing")->capture_default_str();
  app.add_option("--threads", o.threads, "engine threads (0 = all OpenMP threads)")->capture_default_str();
  app.add_option("--fft-planning", o.planning, "FFTW planning")
      ->check(CLI::IsMember({"estimate", "measure"}))
      ->capture_default_str();
  app.add_option("--precision", o.precision, "[reconstruct] precision of the engine")
      ->check(CLI::IsMember({"float32", "float64"}))
      ->capture_default_str();
  app.add_flag("--reference", o.reference,
               "the engine's reference path ([reconstruct] shift_groups = false: 4 FFTs per position)");
  app.add_option("--deterministic", o.deterministic,
                 "[reconstruct] deterministic: fixed-point sums (the same bits on any number of ranks) or float sums")
      ->check(CLI::IsMember({"true", "false"}))
      ->capture_default_str();
  app.add_option("--slices", o.slices, "object slices (multislice, 2 Å apart)")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--modes", o.modes, "probe modes")->check(CLI::Range(1, 16))->capture_default_str();
  app.add_option("--batch", o.batch, "mini-batch size, positions")->capture_default_str();
  app.add_option("--jsonl", o.jsonl, "append one JSON line per case here")->capture_default_str();
  app.add_flag("--no-record", o.no_record, "do not append to the jsonl file");
  app.add_flag("--keep", o.keep, "keep the tiled data file (reused by the next run)");
  app.add_option("--tiled-scan", o.tiled_scan, "tiled scan size N (N x N); default 128, 64 if disk is short");
  app.add_option("--tmp-dir", o.tmp_dir, "folder for the tiled data file")->capture_default_str();
  app.add_flag("--verbose,-v", o.verbose, "print every iteration and the runtime's log");
  // Internal: how a parent hands one case to a fresh process.
  app.add_option("--result-file", o.result_file)->group("");
  app.add_option("--tiled-file", o.tiled_file)->group("");
  app.add_option("--tiled-rx", o.tiled_rx)->group("");
  app.add_option("--tiled-ry", o.tiled_ry)->group("");
  CLI11_PARSE(app, argc, argv);

  tycho::host::set_log_level(o.verbose ? TYCHO_LOG_INFO : TYCHO_LOG_WARNING);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tycho_bench_cpu: %s\n", e.what());
    return 1;
  }
}
