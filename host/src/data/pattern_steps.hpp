// The preprocessing stage's steps on one pattern (tycho/host/preprocess.hpp): crop, binning,
// centre of mass, recentre, the scan rotation's quarter turns and transpose, normalisation.
// One piece of code for every path: the stage on a scan held in memory (preprocess_dataset) and
// the chunked reads of stored counts (chunked_preprocess.hpp) call these per pattern, so the
// values are the same bit for bit whichever path read the patterns.
//
// Patterns are (N0, N1) float32 in FFT natural order (the zero frequency at pixel 0).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tycho/host/preprocess.hpp"

namespace tycho::host {

// Scratch memory of one thread for pattern_steps (a few patterns' worth, reused).
struct pattern_scratch {
  std::vector<float> a, b;
  std::vector<double> acc;
};

// The per-pattern steps with everything resolved: the shapes, the binning map, the fitted
// centre of mass (recentre) and the quarter turns. Read-only once set: several threads may
// call transform() on one object, each with its own scratch.
struct pattern_steps {
  std::array<int64_t, 2> in{0, 0};       // the detector as read
  std::array<int64_t, 2> cropped{0, 0};  // after crop_detector (= in: no crop)
  int64_t binning = 1;
  std::array<int64_t, 2> binned{0, 0};   // after binning (= cropped: none)
  std::vector<int64_t> to0, to1;         // binning: centred pixel → its bin (FFT order)
  // Recentre (after the fit): pattern j is shifted by the fit at its scan position, rounded.
  bool recentre = false;
  com_fit_result fit;
  int64_t scan_ry = 1;
  int turns = 0;  // quarter turns of scan_rotation_deg
  bool transpose = false;
  std::array<int64_t, 2> out{0, 0};  // after the turns (the axes swap for odd turns xor transpose)

  // Sets the shapes of crop and binning for an `in` detector (the settings checked before).
  void set_shape(const preprocess_settings& s, std::array<int64_t, 2> detector);
  // Sets recentre and the orientation (after the fit and the rotation estimate); out follows.
  void set_placement(const preprocess_settings& s, const com_fit_result& f, int64_t ry);

  bool shapes() const { return cropped != in || binning > 1; }
  bool moves() const { return recentre || turns != 0 || transpose; }

  // Crop and binning: `raw` (in) → the binned pattern, in scratch; returns it (`raw` itself when
  // neither applies).
  const float* shape(const float* raw, pattern_scratch& w) const;
  // Every step but normalisation: `raw` (in) of scan number j → `dst` (out). `dst` may be
  // `raw` only when in == out and nothing shapes (the scratch holds the intermediates).
  void transform(const float* raw, int64_t j, float* dst, pattern_scratch& w) const;
  // The rounded recentring shift of scan number j, px per axis.
  std::array<int64_t, 2> shift(int64_t j) const;
};

// Centre of mass of one binned pattern, px from the zero-frequency pixel: {c0, c1}, NaN when the
// pattern holds no intensity.
std::array<double, 2> pattern_com(const float* p, int64_t n0, int64_t n1);

// The normalisation of one pattern of total `own` to `mean`, in place (nothing when own ≤ 0).
void normalise_pattern(float* p, int64_t m, double own, double mean);

// Reorders one FFT-order (n0, n1) pattern into scan axes (turns quarter turns, transposed when
// `transpose`): exact.
void orient_pattern(const float* in, int64_t n0, int64_t n1, float* out, int turns, bool transpose);
// The same permutation of a detector mask (dataset::detector_mask), so that it follows the pixels.
void orient_mask(const uint8_t* in, int64_t n0, int64_t n1, uint8_t* out, int turns, bool transpose);
// The same permutation of uint16 counts (dataset::counts).
void orient_counts(const uint16_t* in, int64_t n0, int64_t n1, uint16_t* out, int turns, bool transpose);

// The rotation applied to the patterns, as a number of quarter turns, or none when θ is not a
// multiple of 90°.
bool quarter_turns_of(double deg, int& turns);

}  // namespace tycho::host
