// The host side of the memory planner: this machine's memory, the session's check, and the
// `tycho plan` command (resolve_run_geometry, run_memory_problem and preview_run live in
// session.cpp, beside the config readers they share with the session).
#include "tycho/host/run_plan.hpp"
#include "geometry/time_plan.hpp"
#include "runtime/geometry_search.hpp"

#include <tycho/core/error.hpp>

#include <toml++/toml.h>

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <optional>
#include <ostream>
#include <string>
#include <thread>

#include "settings/config_read.hpp"
#include "settings/settings_read.hpp"
#include "data/chunked_preprocess.hpp"
#include "data/target_residency.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/settings.hpp"
#include "settings/iteration_settings.hpp"

namespace tycho::host {

namespace {
int64_t ceil_div_i64(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }

std::string dtype_text(DLDataType t) {
  const char* kind = t.code == kDLUInt ? "uint" : t.code == kDLInt ? "int" : t.code == kDLFloat ? "float" : "type";
  return cat(kind, int(t.bits));
}
// Host memory bandwidth, bytes/s: the best of three 64 MiB copies, what reading patterns from a
// warm page cache costs at most (a cold read is the disk's speed).
double copy_bandwidth() {
  const std::size_t n = std::size_t(64) << 20;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 0;
  for (int k = 0; k < 3; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, double(n) / s);
    a[std::size_t(k)] = b[n - 1 - std::size_t(k)];  // keeps the copies from being elided
  }
  return best;
}

// The target residencies of a host engine's run: the bytes of each, and what reading the targets
// per batch from disk costs per iteration.
std::string residency_options(const memory_problem& p, const tycho_dataset_info& info, const config_document& doc) {
  memory_problem in_memory = p, streamed = p;
  in_memory.targets_streamed = false;
  streamed.targets_streamed = true;
  const uint64_t per_iteration = uint64_t(ceil_div_i64(p.patterns, p.devices)) * uint64_t(info.detector_shape[0]) *
                                 uint64_t(info.detector_shape[1]) * uint64_t(p.target_bytes);  // uint16 counts: 2
  const double bandwidth = copy_bandwidth();
  // Refused as the run refuses it ("gpu" is no residency), rather than echoed in the table.
  const std::string asked = residency_name(read_target_residency(doc));
  return cat("target residency ([reconstruct] target_residency = \"", asked, "\"; docs/streaming.md):\n",
             "  device, host  ", human_bytes(memory_total(in_memory)), " in all: every target in memory\n",
             "  disk          ", human_bytes(memory_total(streamed)),
             " in all: one batch held, the next read ahead, from a prepared file's patterns; reads ",
             human_bytes(per_iteration), " per iteration (per process), ",
             bandwidth > 0 ? cat(std::lround(double(per_iteration) / bandwidth * 1e3), " ms at this machine's ",
                                 std::lround(bandwidth / 1e9 * 10) / 10.0, " GB/s copy bandwidth (a warm page cache)")
                           : std::string("bandwidth unknown"),
             "\n");
}

// What a run's sums promise (docs/guarantees.md): an engine with deterministic sums gives the
// same bits on any number of ranks, threads and devices; float sums round as each batch is cut.
std::string sums_line(const config_document& doc, const registry& reg, const std::string& engine) {
  const component_ref* c = reg.find_description(TYCHO_COMPONENT_ENGINE, engine);
  const setting_decl* decl = nullptr;
  if (c != nullptr)
    for (const auto& d : c->settings)
      if (d.key == "deterministic" && d.type == TYCHO_SETTING_BOOL) decl = &d;
  const std::string varies = "the last bits of the gradients depend on how many ranks and threads share each batch";
  if (decl == nullptr) return cat("sums     float: the ", engine, " engine keeps no deterministic sums; ", varies, "\n");
  bool on = decl->default_text && *decl->default_text == "true";
  if (std::optional<bool> v = doc.table_at("reconstruct")["deterministic"].value<bool>()) on = *v;
  if (!on) return cat("sums     float ([reconstruct] deterministic = false): ", varies, "\n");
  return "sums     deterministic ([reconstruct] deterministic = true): gradients and loss summed as fixed-point "
         "integers,\n         the same bits for any number of ranks, threads and devices (the same engine, precision "
         "and batch order)\n";
}

}  // namespace

uint64_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

uint64_t available_memory_bytes() {
  // /proc/meminfo's MemAvailable: what can be allocated without swapping (free memory plus the
  // page cache and reclaimable slabs the kernel would give back), in kB.
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kb = 0;
  bool found = false;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
      found = true;
      break;
    }
  std::fclose(f);
  return found && kb < (uint64_t(1) << 53) ? uint64_t(kb) * 1024u : 0;
}

int64_t default_engine_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);  // "8" or "8,4": the outermost level
    if (end != env && n > 0) return n;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? int64_t(n) : 1;
}

uint64_t cuda_device_memory_bytes(int ordinal) {
  // The driver API through dlopen: the host does not link CUDA, and a machine without a GPU
  // simply has no libcuda. The library stays loaded (unloading the driver is not supported).
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return 0;
  using init_fn = int (*)(unsigned);
  using device_get_fn = int (*)(int*, int);
  using total_mem_fn = int (*)(std::size_t*, int);
  auto init = reinterpret_cast<init_fn>(dlsym(lib, "cuInit"));
  auto device_get = reinterpret_cast<device_get_fn>(dlsym(lib, "cuDeviceGet"));
  auto total_mem = reinterpret_cast<total_mem_fn>(dlsym(lib, "cuDeviceTotalMem_v2"));
  int device = 0;
  std::size_t bytes = 0;
  if (init && device_get && total_mem && init(0) == 0 && device_get(&device, ordinal) == 0 &&
      total_mem(&bytes, device) == 0)
    return bytes;
  return 0;
}

void check_host_memory(const memory_problem& problem, const std::string& hint, uint64_t capacity) {
  memory_problem host = problem;
  // A device engine's terms are in device memory; the host holds the staging copy.
  if (memory_on_device(host)) host.model = memory_model::host_staging;
  const memory_plan plan = plan_memory(host, capacity > 0 ? capacity : physical_memory_bytes());
  if (!plan.fits) fail(TYCHO_ERR_OUT_OF_MEMORY, memory_plan_summary(plan), "; ", hint);
  log_info("session", cat("memory plan (", memory_plan_name(host), "): ", human_bytes(plan.total), " of ",
                          human_bytes(plan.capacity), " (largest term: ", plan.largest_term, ")"));
}

int run_plan_command(const config_document& doc, const registry& reg, const plan_options& options,
                     std::ostream& out) {
  run_preview r = preview_run(doc, reg);
  memory_problem& p = r.problem;
  if (expects_count_targets(doc, r.info)) {
    p.target_bytes = 2;         // uint16 counts, as the run will hold them
    p.binned_target_bytes = 4;  // binned, their sums may pass 65535 (the run then holds float32)
  }
  if (options.devices > 0) p.devices = options.devices;
  const bool device_model = memory_on_device(p);

  out << "plan for " << doc.origin() << "\n";
  out << "data     " << r.description << ": scan " << r.info.scan_shape[0] << " x " << r.info.scan_shape[1] << " ("
      << p.patterns << " patterns), detector " << r.info.detector_shape[0] << " x " << r.info.detector_shape[1]
      << " " << dtype_text(r.info.stored_dtype) << ", window " << p.window[0] << " x " << p.window[1] << "\n";
  out << "object   " << p.slices << " x " << p.object_shape[0] << " x " << p.object_shape[1] << " px of "
      << r.geometry.geometry.pixel_A[0] << " Å; probe " << p.probe_modes << " mode(s) of " << p.window[0] << " x "
      << p.window[1] << "\n";
  out << "engine   " << r.engine_name << " (" << memory_plan_name(p) << " model";
  if (memory_scales_with_threads(p)) out << ", " << p.threads << " threads";
  if (device_model) out << ", " << p.devices << " device(s), batch " << p.batch_size << " global";
  out << ")";
  if (!r.engine_available)
    out << "\n         the '" << r.engine_name << "' engine is not available here: planned with its model anyway";
  out << "\n" << sums_line(doc, reg, r.engine_name) << "\n";

  uint64_t capacity = 0;
  std::string capacity_source;
  if (options.memory_GiB >= 0) {
    capacity = std::max<uint64_t>(1, uint64_t(options.memory_GiB * double(uint64_t(1) << 30)));
    capacity_source = "--device-memory";
  } else if (device_model) {
    const toml::table& rec_t = doc.table_at("reconstruct");
    int ordinal = 0;
    if (const toml::array* d = rec_t["devices"].as_array(); d && !d->empty() && (*d)[0].is_integer())
      ordinal = int(*(*d)[0].value<int64_t>());
    capacity = cuda_device_memory_bytes(ordinal);
    capacity_source = cat("CUDA device ", ordinal);
  } else {
    const host_capacity host = host_memory_capacity(doc);  // [reconstruct] host_memory_GiB, rlimits
    capacity = host.bytes;
    capacity_source = host.source;
  }

  const memory_plan plan = plan_memory(p, capacity);
  out << memory_plan_table(plan);
  if (capacity == 0) {
    out << "\nthe device memory is not known here (no CUDA driver or device): give --device-memory GiB\n";
    return 2;
  }
  out << "(memory: " << capacity_source << ")\n\n";
  if (!device_model) out << residency_options(p, r.info, doc) << "\n";
  double seconds_per_iteration = 0;  // 0: not estimated
  if (options.estimate_time) {
    // The time per iteration, from a short calibration run of this machine's engine (time_plan.hpp).
    const time_estimate t = estimate_iteration_time(doc, reg, r);
    if (t.done) {
      const iteration_settings length = read_iteration_settings(doc.table_at("reconstruct"));
      const int64_t iterations = length.most();
      const double total = t.seconds_per_iteration * double(iterations);
      seconds_per_iteration = t.seconds_per_iteration;
      out << "time     ~" << std::lround(t.seconds_per_iteration * 100) / 100.0 << " s per iteration ("
          << std::lround(t.us_per_position * 10) / 10.0 << " µs per position·iteration; CPU time "
          << std::lround(t.cpu_us_per_position * 10) / 10.0 << " µs, " << t.batching << " batches); " << (length.by_rule ? "at most " : "") << iterations
          << " iterations ~"
          << duration_text(total)
          << "\n         " << t.why << "\n";
    } else {
      out << "time     " << t.why << "\n";
    }
  }
  // The scan geometry search's trials, with their time where the iteration's was estimated (a
  // raster of at least 3 x 3: listed positions are not searched).
  const bool searchable = r.positions_A.empty() && r.info.scan_shape[0] >= 3 && r.info.scan_shape[1] >= 3;
  const std::string search =
      geometry_search_plan_line(doc, searchable, p.patterns, p.window[0] * p.window[1], seconds_per_iteration);
  if (!search.empty()) out << search << "\n";
  if (options.estimate_time || !search.empty()) out << "\n";

  if (plan.fits && !plan.batch_shrunk) {
    out << "fits: " << human_bytes(plan.total) << (device_model ? " per device" : "") << " of "
        << human_bytes(plan.capacity) << "\n";
    return 0;
  }
  if (plan.fits) {
    out << "fits with batch_size = " << plan.problem.batch_size << ", shrunk from " << plan.requested_batch
        << " (which needs " << human_bytes(plan.requested_total) << " per device): set [reconstruct] batch_size = "
        << plan.problem.batch_size;
    if (plan.devices_to_fit > 0) out << ", or " << plan.devices_to_fit << " devices keep the batch";
    out << "\n";
    return 0;
  }
  out << "does not fit: needs " << human_bytes(plan.total) << (device_model ? " per device" : "") << ", "
      << human_bytes(plan.capacity) << " available; largest term: " << plan.largest_term << " ("
      << human_bytes(plan.term(plan.largest_term).bytes) << ")\nremedies, in order:\n";
  for (std::size_t i = 0; i < plan.remedies.size(); ++i) out << "  " << i + 1 << ". " << plan.remedies[i] << "\n";
  return 2;
}

}  // namespace tycho::host
