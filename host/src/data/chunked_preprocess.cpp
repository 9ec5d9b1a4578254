#include "data/chunked_preprocess.hpp"

#include <tycho/core/error.hpp>
#include <tycho/sdk.hpp>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "data/preprocess_stage.hpp"
#include "data/source_reader.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/progress.hpp"
#include "tycho/host/run_plan.hpp"

namespace tycho::host {

bool stage_changes_patterns(const config_document& doc) {
  const preprocess_settings s = read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
  return s.active() && !s.only_measures();
}

chunked_read read_preprocessed_in_chunks(const component_ref& source, const tycho_config* data_table, int64_t part,
                                         int64_t parts, const config_document& doc, const rank_sum& sum_across_ranks,
                                         const gather_texts& gather, bool integer_targets, int64_t chunk_bytes) {
  source_reader reader(source, data_table, part, parts);
  chunked_read out;
  dataset& d = reader.header();
  const bool counts = reader.reads_counts();
  out.read_as = counts ? cat("the stored ", sdk::dtype_name(d.info.stored_dtype), " counts") : std::string("float32");
  const int64_t n = d.n0 * d.n1;
  const int64_t chunk = std::max<int64_t>(1, chunk_bytes / ((counts ? 2 : 4) * n));
  const std::size_t chunk_values = std::size_t(std::min(chunk, std::max<int64_t>(d.patterns, 1)) * n);
  std::vector<uint16_t> count_chunk(counts ? chunk_values : 0);
  std::vector<float> float_chunk(counts ? 0 : chunk_values);
  float max_float = 0;  // float32 reads: the largest finite value
  // One pass: every chunk of the block read (float32 reads refuse negative values), its
  // patterns handed over in order as uint16 counts or float32.
  auto each_pattern = [&](auto&& use) {
    ++out.passes;
    for (int64_t first = 0; first < d.patterns; first += chunk) {
      const int64_t count = std::min(chunk, d.patterns - first);
      if (counts) {
        reader.read_counts(first, count, count_chunk.data());
        for (int64_t l = 0; l < count; ++l) use(first + l, count_chunk.data() + l * n);
      } else {
        reader.read_float32(first, count, float_chunk.data(), max_float);
        for (int64_t l = 0; l < count; ++l) use(first + l, float_chunk.data() + l * n);
      }
    }
  };

  // Pass 1: the bad pixels (over every rank's patterns), the largest value, and which pixels
  // ever hold intensity (for data that hold none, refused as mask_bad_pixels refuses them).
  const toml::table& pre = doc.table_at("preprocess");
  bad_pixel_scan scan(d, read_bad_pixel_settings(pre, doc.origin(), d.info.stored_dtype));
  uint16_t max_value = 0;
  std::vector<uint8_t> lit(std::size_t(n), 0);
  report_stage("reading", 0, d.patterns);
  each_pattern([&](int64_t l, const auto* p) {
    scan.add(p, d.first + l);
    for (int64_t k = 0; k < n; ++k) {
      if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(p)>>, uint16_t>)
        max_value = std::max(max_value, p[k]);
      lit[std::size_t(k)] |= p[k] > 0;  // NaN: no; inf: masked below
    }
    if ((l + 1) % chunk == 0 || l + 1 == d.patterns) report_stage("reading", l + 1, d.patterns);
  });
  d.max_value = counts ? float(max_value) : max_float;
  if (const std::string w = float32_rounding_warning(d); !counts && !w.empty()) log_warning("data", w);
  out.bad_pixel_warning = scan.finish(d, gather);
  bool holds_intensity = false;
  for (int64_t k = 0; k < n; ++k) holds_intensity |= lit[std::size_t(k)] && !scan.bad()[std::size_t(k)];
  refuse_no_intensity(d, holds_intensity);
  const preprocess_settings s = read_preprocess_settings(pre, doc.origin());
  refuse_moving_masked_pixels(d, s, s.transpose);
  // uint16 results when every step keeps whole counts and a bin's sum cannot pass 65535.
  const double largest_result = double(max_value) * double(s.binning * s.binning);
  const bool as_counts = counts && integer_targets && !s.normalise && largest_result <= 65535.0;
  // The targets' memory, bounded by this machine's before it is allocated (as read_dataset's).
  const auto shaped = preprocessed_detector_shape(s, d.n0, d.n1);
  const uint64_t target_bytes = uint64_t(d.patterns) * uint64_t(shaped[0] * shaped[1]) * (as_counts ? 2 : 4);
  if (const uint64_t have = physical_memory_bytes(); have > 0 && target_bytes > have)
    fail(TYCHO_ERR_OUT_OF_MEMORY, "data '", d.description, "': ", d.patterns, " preprocessed patterns of ", shaped[0],
         " x ", shaped[1], " pixels need ", human_bytes(target_bytes), ", more than this machine's ",
         human_bytes(have), " of memory (run `tycho plan` for the remedies: more ranks, binning)");

  // The stage's passes: each pattern as float32 (exact), masked; the masked totals summed as
  // mask_bad_pixels sums them (the stage replaces them when it changes the patterns).
  std::vector<float> pattern(static_cast<std::size_t>(n));
  const pattern_feed feed = [&](const pattern_visitor& visit) {
    double total = 0;
    each_pattern([&](int64_t l, const auto* p) {
      std::copy(p, p + n, pattern.begin());  // counts convert exactly
      total += scan.mask(pattern.data());
      visit(l, pattern.data());
    });
    d.total_intensity = total;
    d.mean_total_intensity = d.patterns > 0 ? total / double(d.patterns) : 0.0;
  };
  out.source_info = d.info;
  out.report =
      run_preprocess_stage(d, doc, sum_across_ranks, feed, as_counts ? stage_output::counts : stage_output::float32);
  out.data = std::move(d);
  return out;
}

}  // namespace tycho::host
