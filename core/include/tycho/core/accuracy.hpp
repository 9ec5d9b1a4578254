// The accuracy metric of a reconstruction against a known projected phase, as defined in the
// data set's README (../shared/data/mos2/README.md, "Ground truth"): Pearson correlation and RMS
// difference of the local phases phi_hp = arg(z * conj(G_sigma (*) z)) of object and truth inside
// the inner part of the scanned field of view, after integer registration. The local phase drops
// what ptychography cannot determine (a constant phase, a slow ramp) and is wrap-safe.
// A second figure, for phases that exceed π (a thick crystal's total phase, ../shared/data/si110):
// the same comparison of high-passed unwrapped phases φ − G_σ ⊛ φ. And the RMS error of scan
// positions after removing their common translation.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace tycho {

// What evaluate_accuracy compares.
enum class phase_metric {
  // arg(z · conj(G_σ ⊛ z)) of the complex object and of exp(i·truth): wrap-safe, saturates for
  // phases that vary by more than about π over σ.
  local_phase,
  // φ − G_σ ⊛ φ of the object's unwrapped phase (object_phase) and of the truth phase itself:
  // linear in the phase, so a phase of several radians is measured, not wrapped.
  high_passed_phase,
};

struct accuracy_input {
  phase_metric metric = phase_metric::local_phase;
  // Reconstructed object, one slice (or the product of all slices), shape (H, W) = object_shape,
  // C order (axis 0 = Rx): for local_phase complex64 in `object`, or complex128 (a float64 run)
  // in `object64`; for high_passed_phase the unwrapped phase in radians, float64, in
  // `object_phase` (e.g. summed_slice_phases). Give exactly one of the three.
  const std::complex<float>* object = nullptr;
  const std::complex<double>* object64 = nullptr;
  const double* object_phase = nullptr;
  int64_t object_shape[2] = {0, 0};
  double object_pixel_A = 0.0;  // its pixel size, Å

  // Probe centres in object pixels (row, col), (P, 2) row-major, P = Rx*Ry in C order over the
  // scan; positions_px[0..1] is scan index (0, 0).
  const double* positions_px = nullptr;
  int64_t n_positions = 0;

  // Ground-truth phase in radians over one periodic cell, shape truth_shape, C order.
  const float* truth_phase = nullptr;
  int64_t truth_shape[2] = {0, 0};
  double truth_pixel_A = 0.0;  // must equal object_pixel_A within 1e-3 relative (no resampling)

  double scan_origin_A[2] = {0.0, 0.0};  // where scan index (0, 0) lies in the truth cell, Å

  double sigma_A = 2.0;         // σ of the Gaussian whose smoothed copy either metric removes
  double fov_fraction = 0.8;    // inner fraction of the scanned field of view that is compared
  int search_radius_px = 12;    // integer registration search around the expected alignment
};

// Which compared map was constant over the field of view (the correlation is then undefined).
enum class constant_map { none, object, truth };

struct accuracy_result {
  double pearson;       // best Pearson correlation of the compared maps over the searched shifts
  double rms_rad;       // RMS of (object - truth) map after removing the mean difference
  int64_t shift_px[2];  // chosen offset, truth index - object index (before the periodic wrap)
  int64_t fov_shape[2]; // rows, cols of object pixels compared
  // The same correlation with the truth's map moved by a fraction of a pixel too (shifted through
  // its Fourier transform, the map being periodic), the fraction found by a pattern search from
  // the integer best to 1/64 px: what the integer registration (the data README's metric) loses
  // when the object sits between the truth's pixels, e.g. where a scan map scaled about the scan's
  // centre moved it. NaN where `constant` is not none.
  double subpixel_pearson;
  double subpixel_shift_px[2];  // truth index - object index, fractional
  // none: pearson is defined. object / truth: that side's map is constant over the field of view
  // (at every shift searched, for the truth), so the correlation is undefined; pearson is then 0,
  // which a caller must not report as a score (tycho evaluate refuses it).
  constant_map constant = constant_map::none;
};

// Evaluates the metric. Field of view: the bounding box of the positions, shrunk about its centre
// to fov_fraction of its extent per axis, rounded to whole pixels and clipped to the object.
// Expected alignment: truth pixel = object pixel - positions_px[0] + scan_origin_A / truth_pixel_A;
// every integer shift within ±search_radius_px of its rounding is tried (truth wraps periodically).
// A constant local phase on either side (e.g. an untouched object of ones) has no defined
// correlation: pearson 0 and `constant` says which side. Throws
// tycho::error(TYCHO_ERR_INVALID_ARGUMENT) on null pointers, bad sizes, mismatched pixel sizes,
// an empty field of view, or a truth cell smaller than the field of view on either axis.
accuracy_result evaluate_accuracy(const accuracy_input& in);

// Building blocks, exposed so tests can check them by hand.

// How the filter reads past an image edge: scipy.ndimage's 'reflect'
// (d c b a | a b c d | d c b a) for a reconstructed object, 'wrap' for a periodic cell.
enum class filter_boundary { reflect, wrap };

// Normalised 1-D Gaussian taps exp(-x²/2σ²), x = -r..r, r = int(4σ + 0.5) (scipy's truncate=4).
// Throws TYCHO_ERR_INVALID_ARGUMENT unless 0 < σ and 4σ + 0.5 < 2^24 px; a σ far below a pixel
// gives the single tap 1.
std::vector<double> gaussian_kernel(double sigma_px);

// In-place separable Gaussian filter of an (h, w) C-order image (real and imaginary parts alike).
// A kernel longer than the boundary's period (w or 2w per row) is folded onto it: the cost is
// at most h · w · (2h + 2w) whatever σ.
void gaussian_filter_2d(std::complex<double>* image, int64_t h, int64_t w, double sigma_px,
                        filter_boundary boundary);

// Local phase arg(z * conj(G_σ (*) z)) of an (h, w) complex image, radians in (-π, π].
std::vector<double> local_phase(const std::complex<double>* z, int64_t h, int64_t w,
                                double sigma_px, filter_boundary boundary);

// High-passed phase φ − G_σ ⊛ φ of an (h, w) real phase map, radians (not wrapped).
std::vector<double> high_passed_phase(const double* phase, int64_t h, int64_t w, double sigma_px,
                                      filter_boundary boundary);

// The total phase of a multislice object, unwrapped as far as its slices allow: the sum over
// slices s of arg(m_s) + arg(z_s · conj(m_s)), m_s = the mean of slice s over the whole slice,
// i.e. each slice's phase taken in (−π, π] about its own mean phase arg(m_s). Exact as long as no single slice's phase strays more than π from its
// mean (a 10 Å slab of Si [110] spans 1.2 rad); the sum may then exceed π without wrapping.
// `slices` is (count, h, w) C order; returns (h, w). Throws TYCHO_ERR_INVALID_ARGUMENT on an
// empty input.
std::vector<double> summed_slice_phases(const std::complex<double>* slices, int64_t count, int64_t h,
                                        int64_t w);

// Scan positions against the true ones, both (n, 2) row-major in Å, the same order.
struct position_error {
  double rms_A;            // sqrt(mean over positions of |d_k − mean(d)|²), d = result − truth
  double max_A;            // largest |d_k − mean(d)|
  double mean_shift_A[2];  // mean(d): the common translation removed
};
// Throws TYCHO_ERR_INVALID_ARGUMENT for n <= 0, null pointers or non-finite values.
position_error compare_positions(const double* result_A, const double* truth_A, int64_t n);

}  // namespace tycho
