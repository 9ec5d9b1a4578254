// Bad detector pixels ([preprocess] saturation_value, max_masked_fraction): non-finite values
// (NaN, ±inf) and saturated ones (>= saturation_value; by default the maximum of the stored
// integer dtype, e.g. 65535 for uint16 detector gaps; none for float data) are masked out of the
// loss instead of refused.
//
// A detector pixel bad in any pattern is masked in every pattern (detector gaps and hot pixels
// are fixed pixels), on every rank: the ranks' masks are combined, so a run of W ranks masks
// what a run of one does. Masked pixels are set to 0 in the targets, so nothing non-finite
// reaches an engine, and the mean total intensity leaves them out. The mask is combined with
// the detector padding's (detector_padding.hpp) into the engine's mask (setup->mask) and saved
// as the result's `mask` member.
#pragma once

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
};

// The largest value of an integer dtype (uint16: 65535, int16: 32767); none for floats.
std::optional<double> dtype_maximum(DLDataType t);

// Reads [preprocess] saturation_value (a number > 0, or false: no saturation check; default:
// dtype_maximum(stored)) and max_masked_fraction (a number in [0, 1], default 0.5); `origin`
// names the config in errors.
bad_pixel_settings read_bad_pixel_settings(const toml::table& preprocess, const std::string& origin,
                                           DLDataType stored);

// Every rank's text, in rank order, on every rank (parallel_context::all_texts); empty: one rank
// (or ranks that all hold every pattern).
using gather_texts = std::function<std::vector<std::string>(const std::string&)>;

// The same, pattern by pattern (the chunked reads, which never hold the scan): add() every
// pattern held (FFT order, float32 or uint16 counts, in the order of their scan numbers), then
// finish() once (combines the ranks' pixels through `gather`, fills d.bad_pixels and
// d.detector_mask, refuses as mask_bad_pixels does, returns its warning), then mask() each
// pattern as it is used: the masked pixels set to 0, returning the pattern's remaining sum (the
// sum mask_bad_pixels adds to d.total_intensity, bit for bit). Not thread-safe.
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
};

// Refuses data that hold no intensity (TYCHO_ERR_BAD_DATA) when d holds every pattern and
// `holds_intensity` (some pattern's total after masking is > 0) is false.
void refuse_no_intensity(const dataset& d, bool holds_intensity);

// Finds the bad values of d's patterns (FFT order, as read_dataset leaves them), combines the
// bad pixels with the other ranks' through `gather`, masks them in every pattern (value 0,
// d.detector_mask 0), sums the remaining intensity (d.total_intensity, d.mean_total_intensity)
// and fills d.bad_pixels. Refuses (TYCHO_ERR_BAD_DATA) a mask that leaves no valid pixel or
// masks more than max_masked_fraction of the detector, and data holding no intensity when d
// holds every pattern. Returns the warning to log ("" when nothing is masked): how many pixels,
// in how many patterns, and the first few pixels, in the data's (stored) detector coordinates.
std::string mask_bad_pixels(dataset& d, const bad_pixel_settings& settings, const gather_texts& gather = {});

// The gather of a run's ranks: every rank's findings when the patterns are sharded, none when
// every rank holds every pattern.
gather_texts bad_pixel_gather(parallel_context& par);

// The session's call: the settings from [preprocess], the ranks' masks combined (when the
// patterns are sharded), the warning logged once, by rank 0.
void mask_bad_pixels(dataset& d, const toml::table& preprocess, const std::string& origin, parallel_context& par);

// d.bad_pixels as the manifest's "data.bad_pixels" object (JSON text).
std::string bad_pixels_json(const dataset& d);

}  // namespace tycho::host
