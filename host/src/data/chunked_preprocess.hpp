// The preprocessing stage on chunks of the source's patterns: no stage holds the scan. A first
// pass over the source's chunks finds the bad pixels (and the largest value, refusing negative
// ones); the stage's statistics (centre of mass, its fit, the rotation estimate) take another
// pass; the last pass sends every pattern through the per-pattern steps (pattern_steps.hpp)
// into the targets: uint16 counts when the source delivers uint8/uint16 counts, the steps keep
// whole counts below 65536 (crop, binning that cannot overflow, recentre, turns) and the run
// asks for integer targets, else float32 (normalised afterwards when asked). The chunks are read
// as the stored counts when the source delivers them, else as float32. Every value, total and
// fit is the whole-scan float32 path's (read_dataset, mask_bad_pixels, preprocess_dataset) bit
// for bit: the same per-pattern code in the same order, on values that are its float32 exactly.
#pragma once

#include <string>

#include "bad_pixels.hpp"
#include "tycho/host/dataset.hpp"
#include "tycho/host/preprocess.hpp"
#include "tycho/host/registry.hpp"

namespace tycho::host {

struct chunked_read {
  dataset data;                      // targets or counts (uint16) preprocessed, bad pixels masked
  tycho_dataset_info source_info{};  // data.info as the source gave it, before the stage
  preprocess_report report;          // what the stage did (to_json for the manifest)
  std::string bad_pixel_warning;     // mask_bad_pixels's ("" when nothing is masked)
  std::string read_as;               // "the stored uint16 counts" or "float32", for the log
  int64_t passes = 0;                // reads of the source's block
};

// Whether the stage in `doc` changes the patterns, so that read_preprocessed_in_chunks applies
// (a stage that only measures, or none, leaves them to read_dataset).
bool stage_changes_patterns(const config_document& doc);

// Opens `source`, reads the block `part` of `parts` chunk by chunk and preprocesses it as
// [preprocess] in `doc` asks: `sum_across_ranks` and `gather` combine the ranks' fits and bad
// pixels as the whole-scan path does. `integer_targets`: uint16 results where the steps keep
// whole counts. `chunk_bytes`: the values read per source call (at least one pattern). Errors
// as read_dataset's, mask_bad_pixels's and preprocess_dataset's.
chunked_read read_preprocessed_in_chunks(const component_ref& source, const tycho_config* data_table, int64_t part,
                                         int64_t parts, const config_document& doc, const rank_sum& sum_across_ranks,
                                         const gather_texts& gather, bool integer_targets,
                                         int64_t chunk_bytes = int64_t(4) << 20);

}  // namespace tycho::host
