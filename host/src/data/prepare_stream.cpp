#include "data/prepare_stream.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tycho/host/progress.hpp"

namespace tycho::host {

streamed_patterns::streamed_patterns(const component_ref& source, const tycho_config* data_table,
                                     const config_document& doc, const std::function<void(const dataset&)>& refuse,
                                     int64_t chunk_bytes)
    : src_(source, data_table, 0, 1, doc, {}, chunk_bytes) {
  dataset& d = src_.header();
  refuse(d);
  source_info_ = d.info;
  const preprocess_settings s = read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
  refuse_moving_masked_pixels(d, s);
  counts_ = results_stay_counts(src_, s, keeps_integer_targets(doc));
  plan_ = plan_preprocess_stage(d, doc, sum_on_one_rank, src_.feed());
  if (plan_.report.settings.normalise) normalised_to_ = plan_.normalise_totals(d, src_.feed(), sum_on_one_rank);
  after_ = d;  // the reader keeps reading with the source's own header
  finish_preprocess_stage(after_, plan_, false);  // the shape and calibration; the totals as produced
  total_patterns_ = after_.patterns;
  const std::size_t m = std::size_t(after_.n0 * after_.n1);
  out_.resize(m);
  centred_.resize(m);
  if (counts_) {
    counts_out_.resize(m);
    counts_centred_.resize(m);
  }
  if (counts_) count_bytes_ = stored_count_bytes(d.max_value, s.binning);
  pattern_bytes_.resize(m * std::size_t(counts_ ? count_bytes_ : 4));
  at_ = pattern_bytes_.size();  // nothing held yet
  src_.start_pass();
  report_stage("writing", 0, total_patterns_);
}

void streamed_patterns::next_pattern() {
  dataset& d = after_;
  int64_t l = 0;
  const float* raw = src_.next(l);
  if (raw == nullptr) fail(TYCHO_ERR_INTERNAL, "preprocess: the source ended after ", produced_, " patterns");
  const int64_t n0 = d.n0, n1 = d.n1, m = n0 * n1;
  const float* result = raw;
  if (plan_.changes) {  // as run_preprocess_stage's last pass, then normalise and the totals
    plan_.transform(raw, l, d.first, out_.data(), scratch_);
    if (plan_.report.settings.normalise)
      normalise_pattern(out_.data(), m, plan_.own_totals[std::size_t(l)], normalised_to_);
    total_ += pattern_total(out_.data(), n0, n1, d.info.patterns_centred != 0);
    result = out_.data();
  }
  if (counts_) {
    for (int64_t k = 0; k < m; ++k) {
      const float v = result[k];
      if (!(v >= 0.f && v <= 65535.f) || v != std::floor(v))
        fail(TYCHO_ERR_INTERNAL, "the preprocessing stage made pattern ", d.first + l, " hold ", v,
             ", not a uint16 count");
      counts_out_[std::size_t(k)] = uint16_t(v);
    }
    fftshift_pattern(counts_out_.data(), counts_centred_.data(), n0, n1);
    store_counts(counts_centred_.data(), m, count_bytes_, pattern_bytes_.data(), d.first + l, d.max_value);
  } else {
    fftshift_pattern(result, centred_.data(), n0, n1);
    std::memcpy(pattern_bytes_.data(), centred_.data(), pattern_bytes_.size());
  }
  at_ = 0;
  if (++produced_ == total_patterns_) {
    // The scan's totals: the masked sums of the reads (patterns as read), or the results' own.
    d.total_intensity = plan_.changes ? total_ : src_.pass_total();
    d.mean_total_intensity = d.patterns > 0 ? d.total_intensity / double(d.patterns) : 0.0;
  }
  if (produced_ % 256 == 0 || produced_ == total_patterns_) report_stage("writing", produced_, total_patterns_);
}

void streamed_patterns::produce(unsigned char* dst, uint64_t bytes) {
  while (bytes > 0) {
    if (at_ == pattern_bytes_.size()) next_pattern();
    const std::size_t n = std::min<std::size_t>(std::size_t(bytes), pattern_bytes_.size() - at_);
    std::memcpy(dst, pattern_bytes_.data() + at_, n);
    at_ += n;
    dst += n;
    bytes -= n;
  }
}

void streamed_patterns::drain() {
  while (produced_ < total_patterns_) next_pattern();
  at_ = pattern_bytes_.size();
}

tycho_status streamed_patterns::produce_callback(void* context, void* dst, size_t bytes) {
  try {
    static_cast<streamed_patterns*>(context)->produce(static_cast<unsigned char*>(dst), bytes);
    return TYCHO_OK;
  } catch (const error& e) {
    return set_last_error(e.status, e.what());
  } catch (const std::exception& e) {
    return set_last_error(TYCHO_ERR_INTERNAL, e.what());
  }
}

}  // namespace tycho::host
