// The preprocessing stage on chunks of stored integer counts: no stage holds the scan, neither
// as float32 nor as counts. A first pass over the source's chunks finds the bad pixels (and the
// largest count); the stage's statistics (centre of mass, its fit, the rotation estimate) take
// another pass; the last pass sends every pattern through the per-pattern steps
// (pattern_steps.hpp) into the targets: uint16 counts when the steps keep whole counts below
// 65536 (crop, binning of counts that cannot overflow, recentre, turns) and the run asks for
// integer targets, else float32 (normalised afterwards when asked). Every value, total and fit
// is the whole-scan float32 path's (read_dataset, mask_bad_pixels, preprocess_dataset) bit for
// bit: the same per-pattern code in the same order, on counts that convert to float32 exactly.
#pragma once

#include <optional>
#include <string>

#include "bad_pixels.hpp"
#include "tycho/host/dataset.hpp"
#include "tycho/host/preprocess.hpp"
#include "tycho/host/registry.hpp"

namespace tycho::host {

struct chunked_read {
  dataset data;                   // targets or counts (uint16) preprocessed, bad pixels masked
  tycho_dataset_info source_info{};  // data.info as the source gave it, before the stage
  preprocess_report report;       // what the stage did (to_json for the manifest)
  std::string bad_pixel_warning;  // mask_bad_pixels's ("" when nothing is masked)
  int64_t passes = 0;             // reads of the source's block
};

// Whether the stage in `doc` changes the patterns, so that read_preprocessed_counts applies.
bool stage_changes_patterns(const config_document& doc);

// Opens `source`, and when it delivers uint8 or uint16 counts in their stored dtype, reads the
// block `part` of `parts` chunk by chunk and preprocesses it as [preprocess] in `doc` asks:
// `sum_across_ranks` and `gather` combine the ranks' fits and bad pixels as the whole-scan path
// does. `integer_targets`: uint16 results where the steps keep whole counts. Returns none,
// reading no pattern, when the source does not deliver counts (the caller reads float32).
// `chunk_bytes`: the counts read per source call (at least one pattern).
std::optional<chunked_read> read_preprocessed_counts(const component_ref& source, const tycho_config* data_table,
                                                     int64_t part, int64_t parts, const config_document& doc,
                                                     const rank_sum& sum_across_ranks, const gather_texts& gather,
                                                     bool integer_targets, int64_t chunk_bytes = int64_t(4) << 20);

}  // namespace tycho::host
