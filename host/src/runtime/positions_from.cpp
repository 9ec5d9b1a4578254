#include "runtime/positions_from.hpp"

#include <tycho/core/error.hpp>
#include <tycho/host/result_record.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

#include "data/finite_values.hpp"
#include "results/manifest_checks.hpp"

namespace tycho::host {

namespace {

constexpr const char* k_key = "[data] positions_from";

std::string pair_text(const std::vector<int64_t>& v) {
  return v.size() == 2 ? cat(v[0], " x ", v[1]) : std::string("(not two numbers)");
}

// manifest[a][b] as two numbers of type T; empty when absent or of another shape.
template <class T>
std::vector<T> manifest_pair(const nlohmann::json& m, const char* a, const char* b) {
  const auto outer = m.find(a);
  if (outer == m.end() || !outer->is_object()) return {};
  const auto it = outer->find(b);
  if (it == outer->end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number() || !(*it)[1].is_number())
    return {};
  return {(*it)[0].get<T>(), (*it)[1].get<T>()};
}

}  // namespace

std::vector<double> positions_from_result(const registry& reg, const std::string& path, const scan_geometry& g,
                                          const object_layout& layout) {
  if (!std::filesystem::is_regular_file(path)) fail(TYCHO_ERR_NOT_FOUND, k_key, " '", path, "': no such file");
  loaded_record record;
  try {
    record = load_record(format_for_path(reg, path), path);
  } catch (const error& e) {
    fail(TYCHO_ERR_BAD_DATA, k_key, " '", path, "' is not a tycho result: ", e.what());
  }
  nlohmann::json m = nlohmann::json::parse(record.manifest_json, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || m.value("format", std::string()) != "tycho-result")
    fail(TYCHO_ERR_BAD_DATA, k_key, " '", path,
         "' is not a tycho result (its manifest.json does not say \"format\": \"tycho-result\")");
  check_format_version(m, k_result_format_version, path, "tycho result", "write it again with this tycho");

  // The grid the positions were saved on must be this run's: same scan, window, pixel, object.
  const std::vector<int64_t> scan{g.scan_shape[0], g.scan_shape[1]}, window{g.window[0], g.window[1]};
  const std::vector<int64_t> file_scan = manifest_pair<int64_t>(m, "data", "scan_shape");
  const std::vector<int64_t> file_window = manifest_pair<int64_t>(m, "calibration", "window_shape");
  const std::vector<double> file_pixel = manifest_pair<double>(m, "calibration", "object_pixel_A");
  if (file_scan != scan)
    fail(TYCHO_ERR_INVALID_ARGUMENT, k_key, " '", path, "' holds the positions of a ", pair_text(file_scan),
         " scan; this run's data are a ", pair_text(scan), " scan (", scan[0] * scan[1],
         " positions): give the result of a run on the same data");
  if (file_window != window)
    fail(TYCHO_ERR_INVALID_ARGUMENT, k_key, " '", path, "' was reconstructed in a ", pair_text(file_window),
         " px window; this run's is ", pair_text(window),
         " px: its positions are in another pixel size (check [preprocess] binning, crop_detector, pad_detector)");
  for (int a = 0; a < 2; ++a)
    if (file_pixel.size() != 2 || !(std::abs(file_pixel[std::size_t(a)] - g.pixel_A[a]) <= 1e-9 * g.pixel_A[a]))
      fail(TYCHO_ERR_INVALID_ARGUMENT, k_key, " '", path, "' has an object pixel of ",
           file_pixel.size() == 2 ? cat(file_pixel[0], " x ", file_pixel[1]) : std::string("(not recorded)"),
           " Å; this run's is ", g.pixel_A[0], " x ", g.pixel_A[1],
           " Å: its positions are in other pixels (check [data] detector_pixel_invA)");
  const owned_array& object = record.array("object", path);
  const std::vector<int64_t> grid{layout.shape[0], layout.shape[1]};
  if (object.shape.size() != 3 || std::vector<int64_t>(object.shape.begin() + 1, object.shape.end()) != grid)
    fail(TYCHO_ERR_INVALID_ARGUMENT, k_key, " '", path, "' has an object of ",
         object.shape.size() == 3 ? cat(object.shape[1], " x ", object.shape[2]) : std::string("another rank"),
         " px; this run's is ", grid[0], " x ", grid[1],
         " px: its positions lie on another grid (check [preprocess] object_padding_px and scan_origin_A)");

  const owned_array& positions = record.array("positions_px", path);
  const int64_t patterns = scan[0] * scan[1];
  if (positions.dtype.code != kDLFloat || positions.dtype.bits != 64 || positions.dtype.lanes != 1 ||
      positions.shape != std::vector<int64_t>{patterns, 2})
    fail(TYCHO_ERR_BAD_DATA, k_key, " '", path, "': its positions_px is not (", patterns, ", 2) float64");
  require_finite(positions, path, cat("named by ", k_key));
  return {positions.as<double>(), positions.as<double>() + positions.count()};
}

}  // namespace tycho::host
