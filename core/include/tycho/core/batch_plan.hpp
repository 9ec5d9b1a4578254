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
  // B = ⌈patterns / batch_size⌉ batches, batch k holding the patterns [⌊k P / B⌋, ⌊(k+1) P / B⌋)
  // of the iteration's order: sizes that differ by at most one, none above batch_size (a last
  // batch of a few patterns would step the object as a full one: 518 patterns in batches of 128
  // and one of 6 raised the fitted loss 5 % on a low-dose scan, bench/RESULTS.md "Session 22").
  // random: the order is epoch_permutation(patterns, seed, epoch). compact: the patterns sorted
  // by the Hilbert index of their position (positions_px, (patterns, 2) px; ties by index) and cut
  // once into those B blocks, each a spatially compact patch of the scan; iteration e visits the
  // blocks in the order epoch_permutation(B, seed, e).
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
  int64_t start_of(int64_t k) const;  // batch k's first position in the iteration's order
  int64_t patterns_, batch_size_;
  uint64_t seed_;
  batching kind_;
  int64_t batches_;
  std::vector<int64_t> hilbert_order_;  // compact: the patterns in Hilbert order (blocks of batch_size)
  int64_t epoch_ = -1;                  // the iteration order_ and starts_ are for
  std::vector<int64_t> order_, starts_; // the iteration's patterns in batch order; batch k's start
};

// The patterns a run holds out of every batch (driver_options::held_out): block `fold` of
// n = round(fraction · patterns) of epoch_permutation(patterns, seed, −2) (an epoch no iteration
// uses), i.e. its entries [fold · n, (fold + 1) · n), sorted: folds 0, 1, ... of one seed are
// disjoint (k-fold cross-validation, k = 1 / fraction). Empty for fraction 0; fraction must lie in
// [0, 0.5] and fold in [0, patterns / n) (else TYCHO_ERR_INVALID_ARGUMENT naming `key`).
std::vector<int64_t> held_out_patterns(int64_t patterns, double fraction, uint64_t seed, int64_t fold,
                                       const std::string& key);

// The Hilbert index of (x, y) on a 2^16 × 2^16 grid (x, y < 65536).
uint64_t hilbert_index(uint32_t x, uint32_t y);

}  // namespace tycho
