// The preprocessing stage ([preprocess] com_fit, recentre, scan_rotation_deg, scan_transpose,
// crop_detector, binning, normalise): what the session applies to the patterns right after
// reading them (and so `tycho preprocess` too), before detector padding and geometry.
//
// The patterns arrive in FFT natural order (dataset.cpp shifted them once); the stage keeps that
// order. In this order the zero frequency is pixel 0 and a pixel's frequency is its signed index
// f(i) = i for i < ⌈N/2⌉, else i − N: "pixels from the detector centre" below means f, i.e. the
// centred index minus ⌊N/2⌋.
//
// Steps, in this order (each only when asked for; with every key at its default the stage does
// nothing and the patterns stay bit for bit as read):
//   1. crop_detector = [M0, M1]: keep the centred M0 x M1 pixels, frequencies −⌊M/2⌋ … ⌈M/2⌉ − 1
//      (the inverse of detector padding's rule); the detector pixel dk is unchanged.
//   2. binning = b: sum b x b pixels; b must divide the (cropped) detector. dk grows b times, the
//      window shrinks b times and so does its real-space extent 1 / dk. Refused, naming the largest
//      factor that is allowed, when the initial probe would no longer keep clear of the binned
//      window's edge (binning_edge_* below).
//   3. centre of mass (COM) of every pattern, in pixels from the detector centre.
//   4. com_fit = "constant" | "plane": least squares over the scan positions (i, k) (pattern
//      j = i·Ry + k), per detector axis: c = a, or c = a + b·i + c·k. Written as sums (the normal
//      equations) so that ranks holding different patterns add their sums (sum_across_ranks).
//   5. scan_rotation_deg = "auto": the scan's geometry from the data (scan_geometry_estimate
//      below): the rotation (and, unless scan_transpose is given, the transpose) from the parallax
//      of the bright field (tycho/core/parallax.hpp) where the probe is defocused enough, else from
//      the COM field's curl as py4DSTEM and quantEM estimate it; with the parallax also the ratio of
//      the scan axes' steps and their shear.
//   6. recentre = true: shift every pattern by the fitted COM, rounded to whole pixels, so the
//      fitted centre lands on the zero-frequency pixel (pixels shifted in from outside are 0).
//   7. scan_transpose applied to the patterns (an exact permutation of the pixels). The rotation
//      (any angle) and the rest of the scan's linear map move the positions instead: the report's
//      scan_map, which the session applies to the nominal raster (tycho/core/scan_map.hpp).
//   8. normalise = true: scale every pattern to the scan's mean total intensity.
#pragma once

#include <tycho/core/config.hpp>
#include <tycho/core/lattice_map.hpp>
#include <tycho/core/parallax.hpp>
#include <tycho/core/scan_map.hpp>
#include <tycho/sdk/optics.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tycho/host/dataset.hpp"

namespace toml {
inline namespace v3 {
class table;
}
}  // namespace toml

namespace tycho::host {

// The [preprocess] keys the stage reads (the session adds them to the table's allowed keys).
const std::vector<std::string>& preprocess_stage_keys();

// Binning keeps the probe clear of the binned window's edge: at most this fraction of the
// initial probe's intensity may lie within binning_edge_margin of the window's edges (the
// session refuses any window at 10 %; a binned window shrinks towards the probe, whose tails
// then wrap around the periodic window, so binning asks for ten times less).
constexpr double binning_edge_margin = 0.05;
constexpr double binning_edge_fraction_max = 0.01;
// Below this curl contrast (rotation_estimate::contrast) the estimate is noise-dominated: a
// warning says so. Measured: 0.71 on the noise-free MoS2 patterns, 0.22 on the counts, 0.17 on
// an 8 x 8 simulated scan whose estimate is meaningless.
constexpr double rotation_contrast_warn = 0.25;

enum class com_fit_kind { none, constant, plane };

struct preprocess_settings {
  com_fit_kind com_fit = com_fit_kind::none;
  bool recentre = false;
  bool rotation_auto = false;   // scan_rotation_deg = "auto"
  // "auto" because scan_rotation_deg was not given (the default): where the data cannot be
  // measured (listed positions, unknown optics, a scan under 3 x 3) the stage keeps the nominal
  // raster and says so, instead of refusing the run as a stated "auto" does.
  bool rotation_defaulted = false;
  double rotation_deg = 0;      // given (or, after the stage, applied)
  bool transpose_auto = false;  // estimated with the rotation (scan_transpose not given)
  bool transpose = false;
  bool scale_from_lattice = false;  // scan_scale = "lattice" or "auto" (with the rotation estimated)
  // scan_scale = "auto": the lattice where a crystal gives one and nothing else fixes the scale
  // (one slice, no [data] fast_axis); its fallbacks are said as information, not warnings.
  bool scale_auto = false;
  // scan_geometry_search: trial reconstructions rank candidate rotations (and transposes) where
  // the rotation is "auto" and the data measure it no other way ("auto"), or instead of the
  // parallax and the curl (true); never (false). The session runs them
  // (host/src/runtime/geometry_search.hpp); the stage only reads the keys.
  enum class search_mode { never, fallback, always } geometry_search = search_mode::fallback;
  double geometry_search_step_deg = 20;
  int64_t geometry_search_iterations = 200;
  int64_t binning = 1;
  std::array<int64_t, 2> crop{0, 0};  // crop_detector; 0: no crop
  bool normalise = false;
  bool save_raw_data = false;  // for `tycho preprocess`: embed the patterns in the prepared file

  bool needs_com() const { return com_fit != com_fit_kind::none || rotation_auto || recentre; }
  // Whether the stage does anything (to the patterns, the detector or, by a rotation, the
  // positions).
  bool active() const {
    return needs_com() || transpose || rotation_deg != 0 || binning != 1 || crop[0] > 0 || normalise;
  }
  // Whether the stage only measures (the centre of mass, its fit, the scan's geometry) and at most
  // reorders the pixels (a transpose, given or estimated: an exact permutation), leaving every
  // value as it is: it then works on uint16 counts held in memory as well (dataset::counts), the
  // scan read once.
  bool only_measures() const { return active() && !recentre && binning == 1 && crop[0] == 0 && !normalise; }
};

// Bad detector pixels (mask_bad_pixels) are masked in the detector's own geometry; a transpose
// (an exact permutation) carries the mask with the pixels, the other steps that move pixels do
// not yet: data with masked pixels is refused, naming both, when the stage would recentre, bin or
// crop.
void refuse_moving_masked_pixels(const dataset& d, const preprocess_settings& s);

// Reads and checks the stage's keys; `origin` names the config in errors.
preprocess_settings read_preprocess_settings(const toml::table& preprocess, const std::string& origin);

// The detector after crop and binning, for an (n0, n1) detector (refuses a crop larger than the
// detector and a factor that does not divide it). A transpose swaps the axes, so `tycho plan`
// asks this function with `with_rotation` = true for the engine's window.
std::array<int64_t, 2> preprocessed_detector_shape(const preprocess_settings& s, int64_t n0, int64_t n1,
                                                   bool with_rotation = false);

// Least-squares fit of the COM over the scan positions. coefficients[axis] = {a, b, c}:
// c_axis(i, k) = a + b·i + c·k (b = c = 0 for "constant").
struct com_fit_result {
  com_fit_kind kind = com_fit_kind::none;
  std::array<std::array<double, 3>, 2> coefficients{};
  std::array<double, 2> rms_residual{0, 0};  // px, of the measured COM about the fit
  int64_t patterns = 0;                      // patterns with intensity (the others have no COM)
  double at(int axis, double i, double k) const {
    const auto& c = coefficients[std::size_t(axis)];
    return c[0] + c[1] * i + c[2] * k;
  }
};

// The normal equations of the fit: per axis Σ1, Σi, Σk, Σi², Σik, Σk², Σc, Σi·c, Σk·c over the
// patterns given (their COM in `com`, NaN for none), `first` the scan number of com[0].
struct com_fit_sums {
  static constexpr int size = 14;
  std::array<double, size> s{};  // n, Σi, Σk, Σii, Σik, Σkk, then per axis Σc, Σic, Σkc, Σcc
};
com_fit_sums com_sums(const std::vector<double>& com, int64_t first, int64_t scan_ry);
com_fit_result solve_com_fit(const com_fit_sums& sums, com_fit_kind kind);

// The COM-curl estimate of the scan rotation. Convention (py4DSTEM's): a COM vector c measured
// in detector axes, swapped (c0, c1) → (c1, c0) first when transposed, then rotated by +θ,
// (x, y) → (x cos θ − y sin θ, x sin θ + y cos θ) in the (axis 0, axis 1) plane, is the vector
// in scan axes. The estimate lies in (−90°, 90°]: the curl cannot tell θ from θ + 180°.
struct rotation_estimate {
  bool done = false;
  double deg = 0;
  bool transpose = false;
  double curl = 0;        // mean |curl| at the estimate, px per scan step
  double curl_other = 0;  // the best mean |curl| with the other transpose (when both were tried)
  double curl_at_zero = 0;  // mean |curl| at θ = 0 with the estimate's transpose
  double curl_max = 0;      // the largest mean |curl| on the 1° grid (both transposes when tried)
  // The estimate's standard error, degrees (com_curl_standard_error); infinite when the field
  // has no curl to turn.
  double sd_deg = std::numeric_limits<double>::infinity();
  // How much the curl varies over the angles: (max − min) / max. Noise flattens it (below
  // rotation_contrast_warn the stage warns that the estimate is uncertain).
  double contrast() const { return curl_max > 0 ? (curl_max - curl) / curl_max : 0.0; }
};
// `com` (Rx·Ry x 2, the fit already subtracted; NaN: no COM) on the whole scan grid.
// transpose: -1 try both, 0 / 1 given.
rotation_estimate estimate_scan_rotation(const std::vector<double>& com, int64_t rx, int64_t ry, int transpose);
// Mean |curl| of the COM field rotated by θ (degrees), transposed first when asked.
double com_curl(const std::vector<double>& com, int64_t rx, int64_t ry, double deg, bool transpose);
// The standard error (degrees) of a curl estimate at θ: √(Σ r² / Σ L² / n) over the n interior
// positions, r the curls at θ and L those at θ + 90° (preprocess.cpp says why).
double com_curl_standard_error(const std::vector<double>& com, int64_t rx, int64_t ry, double deg, bool transpose);

// The scan's geometry the stage decided (step 5 and the given keys): the linear map of the
// nominal raster into the (transposed) detector's frame, and how it was found.
struct scan_geometry_estimate {
  bool done = false;        // map holds a decision (given, or estimated from the data)
  std::string source;       // "given", "parallax", "centre-of-mass curl", "nominal" (no estimate possible)
  scan_map map;             // r = L n (scan_map.hpp): det L > 0, the transpose already applied
  bool transpose = false;   // the patterns are transposed
  parallax_result parallax;              // when tried
  double parallax_scale = std::nan("");  // √det of the parallax's map at the nominal C10
  double parallax_C10_A = std::nan("");  // the C10 that gives the parallax's map the nominal step
  // The defocus at the entrance surface the parallax implies (parallax_C10_A is the specimen's
  // middle's), when its standard error is below 2 % and it differs from the stated C10 by more
  // than C10_sd_A (or none is stated): the run's initial probe unless [optics] refine_C10 = false.
  double C10_estimate_A = std::nan("");
  // That entrance C10's standard uncertainty, Å: the parallax's own standard error and, with
  // several slices, the unknown depth of the specimen's contrast (its middle is assumed; the
  // contrast may lie anywhere in the slices' span T: T / √12).
  double C10_sd_A = std::nan("");
  double C10_entrance_A = std::nan("");  // the parallax's C10 at the entrance surface, whatever its error
  // scan_scale = "lattice" or "auto": the crystal's measurement (tycho/core/lattice_map.hpp),
  // when tried, the isotropic scale of the map it gave (NaN where the stated step was kept), and
  // whether its whole map was taken (its anisotropy over 5 %) or its scale alone.
  bool lattice_tried = false;
  lattice_map_result lattice;
  double lattice_scale = std::nan("");
  bool lattice_whole_map = false;
  double com_rotation_deg = std::nan("");  // the curl's estimate (py4DSTEM's convention), when made
  double dpc_skewness = std::nan("");      // the integrated COM's skewness at the chosen rotation
  std::vector<std::string> notes;          // each decision and its reason, for the log
};

// What the stage did, for the log, the prepared file and the result's manifest.
struct preprocess_report {
  preprocess_settings settings;  // rotation_deg / transpose: as applied
  bool active = false;
  std::array<int64_t, 2> detector_in{0, 0}, detector_out{0, 0};
  std::array<double, 2> binning_offset_px{0, 0};  // centre of the zero-frequency bin, raw px from zero
  std::array<double, 2> com_mean{0, 0};           // mean measured COM, px from the centre
  com_fit_result fit;
  rotation_estimate rotation;
  scan_geometry_estimate geometry;
  std::array<std::array<int64_t, 2>, 2> shift_range{};  // recentre: [min, max] shift per axis, px
  double normalised_to = 0;                             // normalise: the mean total every pattern got
  std::vector<double> com;  // (patterns held, 2): measured COM (empty unless computed)
  // JSON object (settings and results); "" when the stage did nothing.
  std::string to_json() const;
};

// Sums `n` values across the ranks of a run, in place (the identity for one rank, or when every
// rank holds every pattern).
using rank_sum = std::function<void(double* values, int n)>;
inline void sum_on_one_rank(double*, int) {}

// The probe's optics and detector pixel as the session resolves them (config over file), for the
// binning check. Throws when the energy, semiangle or detector pixel are unknown.
struct binning_optics {
  sdk::probe_optics optics;
  std::array<double, 2> dk_invA{0, 0};  // the detector's, before binning
};
binning_optics resolve_binning_optics(const config_document& doc, const tycho_dataset_info& info);

// The largest factor f ≤ `binning` dividing the (n0, n1) detector for which the initial probe
// keeps clear of the binned (and padded, as [preprocess] asks) window's edge; 1 at least.
// `edge_fraction` (optional) receives the edge fraction of `binning` itself.
int64_t largest_allowed_binning(const config_document& doc, const binning_optics& o, int64_t n0, int64_t n1,
                                int64_t binning, double* edge_fraction = nullptr);

// Runs the stage on `d` (this rank's patterns, FFT order) as [preprocess] asks: d.targets, d.n0,
// d.n1, d.info.detector_shape and the intensity totals change; the calibrations in d.info stay
// those of the detector as read (the session multiplies dk by the binning factor).
preprocess_report preprocess_dataset(dataset& d, const config_document& doc, const rank_sum& sum_across_ranks);

// Σ of one FFT-order pattern in the order its source stored it (centred when `centred`), as
// read_dataset sums: the totals of the stage and of a prepared file's loader are those of
// read_dataset, bit for bit.
double pattern_total(const float* p, int64_t n0, int64_t n1, bool centred);
double pattern_total(const uint16_t* p, int64_t n0, int64_t n1, bool centred);  // the same on counts
// Recomputes d.total_intensity and d.mean_total_intensity (this rank's) from the patterns
// (d.targets, or d.counts when the targets are empty).
void recompute_totals(dataset& d);

// Centred ↔ FFT natural order of one (n0, n1) pattern (exact permutations).
void fftshift_pattern(const float* in, float* out, int64_t n0, int64_t n1);   // FFT order → centred
void ifftshift_pattern(const float* in, float* out, int64_t n0, int64_t n1);  // centred → FFT order
void fftshift_pattern(const uint16_t* in, uint16_t* out, int64_t n0, int64_t n1);   // the same on counts
void ifftshift_pattern(const uint16_t* in, uint16_t* out, int64_t n0, int64_t n1);
void ifftshift_pattern(const uint8_t* in, uint16_t* out, int64_t n0, int64_t n1);  // uint8 counts widened

}  // namespace tycho::host
