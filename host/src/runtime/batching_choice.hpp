// Which patterns form a mini-batch ([reconstruct] batching, tycho/core/batch_plan.hpp):
// "random" (a seeded permutation each iteration), "compact" (patches of neighbouring positions,
// the object stepped only in the tiles under each batch's windows: the cost per position does
// not grow with the scan), or "auto": random while a batch's windows cover the object several
// times over (the object costs less than the patterns do, and every batch touches most of it),
// compact beyond. The choice depends on the data's shapes only, never on the number of ranks,
// so every rank and every rank count runs the same batches.
#pragma once

#include <tycho/core/batch_plan.hpp>
#include <tycho/core/config.hpp>

#include <cstdint>
#include <string>

namespace tycho::host {

struct batching_choice {
  batching kind = batching::random;
  std::string why;  // for the log
};

// `object_px`: the object's pixels per slice (H·W); `window_px`: the probe window's (N0·N1).
batching_choice choose_batching(const config_document& doc, int64_t object_px, int64_t window_px, int64_t batch_size);

// "auto" picks compact when the object has more pixels than batch_size · window_px / this.
constexpr int64_t auto_compact_coverage = 8;

}  // namespace tycho::host
