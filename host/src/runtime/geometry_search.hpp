// The scan's geometry by trial reconstructions ([preprocess] scan_geometry_search): where neither
// the bright field's parallax nor the centre-of-mass curl measures the scan's rotation against
// the detector (low dose, weak contrast), short reconstructions at candidate rotations (every
// step_deg over the full turn, rounded to a whole number of candidates, each transpose the
// settings leave open), positions held on the candidate's rotated raster, are ranked by their
// final loss: the data fit the object best where the positions are right. The best is refined
// by half a step either side, then checked against the best candidate elsewhere (another
// transpose, or more than a step away) on patterns no trial was fitted to: with each of
// geometry_search_replicas other seeds than the ranking's (other mini-batches; where one batch
// would hold the whole scan the trials take batches of a quarter of it) and each of
// geometry_search_folds folds of the patterns held out in turn ([reconstruct]
// validation_fraction, validation_fold), both run again and their held-out loss compared: the
// runner-up's less the best's must be positive beyond its scatter over the 20 seeds and folds, a
// one-sided Student t test at 95 %. Else the search is inconclusive and the caller keeps its
// geometry, with a warning. Once it has passed, the rotation is placed between the candidates by
// trials that take the whole scan as one batch (their loss then a smooth function of the angle,
// no draw of mini-batches in it): eleven angles around the best, a parabola's vertex.
//
// Why held-out patterns: the fitted loss is biased by the choice. The best is the geometry whose
// trial fits this data's noise best, and it keeps fitting it with any seed: on 16 x 16 patterns
// of pure Poisson noise, 220° against 200° transposed, the fitted gap's t was 3.4 over ten seeds
// (and a raster turned off the object's pixel axes fits noise better by itself); the held-out
// gap's t was −2.7 over eight (four folds each): the geometry that fits the noise predicts it
// worse. Where the data place no position pattern by pattern (the caller's measure: the
// neighbouring patterns' information within twice its standard error) the test takes the
// one-sided 99 % point (options.strict). Measured (bench/RESULTS.md, "Session 22"), the first five
// seeds' 20 gaps: hBN at 5,000 e/Å² (60° against 140°) t = 5.5; graphene at 1,600 electrons a
// pattern (110° against 320° transposed) t = 4.4 over eight seeds' means. Session 21's check (the
// fitted gaps, and them less the same gaps on the patterns shuffled over the positions) gave
// graphene's verdict by the draw of the shuffles (t = 10.1 or 3.2 against 3.747).
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

#include "tycho/host/preprocess.hpp"

namespace tycho::host {

class registry;

// Seeds beside the ranking's that check the winner against the runner-up, and the folds of the
// patterns each holds out in turn ([reconstruct] validation_fraction = 1 / folds).
constexpr int geometry_search_replicas = 5;
constexpr int geometry_search_folds = 4;
// The trials that place the rotation between the candidates once the check has passed: seven
// angles a quarter step apart around the best, then four an eighth and a sixteenth of a step
// either side of the lowest; a parabola's vertex. Each takes the whole scan as one batch where
// that still gives the object geometry_search_placement_updates steps (with the default 200
// iterations; the MoS2 counts after 20 steps of the whole scan: loss 0.0253 against 0.0153 in
// batches of 128, and rough over the angle; after 60 smooth) and holds at most
// geometry_search_placement_pixels pattern pixels (2²³: 64 MiB of complex64 per buffer of the
// batch; the hBN entry's 576 x 64² is 2.4e6); else as few batches as meet both, one draw of them
// for every angle.
constexpr int geometry_search_placement_trials = 11;
constexpr int64_t geometry_search_placement_updates = 100;
constexpr int64_t geometry_search_placement_pixels = int64_t(1) << 23;
// scan_geometry_search = "auto" runs the trials only where their whole work, trials x iterations
// x patterns x detector pixels, is at most this: about a quarter of an hour on two cores (46
// trials of 200 iterations over the hBN entry's 576 x 64² took 117 s; this is 7 times that). The
// default search (89 trials of 200 iterations) then admits 8.7e6 pattern pixels, 64 x 64 patterns
// of 46².
constexpr double geometry_search_auto_max_work = 46.0 * 200.0 * double(1 << 24);

struct geometry_search_options {
  double step_deg = 20;       // [preprocess] scan_geometry_search_step_deg
  int64_t iterations = 200;   // [preprocess] scan_geometry_search_iterations
  bool transpose_free = true;  // both transposes tried; else only `transpose`
  bool transpose = false;
  int64_t patterns = 0;        // the scan's, for the trials' batches
  int64_t detector_pixels = 0;  // the window's, for the placement's batch (0: the whole scan)
  int64_t batch_size = 128;    // [reconstruct] batch_size
  bool strict = false;         // the checks at the one-sided 99 % point instead of 95 %
};

// The search's options as [preprocess] states them, for a scan of `patterns` patterns run with
// [reconstruct] batch_size `batch_size` (strict: false).
geometry_search_options geometry_search_options_of(const preprocess_settings& pre, int64_t patterns,
                                                   int64_t batch_size);

// The trials a search runs: the candidates, the best's two neighbours, the best and the
// runner-up again with each replica seed and fold, and the placement's (where it runs: at most).
int64_t geometry_search_trials(const geometry_search_options& o);

// The placement's batch: the whole scan, or as few batches as give the object
// geometry_search_placement_updates steps in o.iterations and hold at most
// geometry_search_placement_pixels pattern pixels each (but at least the run's batch_size).
int64_t geometry_search_placement_batch(const geometry_search_options& o);

struct geometry_trial {
  double rotation_deg = 0;
  bool transpose = false;
  int64_t seed = 0;
  int64_t fold = -1;  // the fold held out (−1: none)
  double loss = 0;  // the mean of the trial's last iterations' losses; with a fold, the held-out patterns' loss
};

struct geometry_search_result {
  std::vector<geometry_trial> trials;  // in the order run
  double rotation_deg = 0;
  bool transpose = false;
  bool conclusive = false;
  double runner_up_deg = 0;  // the best candidate away from the winner, which it must beat
  bool runner_up_transpose = false;
  double step_deg = 0;       // the candidates' spacing (360 / a whole number)
  // The placement: its trials' offsets from the ranking's best (degrees) and losses, in the order
  // run, and their batch (the whole scan's patterns where it fits); rotation_deg is the vertex.
  std::vector<double> fine_offsets_deg, fine_losses;
  int64_t fine_batch = 0;
  // Per replica seed and fold (seed-major): the runner-up's held-out loss minus the best's.
  std::vector<double> gaps;
  double t_statistic = 0;  // of the gaps
  double t_critical = 0;   // the one-sided 95 % point (99 % with options.strict) it must pass
  std::string summary;  // for the log and the manifest
};

// The trials' whole work, trials x iterations x patterns x detector pixels (the window's), which
// "auto" bounds by geometry_search_auto_max_work.
double geometry_search_work(const geometry_search_options& o, int64_t detector_pixels);

// What `tycho plan` says of the search for a run of `config` whose data are `patterns` patterns of
// `detector_pixels` (the window's), `seconds_per_iteration` its estimated time per iteration (0:
// not estimated): "" where it cannot run (a stated rotation, scan_geometry_search = false, listed
// positions: `raster` false), else its trials, iterations and time (about trials x iterations x
// seconds_per_iteration: a trial iterates over the whole scan), and whether "auto" would run them.
std::string geometry_search_plan_line(const config_document& config, bool raster, int64_t patterns,
                                      int64_t detector_pixels, double seconds_per_iteration);

// Runs the search on `config` (the user's: each trial is a copy with its candidate's geometry,
// a fixed count of iterations, the positions and the scan map held, no previews). Throws what a
// trial session throws.
geometry_search_result search_scan_geometry(const config_document& config, registry& reg,
                                            const geometry_search_options& o);

}  // namespace tycho::host
