// The ranks of a data-parallel run and the reducer that joins them. One per rank, made before
// the session from the launcher's environment (torchrun, srun, mpirun) and [parallel]: every
// rank holds the whole object and probe and a share of the patterns; gradients and losses are
// summed across ranks, so the trajectory does not depend on the number of ranks.
#pragma once

#include <tycho/core/config.hpp>
#include <tycho/core/driver.hpp>
#include <tycho/core/launch.hpp>
#include <tycho/core/sharding.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tycho/host/registry.hpp"

namespace toml {
inline namespace v3 {
class table;
}
}  // namespace toml

namespace tycho::host {

class thread_channel;

class parallel_context final : public rank_collectives {
 public:
  // A run of one rank: no reducer, every collective is the identity.
  parallel_context();
  ~parallel_context() override;
  parallel_context(const parallel_context&) = delete;
  parallel_context& operator=(const parallel_context&) = delete;

  // Reads [parallel] and [reconstruct] engine/devices, detects the launcher and makes the
  // reducer ("auto": none for one rank, else the first installed reducer whose devices include
  // the engine's device: tycho_component::devices says what each sums).
  // Several ranks without a reducer, a reducer that is not installed, or a CPU engine asked
  // for GPUs are errors that say why; nothing is silently reduced to one rank.
  // `communicator`: the caller's (MPI_Comm* or ncclComm_t*), adopted and not freed.
  static std::unique_ptr<parallel_context> create(const config_document& doc, const registry& reg,
                                                  const launch_environment& launch,
                                                  void* communicator = nullptr);

  // Rank `rank` of `world_size` ranks that run as threads of this process, one per device,
  // joined by `channel` (a thread_channel of world_size): a GPU engine's gradients are summed by
  // the nccl reducer (its unique id sent through the channel), a host engine's through the
  // channel itself, in rank order.
  static std::unique_ptr<parallel_context> create_local(const config_document& doc, const registry& reg,
                                                        int32_t rank, int32_t world_size,
                                                        std::shared_ptr<thread_channel> channel, DLDevice device);

  int32_t rank() const { return rank_; }
  int32_t world_size() const { return world_size_; }
  int32_t local_rank() const { return local_rank_; }
  bool is_root() const { return rank_ == 0; }
  const std::string& launcher() const { return launcher_; }
  const std::string& reducer_name() const { return reducer_name_; }
  DLDevice device() const { return device_; }   // the engine's device on this rank
  shard::mode sharding() const { return sharding_; }
  double timeout_s() const { return timeout_s_; }
  // [parallel] on_error = "abort" (default): an error on this rank of an embedded run stops every
  // rank (the C API calls abort()); "return": the error is only returned to the caller, whose
  // own code must then stop the other ranks, or they wait until timeout_s.
  bool abort_on_error() const { return abort_on_error_; }

  // rank_collectives: gradient sums on the engine's device, loss sums on the host.
  void sum_in_place(DLTensor& tensor, void* stream) override;
  double sum(double local) override;
  // Element-wise sums of n host doubles in place, in one collective (every rank gets the same).
  void sum(double* values, int64_t n);

  // Time spent in gradient all-reduces so far (host wall time of the calls; for a device
  // reducer that is the time to queue them unless the stream is synchronised), their number and
  // the bytes of one rank's tensors: what the scaling model (docs/scaling.md) needs.
  struct reduce_stats {
    int64_t calls = 0;
    double seconds = 0, bytes = 0;
  };
  reduce_stats gradient_reduce_stats() const { return stats_; }

  // Host-side: root's text replaces every rank's.
  void broadcast_text(std::string& text, int32_t root);
  // Every rank's text, in rank order, on every rank.
  std::vector<std::string> all_texts(const std::string& mine);
  void barrier();
  // Stops every rank after an error on this one (MPI_Abort, ncclCommAbort) and exits with
  // `exit_code`; with one rank it only returns. Ranks that are threads of this process are not
  // exited: their collectives fail (ncclCommAbort, the channel broken) and they return errors.
  void abort(int exit_code);

  // Rank 0 sends its resolved configuration (TOML); a rank whose own differs stops with a
  // message naming the first differing key, and then every rank stops.
  void check_same_config(const std::string& config_toml);
  // Every rank states `mine`; if any differs from rank 0's, every rank stops with a message
  // naming the ranks, their values and `what`.
  void require_same(const std::string& mine, const std::string& what);

  struct impl;  // the reducer, the rendezvous and the watchdog

 private:
  // [parallel] timeout_s, sharding and on_error, for both ways of making a context.
  void read_settings(const toml::table& par_t);
  std::unique_ptr<impl> p_;
  int32_t rank_ = 0, world_size_ = 1, local_rank_ = 0;
  std::string launcher_, reducer_name_ = "none";
  DLDevice device_{kDLCPU, 0};
  shard::mode sharding_ = shard::mode::patterns;
  double timeout_s_ = 600;
  bool abort_on_error_ = true;
  reduce_stats stats_;
};

// The engine's device for this rank: the CPU for a host engine; for a GPU engine,
// [reconstruct] devices[local_rank] when it lists one device per local rank, else the
// local rank (or 0 when CUDA_VISIBLE_DEVICES leaves one device to each rank).
DLDevice rank_device(const config_document& doc, const component_ref& engine, const launch_environment& launch);

// The devices of an in-process multi-GPU run: [reconstruct] devices with two or more entries, a
// GPU engine and no launcher of several processes; empty when this is not such a run.
std::vector<DLDevice> local_rank_devices(const config_document& doc, const registry& reg,
                                         const launch_environment& launch);

// Runs `body` on one thread per device, each with its rank's context (create_local). An error
// on one rank stops the others' collectives; after every thread has ended, the error of the
// lowest failing rank is rethrown (the others' follow-on errors are dropped).
void run_local_ranks(const config_document& doc, const registry& reg, const std::vector<DLDevice>& devices,
                     const std::function<void(parallel_context&)>& body);

// Calls every loaded reducer component's shutdown (tycho_shutdown()).
void shutdown_reducers(const registry& reg);

// [parallel] rendezvous_file resolved against the config file's folder (an absolute path as it
// is); nullopt when the key is absent.
std::optional<std::string> rendezvous_file(const config_document& doc);

// [reconstruct] devices: the device numbers listed (default [0]).
std::vector<int64_t> configured_devices(const config_document& doc);

}  // namespace tycho::host
