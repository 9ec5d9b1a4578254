// [optics] refine_C10: whether the run starts from the defocus the bright field's parallax
// measured, and whether the scan map's refinement moves it during the run. Host-internal: the
// session and its config reader read it alike.
#pragma once

#include <cstdint>

#include <toml++/toml.h>

namespace tycho::host {

enum class C10_refinement {
  off,   // false: the stated C10 throughout
  on,    // true: start from the parallax's C10 and refine it with the scan map
  auto_  // "auto" (the default): as true with one slice; with several, refined where the map
         // refines the scale too (the probe then waits for the map: the two need the defocus
         // they are paired with, bench/RESULTS.md session 10), else held at the parallax's C10
         // (the map's C10 step ran away on GaAs [110] with the probe refined alongside: session 9)
};

// Refuses anything but true, false and "auto", naming the key.
C10_refinement read_C10_refinement(const toml::table& optics);

// Whether the run starts from the parallax's C10 (anything but false).
inline bool starts_from_measured_C10(C10_refinement m) { return m != C10_refinement::off; }

// Whether the scan map's refinement refines C10 for a run of `slices` slices whose map refines
// the isotropic scale (`scale_refined`) or not.
inline bool map_refines_C10(C10_refinement m, int64_t slices, bool scale_refined) {
  return m == C10_refinement::on || (m == C10_refinement::auto_ && (slices <= 1 || scale_refined));
}

}  // namespace tycho::host
