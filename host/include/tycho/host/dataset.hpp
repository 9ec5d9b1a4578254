// Reading the diffraction data through a source component into the engine's targets:
// negative values refused, shift from centred to FFT order; then (host/src/data/bad_pixels.hpp)
// bad pixels masked and the mean total intensity.
#pragma once

#include <tycho/tycho_components.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tycho/host/registry.hpp"

namespace tycho::host {

// A detector pixel the data showed to be bad (bad_pixel_scan's detection): stored (row, column),
// why, and the figures that decided it. `mean` and `max` are the pixel's over the scan (per
// pattern, in the data's units), `neighbours_*` the reference its 3 x 3 neighbours give (the
// second largest for "hot", the second smallest for "dead"), `score` the distance from the
// detector's median in robust standard deviations (flagged above bad_pixel_threshold).
struct found_bad_pixel {
  int64_t row = 0, column = 0;
  std::string reason;  // "dead", "hot", "hot_in_some_patterns"
  double mean = 0, neighbours_mean = 0, max = 0, neighbours_max = 0, score = 0;
};

// What mask_bad_pixels found (over every rank's patterns), for the log and the manifest.
struct bad_pixel_summary {
  std::optional<double> saturation_value;  // values >= it were saturated; none: not checked
  double max_masked_fraction = 0.5;        // [preprocess] max_masked_fraction as used
  int64_t masked_pixels = 0;               // detector pixels masked in every pattern (all causes)
  int64_t nonfinite_values = 0;            // NaN, ±inf values, over all patterns
  int64_t saturated_values = 0;            // values >= saturation_value, over all patterns
  int64_t patterns = 0;                    // patterns holding at least one bad value
  int64_t value_pixels = 0;                // pixels masked for a non-finite or saturated value
  // [preprocess] bad_pixels: (row, column) of the stored detector, as given.
  std::vector<std::array<int64_t, 2>> given;
  int64_t detector_mask_pixels = 0;        // marked bad by the source's detector mask
  // [preprocess] detect_bad_pixels: whether the data were searched, how many pixels were
  // compared (the detection needs enough of them), and the scales it measured; every pixel
  // found, in stored (row, column) order.
  bool detect = true;
  int64_t compared_pixels = 0;
  double threshold = 0;                    // in robust standard deviations
  double scale_mean = 0, scale_dead = 0, scale_max = 0;  // the robust spreads (√ counts)
  std::vector<found_bad_pixel> found;
  std::string note;  // the search's outcome in words, for the log (also when nothing was found)
};

struct dataset {
  tycho_dataset_info info{};
  std::string description;       // "file:path" from the source
  std::string source_name;
  std::vector<float> targets;    // (patterns, N0, N1), FFT natural order
  // Instead of `targets` when read as counts (read_dataset's as_counts): the same patterns as
  // uint16, read in the source's stored dtype (uint8, uint16). Exactly one of the two is filled.
  std::vector<uint16_t> counts;
  int64_t patterns = 0, n0 = 0, n1 = 0;  // patterns: those held, [first, first + patterns)
  int64_t first = 0, all_patterns = 0;   // all_patterns: the scan's Rx·Ry
  double max_value = 0;             // the largest finite value read (as float32)
  // (Qx, Qy) as measured, FFT natural order like the targets: 1 = valid, 0 = a bad pixel,
  // masked in every pattern (mask_bad_pixels). Empty: no pixel is masked.
  std::vector<uint8_t> detector_mask;
  bad_pixel_summary bad_pixels;
  // The detector's own mask as the source delivered it (read_detector_mask, ABI 1.3): (Qx, Qy)
  // in the stored frame (as read() delivers the patterns, before any shift), nonzero = a pixel
  // the detector marks bad; empty when the source has none. Combined by mask_bad_pixels.
  std::vector<uint8_t> source_mask;
  double total_intensity = 0;       // Σ over the patterns held of Σ_k D over valid pixels
  double mean_total_intensity = 0;  // mean over all patterns of Σ_k D (set by the caller when
                                    // the patterns held are a share)
  // (all_patterns, 2) probe positions in Å listed by the source (read_positions), for every
  // pattern whichever this rank holds; empty when the source knows only a raster.
  std::vector<double> positions_A;
  // Streamed (a prepared file's patterns left on disk, target_residency): `targets` is empty, the
  // totals above are set, and streamed_mean is mean_pattern's (N0, N1) of the padded window.
  bool streamed = false;
  bool streamed_counts = false;  // the streamed patterns are uint16 counts (else float32)
  // The source stored integer counts (info.stored_dtype an integer, or a prepared file made from
  // such a source says so): the scan map refinement's counting-noise model applies.
  bool counted = false;
  std::vector<double> streamed_mean;
  // Counted electrons or photons, with a known mean: the data have a noise model (the scan map's
  // counting-noise penalty, the positions' Cramér–Rao bound).
  bool has_counts() const {
    return (counted || info.stored_dtype.code == kDLUInt || info.stored_dtype.code == kDLInt) &&
           mean_total_intensity > 0;
  }
};

// The source's read_positions for `info`'s scan: (P, 2) positions in Å, or empty when the
// source's vtable lacks the function or it answers TYCHO_ERR_UNSUPPORTED (a raster).
// `description` names the data in errors (a non-finite position is refused).
std::vector<double> read_source_positions(const tycho_source_vtable* vt, tycho_source* src,
                                          const tycho_dataset_info& info,
                                          const std::string& description);

// The source's read_detector_mask for `info`'s detector (checked as read_source_positions
// checks the shape): (Qx, Qy) in the stored frame, 1 = bad; empty when the vtable lacks the
// function, it answers TYCHO_ERR_UNSUPPORTED, or the mask marks no pixel.
std::vector<uint8_t> read_source_detector_mask(const tycho_source_vtable* vt, tycho_source* src,
                                               const tycho_dataset_info& info);

// Opens `source` with the [data] table, reads the patterns of the block `part` of `parts`
// (shard::of's blocks; 0 of 1: every pattern), refuses negative values (a wrong dark
// subtraction) and shifts centred patterns to FFT order. Non-finite values are left in place
// and the totals at 0: mask_bad_pixels (host/src/data/bad_pixels.hpp) masks them and sums the rest.
// A share's mean_total_intensity is its own mean; the caller combines the shares' totals.
// as_counts: when the source delivers its stored dtype (tycho_dataset_info::reads_stored_dtype)
// and that is uint8 or uint16, the patterns are read in it, chunk by chunk, into d.counts
// (uint16, the same values as float32 would hold, exactly) and d.targets stays empty: the peak
// is the counts plus one chunk. Otherwise (and always without as_counts) into d.targets.
// A source that declares its stored dtype but refuses to read in it is an error naming it.
dataset read_dataset(const component_ref& source, const tycho_config* data_table, int64_t part = 0,
                     int64_t parts = 1, bool as_counts = false);

// For data stored as integers: a warning when the largest value reaches 2^24 = 16777216, above
// which float32 (what sources deliver) does not hold every integer; "" otherwise.
std::string float32_rounding_warning(const dataset& d);

// Integer counts stay integer until the loss: when the source stored an integer dtype and every
// value (after masking and preprocessing) is a whole number in [0, 65535], moves the targets
// into `packed` as uint16 (half the memory of float32, exact) and frees d.targets. Returns
// false, leaving d untouched, otherwise (float data, normalised or binned beyond 65535, ...).
bool pack_integer_targets(dataset& d, std::vector<uint16_t>& packed);

}  // namespace tycho::host
