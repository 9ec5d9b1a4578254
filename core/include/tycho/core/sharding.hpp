// How a data-parallel run splits its work: which patterns a rank holds and which members of
// each global mini-batch it computes. The batches themselves (one global permutation per
// epoch, drawn from the shared seed) do not depend on the number of ranks, so neither does the
// loss trajectory: only the order of floating-point sums changes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tycho {

struct shard {
  enum class mode {
    patterns,    // rank r holds the contiguous block r of the patterns (memory / W) and computes
                 // the batch members in its block: shares vary from batch to batch
    replicated   // every rank holds every pattern and computes the r-th slice of each batch:
                 // equal shares, W times the memory
  };
  mode kind = mode::patterns;
  int32_t rank = 0, world_size = 1;
  int64_t first = 0, count = 0;  // the patterns this rank holds: [first, first + count)

  // Blocks of ⌊P/W⌋ or ⌈P/W⌉ patterns, the larger ones first.
  static shard of(int64_t patterns, int32_t rank, int32_t world_size, mode kind);
  static mode parse(const std::string& name, const std::string& key);

  // The members of a global batch this rank computes, as indices into the patterns it holds.
  // In replicated mode a batch of n splits into slices of ⌊n/W⌋ or ⌈n/W⌉, the larger first.
  void select(const int64_t* batch, int64_t n, std::vector<int64_t>& local) const;
};

// [first, first + count) of the i-th of `parts` near-equal blocks of `n` (the larger first).
void block_of(int64_t n, int64_t parts, int64_t i, int64_t& first, int64_t& count);

}  // namespace tycho
