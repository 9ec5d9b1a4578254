// Scan geometry: probe positions in object pixels and the object's size.
#pragma once

#include <cstdint>
#include <vector>

namespace tycho {

struct scan_geometry {
  int64_t scan_shape[2];      // (Rx, Ry)
  double step_A[2];           // scan step along Rx, Ry, Å
  double pixel_A[2];          // object pixel = window's real-space pixel, Å
  int64_t window[2];          // (N0, N1)
  int64_t padding_px = 0;     // object margin beyond the outermost windows
  // Where scan index (0, 0) lies in a reference frame (e.g. a simulation cell), Å. Only its
  // sub-pixel part matters: the object grid is placed so that its pixels fall on that frame's
  // pixels, which lets a reconstruction be compared with a model pixel for pixel.
  double scan_origin_A[2] = {0.0, 0.0};
};

struct object_layout {
  int64_t shape[2];                  // (H, W)
  std::vector<double> positions_px;  // (P, 2) probe centres, C order over (Rx, Ry)
};

// Raster scan, axis 0 of the scan along axis 0 of the object (CONVENTIONS.md): the centre of
// pattern (i, j) lies at padding + N/2 + frac(origin/px) + (i·step0/px0, j·step1/px1). The
// object spans every window plus the padding on each side, plus one pixel for the sub-pixel
// shifts.
object_layout layout_object(const scan_geometry& g);

// Positions listed by the data (a source's read_positions): `positions_A` holds (P, 2) probe
// positions in Å (column 0 along object axis 0), in any frame. The object spans their
// bounding box: the centre of pattern j lies at padding + N/2 + frac(corner/px) +
// (p_j − lo)/px per axis, with lo the smallest position along that axis and corner =
// scan_origin_A + lo (scan_origin_A is where the positions' zero lies in the reference frame;
// again only its sub-pixel part matters). The size follows the raster rule with the extent
// (hi − lo)/px. g.scan_shape and g.step_A are not used. Raster positions given explicitly,
// (i·step0, j·step1), give bit-identical positions_px and shape to layout_object(g).
// Throws on an empty or odd-sized list and on a non-finite position.
object_layout layout_object(const scan_geometry& g, const std::vector<double>& positions_A);

// Deterministic Fisher–Yates permutation of [0, n) for (seed, epoch), identical on every
// platform and rank (its own generator: std::uniform_int_distribution is not portable).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace tycho
