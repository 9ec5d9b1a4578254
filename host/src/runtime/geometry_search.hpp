// The scan's geometry by trial reconstructions ([preprocess] scan_geometry_search): where neither
// the bright field's parallax nor the centre-of-mass curl measures the scan's rotation against
// the detector (low dose, weak contrast), short reconstructions at candidate rotations (every
// step_deg over the full turn, rounded to a whole number of candidates, each transpose the
// settings leave open), positions held on the candidate's rotated raster, are ranked by their
// final loss: the data fit the object best where the positions are right. The best is refined
// by half a step either side, then checked against the best candidate elsewhere (another
// transpose, or more than a step away): with the first seed and geometry_search_replicas other
// seeds (other mini-batches; where one batch would hold the whole scan the trials take batches
// of a quarter of it, so that the seeds differ) the runner-up's loss minus the best's must be
// positive beyond its scatter, a one-sided Student t test at 95 %. Else the search is
// inconclusive and the caller keeps its geometry, with a warning.
//
// Measured on the validation matrix (bench/RESULTS.md, "Session 20"): hBN at 80 kV and 5,000
// e/Å² (the parallax's standard error 55 %, the curl's contrast 10 %) and WSe2 at 200 kV with 360
// electrons a pattern: the truth's rotation and transpose ranked first (200 iterations each).
//
// Cost: every trial reads and preprocesses the data again and runs `iterations` iterations over
// the whole scan: geometry_search_trials() of them. One rank only (the trials are sessions of
// their own). While it runs the process's log level is raised to errors (the trials'
// information and advice would bury the run's own): not for threads that log meanwhile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <tycho/core/config.hpp>

namespace tycho::host {

class registry;

// Seeds beside the first that check the winner against the runner-up.
constexpr int geometry_search_replicas = 4;
// scan_geometry_search = "auto" runs the trials only where their whole work, trials x iterations
// x patterns x detector pixels, is at most this: the default search (46 trials of 200
// iterations) over 2^24 pattern pixels, 7 times the hBN entry's 576 x 64² (117 s here): about a
// quarter of an hour on two cores.
constexpr double geometry_search_auto_max_work = 46.0 * 200.0 * double(1 << 24);

struct geometry_search_options {
  double step_deg = 20;       // [preprocess] scan_geometry_search_step_deg
  int64_t iterations = 200;   // [preprocess] scan_geometry_search_iterations
  bool transpose_free = true;  // both transposes tried; else only `transpose`
  bool transpose = false;
  int64_t patterns = 0;        // the scan's, for the trials' batches
  int64_t batch_size = 128;    // [reconstruct] batch_size
};

// The trials a search runs: the candidates, the best's two neighbours, and the best and the
// runner-up again with each replica seed.
int64_t geometry_search_trials(const geometry_search_options& o);

struct geometry_trial {
  double rotation_deg = 0;
  bool transpose = false;
  int64_t seed = 0;
  double loss = 0;  // the mean of the trial's last iterations' losses
};

struct geometry_search_result {
  std::vector<geometry_trial> trials;  // in the order run
  double rotation_deg = 0;
  bool transpose = false;
  bool conclusive = false;
  double runner_up_deg = 0;  // the best candidate away from the winner, which it must beat
  bool runner_up_transpose = false;
  double step_deg = 0;       // the candidates' spacing (360 / a whole number)
  double t_statistic = 0;    // of the runner-up's loss minus the best's over the seeds
  double t_critical = 0;     // the one-sided 95 % point it must pass
  std::string summary;  // for the log and the manifest
};

// Runs the search on `config` (the user's: each trial is a copy with its candidate's geometry,
// a fixed count of iterations, the positions and the scan map held, no previews). Throws what a
// trial session throws.
geometry_search_result search_scan_geometry(const config_document& config, registry& reg,
                                            const geometry_search_options& o);

}  // namespace tycho::host
