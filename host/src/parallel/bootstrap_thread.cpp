// The in-process bootstrap channel: W threads of one process, one per device (see
// bootstrap_channels.hpp).
#include <tycho/core/error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "parallel/bootstrap_channels.hpp"

namespace tycho::host {

struct thread_channel::endpoint_impl final : bootstrap_channel {
  endpoint_impl(thread_channel* c, int32_t r) : channel(c), rank_of(r) {}
  void broadcast(void* data, size_t bytes, int32_t root) override {
    channel->broadcast(rank_of, data, bytes, root);
  }
  int32_t rank() const override { return rank_of; }
  int32_t world_size() const override { return channel->world_size(); }
  thread_channel* channel;
  int32_t rank_of;
};

namespace {
using clock = std::chrono::steady_clock;

clock::time_point deadline_after(double seconds) {
  return clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
}
}  // namespace

thread_channel::thread_channel(int32_t world_size, double timeout_s)
    : world_size_(world_size), timeout_s_(timeout_s) {
  if (world_size < 1) fail(TYCHO_ERR_INVALID_ARGUMENT, "in-process bootstrap: world size must be >= 1, got ", world_size);
  if (!(timeout_s > 0) || !std::isfinite(timeout_s))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "in-process bootstrap: the timeout must be > 0 s, got ", timeout_s);
  arrived_.assign(size_t(world_size), 0);
  for (int32_t r = 0; r < world_size; ++r) endpoints_.push_back(std::make_unique<endpoint_impl>(this, r));
}

thread_channel::~thread_channel() = default;

bootstrap_channel& thread_channel::endpoint(int32_t rank) {
  if (rank < 0 || rank >= world_size_)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "in-process bootstrap: rank ", rank, " is not in [0, ", world_size_, ")");
  return *endpoints_[size_t(rank)];
}

void thread_channel::arrive_and_wait(std::unique_lock<std::mutex>& lock, int32_t rank, phase ph) {
  const uint64_t generation = generation_;
  arrived_[size_t(rank)] = 1;
  if (++count_ == world_size_) {
    count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), 0);
    ++generation_;
    if (ph == phase::read) round_open_ = false;  // everyone has read: the next round may start
    cv_.notify_all();
    return;
  }
  const auto deadline = deadline_after(timeout_s_);
  while (generation_ == generation && broken_.empty()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && generation_ == generation &&
        broken_.empty()) {
      std::string missing;
      int n_missing = 0;
      for (int32_t r = 0; r < world_size_; ++r)
        if (!arrived_[size_t(r)]) missing += cat(n_missing++ ? ", " : "", r);
      broken_ = cat("in-process bootstrap, rank ", rank, ": broadcast round ", round_ - 1, " (root ",
                    root_, ", ", bytes_, " bytes) timed out after ", timeout_s_, " s: rank",
                    n_missing > 1 ? "s " : " ", missing, n_missing > 1 ? " have" : " has",
                    ph == phase::write ? " not arrived" : " not finished reading");
      cv_.notify_all();
      fail(TYCHO_ERR_IO, broken_);
    }
  }
  if (generation_ == generation)
    fail(TYCHO_ERR_IO, "in-process bootstrap, rank ", rank, ": the channel failed: ", broken_);
}

void thread_channel::fail_all(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (broken_.empty()) broken_ = why;
  }
  cv_.notify_all();
}

void thread_channel::broadcast(int32_t rank, void* data, size_t bytes, int32_t root) {
  if (rank < 0 || rank >= world_size_)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "in-process bootstrap: rank ", rank, " is not in [0, ", world_size_, ")");
  if (root < 0 || root >= world_size_)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "in-process bootstrap, rank ", rank, ": root ", root,
         " is not in [0, ", world_size_, ")");
  if (data == nullptr && bytes > 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "in-process bootstrap, rank ", rank, ": no buffer for ", bytes, " bytes");
  std::unique_lock<std::mutex> lock(mutex_);
  if (!broken_.empty())
    fail(TYCHO_ERR_IO, "in-process bootstrap, rank ", rank, ": the channel failed earlier: ", broken_);
  if (!round_open_) {
    round_open_ = true;
    ++round_;
    bytes_ = bytes;
    root_ = root;
    first_rank_ = rank;
  } else if (bytes != bytes_ || root != root_) {
    broken_ = cat("in-process bootstrap: broadcast round ", round_ - 1, ": rank ", rank, " sends ",
                  bytes, " bytes from root ", root, " but rank ", first_rank_, " ", bytes_,
                  " bytes from root ", root_);
    cv_.notify_all();
    fail(TYCHO_ERR_INVALID_ARGUMENT, broken_);
  }
  if (rank == root) {
    const auto* p = static_cast<const unsigned char*>(data);
    storage_.assign(p, p + bytes);
  }
  arrive_and_wait(lock, rank, phase::write);
  if (rank != root && bytes > 0) std::memcpy(data, storage_.data(), bytes);
  arrive_and_wait(lock, rank, phase::read);
}

std::shared_ptr<thread_channel> make_thread_channel(int32_t world_size, double timeout_s) {
  return std::make_shared<thread_channel>(world_size, timeout_s);
}

}  // namespace tycho::host
