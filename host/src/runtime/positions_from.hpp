// Where a fresh run's positions come from other than its source: [data] positions_from, the probe
// positions a tycho result saved (e.g. corrected by an earlier run) instead of the source's raster
// or listed positions (the object, probe and optimizers start anew; only the positions are
// taken); and [data] shuffle_positions, the same positions in a random order. Host-internal.
#pragma once

#include <tycho/core/geometry.hpp>
#include <tycho/host/registry.hpp>

#include <string>
#include <vector>

namespace tycho::host {

// The positions_px of the result at `path`: (P, 2) float64 object pixels, C order over the scan,
// exactly as saved (bit for bit). The result must describe this run's grid, so that every
// position falls on the object pixel it had there: the same scan shape (so P), window (N0, N1),
// object pixel (within 1e-9 relative) and object (H, W) as `g` and `layout` (the layout this run
// computed from its own data and config). Throws tycho::error naming `[data] positions_from`, the
// file and both values on a mismatch; on a file that is not a tycho result, a missing or
// non-float64 positions_px, or a non-finite position. Reads the whole file (it is small).
std::vector<double> positions_from_result(const registry& reg, const std::string& path, const scan_geometry& g,
                                          const object_layout& layout);

// [data] shuffle_positions: permutes the (P, 2) pairs of `positions_px` in place by
// epoch_permutation(P, seed, −1) (core's Fisher–Yates, the same order on every platform and
// library, unlike std::shuffle; an epoch neither the batches nor the held-out patterns draw), so
// that pattern k gets pattern π(k)'s position.
void shuffle_position_pairs(std::vector<double>& positions_px, uint64_t seed);

}  // namespace tycho::host
