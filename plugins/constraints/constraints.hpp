// The built-in constraint components (tycho_constraint_vtable, ABI 1.3), each a class for the
// SDK's constraint adapter (tycho/sdk/constraint.hpp): constructed from its own entry of
// [[reconstruct.constraints]] and the run's setup, applied to the engine's host tensors in place.
// Every one is deterministic, so the replicas of several ranks stay bitwise identical.
#pragma once

#include <tycho/sdk/constraint.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tycho::constraints {

using sdk::config_view;
using sdk::constraint_arguments;

// The share of its set strength a regulariser (object_lowpass, object_tv, object_depth,
// object_missing_cone) applies now: the object's learning rate as a share of its setting
// (constraint_arguments::object_rate_factor), at most 1. Each stands for a penalty term of the
// loss, whose own gradient step would shrink with the rate: at a fixed pull, the stopping rule's
// halved rates let it outweigh the data (on `bilayer`, 10 uniform slices, the missing cone's
// crosstalk rose from 0.08 to 0.13 over three halvings and the loss rose with it). 0 while the
// object is not stepped: nothing it regularises has changed.
inline double regulariser_pull(const constraint_arguments& a) {
  return std::clamp(a.object_rate_factor, 0.0, 1.0);
}

// |O| clamped to [min, max] (a thin specimen neither amplifies nor absorbs everything); the
// phase is kept, and a zero becomes min. With min = 0 it is the runtime's
// [reconstruct.object] amplitude_max, bit for bit.
class object_amplitude {
 public:
  object_amplitude(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_OBJECT; }
  void apply(const constraint_arguments& a);

 private:
  double min_ = 0, max_ = 1;
};

// |O| = 1 keeping the phase (a pure-phase object, exp(iσV) with real V); 0 becomes 1.
class object_phase {
 public:
  object_phase(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_OBJECT; }
  void apply(const constraint_arguments& a);
};

// O ← (1 − w)·O + w·G_σ ⊛ O per slice, once per iteration (its last mini-batch), w = weight ×
// regulariser_pull: a Gaussian low-pass (σ = sigma_A) against high-frequency noise the data do
// not constrain.
class object_lowpass {
 public:
  object_lowpass(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_OBJECT; }
  void apply(const constraint_arguments& a);

 private:
  double sigma_px_ = 0, weight_ = 1;
};

// The object's slices kept exp(iσV) with V real and ≥ 0 (a non-negative projected potential):
// |O| = 1 and arg O clipped to [0, π] (reference = "zero": the vacuum's phase, the initial
// object's) or shifted so each slice's smallest phase is 0 (reference = "minimum"). The
// potential is V = arg O / σ (V·Å), σ the interaction constant of the beam (logged at create).
class object_potential {
 public:
  object_potential(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_OBJECT; }
  void apply(const constraint_arguments& a);

 private:
  bool subtract_minimum_ = false;
};

// One proximal step of λ·TV per slice, once per iteration (its last mini-batch): O ← argmin_u
// ½‖u − O‖² + λ Σ sqrt(|∂₀u|² + |∂₁u|²), the isotropic total variation of the complex values
// (Rudin, Osher & Fatemi 1992), by Chambolle's dual projection (2004) in its vectorial form
// (Bresson & Chan 2008). λ = weight × regulariser_pull (the proximal step of a penalty scales
// with the step size); weight 0 leaves the object bit for bit.
class object_tv {
 public:
  object_tv(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_OBJECT; }
  void apply(const constraint_arguments& a);

 private:
  double weight_ = 0;
  int64_t iterations_ = 20;
};

// ln O (ln|O| + i·arg O) low-passed along the slices, once per iteration: blended with a
// Gaussian of σ = sigma_A in depth (mirror edges), O ← exp((1 − w)·ln O + w·G_σ ⊛_z ln O),
// w = weight × regulariser_pull.
// A multislice regulariser (S > 1); refused for one slice.
class object_depth {
 public:
  object_depth(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_OBJECT; }
  void apply(const constraint_arguments& a);

 private:
  double sigma_slices_ = 0, weight_ = 1;
};

// The missing cone of depth sectioning, once per iteration: ln O of the slices (S, H, W), mirrored
// along the depth (2S, so the depth has no wrap-around edge), transformed in three dimensions and
// multiplied by W(k_r, k_z) = 1 / (1 + (|k_z| / b(k_r))⁴), b(k_r) = γ · k_r (α − λ k_r / 2) for
// k_r < 2α/λ, else 0. A probe of semiangle α transfers a lateral frequency k_r only with depth
// frequencies |k_z| ≤ k_r (α − λ k_r / 2) (the band between the two Ewald spheres of the aperture's
// edge; Van den Broek & Koch, Phys. Rev. Lett. 109, 245502, 2012, and the "missing wedge" of
// optical sectioning): outside that band the data say nothing, so whatever the reconstruction put
// there is crosstalk between depths (one layer's image repeated in the others). W keeps the band,
// and the mean over the slices of every lateral frequency (k_z = 0). As the kz filters of
// py4DSTEM and PtyRAD, with the band taken from the optics instead of a tuned weight; γ widens
// the band's edge. Ptychography records the dark field too: a pattern's pixels up to the
// detector's largest angle θ = λ / (2 px) interfere with the bright field, so the default γ is
// θ / α (measured on `bilayer`, 10 uniform 5 Å slices: γ = 2.4 from its optics separates the
// layers, own 0.908 / 0.916, other 0.086 / 0.099; γ = 1, the bright field's band alone, mixes
// them, 0.445 / 0.659). The filter blends in by regulariser_pull: each coefficient is multiplied
// by 1 − p (1 − W). Multislice only (S > 1).
class object_missing_cone {
 public:
  object_missing_cone(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_OBJECT; }
  void apply(const constraint_arguments& a);

 private:
  double gamma_ = 1, alpha_rad_ = 0, wavelength_A_ = 0, slice_A_ = 0;
  double pixel_A_[2] = {0, 0};
};

// Several probe modes orthonormalised in decreasing power (a unitary mixture: the model does
// not change); the runtime's [reconstruct.probe] orthogonalize_modes.
class probe_orthogonal_modes {
 public:
  probe_orthogonal_modes(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_PROBE; }
  void apply(const constraint_arguments& a);
};

// Σ_m Σ|P_m|² scaled to relative_power × the measured patterns' mean total intensity (the
// power that explains the data when |O| ≈ 1): the object then carries no global scale.
class probe_power {
 public:
  probe_power(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_PROBE; }
  void apply(const constraint_arguments& a);

 private:
  double target_ = 1;
};

// Each mode's Fourier transform set to 0 beyond semiangle_factor × the aperture's semiangle
// (|k| > factor · α / λ): the probe-forming aperture passes nothing there.
class probe_aperture {
 public:
  probe_aperture(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_PROBE; }
  void apply(const constraint_arguments& a);

 private:
  double k_cut_invA_ = 0, pixel_A_[2] = {0, 0};
};

// After each probe step all modes are shifted by one common sub-pixel Fourier shift so the
// centroid of Σ_m |P_m|² lies at the window centre (index ⌊N/2⌋ per axis, where the initial
// probe is), when it is off by more than tolerance_A; the centroid is the periodic window's
// (per axis, the phase of the intensity's first Fourier coefficient), so a probe that has
// wrapped across the window's edge is measured where it is. With shift_object the object's
// slices are shifted by the same displacement, so every exit wave only translates and the
// model intensities stay as they were (else the next steps have to catch up).
class probe_centre {
 public:
  probe_centre(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_PROBE | (shift_object_ ? TYCHO_CONSTRAINT_OBJECT : 0u); }
  void apply(const constraint_arguments& a);

 private:
  double tolerance_A_ = 0, pixel_A_[2] = {0, 0};
  bool shift_object_ = true;
};

// The least-squares affine map p ≈ linear · n + shift from `count` nominal positions n to
// positions p ((count, 2) each, C order).
struct affine_fit {
  double linear[2][2] = {{1, 0}, {0, 1}};
  double shift[2] = {0, 0};
};
affine_fit fit_affine(const double* nominal, const double* positions, int64_t count);

// After each position step the positions become A(nominal) + residual_weight · residual, the
// residual capped at residual_max_A per axis (0: no cap), A the least-squares affine map from
// the nominal positions to the corrected ones (linear = "free": scale, rotation, shear and
// shift; "nominal": the shift only; "drift": the linear part nearest the fitted one among those
// of a drift linear in acquisition time, I + u gᵀ with t = g · n + c the acquisition index of a
// raster swept along fast_axis first, and the residual of the full fit kept).
class positions_affine {
 public:
  positions_affine(const config_view& cfg, const tycho_constraint_setup& setup);
  uint32_t acts_on() const { return TYCHO_CONSTRAINT_POSITIONS; }
  void apply(const constraint_arguments& a);

 private:
  std::vector<double> nominal_;
  double residual_weight_ = 1, residual_max_px_[2] = {0, 0};
  std::string linear_ = "free";
  std::array<double, 2> drift_{};  // linear = "drift": t = drift_ · n + c
};

}  // namespace tycho::constraints
