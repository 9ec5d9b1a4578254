// tycho_bench_startup: the start-up overhead of a reconstruct call in a process that is already
// running, through the embedding C API (what a Python, Julia or MATLAB caller pays per call).
//
// The first tycho_session_create of the process also loads the plugins (and starts MPI under a
// launcher); it is reported apart as "first create". Then R times: tycho_session_create from
// the MoS2 configuration (reads the data, builds the probe, creates the engine: FFT plans or
// cuFFT plans and device buffers), one tycho_session_run of 2 iterations, destroy. The overhead
// of a call is what comes before the reconstruction proper:
//
//     overhead = create + (first iteration − second iteration)
//
// (the first iteration's extra cost is lazy initialisation: CUDA context, allocator pools).
// Medians over R. One JSON line is appended to bench/results.jsonl. Under mpirun every rank
// measures and rank 0 prints.
#include <tycho/tycho.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_record.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
const std::string k_source_dir = TYCHO_SOURCE_DIR;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string config_text(const std::string& engine, int threads) {
  return fmt::format(
      "[data]\nsource = \"emd\"\npath = \"data/mos2_80kV_32x24_counts.h5\"\n"
      "[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = -150.0\n"
      "[preprocess]\nobject_padding_px = 16\nscan_origin_A = [17.0, 19.0]\n"
      "[reconstruct]\nengine = \"{}\"\niterations = 2\nbatch_size = 128\n{}"
      "[output]\npreviews = false\n",
      engine, engine == "cpu" && threads > 0 ? fmt::format("threads = {}\n", threads) : std::string());
}

struct iteration_times {
  std::vector<double> seconds;
};

int record_iteration(const tycho_progress* p, void* user) {
  static_cast<iteration_times*>(user)->seconds.push_back(p->seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tycho_bench_startup: overhead of a reconstruct call in a running process"};
  std::string engine = "cpu";
  int repeats = 10, threads = 0;
  std::string jsonl = k_source_dir + "/bench/results.jsonl";
  bool no_record = false;
  app.add_option("--engine", engine, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--repeats", repeats, "calls to time (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "cpu engine threads (0: all)");
  app.add_option("--jsonl", jsonl, "append the record here");
  app.add_flag("--no-record", no_record, "do not append to the JSONL file");
  CLI11_PARSE(app, argc, argv);

  const std::string text = config_text(engine, threads);
  const std::string base = k_source_dir + "/examples";
  std::vector<double> create_s, first_s, second_s, overhead_s;
  double first_create_s = 0;
  int32_t rank = 0, world = 1;
  for (int i = 0; i <= repeats; ++i) {
    tycho_session* s = nullptr;
    auto t0 = clock_type::now();
    if (tycho_session_create(text.c_str(), base.c_str(), &s) != TYCHO_OK) {
      std::fprintf(stderr, "tycho_bench_startup: %s\n", tycho_last_error());
      return 1;
    }
    const double create = seconds_since(t0);
    rank = tycho_session_rank(s);
    world = tycho_session_world_size(s);
    iteration_times it;
    if (tycho_session_run(s, 2, &record_iteration, &it) != TYCHO_OK || it.seconds.size() != 2) {
      std::fprintf(stderr, "tycho_bench_startup: %s\n", tycho_last_error());
      tycho_session_destroy(s);
      return 1;
    }
    tycho_session_destroy(s);
    if (i == 0) {  // plugin loading (and MPI start under a launcher) happen here, once
      first_create_s = create;
      continue;
    }
    create_s.push_back(create);
    first_s.push_back(it.seconds[0]);
    second_s.push_back(it.seconds[1]);
    overhead_s.push_back(create + std::max(0.0, it.seconds[0] - it.seconds[1]));
  }
  tycho_shutdown();
  if (rank != 0) return 0;

  const auto machine = tycho::bench::this_machine();
  fmt::print("tycho_bench_startup: engine {}, {} rank(s), MoS2 32 x 24 scan, 96 x 96 detector, {} calls\n", engine,
             world, repeats);
  fmt::print("  first create of the process (plugins loaded): {:.3f} s\n", first_create_s);
  fmt::print("  create (median)                 {:.3f} s\n", median(create_s));
  fmt::print("  first iteration (median)        {:.3f} s\n", median(first_s));
  fmt::print("  second iteration (median)       {:.3f} s\n", median(second_s));
  fmt::print("  overhead per call (median)      {:.3f} s   (target < 0.5 s on one GPU)\n", median(overhead_s));
  if (!no_record) {
    nlohmann::ordered_json j = {
        {"date", tycho::bench::iso_utc_now()},
        {"commit", tycho::bench::git_commit(k_source_dir)},
        {"machine", {{"cpu", machine.cpu}, {"cores", machine.cores}, {"memory_GiB", machine.memory_GiB}}},
        {"benchmark", "startup"},
        {"engine", engine},
        {"world_size", world},
        {"case", "mos2"},
        {"repeats", repeats},
        {"first_create_s", first_create_s},
        {"create_s_median", median(create_s)},
        {"first_iteration_s_median", median(first_s)},
        {"second_iteration_s_median", median(second_s)},
        {"overhead_s_median", median(overhead_s)}};
    tycho::bench::append_line(jsonl, j.dump());
  }
  return 0;
}
