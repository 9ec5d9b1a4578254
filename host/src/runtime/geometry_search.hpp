// The scan's geometry by trial reconstructions ([preprocess] scan_geometry_search): where neither
// the bright field's parallax nor the centre-of-mass curl measures the scan's rotation against
// the detector (low dose, weak contrast), short reconstructions at candidate rotations (every
// step_deg over the full turn, each transpose the settings leave open), positions held on the
// candidate's rotated raster, are ranked by their final loss: the data fit the object best where
// the positions are right. Then the best is refined by half a step either side, and checked:
// it must also beat the best candidate elsewhere (another transpose, or more than a step away)
// with two other seeds (other mini-batches), or the search is inconclusive and the nominal
// raster stays, with a warning.
//
// Measured on the validation matrix (bench/RESULTS.md, "Session 20"): hBN at 80 kV and 5,000
// e/Å² (the parallax's standard error 55 %, the curl's contrast 10 %) and WSe2 at 200 kV with 360
// electrons a pattern: the truth's rotation and transpose ranked first (200 iterations each).
//
// Cost: every trial reads and preprocesses the data again and runs `iterations` iterations over
// the whole scan: (360 / step_deg × transposes + 6) trials. One rank only (the trials are
// sessions of their own). While it runs the process's log level is raised to errors (the trials'
// information and advice would bury the run's own): not for threads that log meanwhile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <tycho/core/config.hpp>

namespace tycho::host {

class registry;

// scan_geometry_search = "auto" runs the trials only where a trial iteration touches at most this
// many pattern pixels (patterns x detector pixels; 7 times the hBN entry's 576 x 64²).
constexpr double geometry_search_auto_max_values = double(1 << 24);

struct geometry_search_options {
  double step_deg = 20;       // [preprocess] scan_geometry_search_step_deg
  int64_t iterations = 200;   // [preprocess] scan_geometry_search_iterations
  bool transpose_free = true;  // both transposes tried; else only `transpose`
  bool transpose = false;
};

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
  std::string summary;  // for the log and the manifest
};

// Runs the search on `config` (the user's: each trial is a copy with its candidate's geometry,
// a fixed count of iterations, the positions and the scan map held, no previews). Throws what a
// trial session throws.
geometry_search_result search_scan_geometry(const config_document& config, registry& reg,
                                            const geometry_search_options& o);

}  // namespace tycho::host
