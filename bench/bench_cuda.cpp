// tycho_bench_cuda: time the `cuda` engine (built with CUDA only).
//
// Each case drives the engine through the ABI with the runtime's own iteration loop
// (tycho::driver: epochs of seeded mini-batches, Adam on object and probe, the amplitude loss),
// as a session does, and times every iteration with CUDA events on the engine's stream (the
// iteration ends in collect_loss, which waits for the stream). After W warm-up iterations it
// times T (default 20) and reports the median, min and max in
//     µs per position·iteration = iteration time / positions × 1e6
// Cases (batch 128, 16 px object padding, 0.5 Å scan step, 0.06 Å⁻¹ detector pixel):
//   mos2      the shipped counts (examples/data, read through the emd source, shifted to FFT
//             order and scaled as the host does): 32 × 24 scan, 96 × 96 detector;
//   tiled96   a 128 × 128 scan with a 96 × 96 detector,
//   tiled128  a 128 × 128 scan with a 128 × 128 detector: random patterns (timing only; the
//             physics of these two is meaningless).
// The probe is a normalised Gaussian with a chirp (the timing does not depend on it). One JSON
// line per case is appended to bench/results.jsonl (bench_record.hpp, as tycho_bench_cpu does).
#include <tycho/core/config.hpp>
#include <tycho/core/driver.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/log.hpp>
#include <tycho/host/registry.hpp>

#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_record.hpp"

namespace {

using json = nlohmann::ordered_json;
using cfloat = std::complex<float>;
namespace th = tycho::host;

const std::string k_source_dir = TYCHO_SOURCE_DIR;
const std::string k_mos2_file = k_source_dir + "/examples/data/mos2_80kV_32x24_counts.h5";

struct options {
  std::string which = "all";
  int iterations = 20;
  int warmup = 3;
  int batch = 128;
  bool deterministic = false;
  std::string jsonl = k_source_dir + "/bench/results.jsonl";
  bool no_record = false;
  bool verbose = false;
  std::string engine = "cuda";  // "cpu" checks this program where no GPU is (wall-clock timing)
};

struct case_result {
  std::string name;
  int64_t scan[2] = {0, 0};
  int64_t detector[2] = {0, 0};
  int64_t object[2] = {0, 0};
  std::vector<double> ms;  // CUDA-event time of each timed iteration
  std::vector<double> wall_ms;
  double setup_s = 0, final_loss = 0, device_MiB = 0;

  int64_t positions() const { return scan[0] * scan[1]; }
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  double us(double ms_value) const { return ms_value * 1e3 / double(positions()); }
  double median_us() const { return us(median(ms)); }
  double min_us() const { return us(*std::min_element(ms.begin(), ms.end())); }
  double max_us() const { return us(*std::max_element(ms.begin(), ms.end())); }
  double wall_median_us() const { return us(median(wall_ms)); }
};

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}
void check(tycho_status s, const char* what) {
  if (s != TYCHO_OK) throw std::runtime_error(fmt::format("{}: {}", what, tycho::last_error()));
}

// Everything the engine's set-up needs.
struct problem {
  int64_t n0 = 0, n1 = 0, patterns = 0, scan[2] = {0, 0};
  std::vector<float> targets;
  double target_scale = 1;
  tycho::object_layout layout;
  std::vector<cfloat> object, probe;
};

// Positions and object size as the session lays them out (core/geometry).
void lay_out(problem& p, int64_t rx, int64_t ry, bool mos2_origin) {
  tycho::scan_geometry g{};
  g.scan_shape[0] = rx;
  g.scan_shape[1] = ry;
  g.step_A[0] = g.step_A[1] = 0.5;
  g.pixel_A[0] = 1.0 / (double(p.n0) * 0.06);
  g.pixel_A[1] = 1.0 / (double(p.n1) * 0.06);
  g.window[0] = p.n0;
  g.window[1] = p.n1;
  g.padding_px = 16;
  if (mos2_origin) {
    g.scan_origin_A[0] = 17.0;
    g.scan_origin_A[1] = 19.0;
  }
  p.layout = tycho::layout_object(g);
  p.patterns = rx * ry;
  p.scan[0] = rx;
  p.scan[1] = ry;
  p.object.assign(std::size_t(p.layout.shape[0] * p.layout.shape[1]), cfloat(1.f, 0.f));
  p.probe.resize(std::size_t(p.n0 * p.n1));
  double total = 0;
  for (int64_t a = 0; a < p.n0; ++a)
    for (int64_t b = 0; b < p.n1; ++b) {
      const double y = double(a - p.n0 / 2) / double(p.n0), x = double(b - p.n1 / 2) / double(p.n1);
      const double r2 = y * y + x * x;
      const auto v = std::exp(-r2 * 30.0) * std::polar(1.0, 12.0 * r2);
      p.probe[std::size_t(a * p.n1 + b)] = cfloat(v);
      total += std::norm(v);
    }
  for (auto& v : p.probe) v /= float(std::sqrt(total));
}

// The MoS2 counts through the emd source: shifted from centred to FFT order, scaled to the mean
// total intensity (as host/dataset.cpp does).
problem mos2_problem() {
  auto& reg = th::registry::global();
  const auto* src = reg.find(TYCHO_COMPONENT_SOURCE, "emd").as<tycho_source_vtable>();
  auto doc = tycho::config_document::parse("[data]\npath = \"" + k_mos2_file + "\"\n", "<bench>", "");
  tycho_config cfg{&doc.table_at("data"), "[data]", ""};
  tycho_source* s = nullptr;
  check(src->open(&cfg, &s), "opening the MoS2 data");
  tycho_dataset_info info{};
  info.struct_size = sizeof(info);
  check(src->info(s, &info), "reading the MoS2 data's info");
  problem p;
  p.n0 = info.detector_shape[0];
  p.n1 = info.detector_shape[1];
  const int64_t count = info.scan_shape[0] * info.scan_shape[1], m = p.n0 * p.n1;
  std::vector<float> centred(std::size_t(count * m));
  int64_t shape[3] = {count, p.n0, p.n1};
  DLTensor t{centred.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  check(src->read(s, 0, count, &t), "reading the MoS2 patterns");
  src->close(s);
  p.targets.resize(centred.size());
  double total = 0;
  for (int64_t j = 0; j < count; ++j)
    for (int64_t a = 0; a < p.n0; ++a)
      for (int64_t b = 0; b < p.n1; ++b) {
        const float v = centred[std::size_t((j * p.n0 + a) * p.n1 + b)];
        const int64_t a2 = (a + p.n0 - p.n0 / 2) % p.n0, b2 = (b + p.n1 - p.n1 / 2) % p.n1;  // ifftshift
        p.targets[std::size_t((j * p.n0 + a2) * p.n1 + b2)] = v;
        total += v;
      }
  p.target_scale = double(count) / total;
  lay_out(p, info.scan_shape[0], info.scan_shape[1], true);
  return p;
}

// Random patterns (a fixed xorshift stream) over an n × n scan with an nd × nd detector.
problem tiled_problem(int64_t scan, int64_t nd) {
  problem p;
  p.n0 = p.n1 = nd;
  const int64_t m = nd * nd, count = scan * scan;
  p.targets.resize(std::size_t(count * m));
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& v : p.targets) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = float(x >> 40) * (2.0f / 16777216.0f) * 25000.f / float(m);
  }
  p.target_scale = 1.0 / 25000.0;
  lay_out(p, scan, scan, false);
  return p;
}

case_result run_case(const std::string& name, const options& o) {
  auto t_setup = std::chrono::steady_clock::now();
  problem p = name == "mos2" ? mos2_problem() : tiled_problem(128, name == "tiled128" ? 128 : 96);
  auto& reg = th::registry::global();
  const std::string rec_toml = fmt::format(
      "[reconstruct]\nbatch_size = {}\ndeterministic = {}\n[reconstruct.object]\nlearning_rate = 5e-3\n"
      "[reconstruct.probe]\nlearning_rate = 5e-3\n",
      o.batch, o.deterministic ? "true" : "false");
  // (the cpu engine ignores `deterministic`: engines read only their own keys)
  auto doc = tycho::config_document::parse(rec_toml, "<tycho_bench_cuda>", "");
  tycho_config rec_cfg{&doc.table_at("reconstruct"), "[reconstruct]", ""};
  tycho_config obj_cfg{&doc.table_at("reconstruct.object"), "[reconstruct.object]", ""};
  tycho_config probe_cfg{&doc.table_at("reconstruct.probe"), "[reconstruct.probe]", ""};

  const auto* lvt = reg.find(TYCHO_COMPONENT_LOSS, "amplitude").as<tycho_loss_vtable>();
  const bool gpu = o.engine == "cuda";
  const auto* evt = reg.find(TYCHO_COMPONENT_ENGINE, o.engine).as<tycho_engine_vtable>();
  const auto* ovt = reg.find(TYCHO_COMPONENT_OPTIMIZER, "adam").as<tycho_optimizer_vtable>();
  tycho_loss* loss = nullptr;
  check(lvt->create(&rec_cfg, &loss), "loss create");

  size_t free_before = 0, total_mem = 0;
  if (gpu) {
    cuda_check(cudaSetDevice(0), "cudaSetDevice");
    cuda_check(cudaMemGetInfo(&free_before, &total_mem), "cudaMemGetInfo");
  }

  int64_t tshape[3] = {p.patterns, p.n0, p.n1}, pshape[2] = {p.patterns, 2};
  int64_t oshape[3] = {1, p.layout.shape[0], p.layout.shape[1]}, prshape[3] = {1, p.n0, p.n1};
  DLTensor targets{p.targets.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, tshape, nullptr, 0};
  DLTensor positions{p.layout.positions_px.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, pshape, nullptr, 0};
  DLTensor object{p.object.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, oshape, nullptr, 0};
  DLTensor probe{p.probe.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, prshape, nullptr, 0};
  tycho_engine_setup setup{};
  setup.struct_size = sizeof(setup);
  setup.config = &rec_cfg;
  setup.targets = &targets;
  setup.target_scale = p.target_scale;
  setup.positions_px = &positions;
  setup.object_init = &object;
  setup.probe_init = &probe;
  setup.loss = {lvt, loss};
  setup.device = gpu ? DLDevice{kDLCUDA, 0} : DLDevice{kDLCPU, 0};
  tycho_engine* eng = nullptr;
  check(evt->create(&setup, &eng), "engine create");

  std::vector<tycho::optimizer_binding> opts;
  tycho_optimizer *obj_opt = nullptr, *probe_opt = nullptr;
  DLTensor param{};
  check(evt->get_tensor(eng, TYCHO_TENSOR_OBJECT, &param), "get_tensor");
  check(ovt->create(&obj_cfg, &param, &obj_opt), "optimizer create");
  check(evt->get_tensor(eng, TYCHO_TENSOR_PROBE, &param), "get_tensor");
  check(ovt->create(&probe_cfg, &param, &probe_opt), "optimizer create");
  opts.push_back({ovt, obj_opt, TYCHO_TENSOR_OBJECT, TYCHO_TENSOR_OBJECT_GRAD, 1, {}});
  opts.push_back({ovt, probe_opt, TYCHO_TENSOR_PROBE, TYCHO_TENSOR_PROBE_GRAD, 1, {}});
  tycho::driver_options dopt;
  dopt.batch_size = o.batch;
  tycho::driver drv({evt, eng}, opts, p.patterns, dopt);

  case_result r;
  r.name = name;
  r.scan[0] = p.scan[0];
  r.scan[1] = p.scan[1];
  r.detector[0] = p.n0;
  r.detector[1] = p.n1;
  r.object[0] = p.layout.shape[0];
  r.object[1] = p.layout.shape[1];
  auto stream = static_cast<cudaStream_t>(evt->stream(eng));
  cudaEvent_t start = nullptr, stop = nullptr;
  if (gpu) {
    cuda_check(cudaEventCreate(&start), "cudaEventCreate");
    cuda_check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  r.setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_setup).count();
  for (int it = 0; it < o.warmup + o.iterations; ++it) {
    auto w0 = std::chrono::steady_clock::now();
    if (gpu) cuda_check(cudaEventRecord(start, stream), "cudaEventRecord");
    r.final_loss = drv.run_iteration();
    float ms = 0;
    if (gpu) {
      cuda_check(cudaEventRecord(stop, stream), "cudaEventRecord");
      cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    }
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
    if (!gpu) ms = float(wall);
    if (it >= o.warmup) {
      r.ms.push_back(ms);
      r.wall_ms.push_back(wall);
    }
    if (o.verbose)
      std::fprintf(stderr, "  %s iteration %d%s: %.3f ms (wall %.3f), loss %.6g\n", name.c_str(), it + 1,
                   it < o.warmup ? " (warm-up)" : "", double(ms), wall, r.final_loss);
  }
  if (gpu) {
    size_t free_after = 0;
    cuda_check(cudaMemGetInfo(&free_after, &total_mem), "cudaMemGetInfo");
    r.device_MiB = double(free_before - std::min(free_before, free_after)) / double(1 << 20);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  ovt->destroy(obj_opt);
  ovt->destroy(probe_opt);
  evt->destroy(eng);
  lvt->destroy(loss);
  if (!std::isfinite(r.final_loss)) throw std::runtime_error("case " + name + ": the loss is not finite");
  return r;
}

json record(const case_result& r, const options& o, const std::string& gpu, const tycho::bench::machine_info& m,
            const std::string& date, const std::string& commit) {
  json j;
  j["date"] = date;
  j["commit"] = commit;
  j["machine"] = {{"cpu", m.cpu}, {"cores", m.cores}, {"memory_GiB", std::round(m.memory_GiB * 10) / 10}};
  j["engine"] = o.engine;
  j["device"] = gpu;
  j["case"] = r.name;
  j["detector"] = {r.detector[0], r.detector[1]};
  j["probe_modes"] = 1;
  j["slices"] = 1;
  j["scan_shape"] = {r.scan[0], r.scan[1]};
  j["object_shape"] = {r.object[0], r.object[1]};
  j["batch"] = o.batch;
  j["deterministic"] = o.deterministic;
  j["timer"] = o.engine == "cuda" ? "cuda events on the engine stream, per iteration" : "wall clock, per iteration";
  j["us_per_position_iteration"] = std::round(r.median_us() * 1000) / 1000;
  j["us_min"] = std::round(r.min_us() * 1000) / 1000;
  j["us_max"] = std::round(r.max_us() * 1000) / 1000;
  j["us_wall_median"] = std::round(r.wall_median_us() * 1000) / 1000;
  j["iterations_timed"] = r.ms.size();
  j["iterations_warmup"] = o.warmup;
  j["device_memory_MiB"] = std::round(r.device_MiB * 10) / 10;
  j["setup_seconds"] = std::round(r.setup_s * 1000) / 1000;
  if (r.name != "mos2") j["note"] = "random patterns over a 128 x 128 scan: timing only, the physics is meaningless";
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"Time the tycho cuda engine: median µs per position·iteration (CUDA events) on MoS2 and on "
               "128 x 128 scans with 96² and 128² detectors."};
  app.add_option("--case", o.which, "mos2 | tiled96 | tiled128 | all")
      ->check(CLI::IsMember({"mos2", "tiled96", "tiled128", "all"}))
      ->capture_default_str();
  app.add_option("--iterations,-T", o.iterations, "timed iterations")->capture_default_str();
  app.add_option("--warmup,-W", o.warmup, "warm-up iterations before timing")->capture_default_str();
  app.add_option("--batch", o.batch, "mini-batch size, positions")->capture_default_str();
  app.add_flag("--deterministic", o.deterministic, "the engine's deterministic object gradient");
  app.add_option("--jsonl", o.jsonl, "append one JSON line per case here")->capture_default_str();
  app.add_flag("--no-record", o.no_record, "do not append to the jsonl file");
  app.add_flag("--verbose,-v", o.verbose, "print every iteration and the runtime's log");
  app.add_option("--engine", o.engine, "cuda, or cpu to check this program without a GPU")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  th::set_log_level(o.verbose ? TYCHO_LOG_INFO : TYCHO_LOG_WARNING);
  if (o.iterations < 1 || o.warmup < 0) {
    std::fprintf(stderr, "tycho_bench_cuda: --iterations must be >= 1 and --warmup >= 0\n");
    return 1;
  }
  try {
    int devices = 0;
    cudaDeviceProp prop{};
    if (o.engine == "cuda") {
      if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "tycho_bench_cuda: no CUDA device\n");
        return 1;
      }
      cuda_check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    } else {
      std::snprintf(prop.name, sizeof(prop.name), "cpu");
    }
    const std::vector<std::string> names =
        o.which == "all" ? std::vector<std::string>{"mos2", "tiled96", "tiled128"} : std::vector<std::string>{o.which};
    std::vector<case_result> results;
    int failed = 0;
    for (const auto& name : names) {
      std::fprintf(stderr, "%s: %d warm-up + %d timed iterations, batch %d on %s ...\n", name.c_str(), o.warmup,
                   o.iterations, o.batch, prop.name);
      try {
        results.push_back(run_case(name, o));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s: %s\n", name.c_str(), e.what());
        ++failed;
      }
    }
    fmt::print("{:<9} {:>9} {:>8} {:>9} {:>14} {:>9} {:>9} {:>9} {:>10} {:>8}\n", "case", "scan", "detector",
               "object", "median us/p.it", "min", "max", "wall med", "device MiB", "setup s");
    for (const auto& r : results)
      fmt::print("{:<9} {:>9} {:>8} {:>9} {:>14.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>10.0f} {:>8.2f}\n", r.name,
                 fmt::format("{}x{}", r.scan[0], r.scan[1]), fmt::format("{}x{}", r.detector[0], r.detector[1]),
                 fmt::format("{}x{}", r.object[0], r.object[1]), r.median_us(), r.min_us(), r.max_us(),
                 r.wall_median_us(), r.device_MiB, r.setup_s);
    fmt::print("us/p.it = CUDA-event time of one iteration (all batches, loss, Adam steps) / positions x 1e6: median "
               "(min, max) of {} timed iterations after {} warm-up, batch {}{}, on {}.\n",
               o.iterations, o.warmup, o.batch, o.deterministic ? ", deterministic" : "", prop.name);
    if (!o.no_record && !results.empty()) {
      auto machine = tycho::bench::this_machine();
      const std::string date = tycho::bench::iso_utc_now(), commit = tycho::bench::git_commit(k_source_dir);
      for (const auto& r : results)
        tycho::bench::append_line(o.jsonl, record(r, o, prop.name, machine, date, commit).dump());
      fmt::print("recorded {} line(s) in {}\n", results.size(), o.jsonl);
    }
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tycho_bench_cuda: %s\n", e.what());
    return 1;
  }
}
