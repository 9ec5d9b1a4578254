#include "tycho/host/dataset.hpp"

#include "data/source_reader.hpp"

#include <tycho/core/driver.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/core/sharding.hpp>
#include <tycho/sdk.hpp>
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
template <class T>
void ifftshift(T* p, int64_t n0, int64_t n1, std::vector<T>& tmp) {
  tmp.assign(p, p + n0 * n1);
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      p[i * n1 + j] = tmp[std::size_t(((i + n0 / 2) % n0) * n1 + (j + n1 / 2) % n1)];
}

constexpr DLDataType k_uint8{kDLUInt, 8, 1}, k_uint16{kDLUInt, 16, 1}, k_float16{kDLFloat, 16, 1},
    k_float32{kDLFloat, 32, 1};
bool same_dtype(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

// Whether the source delivers its stored dtype (tycho_dataset_info::reads_stored_dtype, ABI 1.3):
// only when its info covers the field and sets it. A source that claims it for a dtype no host
// takes is refused.
bool source_reads_stored_dtype(const dataset& d) {
  if (d.info.struct_size < offsetof(tycho_dataset_info, reads_stored_dtype) + sizeof(d.info.reads_stored_dtype) ||
      d.info.reads_stored_dtype == 0)
    return false;
  const DLDataType t = d.info.stored_dtype;
  if (!same_dtype(t, k_uint8) && !same_dtype(t, k_uint16) && !same_dtype(t, k_float16) && !same_dtype(t, k_float32))
    fail(TYCHO_ERR_BAD_DATA, "source '", d.source_name, "' (data '", d.description, "') declares that it delivers ",
         "its stored dtype (reads_stored_dtype = ", d.info.reads_stored_dtype, ") for data stored as ",
         sdk::dtype_name(t), "; a source may deliver uint8, uint16, float16 or float32 (docs/plugin-guide.md)");
  return true;
}

// d's block of patterns at `bytes_per_pixel`, bounded by this machine's memory before it is
// allocated (the session's memory plan, which counts the rest of the run, comes after the read).
// The shape was checked for overflow before (check_data_shape): the product is < 2^63.
void require_memory(const dataset& d, unsigned bytes_per_pixel, const char* as) {
  const uint64_t target_bytes = uint64_t(d.patterns) * uint64_t(d.n0 * d.n1) * bytes_per_pixel;
  if (const uint64_t have = physical_memory_bytes(); have > 0 && target_bytes > have)
    fail(TYCHO_ERR_OUT_OF_MEMORY, "data '", d.description, "': ", d.patterns, " patterns of ", d.n0, " x ", d.n1,
         " pixels need ", human_bytes(target_bytes), " as ", as, ", more than this machine's ", human_bytes(have),
         " of memory (check the file's shape; run `tycho plan` for the remedies: more ranks, binning)");
}

// Reads patterns [first, first + count) of the source through read() into `dst`, whose dtype
// says what is asked: float32, or the stored dtype of a source that delivers it.
void read_patterns(const tycho_source_vtable* vt, tycho_source* src, const dataset& d, int64_t first, int64_t count,
                   void* dst, DLDataType dtype) {
  int64_t shape[3] = {count, d.n0, d.n1};
  DLTensor t{};
  t.data = dst;
  t.device = {kDLCPU, 0};
  t.ndim = 3;
  t.dtype = dtype;
  t.shape = shape;
  const tycho_status st = vt->read(src, first, count, &t);
  if (st == TYCHO_OK) return;
  if (same_dtype(dtype, k_float32)) check_status(st, "source read");
  const std::string why = last_error();
  fail(st, "source '", d.source_name, "' declares that it delivers the stored dtype of '", d.description, "' (",
       sdk::dtype_name(dtype), ", reads_stored_dtype = 1) but did not read patterns [", first, ", ", first + count,
       ") as ", sdk::dtype_name(dtype), ": ", why.empty() ? cat("status ", int(st)) : why);
}

// The patterns of d's block as uint16 counts, read in the stored dtype (uint8 or uint16) in
// chunks straight into d.counts: no float32 copy of the scan. Returns false, reading nothing,
// when the source does not deliver such a dtype.
bool read_counts(source_reader& r) {
  dataset& d = r.header();
  if (!r.reads_counts()) return false;
  const int64_t m = d.n0 * d.n1;
  require_memory(d, 2, "uint16 counts");
  d.counts.resize(std::size_t(d.patterns * m));
  const int64_t chunk = std::max<int64_t>(1, (int64_t(16) << 20) / m);  // ~16 MiB of uint8 staging
  report_stage("reading", 0, d.patterns);
  for (int64_t first = 0; first < d.patterns; first += chunk) {
    const int64_t count = std::min(chunk, d.patterns - first);
    r.read_counts(first, count, d.counts.data() + first * m);
    report_stage("reading", first + count, d.patterns);
  }
  // No negative or non-finite value exists; the largest.
  const uint16_t max_value = d.counts.empty() ? 0 : *std::max_element(d.counts.begin(), d.counts.end());
  d.max_value = float(max_value);
  return true;
}
}  // namespace

std::vector<uint8_t> read_source_detector_mask(const tycho_source_vtable* vt, tycho_source* src,
                                               const tycho_dataset_info& info) {
  if (vt->struct_size < offsetof(tycho_source_vtable, read_detector_mask) + sizeof(vt->read_detector_mask) ||
      vt->read_detector_mask == nullptr)
    return {};
  std::vector<uint8_t> mask(std::size_t(info.detector_shape[0] * info.detector_shape[1]));
  sdk::tensor_view t(mask.data(), DLDataType{kDLUInt, 8, 1}, {info.detector_shape[0], info.detector_shape[1]});
  const tycho_status st = vt->read_detector_mask(src, t.get());
  if (st == TYCHO_ERR_UNSUPPORTED) return {};
  check_status(st, "source read_detector_mask");
  for (uint8_t& v : mask) v = v != 0;
  if (std::find(mask.begin(), mask.end(), uint8_t(1)) == mask.end()) return {};  // marks nothing
  return mask;
}

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
  sdk::tensor_view t(positions.data(), DLDataType{kDLFloat, 64, 1}, {p, 2});
  const tycho_status st = vt->read_positions(src, t.get());
  if (st == TYCHO_ERR_UNSUPPORTED) return {};
  check_status(st, "source read_positions");
  for (int64_t k = 0; k < 2 * p; ++k)
    if (!std::isfinite(positions[std::size_t(k)]))
      fail(TYCHO_ERR_BAD_DATA, "data '", description, "': the position of pattern ", k / 2, " is ",
           positions[std::size_t(k)], " Å along axis ", k % 2, "; expected finite positions");
  return positions;
}

source_reader::source_reader(const component_ref& source, const tycho_config* data_table, int64_t part,
                             int64_t parts)
    : vt_(source.as<tycho_source_vtable>()), src_(nullptr, vt_->close) {
  tycho_source* src = nullptr;
  check_status(vt_->open(data_table, &src), "source open");
  src_.reset(src);
  dataset& d = d_;
  d.source_name = source.name;
  d.info.struct_size = sizeof(tycho_dataset_info);
  check_status(vt_->info(src, &d.info), "source info");
  d.description = d.info.description ? d.info.description : source.name;
  d.info.description = nullptr;  // owned by the source
  // The shape is the file's word: checked for overflow before any product of it sizes memory.
  sdk::check_data_shape(d.info.scan_shape, d.info.detector_shape, "data '" + d.description + "'");
  d.all_patterns = d.info.scan_shape[0] * d.info.scan_shape[1];
  d.n0 = d.info.detector_shape[0];
  d.n1 = d.info.detector_shape[1];
  if (d.all_patterns <= 0 || d.n0 <= 0 || d.n1 <= 0)
    fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "' is empty (scan ", d.info.scan_shape[0],
         " x ", d.info.scan_shape[1], ", detector ", d.n0, " x ", d.n1, ")");
  d.positions_A = read_source_positions(vt_, src, d.info, d.description);
  d.source_mask = read_source_detector_mask(vt_, src, d.info);
  block_of(d.all_patterns, parts, part, d.first, d.patterns);
  const DLDataType t = d.info.stored_dtype;
  counts_ = source_reads_stored_dtype(d) && (same_dtype(t, k_uint8) || same_dtype(t, k_uint16));
}

source_reader::~source_reader() = default;

void source_reader::read_counts(int64_t first, int64_t count, uint16_t* out) {
  if (!counts_) fail(TYCHO_ERR_INTERNAL, "source '", d_.source_name, "' does not deliver counts");
  const dataset& d = d_;
  const int64_t m = d.n0 * d.n1;
  const DLDataType t = d.info.stored_dtype;
  if (same_dtype(t, k_uint16)) {
    read_patterns(vt_, src_.get(), d, d.first + first, count, out, t);
  } else {
    staging_.resize(std::size_t(count * m));
    read_patterns(vt_, src_.get(), d, d.first + first, count, staging_.data(), t);
    std::copy(staging_.begin(), staging_.end(), out);  // widened, exactly
  }
  if (d.info.patterns_centred)
    for (int64_t l = 0; l < count; ++l) ifftshift(out + l * m, d.n0, d.n1, shift_);
}

void source_reader::read_float32(int64_t first, int64_t count, float* out, float& max_value) {
  const dataset& d = d_;
  const int64_t m = d.n0 * d.n1;
  read_patterns(vt_, src_.get(), d, d.first + first, count, out, k_float32);
  for (int64_t l = 0; l < count; ++l) {
    const int64_t j = d.first + first + l;  // the pattern's number in the scan, for messages
    float* p = out + l * m;
    for (int64_t k = 0; k < m; ++k) {
      if (p[k] < 0 && std::isfinite(p[k]))
        fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "': pattern ", j, " (scan position ",
             j / d.info.scan_shape[1], ", ", j % d.info.scan_shape[1], "), pixel (", k / d.n1, ", ",
             k % d.n1, ") is negative (", p[k], "); expected intensities >= 0 (a negative value "
             "means a wrong dark or background subtraction: clip or fix the data)");
      if (p[k] > max_value && std::isfinite(p[k])) max_value = p[k];
    }
    if (d.info.patterns_centred) ifftshift(p, d.n0, d.n1, float_shift_);
  }
}

dataset read_dataset(const component_ref& source, const tycho_config* data_table, int64_t part, int64_t parts,
                     bool as_counts) {
  source_reader r(source, data_table, part, parts);
  dataset& d = r.header();
  const int64_t m = d.n0 * d.n1;
  if (as_counts && read_counts(r)) return std::move(d);
  // This rank's patterns as float32.
  require_memory(d, 4, "float32");
  d.targets.resize(std::size_t(d.patterns * m));
  const int64_t chunk = std::max<int64_t>(1, (int64_t(64) << 20) / (m * 4));  // ~64 MiB reads
  report_stage("reading", 0, d.patterns);  // the `tycho` command's progress bar
  // Negative values mean a wrong dark (or background) subtraction: refused, not masked.
  // Non-finite and saturated values are masked afterwards (mask_bad_pixels).
  float max_value = 0;
  for (int64_t first = 0; first < d.patterns; first += chunk) {
    int64_t count = std::min(chunk, d.patterns - first);
    r.read_float32(first, count, d.targets.data() + first * m, max_value);
    report_stage("reading", first + count, d.patterns);
  }
  d.max_value = max_value;
  if (const std::string w = float32_rounding_warning(d); !w.empty()) log_warning("data", w);
  return std::move(d);
}

std::string float32_rounding_warning(const dataset& d) {
  const DLDataType t = d.info.stored_dtype;
  constexpr double k_exact = 16777216.0;  // 2^24: float32 holds every integer up to here
  if ((t.code != kDLUInt && t.code != kDLInt) || !(d.max_value >= k_exact)) return "";
  return cat("data '", d.description, "' is stored as ", t.code == kDLUInt ? "uint" : "int", int(t.bits),
             " and its values reach ", sdk::whole_number_text(d.max_value), " (the largest, as float32), at or above 2^24 = 16777216: "
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
