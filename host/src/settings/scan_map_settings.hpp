// [reconstruct.positions] refine_scan_scale: whether the scan map's refinement moves the scan's
// isotropic scale. Host-internal: the session's config reader reads it.
#pragma once

#include <cstdint>

#include <toml++/toml.h>

namespace tycho::host {

// true, false, or "auto" (the default): refined with several slices, held with one. With several
// slices the map then refines C10 too ([optics] refine_C10 = "auto") and the probe waits for the
// map to converge: a freed scale lands wherever the defocus it is paired with puts it, and a probe
// refined from the start drifts (bench/RESULTS.md, session 10). With one slice the scale and C10
// are not separable (the bright field's parallax fixes only their ratio; a freed scale collapsed
// the partially coherent MoS2 scan). Refuses anything else, naming the key.
bool read_scan_scale_refinement(const toml::table& positions, int64_t slices);

}  // namespace tycho::host
