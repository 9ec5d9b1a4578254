// The scan's linear map from the parallax of the bright field, before any reconstruction.
//
// With a defocused probe, the bright-field image recorded by one detector pixel at spatial
// frequency k (the "virtual" image of that pixel over the scan) is the specimen seen along a tilted
// ray: to first order it is the image of the pixel at k = 0 shifted by −λ C10 k (Å, in the
// detector's frame). The method of tilt-corrected bright field and of parallax imaging (Ophus et
// al., Microsc. Microanal. 2016; Yu et al., 2024; py4DSTEM's parallax reconstruction) aligns those
// images; here the shifts are measured between *neighbouring* groups of pixels only (a separation
// of s groups along one detector axis), in scan-index units, and the separation doubles at each
// level with the previous level's fit predicting where to look. Small first steps keep a
// crystal's periodic images from aliasing the shift by a lattice period; each level's robust fit
// of shift = A · Δκ (Δκ the separation in detector pixels) gives the 2 x 2 map A in scan indices
// per detector pixel, and
//   A = −λ C10 · L⁻¹ · diag(dk0, dk1) / step   ⇒   L = −(λ C10 / step) · diag(dk) · A⁻¹
// with L the scan map (scan_map.hpp) in units of the nominal step. So the parallax fixes L's
// rotation (all 360°, given the sign of C10), a transposed detector (det A < 0), the ratio of the
// axes' scales and the shear; the overall scale only as the product C10 · scale.
//
// Sub-pixel shifts: the cross-correlation's integer peak within a search radius, refined on a
// 1/16-pixel grid by a matrix DFT of the cross-power spectrum (Guizar-Sicairos, Thurman & Fienup,
// Opt. Lett. 33, 156, 2008), divided by the images' overlap at each shift (zero-padded images
// overlap less at larger shifts, which otherwise pulls a broad peak towards zero).
//
// Then the rotation of A is refined with all bright-field groups at once: the θ that maximises
// the power of the groups' images summed after each is shifted back by R(θ) A κ (the alignment
// of tilt-corrected bright field, Yu et al. 2024, as one parameter). The pairs alone misjudged a
// low-dose scan (360 electrons per pattern) by 4.2°; the summed images, by 1.3°.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tycho {

// The virtual images of groups of detector pixels over a block of the scan, summed pattern by
// pattern (parallax_images::add), then handed to estimate_parallax.
struct parallax_images {
  int64_t block[2] = {0, 0};   // scan indices in the block, per axis
  int64_t first[2] = {0, 0};   // the block's first scan index
  int64_t groups[2] = {0, 0};  // detector groups per axis
  int64_t group_px = 1;        // detector pixels per group and axis
  int64_t first_px[2] = {0, 0};  // frequency index (px from the zero frequency) of group 0's first pixel
  int64_t detector[2] = {0, 0};  // the pattern (n0, n1), FFT order
  std::vector<double> sums;      // (groups0·groups1, block0·block1): counts of group g at position b
  std::vector<double> seen;      // (block0·block1): 1 where a pattern was added

  // A block of at most max_block² positions at the scan's centre, groups of group_px² pixels
  // covering frequencies within ±radius_px of the zero frequency.
  static parallax_images make(int64_t rx, int64_t ry, int64_t n0, int64_t n1, double radius_px, int64_t group_px,
                              int64_t max_block);
  bool holds(int64_t i, int64_t k) const {
    return i >= first[0] && i < first[0] + block[0] && k >= first[1] && k < first[1] + block[1];
  }
  // Adds the pattern of scan index (i, k) (in the block): (n0, n1) float32, FFT order (zero
  // frequency at pixel 0). Not thread-safe for one object.
  void add(int64_t i, int64_t k, const float* pattern);
  // Detector pixel coordinate (px from the zero frequency) of group g's centre along `axis`.
  double group_centre_px(int axis, int64_t g) const {
    return double(first_px[axis] + g * group_px) + 0.5 * double(group_px - 1);
  }
};

struct parallax_result {
  bool done = false;           // false: too few bright-field groups or positions to measure
  std::string why_not;         // when not done
  double A[2][2] = {{0, 0}, {0, 0}};  // scan indices per detector pixel (shift = A · Δκ)
  double relative_error = 0;   // standard error of A's columns over their length (largest)
  int64_t groups = 0;          // bright-field groups used
  int64_t pairs = 0;           // pair shifts measured (all levels)
  int levels = 0;
  double largest_separation_px = 0;
  // The rotation refined with all bright-field groups at once (estimate_parallax): A above is the
  // pairs' A turned by aligned_rotation (radians, in the scan's index plane: A → R(θ) A) when
  // `aligned`; false when the best rotation lay on the searched range's edge (A is the pairs').
  bool aligned = false;
  double aligned_rotation = 0;
  double rotation_sd = 0;      // standard error of A's rotation, radians (the pairs' relative_error when not aligned)
  std::string not_aligned_because;  // when done and not aligned
};

// Estimates A from the images. `expected_shift_per_px`: |A| a user's nominal optics imply
// (|λ C10| dk / step), which sets the first level's search radius; 0 when unknown.
parallax_result estimate_parallax(const parallax_images& images, double expected_shift_per_px);

}  // namespace tycho
