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
#include <exception>
#include <thread>

#include "parallel/bootstrap_channels.hpp"
#include "settings/config_read.hpp"
#include "tycho/host/log.hpp"
#include "settings/config_defaults.hpp"
#include "settings/settings_read.hpp"

namespace tycho::host {

namespace {
bool runs_on_host(const component_ref& engine) { return (engine.devices & TYCHO_DEVICE_BIT(kDLCPU)) != 0; }

// The installed reducers that sum tensors of `type` (their tycho_component::devices), in load
// order: how a reducer is chosen, by what it can do rather than by its name.
std::vector<std::string> reducers_for(const registry& reg, DLDeviceType type) {
  std::vector<std::string> out;
  for (const auto& c : reg.components())
    if (c.kind == TYCHO_COMPONENT_REDUCER && (c.devices & TYCHO_DEVICE_BIT(type)) != 0) out.push_back(c.name);
  return out;
}

std::string memory_kind(DLDeviceType type) { return type == kDLCPU ? "host memory" : "GPU memory"; }

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "\"" : ", \"") + n + "\"";
  return s.empty() ? "none" : s;
}

// [parallel] reducer = "auto": the first installed reducer that sums tensors where the engine
// keeps them; an error naming what is installed when none does.
std::string reducer_for_device(const registry& reg, DLDeviceType type, const std::string& engine,
                               const std::string& why) {
  const auto fit = reducers_for(reg, type);
  if (fit.empty())
    fail(TYCHO_ERR_NOT_FOUND, why, " needs a reducer that sums tensors in ", memory_kind(type), " (engine \"", engine,
         "\"), but no installed reducer does (installed reducers: ", listed(reg.names(TYCHO_COMPONENT_REDUCER)),
         "; `tycho plugins` lists them, docs/scaling.md says which build options provide them)");
  return fit.front();
}

std::string engine_name_of(const config_document& doc) {
  return *setting_value<std::string>(doc.table_at("reconstruct"), "reconstruct", "engine");
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
           "\" computes on the host; use an engine that computes on GPUs (`tycho plugins` lists each engine's "
           "devices), or remove devices (a CPU run uses [reconstruct] threads)");
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
  tycho_bootstrap_ref bootstrap_ref{};  // the same, sized (tycho_reducer_setup::bootstrap_ref)
  // What backs `bootstrap` for a GPU reducer: a channel of its own, or a host reducer.
  std::unique_ptr<bootstrap_channel> channel;
  const tycho_reducer_vtable* host_vt = nullptr;
  tycho_reducer* host_red = nullptr;
  std::shared_ptr<thread_channel> local_channel;  // ranks that are threads of this process
  tycho_config config_view{};  // the [parallel] table as the reducers see it, as long as they live
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
        cv.wait_for(lock, std::chrono::milliseconds(250));
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
    if (host_reducer && vt != nullptr) {
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
    if (host_red != nullptr) host_vt->destroy(host_red);
  }

  // Without a reducer (host engine, ranks as threads): every rank's tensor in turn through the
  // channel, added in rank order, so every rank gets bitwise the same sum.
  void channel_allreduce(DLTensor& t) {
    if (t.device.device_type != kDLCPU) fail(TYCHO_ERR_INTERNAL, "parallel: channel sums need host tensors");
    int64_t n = 1;
    for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
    const bool complex = t.dtype.code == kDLComplex;
    const bool int64 = t.dtype.code == kDLInt && t.dtype.bits == 64;  // deterministic sums: exact
    const int bits = complex ? t.dtype.bits / 2 : t.dtype.bits;
    if (!(t.dtype.code == kDLFloat || complex || int64) || (bits != 32 && bits != 64) || t.dtype.lanes != 1)
      fail(TYCHO_ERR_UNSUPPORTED, "parallel: cannot sum a tensor of dtype code ", int(t.dtype.code), ", ", t.dtype.bits,
           " bits");
    const int64_t reals = complex ? 2 * n : n;
    char* data = static_cast<char*>(t.data) + t.byte_offset;
    const std::size_t bytes = std::size_t(reals) * std::size_t(bits / 8);
    std::vector<char> mine(data, data + bytes), theirs(bytes);
    for (int32_t r = 0; r < world; ++r) {
      if (r == rank) theirs = mine;
      host_broadcast(theirs.data(), bytes, r);
      if (int64) {  // unsigned: two's-complement wrap-around is defined, and the total is the same
        const uint64_t* v = reinterpret_cast<const uint64_t*>(theirs.data());
        uint64_t* out = reinterpret_cast<uint64_t*>(data);
        for (int64_t k = 0; k < reals; ++k) out[k] = (r == 0 ? 0u : out[k]) + v[k];
      } else if (bits == 32) {
        const float* v = reinterpret_cast<const float*>(theirs.data());
        float* out = reinterpret_cast<float*>(data);
        for (int64_t k = 0; k < reals; ++k) out[k] = (r == 0 ? 0.0f : out[k]) + v[k];
      } else {
        const double* v = reinterpret_cast<const double*>(theirs.data());
        double* out = reinterpret_cast<double*>(data);
        for (int64_t k = 0; k < reals; ++k) out[k] = (r == 0 ? 0.0 : out[k]) + v[k];
      }
    }
  }

  // The bootstrap over a host reducer's broadcast (mpirun launching a GPU run).
  static tycho_status mpi_broadcast(void* context, void* data, size_t bytes, int32_t root) {
    auto* self = static_cast<impl*>(context);
    int64_t shape[1] = {int64_t(bytes)};
    DLTensor t{data, {kDLCPU, 0}, 1, {kDLUInt, 8, 1}, shape, nullptr, 0};
    return self->host_vt->broadcast(self->host_red, &t, root, nullptr);
  }
};

namespace {
// The setup of a reducer of this context on `device`: the [parallel] table (kept in the context),
// the context's bootstrap channel, rank and world size unknown (-1) until the caller sets them.
tycho_reducer_setup reducer_setup(parallel_context::impl& p, const config_document& doc, DLDevice device) {
  p.config_view = tycho_config{&doc.table_at("parallel"), "[parallel]", doc.base_dir()};
  tycho_reducer_setup setup{};
  setup.struct_size = sizeof setup;
  setup.config = &p.config_view;
  setup.rank = setup.world_size = setup.local_rank = -1;
  setup.device = device;
  setup.bootstrap = p.bootstrap;
  p.bootstrap_ref = tycho_bootstrap_ref{sizeof(tycho_bootstrap_ref), p.bootstrap.context, p.bootstrap.broadcast};
  setup.bootstrap_ref = &p.bootstrap_ref;
  return setup;
}

// [parallel] timeout_s: finite, at least a second (the watchdog looks twice a second).
double read_timeout(const toml::table& par_t) {
  const double t = *setting_value<double>(par_t, "parallel", "timeout_s");
  if (!(t >= 1.0 && t < 1e9))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[parallel] timeout_s must be a number of seconds from 1 to 1e9, got ", t,
         " (a run must never wait forever)");
  return t;
}

// The rendezvous keys are checked in every run, not only in the GPU runs that use them.
void check_rendezvous_keys(const toml::table& par_t) {
  const std::string how = *setting_value<std::string>(par_t, "parallel", "rendezvous");
  if (how != "auto" && how != defaults::rendezvous_host_reducer && how != "tcp" && how != "file")
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[parallel] rendezvous must be \"auto\", \"", defaults::rendezvous_host_reducer,
         "\", \"tcp\" or \"file\", got \"", how, "\"");
  if (auto port = read_key<int64_t>(par_t, "rendezvous_port", "parallel"); port && (*port <= 0 || *port > 65535))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[parallel] rendezvous_port must be in 1..65535, got ", *port);
  read_key<std::string>(par_t, "rendezvous_file", "parallel");
}

// How the ranks of a GPU run meet before NCCL has a communicator ([parallel] rendezvous):
// defaults::rendezvous_host_reducer (under mpirun, through a reducer of host memory), "tcp" (rank 0 listens on
// MASTER_ADDR:rendezvous_port), "file" (a path every rank sees); "auto" takes the first of
// these the launch allows.
void make_rendezvous(const config_document& doc, const registry& reg, const launch_environment& launch,
                     double timeout_s, parallel_context::impl& p) {
  const toml::table& par_t = doc.table_at("parallel");
  std::string how = *setting_value<std::string>(par_t, "parallel", "rendezvous");
  // Under mpirun a host reducer (one that sums host memory) carries the bootstrap bytes.
  const auto host_reducers = reducers_for(reg, kDLCPU);
  const bool have_host_reducer = !host_reducers.empty();
  const std::string through_host_reducer = defaults::rendezvous_host_reducer;
  const auto file = read_key<std::string>(par_t, "rendezvous_file", "parallel");
  if (how == "auto") {
    if (launch.launcher == "mpirun" && have_host_reducer) how = through_host_reducer;
    else if (!launch.master_addr.empty() && !launch.master_port.empty()) how = "tcp";
    else if (file) how = "file";
    else
      fail(TYCHO_ERR_INVALID_ARGUMENT, "a GPU run of ", launch.world_size, " ranks (", launch.launcher,
           ") needs a rendezvous for NCCL: launch with mpirun, or set MASTER_ADDR and MASTER_PORT (torchrun sets ",
           "them; in a SLURM batch script export them), or set [parallel] rendezvous_file to a path every rank sees");
  }
  if (how == through_host_reducer) {
    if (!have_host_reducer)
      fail(TYCHO_ERR_NOT_FOUND, "[parallel] rendezvous = \"", how, "\": no installed reducer sums host memory (installed: ",
           listed(reg.names(TYCHO_COMPONENT_REDUCER)), ")");
    const component_ref& ref = reg.find(TYCHO_COMPONENT_REDUCER, host_reducers.front());
    tycho_reducer_setup setup = reducer_setup(p, doc, DLDevice{kDLCPU, 0});
    setup.rank = launch.rank;
    setup.world_size = launch.world_size;
    setup.local_rank = launch.local_rank;
    p.host_vt = ref.as<tycho_reducer_vtable>();
    check_status(p.host_vt->create(&setup, &p.host_red), cat("rendezvous through the ", ref.name, " reducer"));
    p.bootstrap = tycho_bootstrap{&p, &parallel_context::impl::mpi_broadcast};
  } else if (how == "tcp") {
    if (launch.master_addr.empty() || launch.master_port.empty())
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[parallel] rendezvous = \"tcp\" needs MASTER_ADDR and MASTER_PORT in the environment");
    char* end = nullptr;
    const long master_port = std::strtol(launch.master_port.c_str(), &end, 10);
    if (*end != '\0' || master_port <= 0 || master_port > 65535)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "environment variable MASTER_PORT=\"", launch.master_port,
           "\" is not a port number (1..65535)");
    // torchrun's agent serves its own store on MASTER_PORT: use the next port unless told.
    const int64_t port = read_key<int64_t>(par_t, "rendezvous_port", "parallel")
                             .value_or(master_port + (launch.launcher == "torchrun" ? 1 : 0));
    if (port <= 0 || port > 65535) fail(TYCHO_ERR_INVALID_ARGUMENT, "[parallel] rendezvous_port must be in 1..65535");
    p.channel = std::make_unique<tcp_channel>(launch.rank, launch.world_size, launch.master_addr, int(port), timeout_s);
    p.bootstrap = p.channel->bootstrap();
  } else if (how == "file") {
    if (!file) fail(TYCHO_ERR_INVALID_ARGUMENT, "[parallel] rendezvous = \"file\" needs [parallel] rendezvous_file");
    p.channel = std::make_unique<file_channel>(launch.rank, launch.world_size, *rendezvous_file(doc), timeout_s);
    p.bootstrap = p.channel->bootstrap();
  } else {
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[parallel] rendezvous must be \"auto\", \"", defaults::rendezvous_host_reducer,
         "\", \"tcp\" or \"file\", got \"", how, "\"");
  }
}
}  // namespace

std::optional<std::string> rendezvous_file(const config_document& doc) {
  const auto file = read_key<std::string>(doc.table_at("parallel"), "rendezvous_file", "parallel");
  if (!file) return std::nullopt;
  return resolve_path(doc.base_dir(), *file);
}

parallel_context::parallel_context() : p_(std::make_unique<impl>()) {}
parallel_context::~parallel_context() = default;

void parallel_context::read_settings(const toml::table& par_t) {
  timeout_s_ = p_->timeout_s = read_timeout(par_t);
  sharding_ = shard::parse(*setting_value<std::string>(par_t, "parallel", "sharding"),
                           "[parallel] sharding");
  const std::string on_error = *setting_value<std::string>(par_t, "parallel", "on_error");
  if (on_error != "abort" && on_error != "return")
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[parallel] on_error must be \"abort\" or \"return\", got \"", on_error, "\"");
  abort_on_error_ = on_error == "abort";
}

std::unique_ptr<parallel_context> parallel_context::create(const config_document& doc, const registry& reg,
                                                           const launch_environment& launch, void* communicator) {
  auto ctx = std::make_unique<parallel_context>();
  const toml::table& par_t = doc.table_at("parallel");
  ctx->read_settings(par_t);
  check_rendezvous_keys(par_t);
  ctx->launcher_ = launch.launcher;
  const component_ref& engine = reg.find(TYCHO_COMPONENT_ENGINE, engine_name_of(doc));
  ctx->device_ = rank_device(doc, engine, launch);
  const std::vector<int64_t> devices = configured_devices(doc);
  if (!launch.multi_process() && devices.size() > 1)
    fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] devices lists ", devices.size(),
         " devices: one session runs on one device; `tycho reconstruct` runs one thread per device, or launch one "
         "rank per device (mpirun -np ", devices.size(), ", srun, torchrun)");

  std::string reducer = *setting_value<std::string>(par_t, "parallel", "reducer");
  const bool multi = launch.multi_process() || communicator != nullptr;
  if (reducer == "auto")
    reducer = !multi ? "none"
                     : reducer_for_device(reg, ctx->device_.device_type, engine.name,
                                          cat("a run of ", launch.world_size, " ranks (", launch.launcher.empty() ? std::string("the caller") : launch.launcher, ")"));
  if (reducer == "none") {
    if (launch.multi_process())
      fail(TYCHO_ERR_INVALID_ARGUMENT, launch.launcher, " started ", launch.world_size,
           " ranks but [parallel] reducer = \"none\": every rank would run the whole reconstruction alone; "
           "set reducer = \"auto\" (or one of the installed reducers: ", listed(reg.names(TYCHO_COMPONENT_REDUCER)),
           "), or start one process");
    return ctx;
  }
  const auto reducers = reg.names(TYCHO_COMPONENT_REDUCER);
  if (std::find(reducers.begin(), reducers.end(), reducer) == reducers.end() &&
      !nearest_name(reducer, reducers).empty())
    fail(TYCHO_ERR_NOT_FOUND, "[parallel] reducer \"", reducer, "\" is not installed; did you mean \"",
         nearest_name(reducer, reducers), "\"?");
  if (std::find(reducers.begin(), reducers.end(), reducer) == reducers.end())
    fail(TYCHO_ERR_NOT_FOUND, "[parallel] reducer \"", reducer, "\" is needed for this run (", launch.world_size,
         " ranks from ", launch.launcher.empty() ? std::string("the caller") : launch.launcher, ", engine \"",
         engine.name, "\") but is not installed",
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
         "\" (", memory_kind(ctx->device_.device_type), "); reducers that can: ",
         listed(reducers_for(reg, ctx->device_.device_type)), " (or reducer = \"auto\")");

  auto& p = *ctx->p_;
  if (!host_tensors && launch.multi_process() && communicator == nullptr)
    make_rendezvous(doc, reg, launch, ctx->timeout_s_, p);

  tycho_reducer_setup setup = reducer_setup(p, doc, ctx->device_);
  // An adopted communicator says the rank and world size itself (it may be a part of the job).
  const bool from_launcher = launch.multi_process() && communicator == nullptr;
  setup.rank = from_launcher ? launch.rank : -1;
  setup.world_size = from_launcher ? launch.world_size : -1;
  setup.local_rank = from_launcher ? launch.local_rank : -1;
  setup.communicator = communicator;
  p.vt = ref.as<tycho_reducer_vtable>();
  p.host_reducer = host_tensors;
  try {
    check_status(p.vt->create(&setup, &p.red), cat("reducer \"", reducer, "\" create"));
  } catch (const error& e) {
    if (!from_launcher) throw;
    fail(e.status, e.what(), " (this process's rank and world size came from the environment: ", launch.variables,
         ", read as ", launch.launcher, ")");
  }
  ctx->reducer_name_ = reducer;
  ctx->rank_ = p.rank = p.vt->rank(p.red);
  ctx->world_size_ = p.world = p.vt->world_size(p.red);
  ctx->local_rank_ = launch.local_rank;
  set_log_rank(ctx->rank_, ctx->world_size_);
  p.start_watchdog();
  return ctx;
}

std::unique_ptr<parallel_context> parallel_context::create_local(const config_document& doc, const registry& reg,
                                                                 int32_t rank, int32_t world_size,
                                                                 std::shared_ptr<thread_channel> channel,
                                                                 DLDevice device) {
  auto ctx = std::make_unique<parallel_context>();
  auto& p = *ctx->p_;
  const toml::table& par_t = doc.table_at("parallel");
  ctx->read_settings(par_t);
  ctx->launcher_ = "threads";
  ctx->device_ = device;
  ctx->rank_ = p.rank = rank;
  ctx->world_size_ = p.world = world_size;
  ctx->local_rank_ = rank;
  p.local_channel = std::move(channel);
  p.bootstrap = p.local_channel->bootstrap(rank);
  p.host_reducer = device.device_type == kDLCPU;
  set_log_rank(rank, world_size);
  if (device.device_type == kDLCPU) {
    ctx->reducer_name_ = "channel";  // host tensors: summed through the channel itself
  } else {
    std::string reducer = *setting_value<std::string>(par_t, "parallel", "reducer");
    const std::string why = cat("[reconstruct] devices asks for ", world_size, " GPUs in one process, which");
    if (reducer == "auto") reducer = reducer_for_device(reg, device.device_type, engine_name_of(doc), why);
    const auto reducers = reg.names(TYCHO_COMPONENT_REDUCER);
    if (std::find(reducers.begin(), reducers.end(), reducer) == reducers.end())
      fail(TYCHO_ERR_NOT_FOUND, why, " needs the \"", reducer, "\" reducer, but it is not installed (installed reducers: ",
           listed(reducers), ")");
    tycho_reducer_setup setup = reducer_setup(p, doc, device);
    setup.rank = rank;
    setup.world_size = world_size;
    setup.local_rank = rank;
    p.vt = reg.find(TYCHO_COMPONENT_REDUCER, reducer).as<tycho_reducer_vtable>();
    check_status(p.vt->create(&setup, &p.red), cat("reducer \"", reducer, "\" create"));
    ctx->reducer_name_ = reducer;
  }
  p.start_watchdog();
  return ctx;
}

std::vector<DLDevice> local_rank_devices(const config_document& doc, const registry& reg,
                                         const launch_environment& launch) {
  const std::vector<int64_t> ids = configured_devices(doc);
  if (launch.multi_process() || ids.size() < 2) return {};
  const component_ref& engine = reg.find(TYCHO_COMPONENT_ENGINE, engine_name_of(doc));
  if (runs_on_host(engine)) return {};  // refused by rank_device with the reason
  std::vector<DLDevice> devices;
  for (int64_t id : ids) {
    for (const auto& d : devices)
      if (d.device_id == id) fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] devices lists device ", id, " twice");
    devices.push_back(DLDevice{kDLCUDA, int32_t(id)});
  }
  return devices;
}

void run_local_ranks(const config_document& doc, const registry& reg, const std::vector<DLDevice>& devices,
                     const std::function<void(parallel_context&)>& body) {
  const int32_t world = int32_t(devices.size());
  const double timeout_s = read_timeout(doc.table_at("parallel"));
  auto channel = make_thread_channel(world, timeout_s);
  std::mutex m;
  std::exception_ptr first_error;  // the first to fail; the others' errors follow from it
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<parallel_context> ctx;
      try {
        ctx = parallel_context::create_local(doc, reg, r, world, channel, devices[std::size_t(r)]);
        body(*ctx);
      } catch (...) {
        {
          std::lock_guard lock(m);
          if (!first_error) first_error = std::current_exception();
        }
        if (ctx) ctx->abort(2);
        else channel->fail_all(cat("rank ", r, " failed to start"));
      }
      set_log_rank(0, 1);
    });
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

void parallel_context::sum_in_place(DLTensor& tensor, void* stream) {
  if (world_size_ == 1) return;
  impl::waiting w(*p_, "a gradient all-reduce");
  const auto t0 = std::chrono::steady_clock::now();
  if (p_->vt == nullptr)
    p_->channel_allreduce(tensor);
  else
    check_status(p_->vt->allreduce_sum(p_->red, &tensor, stream), "reducer allreduce_sum");
  int64_t n = 1;
  for (int i = 0; i < tensor.ndim; ++i) n *= tensor.shape[i];
  stats_.calls += 1;
  stats_.bytes += double(n) * double((tensor.dtype.bits * tensor.dtype.lanes + 7) / 8);
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double parallel_context::sum(double local) {
  sum(&local, 1);
  return local;
}

void parallel_context::sum(double* values, int64_t n) {
  if (world_size_ == 1 || n <= 0) return;
  impl::waiting w(*p_, "a host all-reduce");
  int64_t shape[1] = {n};
  DLTensor t{values, {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, shape, nullptr, 0};
  if (p_->host_reducer && p_->vt != nullptr)
    check_status(p_->vt->allreduce_sum(p_->red, &t, nullptr), "reducer allreduce_sum");
  else
    p_->channel_allreduce(t);  // no host reducer: every rank's values in turn, added in rank order
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
  if (p_->vt == nullptr) {  // the channel's broadcast returns on every rank only once all called it
    char token = 0;
    return p_->host_broadcast(&token, 1, 0);
  }
  check_status(p_->vt->barrier(p_->red), "reducer barrier");
}

void parallel_context::abort(int exit_code) {
  if (world_size_ == 1) return;
  if (p_->local_channel) {  // threads of this process: make the others' collectives fail, no exit
    if (p_->vt != nullptr && p_->vt->abort != nullptr && p_->red != nullptr) p_->vt->abort(p_->red, exit_code);
    p_->local_channel->fail_all(cat("rank ", rank_, " failed"));
    return;
  }
  if (p_->red == nullptr) return;
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

void parallel_context::require_same(const std::string& mine, const std::string& what) {
  if (world_size_ == 1) return;
  const std::vector<std::string> all = all_texts(mine);
  std::string differing;
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differing += cat(differing.empty() ? "" : ", ", "rank ", r, " has ", all[r]);
  if (!differing.empty())
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the ranks disagree on ", what, ": rank 0 has ", all[0], ", ", differing,
         "; every rank must be started alike");
}

void parallel_context::check_same_config(const std::string& config_toml) {
  if (world_size_ == 1) return;
  std::string root_text = config_toml;
  broadcast_text(root_text, 0);
  std::string difference;
  if (root_text != config_toml) {
    const auto mine = keyed_lines(config_toml), theirs = keyed_lines(root_text);
    std::size_t i = 0;
    while (i < mine.size() && i < theirs.size() && mine[i] == theirs[i]) ++i;
    difference = cat("rank ", rank_, "'s configuration differs from rank 0's: rank ", rank_, " has '",
                     i < mine.size() ? mine[i] : std::string("(nothing)"), "', rank 0 has '",
                     i < theirs.size() ? theirs[i] : std::string("(nothing)"), "'");
  }
  // Every rank learns every difference, so whichever rank reports first names them.
  std::string all;
  for (const std::string& d : all_texts(difference))
    if (!d.empty()) all += (all.empty() ? "" : "; ") + d;
  if (!all.empty())
    fail(TYCHO_ERR_INVALID_ARGUMENT, all, "; every rank must run the same configuration (same file, same --set)");
}

}  // namespace tycho::host
