// Bootstrap channels: the host-memory broadcast among ranks (abi/tycho/tycho_components.h,
// tycho_bootstrap) that exists before any reducer, so that a reducer can exchange the few bytes
// it needs to start (NCCL's unique id). Host-internal: libtycho does not export these.
//
// Three transports, each in its own file:
//   thread_channel (bootstrap_thread.cpp): W threads of one process (one per device) share one
//     channel object; each thread uses its rank's endpoint.
//   tcp_channel (bootstrap_tcp.cpp): one object per process; rank 0 listens on
//     MASTER_ADDR:MASTER_PORT (the torchrun convention) and is the hub every broadcast goes
//     through.
//   file_channel (bootstrap_file.cpp): one object per process; round k of a broadcast is the file
//     `<path>.<k>` on a file system every rank sees ([parallel] rendezvous_file).
//
// Every rank calls every broadcast in the same order with the same `bytes` and `root`; on return
// every rank's `data` holds the root's bytes. No call waits longer than the channel's timeout:
// a rank that does not come makes the others fail with an error (tycho::error, status
// TYCHO_ERR_IO) naming the ranks that are missing. After a failure the channel is broken and
// every later broadcast fails at once (the ranks are no longer in step).
//
// bootstrap() gives the C view handed to a reducer (tycho_reducer_setup::bootstrap). It points at
// the channel object, which the caller owns and must keep alive as long as the view is used; the
// C function returns the status and sets the calling thread's last error instead of throwing.
#pragma once

#include <tycho/tycho_components.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tycho::host {

// One rank's end of a channel.
class bootstrap_channel {
 public:
  virtual ~bootstrap_channel() = default;
  bootstrap_channel() = default;
  bootstrap_channel(const bootstrap_channel&) = delete;
  bootstrap_channel& operator=(const bootstrap_channel&) = delete;

  // Every rank's `data` (of `bytes` bytes) receives root's bytes. Throws tycho::error.
  virtual void broadcast(void* data, size_t bytes, int32_t root) = 0;
  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;

  // {this, broadcast}: valid while this object lives.
  tycho_bootstrap bootstrap();
};

// ---- in-process: W threads share one thread_channel, each calls through endpoint(rank).
//
// A broadcast is two generation-counted barriers on a mutex and a condition variable: the root
// copies its bytes into the channel's storage and arrives; when all W have arrived the others
// copy out, and the second barrier keeps the next round from overwriting the storage before
// everyone has read it. A rank that waits longer than the timeout fails naming the ranks that
// have not arrived, and breaks the channel, so the other waiting ranks fail at once too.
class thread_channel {
 public:
  thread_channel(int32_t world_size, double timeout_s);
  ~thread_channel();
  thread_channel(const thread_channel&) = delete;
  thread_channel& operator=(const thread_channel&) = delete;

  int32_t world_size() const { return world_size_; }
  double timeout_s() const { return timeout_s_; }
  // Rank r's end (0 <= r < world_size); lives as long as the channel.
  bootstrap_channel& endpoint(int32_t rank);
  tycho_bootstrap bootstrap(int32_t rank) { return endpoint(rank).bootstrap(); }
  void broadcast(int32_t rank, void* data, size_t bytes, int32_t root);
  // Breaks the channel: every waiting and later broadcast fails at once with `why` (a rank
  // that failed tells the others instead of letting them wait for their timeout).
  void fail_all(const std::string& why);

 private:
  struct endpoint_impl;
  enum class phase { write, read };
  void arrive_and_wait(std::unique_lock<std::mutex>& lock, int32_t rank, phase ph);

  int32_t world_size_;
  double timeout_s_;
  std::vector<std::unique_ptr<endpoint_impl>> endpoints_;

  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;       // completed barriers
  uint64_t round_ = 0;            // broadcast rounds started (the current one is round_ - 1)
  int32_t count_ = 0;             // ranks arrived at the current barrier
  std::vector<char> arrived_;     // per rank, at the current barrier
  bool round_open_ = false;       // the first rank of a round has set bytes_ and root_
  size_t bytes_ = 0;
  int32_t root_ = 0;
  int32_t first_rank_ = 0;        // the rank that opened the round (for mismatch messages)
  std::vector<unsigned char> storage_;
  std::string broken_;            // non-empty once a rank failed: why
};

std::shared_ptr<thread_channel> make_thread_channel(int32_t world_size, double timeout_s);

// ---- TCP: rank 0 listens on master_addr:master_port, every other rank connects to it.
//
// Rank 0 binds in the constructor (port 0: any free port, see port()) on every interface of
// MASTER_ADDR's address family. The connections are made by connect(), or by the first broadcast
// (within its timeout) if nobody called it: the other ranks retry until the timeout while rank 0
// is not listening yet, then send a hello with their rank and world size; rank 0 waits for all
// of them, then stops listening. A broadcast goes through rank 0: a root other than 0 sends its
// bytes (length-prefixed) to rank 0, which forwards them to every other rank; each rank then
// acknowledges to rank 0, and rank 0 answers when all have, so a broadcast returns on any rank
// only once every rank has called it with the same size. All socket I/O is non-blocking under
// poll() with the deadline of the current call, so nothing waits past the timeout; errors name
// the address, the port and the ranks. Sockets are closed at destruction, and on any failure (so
// that peers fail at once instead of at their timeout).
class tcp_channel final : public bootstrap_channel {
 public:
  tcp_channel(int32_t rank, int32_t world_size, std::string master_addr, int master_port,
              double timeout_s);
  ~tcp_channel() override;

  void connect();  // the rendezvous, within the timeout; idempotent
  void broadcast(void* data, size_t bytes, int32_t root) override;
  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  int port() const { return port_; }  // the port rank 0 listens on (the chosen one for 0)

 private:
  std::string where() const;  // "tcp bootstrap 127.0.0.1:29500, rank 2"
  void connect_until(std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail_and_close(const std::string& message);
  void close_all();

  int32_t rank_, world_size_;
  std::string addr_;
  int port_;
  double timeout_s_;
  int listen_fd_ = -1;
  std::vector<int> peers_;  // rank 0: fd per rank (peers_[0] unused); others: peers_[0] = rank 0
  bool connected_ = false;
  uint32_t round_ = 0;
  std::string broken_;
};

// ---- shared file system: round k of the broadcasts is the file `<path>.<k>`.
//
// The root writes `<path>.<k>` atomically (a temporary file beside it, then rename) holding a
// small header and its bytes; every other rank polls for it until the timeout, reads it and
// creates `<path>.<k>.ack<rank>`. The root waits for every rank's acknowledgement (so it returns
// only when all have read the bytes), then removes the round file and the acknowledgements: a
// run that ends normally leaves no files behind. A run that fails may leave files; since ranks
// read rounds by number, `path` must be fresh for each run (put the job id in it): files from an
// earlier run at the same path would be taken for this run's. Errors name the path, the round
// and the ranks missing.
class file_channel final : public bootstrap_channel {
 public:
  file_channel(int32_t rank, int32_t world_size, std::string path, double timeout_s);
  ~file_channel() override = default;

  void broadcast(void* data, size_t bytes, int32_t root) override;
  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  const std::string& path() const { return path_; }

 private:
  std::string where() const;  // "file bootstrap /shared/run1.rdv, rank 2"

  int32_t rank_, world_size_;
  std::string path_;
  double timeout_s_;
  uint64_t round_ = 0;
  std::string broken_;
};

}  // namespace tycho::host
