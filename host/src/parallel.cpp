#include "tycho/host/parallel.hpp"

#include <tycho/core/error.hpp>

#include <toml++/toml.h>

#include <atomic>
#include <cstddef>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "config_read.hpp"
#include "tycho/host/log.hpp"

namespace tycho::host {

namespace {
bool runs_on_host(const component_ref& engine) { return (engine.devices & TYCHO_DEVICE_BIT(kDLCPU)) != 0; }

std::string engine_name_of(const config_document& doc) {
  return read_key<std::string>(doc.table_at("reconstruct"), "engine", "reconstruct").value_or("cpu");
}
}  // namespace

std::vector<int64_t> configured_devices(const config_document& doc) {
  auto node = doc.table_at("reconstruct")["devices"];
  if (!node) return {0};
  const toml::array* arr = node.as_array();
  if (arr == nullptr || arr->empty())
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] devices must be a non-empty list of device numbers, e.g. [0]");
  std::vector<int64_t> ids;
  for (const auto& v : *arr) {
    if (!v.is_integer() || *v.value<int64_t>() < 0 || *v.value<int64_t>() > INT32_MAX)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] devices must list device numbers >= 0, e.g. [0]");
    ids.push_back(*v.value<int64_t>());
  }
  return ids;
}

DLDevice rank_device(const config_document& doc, const component_ref& engine, const launch_environment& launch) {
  const bool has_devices = doc.table_at("reconstruct").contains("devices");
  const std::vector<int64_t> ids = configured_devices(doc);
  if (runs_on_host(engine)) {
    if (has_devices)
      fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] devices asks for GPUs but engine = \"", engine.name,
           "\" computes on the host; use engine = \"cuda\" for GPUs, or remove devices (a CPU run uses [reconstruct] "
           "threads)");
    return DLDevice{kDLCPU, 0};
  }
  if (!launch.multi_process()) return DLDevice{kDLCUDA, int32_t(ids.front())};
  if (ids.size() > 1) {
    if (launch.local_rank < 0 || launch.local_rank >= int32_t(ids.size()))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] devices lists ", ids.size(), " devices but this process is local rank ",
           launch.local_rank, " of its node (", launch.launcher, "): list one device per rank on a node");
    return DLDevice{kDLCUDA, int32_t(ids[std::size_t(launch.local_rank)])};
  }
  // One device per rank, bound by the launcher (srun --gpus-per-task=1 leaves each rank one
  // visible device) or by the local rank.
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && *visible != '\0' && std::strchr(visible, ',') == nullptr) return DLDevice{kDLCUDA, 0};
  return DLDevice{kDLCUDA, std::max(0, launch.local_rank)};
}

void shutdown_reducers(const registry& reg) {
  for (const auto& c : reg.components()) {
    if (c.kind != TYCHO_COMPONENT_REDUCER) continue;
    const auto* vt = c.as<tycho_reducer_vtable>();
    if (vt->struct_size >= offsetof(tycho_reducer_vtable, shutdown) + sizeof(vt->shutdown) && vt->shutdown != nullptr)
      vt->shutdown();
  }
}

struct parallel_context::impl {
  const tycho_reducer_vtable* vt = nullptr;
  tycho_reducer* red = nullptr;
  bool host_reducer = true;  // its tensors live in host memory: it also carries host messages
  tycho_bootstrap bootstrap{};
  int32_t rank = 0, world = 1;
  double timeout_s = 600;

  // Watchdog: a collective that waits longer than timeout_s ends the run.
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  std::atomic<int64_t> waiting_since_ns{0};
  const char* waiting_in = "";
  std::thread watchdog;

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void start_watchdog() {
    watchdog = std::thread([this] {
      set_log_rank(rank, world);
      std::unique_lock lock(m);
      while (!stop) {
        cv.wait_for(lock, std::chrono::milliseconds(500));
        const int64_t since = waiting_since_ns.load();
        if (stop || since == 0) continue;
        const double waited = double(now_ns() - since) * 1e-9;
        if (waited > timeout_s) {
          log(TYCHO_LOG_ERROR, "parallel",
              cat("waited ", int(waited), " s in ", waiting_in, " ([parallel] timeout_s = ", timeout_s,
                  "): another rank has stopped or hangs; ending the run"));
          if (vt != nullptr && vt->abort != nullptr) vt->abort(red, 3);
          std::_Exit(3);
        }
      }
    });
  }

  // Marks the calling thread as waiting in a collective for the watchdog.
  struct waiting {
    impl& p;
    waiting(impl& i, const char* what) : p(i) {
      p.waiting_in = what;
      p.waiting_since_ns = now_ns();
    }
    ~waiting() { p.waiting_since_ns = 0; }
  };

  void host_broadcast(void* data, std::size_t bytes, int32_t root) {
    if (world == 1 || bytes == 0) return;
    waiting w(*this, "a broadcast");
    if (host_reducer) {
      int64_t shape[1] = {int64_t(bytes)};
      DLTensor t{data, {kDLCPU, 0}, 1, {kDLUInt, 8, 1}, shape, nullptr, 0};
      check_status(vt->broadcast(red, &t, root, nullptr), "reducer broadcast");
    } else if (bootstrap.broadcast != nullptr) {
      check_status(bootstrap.broadcast(bootstrap.context, data, bytes, root), "bootstrap broadcast");
    } else {
      fail(TYCHO_ERR_INTERNAL, "parallel: no host channel between the ranks");
    }
  }

  ~impl() {
    {
      std::lock_guard lock(m);
      stop = true;
    }
    cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
    if (red != nullptr) vt->destroy(red);
  }
};

parallel_context::parallel_context() : p_(std::make_unique<impl>()) {}
parallel_context::~parallel_context() = default;

std::unique_ptr<parallel_context> parallel_context::create(const config_document& doc, const registry& reg,
                                                           const launch_environment& launch, void* communicator) {
  auto ctx = std::make_unique<parallel_context>();
  const toml::table& par_t = doc.table_at("parallel");
  ctx->timeout_s_ = read_key<double>(par_t, "timeout_s", "parallel").value_or(600.0);
  if (!(ctx->timeout_s_ > 0)) fail(TYCHO_ERR_INVALID_ARGUMENT, "[parallel] timeout_s must be > 0 seconds");
  ctx->p_->timeout_s = ctx->timeout_s_;
  ctx->sharding_ = shard::parse(read_key<std::string>(par_t, "sharding", "parallel").value_or("patterns"),
                                "[parallel] sharding");
  ctx->launcher_ = launch.launcher;
  const component_ref& engine = reg.find(TYCHO_COMPONENT_ENGINE, engine_name_of(doc));
  ctx->device_ = rank_device(doc, engine, launch);
  const std::vector<int64_t> devices = configured_devices(doc);
  if (!launch.multi_process() && devices.size() > 1)
    fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] devices lists ", devices.size(),
         " devices in one process: this version runs one device per process; launch one rank per device "
         "(mpirun -np ", devices.size(), ", srun, torchrun) with devices = [", devices.front(), "] or none");

  std::string reducer = read_key<std::string>(par_t, "reducer", "parallel").value_or("auto");
  const bool multi = launch.multi_process() || communicator != nullptr;
  if (reducer == "auto") reducer = !multi ? "none" : runs_on_host(engine) ? "mpi" : "nccl";
  if (reducer == "none") {
    if (launch.multi_process())
      fail(TYCHO_ERR_INVALID_ARGUMENT, launch.launcher, " started ", launch.world_size,
           " ranks but [parallel] reducer = \"none\": every rank would run the whole reconstruction alone; "
           "set reducer = \"auto\" (or \"mpi\" / \"nccl\"), or start one process");
    return ctx;
  }
  const auto reducers = reg.names(TYCHO_COMPONENT_REDUCER);
  if (std::find(reducers.begin(), reducers.end(), reducer) == reducers.end())
    fail(TYCHO_ERR_NOT_FOUND, "[parallel] reducer \"", reducer, "\" is needed for this run (", launch.world_size,
         " ranks from ", launch.launcher.empty() ? std::string("the caller") : launch.launcher, ", engine \"",
         engine.name, "\") but is not installed",
         reducer == "mpi"    ? " (tycho was built without MPI: apt install libopenmpi-dev, then rebuild)"
         : reducer == "nccl" ? " (tycho was built without NCCL or CUDA)"
                             : "",
         reducers.empty() ? std::string("; no reducer is installed")
                          : cat("; installed reducers: ", [&] {
                              std::string s;
                              for (const auto& r : reducers) s += (s.empty() ? "" : ", ") + r;
                              return s;
                            }()));
  const component_ref& ref = reg.find(TYCHO_COMPONENT_REDUCER, reducer);
  const bool host_tensors = ctx->device_.device_type == kDLCPU;
  if ((ref.devices & TYCHO_DEVICE_BIT(ctx->device_.device_type)) == 0)
    fail(TYCHO_ERR_UNSUPPORTED, "[parallel] reducer \"", reducer, "\" cannot sum tensors of engine \"", engine.name,
         "\" (", host_tensors ? "host memory" : "GPU memory", ")", host_tensors ? "; use reducer = \"mpi\"" : "; use reducer = \"nccl\"");

  static thread_local tycho_config par_cfg;  // lives as long as the reducer may read it
  par_cfg = tycho_config{&par_t, "[parallel]", doc.base_dir()};
  tycho_reducer_setup setup{};
  setup.struct_size = sizeof(setup);
  setup.config = &par_cfg;
  setup.rank = launch.multi_process() ? launch.rank : -1;
  setup.world_size = launch.multi_process() ? launch.world_size : -1;
  setup.local_rank = launch.multi_process() ? launch.local_rank : -1;
  setup.device = ctx->device_;
  setup.communicator = communicator;
  auto& p = *ctx->p_;
  p.vt = ref.as<tycho_reducer_vtable>();
  p.host_reducer = host_tensors;
  check_status(p.vt->create(&setup, &p.red), cat("reducer \"", reducer, "\" create"));
  ctx->reducer_name_ = reducer;
  ctx->rank_ = p.rank = p.vt->rank(p.red);
  ctx->world_size_ = p.world = p.vt->world_size(p.red);
  ctx->local_rank_ = launch.local_rank;
  set_log_rank(ctx->rank_, ctx->world_size_);
  p.start_watchdog();
  return ctx;
}

void parallel_context::sum_in_place(DLTensor& tensor, void* stream) {
  if (world_size_ == 1) return;
  impl::waiting w(*p_, "a gradient all-reduce");
  check_status(p_->vt->allreduce_sum(p_->red, &tensor, stream), "reducer allreduce_sum");
}

double parallel_context::sum(double local) {
  if (world_size_ == 1) return local;
  if (p_->host_reducer) {
    impl::waiting w(*p_, "a loss all-reduce");
    int64_t shape[1] = {1};
    DLTensor t{&local, {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, shape, nullptr, 0};
    check_status(p_->vt->allreduce_sum(p_->red, &t, nullptr), "reducer allreduce_sum");
    return local;
  }
  // Over the host channel: every rank's value, summed in rank order on every rank.
  double total = 0;
  for (int32_t r = 0; r < world_size_; ++r) {
    double v = local;
    p_->host_broadcast(&v, sizeof v, r);
    total += v;
  }
  return total;
}

void parallel_context::broadcast_text(std::string& text, int32_t root) {
  if (world_size_ == 1) return;
  int64_t n = int64_t(text.size());
  p_->host_broadcast(&n, sizeof n, root);
  text.resize(std::size_t(n));
  p_->host_broadcast(text.data(), text.size(), root);
}

std::vector<std::string> parallel_context::all_texts(const std::string& mine) {
  std::vector<std::string> all(static_cast<std::size_t>(world_size_));
  for (int32_t r = 0; r < world_size_; ++r) {
    all[std::size_t(r)] = r == rank_ ? mine : std::string();
    broadcast_text(all[std::size_t(r)], r);
  }
  return all;
}

void parallel_context::barrier() {
  if (world_size_ == 1) return;
  impl::waiting w(*p_, "a barrier");
  check_status(p_->vt->barrier(p_->red), "reducer barrier");
}

void parallel_context::abort(int exit_code) {
  if (world_size_ == 1 || p_->red == nullptr) return;
  log(TYCHO_LOG_ERROR, "parallel", cat("stopping all ", world_size_, " ranks"));
  if (p_->vt->abort != nullptr) p_->vt->abort(p_->red, exit_code);
  std::_Exit(exit_code);
}

namespace {
// "[table] key = value" lines of a TOML text, in order (for naming a difference).
std::vector<std::string> keyed_lines(const std::string& toml_text) {
  std::vector<std::string> out;
  std::istringstream in(toml_text);
  std::string line, table;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      table = line;
      continue;
    }
    out.push_back(table.empty() ? line : table + " " + line);
  }
  return out;
}
}  // namespace

void parallel_context::check_same_config(const std::string& config_toml) {
  if (world_size_ == 1) return;
  std::string root_text = config_toml;
  broadcast_text(root_text, 0);
  std::string difference;
  if (root_text != config_toml) {
    const auto mine = keyed_lines(config_toml), theirs = keyed_lines(root_text);
    std::size_t i = 0;
    while (i < mine.size() && i < theirs.size() && mine[i] == theirs[i]) ++i;
    difference = cat("this rank has '", i < mine.size() ? mine[i] : std::string("(nothing)"), "', rank 0 has '",
                     i < theirs.size() ? theirs[i] : std::string("(nothing)"), "'");
  }
  const double differing = sum(difference.empty() ? 0.0 : 1.0);
  if (!difference.empty())
    fail(TYCHO_ERR_INVALID_ARGUMENT, "rank ", rank_, "'s configuration differs from rank 0's: ", difference,
         "; every rank must run the same configuration (same file, same --set)");
  if (differing > 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, int(differing), " rank(s) run a configuration that differs from rank 0's ",
         "(their messages name the first differing key)");
}

}  // namespace tycho::host
