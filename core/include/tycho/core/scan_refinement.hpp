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
// Parameters: L = R(θ) · [[s0, 0], [h, s1]] (scan_map.hpp) and the probe's defocus C10, each one
// free or fixed. The defocus belongs with them: the bright field's parallax, most of what a
// defocused probe's patterns say about the scan at low resolution, depends on the scale of the
// scan and C10 only through their ratio, so a stated C10 that is 10 % off pulls the scale 10 %
// off unless both move together (measured: hBN stated 30 % off, the scale went to 0.77); only the
// finer detail separates them. Its slope is the probe's gradient projected on a change of defocus,
// dP/dC10 = F⁻¹[−iπλ|k|² · F P], which the driver computes. All five are scaled to the
// displacement they cause (Å): the map's at the scan's rms radius, C10's as the shift λ ΔC10 k
// of the bright-field image at the aperture's edge; one step size and one tolerance serve all.
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
  // Which of (rotation, isotropic scale ½ log(s0 s1), anisotropy ½ log(s0 / s1), shear, C10) move.
  // The isotropic scale is held by default: with an object free in every pixel, the loss keeps
  // falling as the scan expands (fewer patterns share each pixel, so more of the counting noise
  // is fitted: on the MoS2 counts −8.3e-6 per pattern per 1 % of scale, the 7e-6 that the
  // added pixels' share of the noise predicts), which biases it by +1 to +2.5 % on thin,
  // weakly scattering specimens (MoS2, hBN, WS2 at 1e4 e/Å²) while Pearson is best at the truth.
  std::array<bool, 5> free{{true, false, true, true, true}};
  // With free[1]: the isotropic scale and C10 (free[4]) start held and are freed once the rest
  // has converged (two small steps in a row), the quasi-Newton memory then starting afresh.
  // Their slopes are the data's finest information (several slices: the loss separates the
  // scale from C10 only through the propagation between slices) and need a formed object: freed
  // from the first step, while the object formed, Ge [110]'s scale moved from 1.0015 to 0.98 of
  // the nominal step in 20 iterations and settled 1.1 % from the truth, where it had started;
  // freed after the rest it walks 6 % to within 0.12 % of the truth (Pearson 0.971 -> 0.981,
  // bench/RESULTS.md, session 16).
  bool scale_after_rest = true;
  // What the held scale (free[1] false) keeps as it started: the isotropic scale √(s0 s1), or
  // the step of the scan axis the beam sweeps first, its vector's length in U (axis 0: |(s0, h)|,
  // axis 1: s1). With one slice the data fix neither (the loss is flat along the isotropic scale
  // with C10 / scale held), so the choice is a prior. A drift at constant velocity adds u gᵀ to
  // the map, g along the slow axis (a raster's fast-axis share is 1 / its length): it stretches
  // and shears the slow axis's step and leaves the fast one's, so with the fast axis known the
  // fast step is the one to trust; holding the isotropic scale instead puts half the drift's
  // stretch on the fast axis (the MoS2 jitter file: positions 0.068 Å against 0.036 Å). Where a
  // step is mis-calibrated along the fast axis, the fast-axis prior is the worse one (bench
  // RESULTS.md, session 16). The ratio a = ½ log(s0 / s1) stays the map's free parameter either
  // way; with a scan axis held the isotropic scale follows it after each step, and C10 with the
  // isotropic scale (the parallax fixes C10 / scale), so no slope along the flat direction, whose
  // bias (the noise penalty's, noise_per_A2) would otherwise move the ratio, is used.
  enum class held_scale { isotropic, axis0, axis1 };
  held_scale hold = held_scale::isotropic;
  // λ · k_aperture: the displacement (Å) per Å of C10 (0: C10 is not refined).
  double C10_displacement_per_A = 0;
  double C10_A = 0;  // the probe's defocus the run starts from, the model's
  // The model's C10 less the one the report and physical_C10_A() give (a multislice model's probe
  // carries the entrance surface's C10 moved by half a slice; 0 with one slice).
  double C10_model_shift_A = 0;
  // The expected fall of the loss per Å² of object the windows cover, from fitting more of the
  // counting noise (σ² per real degree of freedom × 2 per object pixel): added to the slopes of
  // the scales as the penalty σ² K(area), so that the scan is not expanded to fit noise (the bias
  // is the Neyman–Scott one of a likelihood with a parameter per pixel). 0: none (noise-free or
  // uncounted data).
  double noise_per_A2 = 0;
  double window_A = 0;  // the probe window's width (√ of its two sides), Å
  double wavelength_A = 0;             // for the probe's change of defocus (the driver's)
  std::array<double, 2> dk_invA{0, 0};  // the window's reciprocal pixel
};

// What a step changed besides the positions: the probe's defocus (the driver applies it).
struct scan_refinement_move {
  bool moved = false;
  double delta_C10_A = 0;
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

  // Whether iteration `iteration` ends with a step (the driver then gathers the probe's gradient).
  bool due(int64_t iteration) const;
  // Whether the refinement refines C10 (from its first step, or once the scale is freed).
  bool refines_C10() const { return o_.free[4] && o_.C10_displacement_per_A > 0; }
  // Whether the next step moves C10 (not while it waits with the scale): the driver gathers the
  // probe's gradient for its slope only then.
  bool moves_C10() const { return free_[4] && refines_C10(); }
  // Whether the isotropic scale (and C10 with it) is still held until the rest converges.
  bool scale_waiting() const { return scale_waits_; }
  const scan_refinement_options& options() const { return o_; }

  // After iteration `iteration`'s position gradients ((P, 2), dL/dr in px⁻¹) and the loss's slope
  // along C10 (dL/dC10, per Å; the same on every rank; ignored unless moves_C10()): when a step
  // is due, moves the positions ((P, 2) px, in place) by the change of the map and returns the
  // change of C10 for the driver to apply to the probe.
  scan_refinement_move step(int64_t iteration, const double* gradient, double C10_slope, double* positions,
                            const rank_sum& sum);

  // The affine part (a map of the nominal positions plus a shift) of per-position steps ((P, 2)
  // px), removed in place: what the map's refinement owns.
  void remove_affine_part(double* steps, const rank_sum& sum) const;

  // What holds the scale where free[1] does not free it: "isotropic", "fast axis 0" or "fast axis 1".
  const char* held_scale_text() const;
  const scan_map& map() const { return map_; }
  scan_map::parameters parameters() const { return map_.decompose(); }
  double C10_A() const { return C10_; }  // the model's probe's
  double physical_C10_A() const { return C10_ - o_.C10_model_shift_A; }  // the entrance surface's
  bool converged() const { return converged_at_ > 0; }
  // The iteration whose step ended the refinement (0: it has not converged).
  int64_t converged_at() const { return converged_at_; }
  int64_t steps_taken() const { return steps_; }
  // One line per step, for the log: iteration, parameters, step length.
  const std::string& last_report() const { return report_; }

  // The refinement's whole state (the map, its parameters, C10, the BFGS memory, the step
  // counters and the iteration it converged at) as state_size numbers, for a result file: a run resumed from it (restore) takes the
  // same steps, bit for bit, as the run that was not interrupted.
  static constexpr std::size_t state_size = 51;
  static constexpr std::size_t older_state_size = 50;  // a file from before the scale waited (no flag)
  std::vector<double> state() const;
  // Refuses (TYCHO_ERR_BAD_DATA, naming `origin`) a list of another length, a non-finite value, a
  // map without a positive determinant or scales that are not positive, negative counters.
  void restore(const std::vector<double>& state, const std::string& origin);

 private:
  using vec = std::array<double, 5>;
  vec slope(const double* gradient, double C10_slope, const rank_sum& sum) const;  // dL/du (scaled)
  void settled(int64_t iteration);  // two small steps in a row: free the waiting scale, else converged
  void wait_for_the_rest(bool wait);  // scale_waits_ and free_ (o_.free, less the scale and C10 while waiting)
  void apply(const vec& du, double* positions);

  scan_refinement_options o_;
  std::vector<double> n_;  // (P, 2) Å
  double radius_ = 1;
  std::array<double, 2> pixel_{1, 1};
  scan_map map_;
  scan_map::parameters p_;
  double held_length_ = 1;  // the held axis's step vector's length in U (the start's)
  std::array<bool, 5> free_{};  // what moves now: o_.free, less the scale and C10 while they wait
  bool scale_waits_ = false;
  double C10_ = 0;
  // BFGS state in the scaled parameters u (Å of displacement).
  bool have_previous_ = false;
  vec previous_slope_{}, previous_step_{};
  std::array<vec, 5> inverse_hessian_{};
  bool have_curvature_ = false;
  int64_t steps_ = 0, small_steps_ = 0;
  int64_t converged_at_ = 0;  // the iteration it converged at (≥ 1: steps start there); 0: not yet
  std::string report_;
};

}  // namespace tycho
