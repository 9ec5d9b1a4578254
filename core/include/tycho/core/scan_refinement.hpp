// The scan's linear map (scan_map.hpp) refined during the reconstruction, as a few global
// parameters with their own step.
//
// Why not leave it to each position's step: a wrong rotation, step or shear of the whole scan is
// the mode of the positions the data fix most weakly. The object forms around the wrong
// positions within a few iterations and then explains them almost as well: on an MoSe2 scan a
// 3 % error of the step moves the final loss by 3e-4 of its value, a curvature thousands of times
// flatter than one position's (whose Gauss–Newton steps, position_correction.hpp, assume the
// object fixed). Per-position steps then find the jitter (0.03 Å) and keep the global error
// (0.35 Å). But the slope along the mode is right wherever the object has adapted: at an object
// that minimises the loss for the current positions, dL/dθ of a global parameter θ is the
// partial derivative with the object held (the envelope theorem), Σ_j (∂L/∂r_j) · ∂r_j/∂θ from
// the positions' gradients the engine already computes. So the map takes quasi-Newton steps on
// those slopes, measured every few iterations while the object keeps adapting, with its
// curvature learnt from how the slopes change (BFGS; Nocedal & Wright, Numerical Optimization,
// 2006, ch. 6), and the positions' own steps keep only what no linear map explains.
//
// Parameters: L = R(θ) · [[s0, 0], [h, s1]] (scan_map.hpp), each one free or fixed; they are
// scaled to the displacement they cause at the scan's rms radius (Å), so that one step size and
// one tolerance serve all four.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tycho/core/scan_map.hpp"

namespace tycho {

struct scan_refinement_options {
  bool enabled = false;
  int64_t first_iteration = 10;  // the first slope (the object has formed)
  int64_t every = 5;             // iterations between steps (the object adapts in between)
  double max_move_A = 0.3;       // largest displacement one step makes at the scan's rms radius
  double tolerance_A = 0.002;    // steps smaller than this (rms radius) twice in a row: converged
  // Which of (rotation, scale0, scale1, shear) move.
  std::array<bool, 4> free{{true, true, true, true}};
};

class scan_refinement {
 public:
  scan_refinement() = default;
  // nominal_A: this rank's positions' nominal raster positions ((P, 2), Å, scan frame) minus the
  // mean over the whole scan; rms_radius_A: √ of the mean of |n|² over the whole scan; pixel_A:
  // the object's pixel (Å per px, per axis); start: the map the positions were laid out with.
  scan_refinement(scan_refinement_options options, std::vector<double> nominal_A, double rms_radius_A,
                  std::array<double, 2> pixel_A, const scan_map& start);

  // Sums n values over the ranks in place (identity on one rank).
  using rank_sum = std::function<void(std::vector<double>&)>;

  // After iteration `iteration`'s position gradients ((P, 2), dL/dr in px⁻¹): when a step is due,
  // moves the positions ((P, 2) px, in place) by the change of the map and returns true.
  bool step(int64_t iteration, const double* gradient, double* positions, const rank_sum& sum);

  // The affine part (a map of the nominal positions plus a shift) of per-position steps ((P, 2)
  // px), removed in place: what the map's refinement owns.
  void remove_affine_part(double* steps, const rank_sum& sum) const;

  const scan_map& map() const { return map_; }
  scan_map::parameters parameters() const { return map_.decompose(); }
  bool converged() const { return converged_; }
  int64_t steps_taken() const { return steps_; }
  // One line per step, for the log: iteration, parameters, step length.
  const std::string& last_report() const { return report_; }

 private:
  std::array<double, 4> slope(const double* gradient, const rank_sum& sum) const;  // dL/du (scaled)
  void apply(const std::array<double, 4>& du, double* positions);

  scan_refinement_options o_;
  std::vector<double> n_;  // (P, 2) Å
  double radius_ = 1;
  std::array<double, 2> pixel_{1, 1};
  scan_map map_;
  scan_map::parameters p_;
  // BFGS state in the scaled parameters u (Å at the rms radius).
  bool have_previous_ = false;
  std::array<double, 4> previous_slope_{}, previous_step_{};
  std::array<std::array<double, 4>, 4> inverse_hessian_{};
  bool have_curvature_ = false;
  int64_t steps_ = 0, small_steps_ = 0;
  bool converged_ = false;
  std::string report_;
};

}  // namespace tycho
