#include "tycho/core/sharding.hpp"

#include <algorithm>

#include "tycho/core/error.hpp"

namespace tycho {

void block_of(int64_t n, int64_t parts, int64_t i, int64_t& first, int64_t& count) {
  const int64_t base = n / parts, extra = n % parts;
  first = i * base + std::min(i, extra);
  count = base + (i < extra ? 1 : 0);
}

shard shard::of(int64_t patterns, int32_t rank, int32_t world_size, mode kind) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "rank ", rank, " of a world of ", world_size);
  shard s;
  s.kind = kind;
  s.rank = rank;
  s.world_size = world_size;
  if (kind == mode::replicated) {
    s.first = 0;
    s.count = patterns;
  } else {
    block_of(patterns, world_size, rank, s.first, s.count);
  }
  return s;
}

shard::mode shard::parse(const std::string& name, const std::string& key) {
  if (name == "patterns") return mode::patterns;
  if (name == "replicated") return mode::replicated;
  fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' must be \"patterns\" or \"replicated\", got \"", name, "\"");
}

void shard::select(const int64_t* batch, int64_t n, std::vector<int64_t>& local) const {
  local.clear();
  if (kind == mode::replicated) {
    int64_t first = 0, count = 0;
    block_of(n, world_size, rank, first, count);
    local.assign(batch + first, batch + first + count);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    if (batch[i] >= first && batch[i] < first + count) local.push_back(batch[i] - first);
}

}  // namespace tycho
