// Bad detector pixels, masked out of the loss instead of refused ([preprocess] saturation_value,
// max_masked_fraction, detect_bad_pixels, bad_pixels):
// - values: non-finite (NaN, ±inf) and saturated ones (>= saturation_value; by default the
//   maximum of the stored integer dtype, e.g. 65535 for uint16 detector gaps; none for float
//   data), in any pattern;
// - given: [preprocess] bad_pixels, (row, column) of the detector as the source stores it;
// - the detector's own mask, which the source hands over (read_detector_mask: CXI's mask, an
//   EIGER/ARINA master's pixel_mask);
// - found in the data (detect_bad_pixels, on by default): pixels that are dead or hot against
//   their neighbours over the whole scan. The statistic: over the scan's P patterns each pixel's
//   mean M and maximum X, on the square-root scale (where Poisson counts have one spread at any
//   level); for each pixel its usable 3 x 3 neighbours (not masked, inside the detector) give
//   hi and lo, the second largest and second smallest of their values (the largest and smallest
//   when 4 or fewer: the corners), so that an edge (the bright-field disc's), a gradient or a
//   pair of bad pixels never looks bad, only a pixel apart from all but one of its neighbours:
//     hot    h = √M − hi(√M)      dead  d = lo(√M) − √M      hot in some patterns  g = √X − hi(√X)
//   Each is compared with the detector's own spread of it: the median and the MAD over every
//   compared pixel, z = (v − median) / (1.4826 MAD), flagged when z > bad_pixel_threshold (10)
//   and the pixel is also far in size: its mean (maximum) at least bad_pixel_least_ratio (2)
//   times the reference's for hot, at most half of it for dead (noise-free data, whose spread is
//   their structure alone, would otherwise flag a pixel 0.4 % off its neighbours).
//   The MAD has floors from the data: ½ √(q / P) for the mean's (the spread of the square root
//   of a mean of P counts of quantum q: 1 for integer data, the smallest positive value for
//   float data), and √P times the mean's for the maximum's (the spread of one pattern's value).
//   A dead pixel among neighbours that hold a few counts over the whole scan cannot be told from
//   a dark one and is not found; a line or cluster of 3 or more bad pixels looks like a feature.
//
// A detector pixel bad in any pattern is masked in every pattern, on every rank: the ranks'
// findings (bad values, and each pixel's sums and maxima for the detection) are combined, so a
// run of W ranks masks what a run of one does (for integer counts exactly: their sums are
// exact in double; float data's sums may differ in the last bit, so a pixel whose score lies
// within rounding of the threshold could differ). Masked pixels are set to 0 in the targets, so
// nothing non-finite reaches an engine, and the mean total intensity leaves them out. The mask is
// combined with the detector padding's (detector_padding.hpp) into the engine's mask
// (setup->mask) and saved as the result's `mask` member.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tycho/host/dataset.hpp"

namespace toml {
inline namespace v3 {
class table;
}
}  // namespace toml

namespace tycho::host {

class parallel_context;

struct bad_pixel_settings {
  std::optional<double> saturation_value;  // values >= it are saturated; none: no such check
  double max_masked_fraction = 0.5;        // of the detector's pixels; more is refused
  bool detect = true;                      // [preprocess] detect_bad_pixels
  // [preprocess] bad_pixels: (row, column) of the stored detector (the source's frame: before
  // the host's shift to FFT order, any transpose or padding), each >= 0; checked against the
  // detector's shape by bad_pixel_scan, naming `origin`.
  std::vector<std::array<int64_t, 2>> given;
  std::string origin;  // the config, for errors
};

// Pixels further than this many robust standard deviations from the detector's median of a
// statistic (above) are bad. Normal pixels of the shared data sets reach 5 (bench/RESULTS.md).
constexpr double bad_pixel_threshold = 10.0;
// A bad pixel's mean (or maximum) is at least this many times its neighbours' reference (hot),
// or at most its inverse (dead): "far above", "zero or nearly so".
constexpr double bad_pixel_least_ratio = 2.0;
// The detection compares at least this many pixels (a smaller detector is not searched: its
// median and MAD would say little).
constexpr int64_t bad_pixel_least_compared = 64;

// The largest value of an integer dtype (uint16: 65535, int16: 32767); none for floats.
std::optional<double> dtype_maximum(DLDataType t);

// Reads [preprocess] saturation_value (a number > 0, or false: no saturation check; default:
// dtype_maximum(stored)), max_masked_fraction (a number in [0, 1], default 0.5),
// detect_bad_pixels (a bool, default true) and bad_pixels (an array of [row, column] arrays of
// two integers >= 0); `origin` names the config in errors.
bad_pixel_settings read_bad_pixel_settings(const toml::table& preprocess, const std::string& origin,
                                           DLDataType stored);

// Every rank's text, in rank order, on every rank (parallel_context::all_texts); empty: one rank
// (or ranks that all hold every pattern).
using gather_texts = std::function<std::vector<std::string>(const std::string&)>;

// The same, pattern by pattern (the chunked reads, which never hold the scan): add() every
// pattern held (FFT order, float32 or uint16 counts, in the order of their scan numbers), then
// finish() once (combines the ranks' findings through `gather`, searches the data for dead and
// hot pixels, fills d.bad_pixels and d.detector_mask, refuses as mask_bad_pixels does, returns
// its warning), then mask() each pattern as it is used: the masked pixels set to 0, returning
// the pattern's remaining sum (the sum mask_bad_pixels adds to d.total_intensity, bit for bit).
// Memory: a double and a float per detector pixel, whatever the scan's length. The constructor
// refuses [preprocess] bad_pixels outside the detector and a source mask of the wrong size.
// Not thread-safe.
class bad_pixel_scan {
 public:
  bad_pixel_scan(const dataset& d, const bad_pixel_settings& settings);
  ~bad_pixel_scan();
  template <class T>
  void add(const T* pattern, int64_t scan_number);
  std::string finish(dataset& d, const gather_texts& gather);
  template <class T>
  double mask(T* pattern) const;
  const std::vector<uint8_t>& bad() const { return bad_; }  // FFT order, 1 = masked (after finish)

 private:
  struct findings;
  std::unique_ptr<findings> f_;
  bad_pixel_settings settings_;
  int64_t n0_ = 0, n1_ = 0;
  std::vector<uint8_t> bad_;
  std::vector<uint8_t> premasked_;  // FFT order: given or the source's mask (not scanned)
};

// Refuses data that hold no intensity (TYCHO_ERR_BAD_DATA) when d holds every pattern and
// `holds_intensity` (some pattern's total after masking is > 0) is false.
void refuse_no_intensity(const dataset& d, bool holds_intensity);

// Finds the bad pixels of d's patterns (FFT order, as read_dataset leaves them; bad values,
// given, the source's mask in d.source_mask, found in the data), combined with the other ranks'
// through `gather`, masks them in every pattern (value 0, d.detector_mask 0), sums the
// remaining intensity (d.total_intensity, d.mean_total_intensity) and fills d.bad_pixels.
// Refuses (TYCHO_ERR_BAD_DATA) a mask that leaves no valid pixel or masks more than
// max_masked_fraction of the detector, and data holding no intensity when d holds every
// pattern. Returns the warning to log ("" when nothing is masked): how many pixels and why, in
// the data's (stored) detector coordinates.
std::string mask_bad_pixels(dataset& d, const bad_pixel_settings& settings, const gather_texts& gather = {});

// The gather of a run's ranks: every rank's findings when the patterns are sharded, none when
// every rank holds every pattern.
gather_texts bad_pixel_gather(parallel_context& par);

// The session's call: the settings from [preprocess], the ranks' masks combined (when the
// patterns are sharded), the warning logged once, by rank 0.
void mask_bad_pixels(dataset& d, const toml::table& preprocess, const std::string& origin, parallel_context& par);

// Logs what was decided (d.bad_pixels.note, at info level) and `warning` (mask_bad_pixels's or
// finish()'s, when not empty): the caller's rank 0 only.
void log_bad_pixels(const dataset& d, const std::string& warning);

// d.bad_pixels as the manifest's "data.bad_pixels" object (JSON text).
std::string bad_pixels_json(const dataset& d);

}  // namespace tycho::host
