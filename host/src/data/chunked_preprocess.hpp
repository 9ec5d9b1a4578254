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

#include <memory>
#include <string>
#include <vector>

#include "bad_pixels.hpp"
#include "preprocess_stage.hpp"
#include "source_reader.hpp"
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

// Whether counts a source delivers as such (uint8 / uint16, tycho_dataset_info::reads_stored_dtype)
// stay uint16 targets ([preprocess] integer_targets; by default yes: exact, half the memory of
// float32, and no float32 copy of the scan is ever made).
bool keeps_integer_targets(const config_document& doc);

// Whether a run of `doc` on a source of header `info` will hold uint16 counts, as far as the
// config and the header tell before any pattern is read (tycho plan: 2 bytes per target): the
// source delivers uint8/uint16 counts as such, integer targets are asked for, no normalise, and
// a binning whose sums cannot pass 65535 at the stored dtype's largest value. The run decides on
// the counts themselves (results_stay_counts), so it may keep counts where this says float32.
bool expects_count_targets(const config_document& doc, const tycho_dataset_info& info);

// Whether the stage in `doc` changes the patterns, so that read_preprocessed_in_chunks applies
// (a stage that only measures, or none, leaves them to read_dataset).
bool stage_changes_patterns(const config_document& doc);

// A source's block read pass after pass, chunk by chunk, each pattern handed over masked as
// float32 (counts convert exactly): the first pass (bad pixels, the largest value, whether any
// pixel holds intensity) runs in the constructor. Passes are pulled pattern by pattern (next),
// or run whole (feed), with the same code: the same values and totals either way.
class chunked_source {
 public:
  // Opens `source`, sets the block `part` of `parts` and runs the first pass (errors as
  // read_dataset's and mask_bad_pixels's; `gather` combines the ranks' bad pixels).
  chunked_source(const component_ref& source, const tycho_config* data_table, int64_t part, int64_t parts,
                 const config_document& doc, const gather_texts& gather, int64_t chunk_bytes);
  dataset& header() { return reader_.header(); }
  const dataset& header() const { return const_cast<source_reader&>(reader_).header(); }
  bool counts() const { return counts_; }        // the source delivers its stored counts
  uint16_t max_count() const { return max_value_; }
  const std::string& bad_pixel_warning() const { return warning_; }
  const std::string& read_as() const { return read_as_; }
  int64_t passes() const { return passes_; }
  // A pass pulled pattern by pattern: start_pass(), then next() until it returns nullptr. The
  // pattern (masked, float32, FFT order) stays valid until the next call; `local` its index.
  // pass_total(): the masked totals of the patterns handed over so far, summed in order.
  void start_pass();
  const float* next(int64_t& local);
  double pass_total() const { return total_; }
  // Whole passes for the stage (run_preprocess_stage), each setting the header's totals.
  pattern_feed feed();

 private:
  void read_chunk(int64_t first, int64_t count);
  source_reader reader_;
  std::unique_ptr<bad_pixel_scan> scan_;
  bool counts_ = false;
  int64_t n_ = 0, chunk_ = 1, passes_ = 0;
  uint16_t max_value_ = 0;
  float max_float_ = 0;
  std::string warning_, read_as_;
  std::vector<uint16_t> count_chunk_;
  std::vector<float> float_chunk_, pattern_;
  int64_t chunk_first_ = 0, chunk_count_ = 0, position_ = 0;  // the pull pass: chunk held, next pattern
  double total_ = 0;
};

// Opens `source`, reads the block `part` of `parts` chunk by chunk and preprocesses it as
// [preprocess] in `doc` asks: `sum_across_ranks` and `gather` combine the ranks' fits and bad
// pixels as the whole-scan path does. `integer_targets`: uint16 results where the steps keep
// whole counts. `chunk_bytes`: the values read per source call (at least one pattern). Errors
// as read_dataset's, mask_bad_pixels's and preprocess_dataset's.
chunked_read read_preprocessed_in_chunks(const component_ref& source, const tycho_config* data_table, int64_t part,
                                         int64_t parts, const config_document& doc, const rank_sum& sum_across_ranks,
                                         const gather_texts& gather, bool integer_targets,
                                         int64_t chunk_bytes = int64_t(4) << 20);

// Whether the stage's results of a source of counts stay uint16 counts: the source delivers
// counts, the run asks for integer targets, the stage does not normalise and a bin's sum cannot
// pass 65535 (the largest count times binning²).
bool results_stay_counts(const chunked_source& src, const preprocess_settings& s, bool integer_targets);

// The bytes a prepared file stores per count: 1 (uint8) when no result can pass 255 (the source's
// largest value, dataset::max_value, times binning²), else 2 (uint16). Half the file, and so half
// the disk's reads of a run from it (target_residency = "disk"); readers widen them to uint16.
// Both writers (in memory, streamed) decide by this bound, so they write the same bytes.
int stored_count_bytes(double largest_source_value, int64_t binning);
// `n` counts into `out` as `bytes`-wide little-endian values (stored_count_bytes): uint16 as they
// are, uint8 narrowed, failing (TYCHO_ERR_INTERNAL, naming `pattern` and the bound) on a count the
// bound from `largest_source_value` said could not be there.
void store_counts(const uint16_t* counts, int64_t n, int bytes, unsigned char* out, int64_t pattern,
                  double largest_source_value);

}  // namespace tycho::host
