// [reconstruct.positions] correct: whether, and from when, each probe position is corrected by
// its own gradient (core/position_correction.hpp). Host-internal: the session and `tycho plan`
// read it alike.
#pragma once

#include <toml++/toml.h>

namespace tycho::host {

enum class position_correction_mode {
  off,             // false (the default): the positions stay where the scan map puts them
  on,              // true: from [reconstruct.positions] first_iteration
  after_scan_map,  // "after_scan_map": from the iteration after the scan map's refinement
                   // converged (a stage the data start: the global parameters first, then the
                   // local errors); none where the map is not refined
  weighed,         // "auto": from first_iteration beside the scan map where it holds the isotropic
                   // scale (one slice), else as after_scan_map; after
                   // core::driver::position_trial_iterations of their own steps the corrections
                   // are weighed against their counting noise (the positions' Fisher information)
                   // and kept only where they exceed it; none where the map is not refined
};

// Refuses anything but true, false, "after_scan_map" and "auto", naming the key.
position_correction_mode read_position_correction(const toml::table& positions);

}  // namespace tycho::host
