// The preprocessing stage (tycho/host/preprocess.hpp) over patterns from anywhere: the scan held
// in memory (preprocess_dataset) or chunks read from a source (chunked_preprocess.hpp). The
// statistics (centre of mass, its fit, the rotation estimate, the normalisation) come from
// passes over the patterns, each pattern through the same per-pattern steps (pattern_steps.hpp).
#pragma once

#include <functional>
#include <vector>

#include "pattern_steps.hpp"
#include "tycho/host/preprocess.hpp"

namespace tycho::host {

// visit(l, p): pattern l (0 ≤ l < d.patterns, this rank's) as read, (N0, N1) float32, FFT order,
// bad pixels masked; p is valid during the call only.
using pattern_visitor = std::function<void(int64_t local, const float* pattern)>;
// Calls `visit` for every pattern held, in order (once per pass; a pass may read a source again).
using pattern_feed = std::function<void(const pattern_visitor& visit)>;

enum class stage_output {
  in_place,  // the patterns are d.targets (or d.counts for a stage that only measures): results overwrite them
  float32,   // results into d.targets (which the feed does not use)
  counts,    // results into d.counts as uint16: only for steps that keep whole counts below 65536
};

// The stage resolved on the patterns `feed` delivers, before any pattern is changed: the shapes,
// the centre of mass, its fit and the rotation estimate (the passes they need), the steps each
// pattern will take. A caller that produces the results itself (pattern by pattern, streamed
// into a prepared file) transforms each pattern with it, as run_preprocess_stage does.
struct stage_plan {
  preprocess_report report;
  pattern_steps steps;
  bool changes = false;              // the steps change the patterns (or normalise them)
  std::vector<double> own_totals;    // normalise: each pattern's total before it (normalise_totals)
  // Pattern `local` (the block's, first = d.first) through the steps into `out` (steps.out).
  void transform(const float* raw, int64_t local, int64_t first, float* out, pattern_scratch& scratch) const;
  // normalise: one more pass for each pattern's total after the steps, and the scan's mean over
  // the ranks (report.normalised_to, returned).
  double normalise_totals(const dataset& d, const pattern_feed& feed, const rank_sum& sum_across_ranks);
};
stage_plan plan_preprocess_stage(dataset& d, const config_document& doc, const rank_sum& sum_across_ranks,
                                 const pattern_feed& feed);
// d's shape and calibration after the steps; `recompute`: d's totals from its patterns (when the
// steps change them; a caller that streamed them sets the totals itself).
void finish_preprocess_stage(dataset& d, stage_plan& plan, bool recompute);

// Runs the stage as [preprocess] asks on the patterns `feed` delivers (d's header: d.n0, d.n1,
// d.first, d.patterns, d.info) and writes every pattern's result as `output` says (in_place:
// only when the stage changes the patterns); d.n0, d.n1, d.info.detector_shape and (when the
// patterns change) the totals as preprocess_dataset's. `steps_out` (optional) receives the
// resolved per-pattern steps. Errors as preprocess_dataset's.
preprocess_report run_preprocess_stage(dataset& d, const config_document& doc, const rank_sum& sum_across_ranks,
                                       const pattern_feed& feed, stage_output output,
                                       pattern_steps* steps_out = nullptr);

}  // namespace tycho::host
