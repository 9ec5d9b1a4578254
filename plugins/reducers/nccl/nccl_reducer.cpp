// The `nccl` reducer: sums and broadcasts of device (kDLCUDA) tensors across the ranks of a
// data-parallel run with NCCL, behind the ABI's reducer vtable. Loading this library touches no
// CUDA or NCCL API (no device is needed to list plugins): the first call is in create.
//
// The communicator is the caller's (tycho_reducer_setup::communicator, an ncclComm_t*, kept by
// the caller) or the reducer's own: rank 0 makes NCCL's unique id and sends it to the others
// through the host's bootstrap channel, then every rank joins with ncclCommInitRankConfig on
// its device. An own communicator is non-blocking (ncclConfig_t::blocking = 0): every NCCL call
// returns at once and the reducer polls ncclCommGetAsyncError, bounded by [parallel] timeout_s,
// so a rank that never comes or a failed peer gives an error instead of a hang, and abort()
// from another thread can always get in.
//
// Every NCCL call on the communicator is made under one mutex (NCCL communicators are not
// thread-safe); abort() sets a flag first, then takes the mutex, so a waiting call notices it.
#include <tycho/sdk.hpp>
#include <tycho/sdk/reducer.hpp>

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the nccl reducer needs NCCL 2.14 or newer (non-blocking communicators, ncclCommFinalize)"
#endif

namespace {
using namespace tycho::sdk;
using clock_type = std::chrono::steady_clock;

constexpr double k_default_timeout_s = 600;

clock_type::time_point deadline_after(double seconds) {
  return clock_type::now() +
         std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
}

// A growing pause for polling loops: from 20 µs up to 1 ms.
struct backoff {
  std::chrono::microseconds step{20};
  void pause() {
    std::this_thread::sleep_for(step);
    if (step < std::chrono::microseconds(1000)) step *= 2;
  }
};

// Makes `device` current for a scope and restores the caller's device after.
class device_scope {
 public:
  device_scope(int device, const std::string& where) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ == device) return;
    const cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail(TYCHO_ERR_IO, where, ": cudaSetDevice(", device, "): ", cudaGetErrorString(e));
    }
    restore_ = previous_ >= 0;
  }
  ~device_scope() {
    if (restore_) (void)cudaSetDevice(previous_);
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int previous_ = -1;
  bool restore_ = false;
};

std::string nccl_detail(ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return last != nullptr && *last != '\0' ? cat(" (", last, ")") : std::string();
}

struct nccl_reducer {
  int32_t rank = -1;
  int32_t world = -1;
  int device = 0;
  double timeout_s = k_default_timeout_s;
  ncclComm_t comm = nullptr;
  bool own_comm = false;
  cudaStream_t barrier_stream = nullptr;
  float* barrier_value = nullptr;  // one float on the device: what the barrier all-reduces
  std::atomic<bool> barrier_pending{false};  // its all-reduce may still run on barrier_stream

  std::mutex mutex;                 // around every NCCL call on `comm`
  std::atomic<bool> aborted{false};
  // A timeout or an NCCL error: the communicator's state is unknown, so destroy aborts it
  // instead of finalising (which could wait forever). True until create has finished.
  std::atomic<bool> broken{true};

  std::string where() const { return cat("nccl reducer rank ", rank, " (CUDA device ", device, ")"); }

  [[noreturn]] void fail_aborted(const std::string& during) const {
    fail(TYCHO_ERR_CANCELLED, where(), ": ", during, ": the communicator was aborted");
  }

  // The communicator's state: ncclSuccess, ncclInProgress (a call is still being carried out)
  // or an error, with NCCL's last message in *detail.
  ncclResult_t state(const std::string& during, std::string* detail) {
    std::lock_guard<std::mutex> lock(mutex);
    if (aborted) fail_aborted(during);
    ncclResult_t st = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &st);
    if (q != ncclSuccess) st = q;
    if (st != ncclSuccess && st != ncclInProgress) *detail = nccl_detail(comm);
    return st;
  }

  [[noreturn]] void fail_nccl(const std::string& during, ncclResult_t st, const std::string& detail) {
    broken = true;
    fail(TYCHO_ERR_IO, where(), ": ", during, ": NCCL error: ", ncclGetErrorString(st), detail,
         "; this rank cannot go on (a peer may have failed): abort the run");
  }

  [[noreturn]] void fail_timeout(const std::string& during, const char* waiting_for) {
    broken = true;
    fail(TYCHO_ERR_IO, where(), ": ", during, ": ", waiting_for, " within ", timeout_s,
         " s ([parallel] timeout_s); a rank may have stopped or never started: abort the run");
  }

  // Polls until no NCCL call is in progress on the communicator (at once in blocking mode),
  // failing on an asynchronous error or at the deadline.
  void wait_ready(const std::string& during, clock_type::time_point deadline) {
    backoff b;
    for (;;) {
      std::string detail;
      const ncclResult_t st = state(during, &detail);
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) fail_nccl(during, st, detail);
      if (clock_type::now() >= deadline) fail_timeout(during, "NCCL did not finish");
      b.pause();
    }
  }

  // Runs one NCCL call on the communicator (under the mutex, on this reducer's device), then
  // waits until NCCL has taken it (non-blocking mode: ncclInProgress until then).
  template <class F>
  void call(const std::string& during, F&& f) {
    const auto deadline = deadline_after(timeout_s);
    wait_ready(during, deadline);  // also reports an asynchronous error of earlier work
    ncclResult_t res;
    std::string detail;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (aborted) fail_aborted(during);
      device_scope scope(device, where());
      res = f();
      if (res != ncclSuccess && res != ncclInProgress) detail = nccl_detail(comm);
    }
    if (res == ncclInProgress) return wait_ready(during, deadline);
    if (res != ncclSuccess) fail_nccl(during, res, detail);
  }

  ~nccl_reducer() {
    if (comm == nullptr && barrier_stream == nullptr && barrier_value == nullptr) return;  // no CUDA yet
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    if (previous != device) (void)cudaSetDevice(device);
    if (comm != nullptr && own_comm && !aborted) {
      std::lock_guard<std::mutex> lock(mutex);
      bool done = false;
      if (!broken) {
        // Finalise (flushes the queued collectives), bounded by the timeout; abort if it fails.
        ncclResult_t st = ncclCommFinalize(comm);
        const auto deadline = deadline_after(timeout_s);
        backoff b;
        while (st == ncclInProgress && clock_type::now() < deadline) {
          b.pause();
          if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) st = ncclInternalError;
        }
        if (st == ncclSuccess) {
          st = ncclCommDestroy(comm);
          done = st == ncclSuccess;
        }
        if (!done)
          log(TYCHO_LOG_WARNING, "nccl", cat(where(), ": closing the communicator failed (",
                                             ncclGetErrorString(st), "); aborting it"));
      }
      if (!done) (void)ncclCommAbort(comm);
      comm = nullptr;
    }
    // A barrier that failed on a caller's communicator (which is not aborted here) may still
    // spin on the barrier stream, and cudaFree would wait for it: leave the 4 bytes then.
    const bool may_hang = barrier_pending && !own_comm && !aborted;
    if (barrier_value != nullptr && !may_hang) (void)cudaFree(barrier_value);
    if (barrier_stream != nullptr && !may_hang) (void)cudaStreamDestroy(barrier_stream);
    (void)cudaGetLastError();
    if (previous >= 0 && previous != device) (void)cudaSetDevice(previous);
  }
};

ncclDataType_t nccl_type(const collective_buffer& b) {
  return b.integer ? ncclInt64 : b.value_bytes == 8 ? ncclFloat64 : ncclFloat32;
}

// ---------------------------------------------------------------- create

int visible_devices(const std::string& where) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    fail(TYCHO_ERR_UNSUPPORTED, where, ": no CUDA device is visible (cudaGetDeviceCount: ",
         e == cudaSuccess ? "0 devices" : cudaGetErrorString(e), ")");
  }
  return count;
}

void cuda_check(cudaError_t e, const std::string& where, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  fail(e == cudaErrorMemoryAllocation ? TYCHO_ERR_OUT_OF_MEMORY : TYCHO_ERR_IO, where, ": ", what,
       ": ", cudaGetErrorString(e));
}

// What rank 0 sends the others: whether it could make the id, and the id.
struct id_packet {
  int32_t ok = 0;
  ncclUniqueId id{};
};

void make_own_comm(nccl_reducer& r, const tycho_reducer_setup& s) {
  id_packet packet;
  ncclResult_t made = ncclSuccess;
  if (r.rank == 0) {
    made = ncclGetUniqueId(&packet.id);
    packet.ok = made == ncclSuccess ? 1 : 0;
  }
  if (r.world > 1) {
    // Rank 0 sends even when it failed, so the others learn it at once instead of at the timeout.
    const tycho_status st = s.bootstrap.broadcast(s.bootstrap.context, &packet, sizeof packet, 0);
    if (st != TYCHO_OK)
      fail(st, r.where(), ": sharing NCCL's unique id through the bootstrap channel failed: ",
           host() != nullptr ? host()->last_error() : "");
  }
  if (!packet.ok) {
    if (r.rank == 0) fail(TYCHO_ERR_IO, r.where(), ": ncclGetUniqueId: ", ncclGetErrorString(made));
    fail(TYCHO_ERR_IO, r.where(), ": rank 0 could not make NCCL's unique id (see its error)");
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto deadline = deadline_after(r.timeout_s);
  ncclResult_t res;
  {
    device_scope scope(r.device, r.where());
    res = ncclCommInitRankConfig(&r.comm, r.world, packet.id, r.rank, &config);
  }
  if (res != ncclSuccess && res != ncclInProgress) {
    const std::string detail = r.comm != nullptr ? nccl_detail(r.comm) : std::string();
    if (r.comm != nullptr) (void)ncclCommAbort(r.comm);
    r.comm = nullptr;
    fail(TYCHO_ERR_IO, r.where(), ": ncclCommInitRankConfig (", r.world, " ranks): ",
         ncclGetErrorString(res), detail);
  }
  r.own_comm = true;  // from here on the destructor aborts it if anything fails
  r.wait_ready(cat("joining the ", r.world, "-rank communicator"), deadline);
}

void adopt_comm(nccl_reducer& r, const tycho_reducer_setup& s) {
  r.comm = *static_cast<ncclComm_t*>(s.communicator);
  if (r.comm == nullptr)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "nccl reducer: the communicator handed in (an ncclComm_t*) points to NULL");
  r.own_comm = false;
  r.wait_ready("adopting the caller's communicator", deadline_after(r.timeout_s));
  int n = 0, me = 0, dev = 0;
  std::string detail;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    ncclResult_t q = ncclCommCount(r.comm, &n);
    if (q == ncclSuccess) q = ncclCommUserRank(r.comm, &me);
    if (q == ncclSuccess) q = ncclCommCuDevice(r.comm, &dev);
    if (q != ncclSuccess)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "nccl reducer: cannot query the caller's communicator: ",
           ncclGetErrorString(q), nccl_detail(r.comm));
  }
  if ((s.world_size >= 0 && s.world_size != n) || (s.rank >= 0 && s.rank != me))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "nccl reducer: the caller's communicator is rank ", me, " of ", n,
         " but the setup says rank ", s.rank, " of ", s.world_size);
  if (dev != r.device)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "nccl reducer: the caller's communicator is on CUDA device ", dev,
         " but the engine's tensors are on CUDA device ", r.device);
  r.rank = me;
  r.world = n;
}

// Fills a fresh reducer from the setup: the [parallel] keys, the rank, the device, then the
// communicator (the caller's, or its own through the bootstrap channel).
void start(nccl_reducer& r, const tycho_reducer_setup& s) {
  config_view cfg(s.config);  // the [parallel] table
  r.timeout_s = cfg.get_double("timeout_s").value_or(k_default_timeout_s);
  if (!(r.timeout_s > 0) || !std::isfinite(r.timeout_s))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'timeout_s' in ", cfg.table_name(),
         " must be a number of seconds > 0, got ", r.timeout_s);

  r.device = s.device.device_id;  // the adapter has checked its type
  if (s.communicator == nullptr) {
    if (s.world_size < 1 || s.rank < 0)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "nccl reducer: the rank and world size are unknown (rank ",
           s.rank, ", world size ", s.world_size, "): the launcher must say them (torchrun sets "
           "RANK and WORLD_SIZE), or the caller must hand in an ncclComm_t");
    if (s.rank >= s.world_size)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "nccl reducer: rank ", s.rank, " is not in [0, ", s.world_size, ")");
    if (s.world_size > 1 && s.bootstrap.broadcast == nullptr)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "nccl reducer rank ", s.rank, ": no bootstrap channel to send "
           "NCCL's unique id to the ", s.world_size, " ranks, and no communicator handed in");
    r.rank = s.rank;
    r.world = s.world_size;
  } else {
    r.rank = s.rank;  // for messages until the communicator says
  }

  // CUDA from here on.
  const int count = visible_devices(r.where());
  if (r.device < 0 || r.device >= count)
    fail(TYCHO_ERR_INVALID_ARGUMENT, r.where(), ": CUDA device ", r.device,
         " was requested but this process sees ", count, " (devices 0 to ", count - 1, ")");
  {
    device_scope scope(r.device, r.where());
    cuda_check(cudaStreamCreateWithFlags(&r.barrier_stream, cudaStreamNonBlocking), r.where(),
               "cudaStreamCreateWithFlags (barrier stream)");
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&r.barrier_value), sizeof(float)), r.where(),
               "cudaMalloc (barrier value)");
    cuda_check(cudaMemset(r.barrier_value, 0, sizeof(float)), r.where(), "cudaMemset (barrier value)");
  }
  if (s.communicator != nullptr)
    adopt_comm(r, s);
  else
    make_own_comm(r, s);
  r.broken = false;
  int version = 0;
  (void)ncclGetVersion(&version);
  log(TYCHO_LOG_DEBUG, "nccl",
      cat(r.where(), ": ", r.own_comm ? "joined" : "adopted", " a communicator of ", r.world,
          " ranks (NCCL ", version / 10000, ".", version / 100 % 100, ".", version % 100, ")"));
}

// ---------------------------------------------------------------- the component

// The reducer as the adapter (tycho/sdk/reducer.hpp) sees it; the state lives in nccl_reducer
// (a member that outlives a failed start: its destructor frees what start made).
class nccl_component {
 public:
  explicit nccl_component(const tycho_reducer_setup& s) { start(r_, s); }

  int32_t rank() const { return r_.rank; }
  int32_t world_size() const { return r_.world; }

  // Deterministic sums: int64, added exactly (ncclInt64) whatever NCCL's ring or tree.
  static constexpr bool sums_int64 = true;

  void allreduce_sum(const collective_buffer& b, void* stream) {
    r_.call(cat("allreduce_sum of ", b.count, " reals"), [&] {
      return ncclAllReduce(b.data, b.data, size_t(b.count), nccl_type(b), ncclSum, r_.comm,
                           static_cast<cudaStream_t>(stream));
    });
  }

  void broadcast(const collective_buffer& b, int32_t root, void* stream) {
    r_.call(cat("broadcast of ", b.count, " reals from rank ", root), [&] {
      return ncclBroadcast(b.data, b.data, size_t(b.count), nccl_type(b), root, r_.comm,
                           static_cast<cudaStream_t>(stream));
    });
  }

  // A one-element all-reduce on the reducer's own stream, then a wait for it that polls the
  // stream and the communicator, so that an NCCL error or the timeout ends it.
  void barrier() {
    nccl_reducer& r = r_;
    const std::string during = "barrier";
    const auto deadline = deadline_after(r.timeout_s);
    r.barrier_pending = true;
    r.call(during, [&] {
      return ncclAllReduce(r.barrier_value, r.barrier_value, 1, ncclFloat32, ncclSum, r.comm, r.barrier_stream);
    });
    backoff b;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(r.barrier_stream);
      if (q == cudaSuccess) {
        r.barrier_pending = false;
        return;
      }
      if (q != cudaErrorNotReady) {
        (void)cudaGetLastError();
        r.broken = true;
        fail(TYCHO_ERR_IO, r.where(), ": barrier: cudaStreamQuery: ", cudaGetErrorString(q));
      }
      std::string detail;
      const ncclResult_t st = r.state(during, &detail);
      if (st != ncclSuccess && st != ncclInProgress) r.fail_nccl(during, st, detail);
      if (clock_type::now() >= deadline) r.fail_timeout(during, "not every rank arrived");
      b.pause();
    }
  }

  // Any thread, any time: makes this rank's pending and later collectives (and, through NCCL,
  // the peers') fail. Returns; the exit code is for reducers that end the job (MPI).
  void abort(int32_t /*exit_code*/) noexcept {
    nccl_reducer& r = r_;
    r.aborted = true;  // waiting loops see it before their next NCCL call
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.comm == nullptr) return;
    log(TYCHO_LOG_WARNING, "nccl", cat(r.where(), ": aborting the communicator"));
    (void)ncclCommAbort(r.comm);  // frees it (a caller's one too: it must not be used after this)
    r.comm = nullptr;
  }

 private:
  nccl_reducer r_;
};

// From the [parallel] table; the runtime declares the same key for its own waits.
const char* const k_keys[] = {"timeout_s", nullptr};
const tycho_setting k_settings[] = {
    setting("timeout_s", TYCHO_SETTING_NUMBER, "600",
            "the longest an NCCL call, the communicator's start or a barrier may wait before the rank gives up", "s")
        .above(0),
    end_of_settings()};
const tycho_component k_components[] = {
    with_settings(component(TYCHO_COMPONENT_REDUCER, "nccl", "1.0.0",
                            "sum and broadcast of CUDA tensors across ranks (NCCL)", TYCHO_DEVICE_BIT(kDLCUDA), k_keys,
                            reducer_vtable<nccl_component>("nccl", TYCHO_DEVICE_BIT(kDLCUDA))),
                  k_settings),
};
}  // namespace

TYCHO_PLUGIN("nccl", "1.0.0", k_components)
