#include "runtime/positions_from.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/host/result_record.hpp>

#include <array>
#include <cstdint>
#include <utility>
#include <cmath>
#include <filesystem>

#include "data/finite_values.hpp"
#include "results/result_file.hpp"

namespace tycho::host {

namespace {

constexpr const char* k_key = "[data] positions_from";

std::string pair_text(const std::array<int64_t, 2>& v) { return cat(v[0], " x ", v[1]); }

}  // namespace

std::vector<double> positions_from_result(const registry& reg, const std::string& path, const scan_geometry& g,
                                          const object_layout& layout) {
  // Read and checked as every result is (results/result_file.hpp).
  const result_file r = read_result_file(reg, path, k_key, cat("named by ", k_key));

  // The grid the positions were saved on must be this run's: same scan, window, pixel, object.
  const std::array<int64_t, 2> scan{g.scan_shape[0], g.scan_shape[1]}, window{g.window[0], g.window[1]};
  if (r.scan_shape != scan)
    fail(TYCHO_ERR_INVALID_ARGUMENT, k_key, " '", path, "' holds the positions of a ", pair_text(r.scan_shape),
         " scan; this run's data are a ", pair_text(scan), " scan (", scan[0] * scan[1],
         " positions): give the result of a run on the same data");
  if (r.window_shape != window)
    fail(TYCHO_ERR_INVALID_ARGUMENT, k_key, " '", path, "' was reconstructed in a ", pair_text(r.window_shape),
         " px window; this run's is ", pair_text(window),
         " px: its positions are in another pixel size (check [preprocess] binning, crop_detector, pad_detector)");
  for (int a = 0; a < 2; ++a)
    if (!(std::abs(r.object_pixel_A[std::size_t(a)] - g.pixel_A[a]) <= 1e-9 * g.pixel_A[a]))
      fail(TYCHO_ERR_INVALID_ARGUMENT, k_key, " '", path, "' has an object pixel of ", r.object_pixel_A[0], " x ",
           r.object_pixel_A[1], " Å; this run's is ", g.pixel_A[0], " x ", g.pixel_A[1],
           " Å: its positions are in other pixels (check [data] detector_pixel_invA)");
  const owned_array& object = r.array("object");
  if (object.shape[1] != layout.shape[0] || object.shape[2] != layout.shape[1])
    fail(TYCHO_ERR_INVALID_ARGUMENT, k_key, " '", path, "' has an object of ", object.shape[1], " x ", object.shape[2],
         " px; this run's is ", layout.shape[0], " x ", layout.shape[1],
         " px: its positions lie on another grid (check [preprocess] object_padding_px and scan_origin_A)");
  const owned_array& positions = r.array("positions_px");
  return {positions.as<double>(), positions.as<double>() + positions.count()};
}

void shuffle_position_pairs(std::vector<double>& positions_px, uint64_t seed) {
  const std::vector<double> given = positions_px;
  const std::vector<int64_t> order = epoch_permutation(int64_t(given.size() / 2), seed, -1);
  for (std::size_t k = 0; k < order.size(); ++k) {
    positions_px[2 * k] = given[2 * std::size_t(order[k])];
    positions_px[2 * k + 1] = given[2 * std::size_t(order[k]) + 1];
  }
}

}  // namespace tycho::host
