#include "data/chunked_preprocess.hpp"

#include <tycho/core/error.hpp>
#include <tycho/sdk.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "settings/config_read.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/progress.hpp"
#include "tycho/host/run_plan.hpp"

namespace tycho::host {

namespace {
// The preprocessed targets of `d`'s patterns ((shaped) pixels of `value_bytes`) must fit this
// machine's memory: refused before anything reads or allocates (a declared shape of 2^40 patterns
// would otherwise keep the first pass busy for days). Overflow-safe: the product is checked.
void refuse_targets_beyond_memory(const dataset& d, std::array<int64_t, 2> shaped, uint64_t value_bytes,
                                  const char* as) {
  uint64_t bytes = 0;
  const bool overflow = __builtin_mul_overflow(uint64_t(std::max<int64_t>(d.patterns, 0)),
                                               uint64_t(std::max<int64_t>(shaped[0], 0)), &bytes) ||
                        __builtin_mul_overflow(bytes, uint64_t(std::max<int64_t>(shaped[1], 0)), &bytes) ||
                        __builtin_mul_overflow(bytes, value_bytes, &bytes);
  const uint64_t have = physical_memory_bytes();
  if (overflow || (have > 0 && bytes > have))
    fail(TYCHO_ERR_OUT_OF_MEMORY, "data '", d.description, "': ", d.patterns, " preprocessed patterns of ", shaped[0],
         " x ", shaped[1], " pixels need ", overflow ? std::string("more than 2^64 bytes") : human_bytes(bytes), as,
         ", more than this machine's ", human_bytes(have), " of memory (run `tycho plan` for the remedies: more ",
         "ranks, binning)");
}
}  // namespace

bool keeps_integer_targets(const config_document& doc) {
  return read_key<bool>(doc.table_at("preprocess"), "integer_targets", "preprocess").value_or(true);
}

bool expects_count_targets(const config_document& doc, const tycho_dataset_info& info) {
  const DLDataType t = info.stored_dtype;
  const bool delivers =
      info.struct_size >= offsetof(tycho_dataset_info, reads_stored_dtype) + sizeof(info.reads_stored_dtype) &&
      info.reads_stored_dtype != 0 && t.code == kDLUInt && t.lanes == 1 && (t.bits == 8 || t.bits == 16);
  if (!delivers || !keeps_integer_targets(doc)) return false;
  const preprocess_settings s = read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
  const double largest = (t.bits == 8 ? 255.0 : 65535.0) * double(s.binning) * double(s.binning);
  return !s.normalise && largest <= 65535.0;
}

bool stage_changes_patterns(const config_document& doc) {
  const preprocess_settings s = read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
  return s.active() && !s.only_measures();
}

chunked_source::chunked_source(const component_ref& source, const tycho_config* data_table, int64_t part,
                               int64_t parts, const config_document& doc, const gather_texts& gather,
                               int64_t chunk_bytes)
    : reader_(source, data_table, part, parts) {
  dataset& d = reader_.header();
  counts_ = reader_.reads_counts();
  read_as_ = counts_ ? cat("the stored ", sdk::dtype_name(d.info.stored_dtype), " counts") : std::string("float32");
  n_ = d.n0 * d.n1;
  chunk_ = std::max<int64_t>(1, chunk_bytes / ((counts_ ? 2 : 4) * n_));
  const std::size_t chunk_values = std::size_t(std::min(chunk_, std::max<int64_t>(d.patterns, 1)) * n_);
  count_chunk_.resize(counts_ ? chunk_values : 0);
  float_chunk_.resize(counts_ ? 0 : chunk_values);
  pattern_.resize(std::size_t(n_));

  // The least the targets can take (uint16), before the first pass reads anything.
  refuse_targets_beyond_memory(
      d, preprocessed_detector_shape(read_preprocess_settings(doc.table_at("preprocess"), doc.origin()), d.n0, d.n1), 2,
      " even as uint16 counts");
  // Pass 1: the bad pixels (over every rank's patterns), the largest value, and which pixels
  // ever hold intensity (for data that hold none, refused as mask_bad_pixels refuses them).
  const toml::table& pre = doc.table_at("preprocess");
  scan_ = std::make_unique<bad_pixel_scan>(d, read_bad_pixel_settings(pre, doc.origin(), d.info.stored_dtype));
  std::vector<uint8_t> lit(std::size_t(n_), 0);
  report_stage("reading", 0, d.patterns);
  ++passes_;
  for (int64_t first = 0; first < d.patterns; first += chunk_) {
    const int64_t count = std::min(chunk_, d.patterns - first);
    read_chunk(first, count);
    for (int64_t l = 0; l < count; ++l) {
      auto visit = [&](const auto* p) {
        scan_->add(p, d.first + first + l);
        for (int64_t k = 0; k < n_; ++k) {
          if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(p)>>, uint16_t>)
            max_value_ = std::max(max_value_, p[k]);
          lit[std::size_t(k)] |= p[k] > 0;  // NaN: no; inf: masked below
        }
      };
      if (counts_)
        visit(count_chunk_.data() + l * n_);
      else
        visit(float_chunk_.data() + l * n_);
    }
    report_stage("reading", first + count, d.patterns);
  }
  d.max_value = counts_ ? float(max_value_) : max_float_;
  if (const std::string w = float32_rounding_warning(d); !counts_ && !w.empty()) log_warning("data", w);
  warning_ = scan_->finish(d, gather);
  bool holds_intensity = false;
  for (int64_t k = 0; k < n_; ++k) holds_intensity |= lit[std::size_t(k)] && !scan_->bad()[std::size_t(k)];
  refuse_no_intensity(d, holds_intensity);
}

void chunked_source::read_chunk(int64_t first, int64_t count) {
  if (counts_)
    reader_.read_counts(first, count, count_chunk_.data());
  else
    reader_.read_float32(first, count, float_chunk_.data(), max_float_);  // refuses negative values
  chunk_first_ = first;
  chunk_count_ = count;
}

void chunked_source::start_pass() {
  ++passes_;
  position_ = 0;
  chunk_count_ = 0;
  total_ = 0;
}

const float* chunked_source::next(int64_t& local) {
  const dataset& d = reader_.header();
  if (position_ >= d.patterns) return nullptr;
  if (position_ >= chunk_first_ + chunk_count_ || position_ < chunk_first_)
    read_chunk(position_, std::min(chunk_, d.patterns - position_));
  const int64_t l = position_ - chunk_first_;
  if (counts_)
    std::copy(count_chunk_.data() + l * n_, count_chunk_.data() + (l + 1) * n_, pattern_.begin());  // exact
  else
    std::copy(float_chunk_.data() + l * n_, float_chunk_.data() + (l + 1) * n_, pattern_.begin());
  // The masked totals summed as mask_bad_pixels sums them (the stage replaces them when it
  // changes the patterns).
  total_ += scan_->mask(pattern_.data());
  local = position_++;
  return pattern_.data();
}

pattern_feed chunked_source::feed() {
  return [this](const pattern_visitor& visit) {
    start_pass();
    int64_t l = 0;
    while (const float* p = next(l)) visit(l, p);
    dataset& d = reader_.header();
    d.total_intensity = total_;
    d.mean_total_intensity = d.patterns > 0 ? total_ / double(d.patterns) : 0.0;
  };
}

bool results_stay_counts(const chunked_source& src, const preprocess_settings& s, bool integer_targets) {
  const double largest_result = double(src.max_count()) * double(s.binning * s.binning);
  return src.counts() && integer_targets && !s.normalise && largest_result <= 65535.0;
}

int stored_count_bytes(double largest_source_value, int64_t binning) {
  return largest_source_value * double(binning) * double(binning) <= 255.0 ? 1 : 2;
}

void store_counts(const uint16_t* counts, int64_t n, int bytes, unsigned char* out, int64_t pattern,
                  double largest_source_value) {
  if (bytes == 2) {
    std::memcpy(out, counts, std::size_t(n) * sizeof(uint16_t));
    return;
  }
  for (int64_t k = 0; k < n; ++k) {
    if (counts[k] > 255)
      fail(TYCHO_ERR_INTERNAL, "preprocess: pattern ", pattern, " holds ", counts[k],
           ", above the 255 its source's largest value (", largest_source_value, ") allowed");
    out[k] = uint8_t(counts[k]);
  }
}

chunked_read read_preprocessed_in_chunks(const component_ref& source, const tycho_config* data_table, int64_t part,
                                         int64_t parts, const config_document& doc, const rank_sum& sum_across_ranks,
                                         const gather_texts& gather, bool integer_targets, int64_t chunk_bytes) {
  chunked_source src(source, data_table, part, parts, doc, gather, chunk_bytes);
  chunked_read out;
  dataset& d = src.header();
  out.read_as = src.read_as();
  out.bad_pixel_warning = src.bad_pixel_warning();
  const preprocess_settings s = read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
  refuse_moving_masked_pixels(d, s);
  const bool as_counts = results_stay_counts(src, s, integer_targets);
  // The targets' memory, bounded by this machine's before it is allocated (as read_dataset's).
  refuse_targets_beyond_memory(d, preprocessed_detector_shape(s, d.n0, d.n1), as_counts ? 2 : 4, "");
  out.source_info = d.info;
  out.report =
      run_preprocess_stage(d, doc, sum_across_ranks, src.feed(), as_counts ? stage_output::counts : stage_output::float32);
  out.passes = src.passes();
  out.data = std::move(d);
  return out;
}

}  // namespace tycho::host
