// The scan's global geometry: where the probe really was for each scan index, as a linear map of
// the nominal raster.
//
// A raster scan stores only its nominal positions n_j = (i·step0, k·step1) (Å, scan axes, scan
// index (i, k) of pattern j). Where the probe was, in the detector's frame (the object's frame:
// the engine's far field is the detector's), is modelled as
//   r_j = L · n_j + c + δ_j
// with L a 2 x 2 linear map, c a translation (which ptychography cannot determine: the object
// moves with it) and δ_j each position's own error. L holds the scan's rotation against the
// detector, the scale of each scan axis, their shear, and a drift at constant velocity: a drift
// u per acquired pattern moves pattern j by u·t_j with t_j = i + R0·k (axis 0 swept first) or
// k + R1·i, which is linear in (i, k), so it is one of these maps too. A transposed detector is not
// in L: the patterns are transposed (an exact reordering) before L applies, so that the object
// keeps the scan's handedness.
//
// L is parametrised for the log, the manifest and the user's fixed values as
//   L = R(θ) · [[s0, 0], [h, s1]]
// θ the rotation (radians inside, degrees in files: from axis 0 towards axis 1), s0, s1 the scale
// of the nominal step along scan axes 0 and 1, h the shear (axis 1's shift per unit of axis 0, in
// units of the step). Every invertible L with det L > 0 has exactly one such form.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tycho/core/geometry.hpp"

namespace tycho {

struct scan_map {
  // r = L n + c (Å); identity by default.
  std::array<std::array<double, 2>, 2> L{{{1.0, 0.0}, {0.0, 1.0}}};

  static scan_map from_parameters(double rotation_rad, double scale0, double scale1, double shear);
  // θ, s0, s1, h of L = R(θ)·[[s0, 0], [h, s1]]; needs det L > 0 (else the values are NaN).
  struct parameters {
    double rotation_rad = 0, scale0 = 1, scale1 = 1, shear = 0;
  };
  parameters decompose() const;

  std::array<double, 2> apply(const std::array<double, 2>& n) const {
    return {L[0][0] * n[0] + L[0][1] * n[1], L[1][0] * n[0] + L[1][1] * n[1]};
  }
  // Every position of `positions_A` ((P, 2) Å, interleaved) mapped in place.
  void apply_in_place(std::vector<double>& positions_A) const;
  double det() const { return L[0][0] * L[1][1] - L[0][1] * L[1][0]; }
  bool is_identity() const { return L[0][0] == 1 && L[1][1] == 1 && L[0][1] == 0 && L[1][0] == 0; }
};

// Rotation by θ, snapped to exact 0/±1 entries when θ is a multiple of 90° within 1e-9 rad (so a
// quarter turn keeps a raster a raster, bit for bit).
scan_map rotation_map(double rotation_rad);

// The nominal positions of an rx x ry raster, n_j = (i·step0, k·step1) for j = i·ry + k ((P, 2) Å,
// interleaved, scan order).
std::vector<double> raster_positions_A(int64_t rx, int64_t ry, double step0, double step1);

// The object's layout for a raster (g's scan shape and steps) whose nominal positions `map` moves,
// as a run lays it out: layout_object(g) for the identity, else layout_object over the mapped
// positions (a turned raster's object is larger). Throws as layout_object does. One rule for the
// session and for the reader of its results.
object_layout layout_mapped_raster(const scan_geometry& g, const scan_map& map);

}  // namespace tycho
