// The scan's linear map from a crystal's lattice, before any reconstruction: the one measurement
// that fixes the map's isotropic scale with one slice (the parallax fixes only C10 · step, and
// the loss of a thin specimen is flat along the scale to within its counting noise:
// bench/RESULTS.md, sessions 10–18).
//
// A crystal's patterns are periodic in the probe's true position r with the lattice: they hold
// terms e^{2πi g·r} for its reciprocal vectors g (Å⁻¹). Over the nominal raster (r = L n, n the
// nominal position) the same term is a scan frequency Q = diag(step) · Lᵀ g (cycles per scan
// index). So two non-collinear lattice peaks of the scan's spectrum, each paired with its g
// measured on the detector, give
//   Lᵀ = diag(step)⁻¹ · [Q_a Q_b] · [g_a g_b]⁻¹,
// the whole linear map, scale included, independent of C10.
//
// Scan side: the spectrum of the patterns (the Hann-weighted mean removed) summed over the bright
// field's pixels; its two strongest non-collinear peaks, then both refined together by a
// variable-projection fit of every pixel's series to sinusoids at h Q_a + k Q_b (|h| + |k| ≤ 2).
// Detector side: G(k, Q), the complex amplitude of e^{2πi Q·p} in pixel k's series over the scan
// (fitted with the lattice's other harmonics, so none leaks into it), is at a lattice peak, for a
// thin specimen (its exit wave the probe times a transmission function t), exactly
//   Σ_{g'} t_{g'+g} t*_{g'} Ψ(k − g' − g) Ψ*(k − g')
// (Ψ = A e^{−iχ} the probe's spectrum): the double-overlap "lunes" of discs g' and g' + g, each a
// constant times the same linear phase ramp e^{iπλC10 (2 k·g − |g|²)} under pure defocus
// (Rodenburg et al., Ultramicroscopy 48, 304, 1993; Pennycook et al., Ultramicroscopy 151, 160,
// 2015, single-sideband ptychography). A finite source, or on average a random offset of the
// positions, multiplies G by a constant; so the lunes' edges fix g. The fit: g, the ramp, and the bright
// field disc's centre, radius and edge, with the lunes' complex weights solved linearly.
//
// Earlier prototypes: bench/matrix/experiments/lattice_*.py; measurements: bench/RESULTS.md,
// "Session 18"; docs/scan-geometry.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tycho/core/scan_map.hpp"

namespace tycho {

// The bright field's pixels of the patterns of a block of the scan at its centre, kept as read
// (lattice_block::add), in double precision so that ranks can sum their parts.
struct lattice_block {
  int64_t block[2] = {0, 0};     // scan indices per axis
  int64_t first[2] = {0, 0};     // the block's first scan index
  int64_t detector[2] = {0, 0};  // (n0, n1), FFT order (zero frequency at pixel 0)
  std::vector<int64_t> pixels;   // the kept pixels' indices in a pattern (FFT order)
  std::vector<double> patterns;  // (block0·block1, pixels)
  std::vector<double> seen;      // (block0·block1): 1 where a pattern was added

  // A block of at most max_block² positions at the scan's centre (fewer where the kept values
  // would pass max_values), keeping the pixels within radius_px[a] of the zero frequency along
  // each axis (an ellipse) that `valid` (n0·n1, FFT order, nonzero = a good pixel; null: all)
  // does not mark bad: a masked pixel holds no signal (a detector's gap), and fitted as a pixel
  // that does it would pull the lunes' fit.
  static lattice_block make(int64_t rx, int64_t ry, int64_t n0, int64_t n1, const double radius_px[2],
                            int64_t max_block, int64_t max_values, const uint8_t* valid = nullptr);
  bool holds(int64_t i, int64_t k) const {
    return i >= first[0] && i < first[0] + block[0] && k >= first[1] && k < first[1] + block[1];
  }
  // Copies the kept pixels of the pattern of scan index (i, k) (in the block): (n0, n1) float32,
  // FFT order. Not thread-safe for one object.
  void add(int64_t i, int64_t k, const float* pattern);
};

struct lattice_map_inputs {
  double step_A[2] = {0, 0};   // the nominal scan step per axis
  double dk_invA[2] = {0, 0};  // the detector pixel per axis
  double wavelength_A = 0;
  double semiangle_mrad = 0;
  // The map the pairing starts from, in the patterns' frame (r = L n; det < 0 for a transposed
  // detector): each scan peak's g is first looked for at L⁻ᵀ diag(step)⁻¹ Q. Its scale need only
  // be within about 10 %.
  scan_map start;
  double C10_A = 0;  // a guess of the defocus for the lunes' phase ramp (0: unknown)
};

struct lattice_map_result {
  bool done = false;
  std::string why_not;  // when not done: what was missing (no lattice peaks, a poor lune fit, ...)
  scan_map map;         // r = L n, in the patterns' frame (det < 0 for a transposed detector)
  double scan_frequency[2][2] = {{0, 0}, {0, 0}};  // Q_a, Q_b, cycles per scan index
  double lattice_invA[2][2] = {{0, 0}, {0, 0}};    // g_a, g_b, Å⁻¹ (detector frame)
  double C10_A[2] = {0, 0};   // defocus the two peaks' phase ramps imply (CONVENTIONS.md sign)
  double peak_contrast = 0;   // the weaker basis peak's power over the spectrum's median
  double lune_fit = 0;        // fraction of Σ|G|² the lune model explains (both peaks)
  double scale_sd = 0;        // the isotropic scale's relative standard error (the fit's covariance)
  double disc_centre_invA[2] = {0, 0}, disc_radius_invA = 0, disc_edge_invA = 0;
};

// What a measurement must show to count (below any: not done, said): the weaker basis peak's
// power over the spectrum's median; the fraction of Σ|G|² the lunes explain (a model that leaves
// more unexplained carries a bias its noise does not show: on the matrix's MoSe2 300 kV entry
// 73.5 % explained, the scale 3.2 % off at a standard error of 0.35 %); the scale's relative
// standard error (the held stated step is typically 1–4 % off; the low-dose WS2 entry's 0.8 %
// went with an error of 2.2 %). Set on the validation matrix (bench/RESULTS.md, session 18).
constexpr double lattice_peak_contrast_min = 2;
constexpr double lattice_lune_fit_min = 0.8;
constexpr double lattice_scale_sd_max = 0.006;

// Thread-safe (FFTW plans made under the project's planner lock).
lattice_map_result estimate_lattice_map(const lattice_block& block, const lattice_map_inputs& in);

}  // namespace tycho
