// Which patterns form each global mini-batch of an iteration ([reconstruct] batching). The
// batches do not depend on the number of ranks (each rank computes its members of each,
// tycho/core/sharding.hpp), so neither does the trajectory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tycho {

enum class batching {
  random,   // each iteration's seeded permutation of the patterns, cut into batches in order
  compact,  // fixed blocks of neighbouring positions (Hilbert order), visited in a seeded order
};

// "random" | "compact" (the host resolves "auto" first); errors name `key`.
batching parse_batching(const std::string& name, const std::string& key);
const char* batching_name(batching kind);

class batch_plan {
 public:
  // random: epoch_permutation(patterns, seed, epoch) cut into batches of batch_size (the last
  // may be smaller). compact: the patterns sorted by the Hilbert index of their position
  // (positions_px, (patterns, 2) px; ties by index) and cut once into blocks of batch_size,
  // each a spatially compact patch of the scan; iteration e visits the blocks in the order
  // epoch_permutation(blocks, seed, e) (the short block, if any, where it falls).
  batch_plan(int64_t patterns, int64_t batch_size, uint64_t seed, batching kind,
             const std::vector<double>& positions_px = {});

  batching kind() const { return kind_; }
  int64_t patterns() const { return patterns_; }
  int64_t batches() const { return batches_; }
  // Batch k (0 <= k < batches()) of iteration `epoch` (1-based): *count global pattern indices,
  // valid until a call for another epoch. Not thread-safe (copy the plan per thread).
  const int64_t* batch(int64_t epoch, int64_t k, int64_t& count);

 private:
  void prepare(int64_t epoch);
  int64_t patterns_, batch_size_;
  uint64_t seed_;
  batching kind_;
  int64_t batches_;
  std::vector<int64_t> hilbert_order_;  // compact: the patterns in Hilbert order (blocks of batch_size)
  int64_t epoch_ = -1;                  // the iteration order_ and starts_ are for
  std::vector<int64_t> order_, starts_; // the iteration's patterns in batch order; batch k's start
};

// The Hilbert index of (x, y) on a 2^16 × 2^16 grid (x, y < 65536).
uint64_t hilbert_index(uint32_t x, uint32_t y);

}  // namespace tycho
