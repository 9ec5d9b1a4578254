// The accuracy metric of a reconstruction against a known projected phase, as defined in the
// data set's README (../shared/data/mos2/README.md, "Ground truth"): Pearson correlation and RMS
// difference of the local phases phi_hp = arg(z * conj(G_sigma (*) z)) of object and truth inside
// the inner part of the scanned field of view, after integer registration. The local phase drops
// what ptychography cannot determine (a constant phase, a slow ramp) and is wrap-safe.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace tycho {

struct accuracy_input {
  // Reconstructed object, one slice, shape (H, W) = object_shape, C order (axis 0 = Rx):
  // complex64 in `object`, or complex128 (a float64 run) in `object64`; give exactly one.
  const std::complex<float>* object = nullptr;
  const std::complex<double>* object64 = nullptr;
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

  double sigma_A = 2.0;         // σ of the Gaussian whose smoothed object the local phase removes
  double fov_fraction = 0.8;    // inner fraction of the scanned field of view that is compared
  int search_radius_px = 12;    // integer registration search around the expected alignment
};

struct accuracy_result {
  double pearson;       // best Pearson correlation of the local phases over the searched shifts
  double rms_rad;       // RMS of (object - truth) local phase after removing the mean difference
  int64_t shift_px[2];  // chosen offset, truth index - object index (before the periodic wrap)
  int64_t fov_shape[2]; // rows, cols of object pixels compared
};

// Evaluates the metric. Field of view: the bounding box of the positions, shrunk about its centre
// to fov_fraction of its extent per axis, rounded to whole pixels and clipped to the object.
// Expected alignment: truth pixel = object pixel - positions_px[0] + scan_origin_A / truth_pixel_A;
// every integer shift within ±search_radius_px of its rounding is tried (truth wraps periodically).
// A constant local phase on either side (e.g. an untouched object of ones) gives pearson 0.
// Throws tycho::error(TYCHO_ERR_INVALID_ARGUMENT) on null pointers, bad sizes, mismatched pixel
// sizes or an empty field of view.
accuracy_result evaluate_accuracy(const accuracy_input& in);

// Building blocks, exposed so tests can check them by hand.

// How the filter reads past an image edge: scipy.ndimage's 'reflect'
// (d c b a | a b c d | d c b a) for a reconstructed object, 'wrap' for a periodic cell.
enum class filter_boundary { reflect, wrap };

// Normalised 1-D Gaussian taps exp(-x²/2σ²), x = -r..r, r = int(4σ + 0.5) (scipy's truncate=4).
std::vector<double> gaussian_kernel(double sigma_px);

// In-place separable Gaussian filter of an (h, w) C-order image (real and imaginary parts alike).
void gaussian_filter_2d(std::complex<double>* image, int64_t h, int64_t w, double sigma_px,
                        filter_boundary boundary);

// Local phase arg(z * conj(G_σ (*) z)) of an (h, w) complex image, radians in (-π, π].
std::vector<double> local_phase(const std::complex<double>* z, int64_t h, int64_t w,
                                double sigma_px, filter_boundary boundary);

}  // namespace tycho
