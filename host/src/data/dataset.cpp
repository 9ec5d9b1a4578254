#include "tycho/host/dataset.hpp"

#include <tycho/core/driver.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/sharding.hpp>
#include <tycho/sdk/checked.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>

#include "tycho/host/log.hpp"
#include "tycho/host/run_plan.hpp"
#include "tycho/host/progress.hpp"

namespace tycho::host {

namespace {
// Swaps the quadrants of one (n0, n1) pattern: centred (zero frequency at N/2) → FFT order.
// ifftshift for odd sizes too.
void ifftshift(float* p, int64_t n0, int64_t n1, std::vector<float>& tmp) {
  tmp.assign(p, p + n0 * n1);
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      p[i * n1 + j] = tmp[std::size_t(((i + n0 / 2) % n0) * n1 + (j + n1 / 2) % n1)];
}
}  // namespace

std::vector<double> read_source_positions(const tycho_source_vtable* vt, tycho_source* src,
                                          const tycho_dataset_info& info,
                                          const std::string& description) {
  // The shape is the source's (the file's) word: checked before any product of it is used.
  sdk::check_data_shape(info.scan_shape, info.detector_shape, "data '" + description + "'");
  if (vt->struct_size < offsetof(tycho_source_vtable, read_positions) + sizeof(vt->read_positions) ||
      vt->read_positions == nullptr)
    return {};
  const int64_t p = info.scan_shape[0] * info.scan_shape[1];
  std::vector<double> positions(std::size_t(2 * p));
  int64_t shape[2] = {p, 2};
  DLTensor t{};
  t.data = positions.data();
  t.device = {kDLCPU, 0};
  t.ndim = 2;
  t.dtype = {kDLFloat, 64, 1};
  t.shape = shape;
  const tycho_status st = vt->read_positions(src, &t);
  if (st == TYCHO_ERR_UNSUPPORTED) return {};
  check_status(st, "source read_positions");
  for (int64_t k = 0; k < 2 * p; ++k)
    if (!std::isfinite(positions[std::size_t(k)]))
      fail(TYCHO_ERR_BAD_DATA, "data '", description, "': the position of pattern ", k / 2, " is ",
           positions[std::size_t(k)], " Å along axis ", k % 2, "; expected finite positions");
  return positions;
}

dataset read_dataset(const component_ref& source, const tycho_config* data_table, int64_t part, int64_t parts) {
  const auto* vt = source.as<tycho_source_vtable>();
  tycho_source* src = nullptr;
  check_status(vt->open(data_table, &src), "source open");
  std::unique_ptr<tycho_source, void (*)(tycho_source*)> guard(src, vt->close);

  dataset d;
  d.source_name = source.name;
  d.info.struct_size = sizeof(tycho_dataset_info);
  check_status(vt->info(src, &d.info), "source info");
  d.description = d.info.description ? d.info.description : source.name;
  d.info.description = nullptr;  // owned by the source, which closes below
  // The shape is the file's word: checked for overflow before any product of it sizes memory.
  sdk::check_data_shape(d.info.scan_shape, d.info.detector_shape, "data '" + d.description + "'");
  d.all_patterns = d.info.scan_shape[0] * d.info.scan_shape[1];
  d.n0 = d.info.detector_shape[0];
  d.n1 = d.info.detector_shape[1];
  if (d.all_patterns <= 0 || d.n0 <= 0 || d.n1 <= 0)
    fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "' is empty (scan ", d.info.scan_shape[0],
         " x ", d.info.scan_shape[1], ", detector ", d.n0, " x ", d.n1, ")");

  d.positions_A = read_source_positions(vt, src, d.info, d.description);

  block_of(d.all_patterns, parts, part, d.first, d.patterns);
  const int64_t m = d.n0 * d.n1;
  // This rank's patterns as float32, bounded by this machine's memory before they are allocated
  // (the session's memory plan, which counts the rest of the run, comes after the read).
  const uint64_t target_bytes = uint64_t(d.patterns) * uint64_t(m) * 4u;  // < 2^63: checked above
  if (const uint64_t have = physical_memory_bytes(); have > 0 && target_bytes > have)
    fail(TYCHO_ERR_OUT_OF_MEMORY, "data '", d.description, "': ", d.patterns, " patterns of ", d.n0, " x ", d.n1,
         " pixels need ", human_bytes(target_bytes), " as float32, more than this machine's ", human_bytes(have),
         " of memory (check the file's shape; run `tycho plan` for the remedies: more ranks, binning)");
  d.targets.resize(std::size_t(d.patterns * m));
  const int64_t chunk = std::max<int64_t>(1, (int64_t(64) << 20) / (m * 4));  // ~64 MiB reads
  report_stage("reading", 0, d.patterns);  // the `tycho` command's progress bar
  for (int64_t first = 0; first < d.patterns; first += chunk) {
    int64_t count = std::min(chunk, d.patterns - first);
    int64_t shape[3] = {count, d.n0, d.n1};
    DLTensor t{};
    t.data = d.targets.data() + first * m;
    t.device = {kDLCPU, 0};
    t.ndim = 3;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape;
    check_status(vt->read(src, d.first + first, count, &t), "source read");
    report_stage("reading", first + count, d.patterns);
  }

  // Negative values mean a wrong dark (or background) subtraction: refused, not masked.
  // Non-finite and saturated values are masked afterwards (mask_bad_pixels).
  std::vector<float> tmp;
  float max_value = 0;
  for (int64_t local = 0; local < d.patterns; ++local) {
    const int64_t j = d.first + local;  // the pattern's number in the scan, for messages
    float* p = d.targets.data() + local * m;
    for (int64_t k = 0; k < m; ++k) {
      if (p[k] < 0 && std::isfinite(p[k]))
        fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "': pattern ", j, " (scan position ",
             j / d.info.scan_shape[1], ", ", j % d.info.scan_shape[1], "), pixel (", k / d.n1, ", ",
             k % d.n1, ") is negative (", p[k], "); expected intensities >= 0 (a negative value "
             "means a wrong dark or background subtraction: clip or fix the data)");
      if (p[k] > max_value && std::isfinite(p[k])) max_value = p[k];
    }
    if (d.info.patterns_centred) ifftshift(p, d.n0, d.n1, tmp);
  }
  d.max_value = max_value;
  if (const std::string w = float32_rounding_warning(d); !w.empty()) log_warning("data", w);
  return d;
}

std::string float32_rounding_warning(const dataset& d) {
  const DLDataType t = d.info.stored_dtype;
  constexpr double k_exact = 16777216.0;  // 2^24: float32 holds every integer up to here
  if ((t.code != kDLUInt && t.code != kDLInt) || !(d.max_value >= k_exact)) return "";
  return cat("data '", d.description, "' is stored as ", t.code == kDLUInt ? "uint" : "int", int(t.bits),
             " and its values reach ", int64_t(d.max_value), " (the largest, as float32), at or above 2^24 = 16777216: "
             "sources deliver float32, which holds every integer only up to 2^24, so larger counts reach the "
             "engine rounded to the nearest float32 (relative error below 6e-8)");
}

bool pack_integer_targets(dataset& d, std::vector<uint16_t>& packed) {
  const DLDataType t = d.info.stored_dtype;
  if (t.code != kDLUInt && t.code != kDLInt) return false;
  for (float v : d.targets)
    if (!(v >= 0.0f && v <= 65535.0f) || v != std::floor(v)) return false;
  packed.resize(d.targets.size());
  for (std::size_t k = 0; k < d.targets.size(); ++k) packed[k] = uint16_t(d.targets[k]);
  std::vector<float>().swap(d.targets);
  return true;
}

}  // namespace tycho::host
