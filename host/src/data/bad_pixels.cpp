#include "data/bad_pixels.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/sharding.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "tycho/host/log.hpp"
#include "tycho/host/parallel.hpp"

namespace tycho::host {

namespace {

constexpr std::size_t k_examples = 5;  // pixels named in the warning

// The first pattern (of the whole scan) in which a masked pixel was bad, and its value there.
struct example {
  int64_t pattern = -1;
  float value = 0;
};

// "%.9g", with nan and inf spelled the way strtod reads them back.
std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// What one rank found, as exchanged between the ranks.
struct rank_findings {
  int64_t nonfinite = 0, saturated = 0, patterns = 0;
  std::vector<uint8_t> bad;                 // FFT order, 1 = bad
  std::map<int64_t, example> examples;      // by stored pixel index: its first few

  std::string to_text() const {
    std::string t = cat(nonfinite, " ", saturated, " ", patterns, "\n");
    for (uint8_t b : bad) t += b ? '1' : '0';
    t += '\n';
    for (const auto& [pixel, e] : examples) t += cat(pixel, " ", e.pattern, " ", number_text(e.value), "\n");
    return t;
  }

  static rank_findings from_text(const std::string& text, std::size_t pixels) {
    rank_findings f;
    std::istringstream in(text);
    std::string mask;
    if (!(in >> f.nonfinite >> f.saturated >> f.patterns >> mask) || mask.size() != pixels)
      fail(TYCHO_ERR_INTERNAL, "the ranks' bad-pixel reports do not agree on the detector's size");
    f.bad.resize(pixels);
    for (std::size_t k = 0; k < pixels; ++k) f.bad[k] = mask[k] == '1';
    int64_t pixel = 0, pattern = 0;
    std::string value;
    while (in >> pixel >> pattern >> value) f.examples[pixel] = {pattern, std::strtof(value.c_str(), nullptr)};
    return f;
  }

  // Adds another rank's findings: the union of the bad pixels, the sums of the counts, and for
  // each pixel the earliest pattern. The first few pixels of the union are among each rank's
  // first few, so keeping k_examples per rank is enough.
  void add(const rank_findings& o) {
    nonfinite += o.nonfinite;
    saturated += o.saturated;
    patterns += o.patterns;
    for (std::size_t k = 0; k < bad.size(); ++k) bad[k] |= o.bad[k];
    for (const auto& [pixel, e] : o.examples) {
      auto it = examples.find(pixel);
      if (it == examples.end() || e.pattern < it->second.pattern) examples[pixel] = e;
    }
    while (examples.size() > k_examples) examples.erase(std::prev(examples.end()));
  }
};

std::string dtype_text(DLDataType t) {
  return cat(t.code == kDLUInt ? "uint" : t.code == kDLInt ? "int" : t.code == kDLFloat ? "float" : "type ",
             int(t.bits));
}

}  // namespace

std::optional<double> dtype_maximum(DLDataType t) {
  if (t.code == kDLUInt && t.bits >= 1 && t.bits <= 64) return std::ldexp(1.0, t.bits) - 1.0;
  if (t.code == kDLInt && t.bits >= 2 && t.bits <= 64) return std::ldexp(1.0, t.bits - 1) - 1.0;
  return std::nullopt;
}

bad_pixel_settings read_bad_pixel_settings(const toml::table& pre, const std::string& origin, DLDataType stored) {
  bad_pixel_settings s;
  s.saturation_value = dtype_maximum(stored);
  if (auto node = pre["saturation_value"]) {
    if (node.is_boolean() && !*node.value<bool>()) {
      s.saturation_value.reset();
    } else {
      const std::optional<double> v = node.is_number() ? node.value<double>() : std::nullopt;
      if (!v || !std::isfinite(*v) || *v <= 0)
        fail(TYCHO_ERR_INVALID_ARGUMENT, origin,
             ": [preprocess] saturation_value must be a number > 0 (values at or above it are masked as "
             "saturated) or false (no saturation check)");
      s.saturation_value = *v;
    }
  }
  if (auto node = pre["max_masked_fraction"]) {
    const std::optional<double> v = node.is_number() ? node.value<double>() : std::nullopt;
    if (!v || !(*v >= 0 && *v <= 1))
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin,
           ": [preprocess] max_masked_fraction must be a number from 0 to 1 (the largest fraction of the "
           "detector's pixels that may be masked as bad)");
    s.max_masked_fraction = *v;
  }
  return s;
}

struct bad_pixel_scan::findings {
  rank_findings mine;
  std::vector<example> first_seen;
};

bad_pixel_scan::bad_pixel_scan(const dataset& d, const bad_pixel_settings& settings)
    : f_(std::make_unique<findings>()), settings_(settings), n0_(d.n0), n1_(d.n1) {
  if (d.n0 != d.info.detector_shape[0] || d.n1 != d.info.detector_shape[1])
    fail(TYCHO_ERR_INTERNAL, "bad pixels are masked on the measured detector, before any padding");
  f_->mine.bad.assign(std::size_t(n0_ * n1_), 0);
  f_->first_seen.resize(std::size_t(n0_ * n1_));
}
bad_pixel_scan::~bad_pixel_scan() = default;

template <class T>
void bad_pixel_scan::add(const T* p, int64_t pattern) {
  const int64_t m = n0_ * n1_;
  const bool check_saturation = settings_.saturation_value.has_value();
  const double saturation = settings_.saturation_value.value_or(0);
  rank_findings& mine = f_->mine;
  bool any = false;
  for (int64_t k = 0; k < m; ++k) {
    const float v = float(p[k]);  // a uint16 count is its float32 exactly
    const bool nonfinite = !std::isfinite(v);
    const bool saturated = !nonfinite && check_saturation && double(v) >= saturation;
    if (!nonfinite && !saturated) continue;
    any = true;
    mine.nonfinite += nonfinite;
    mine.saturated += saturated;
    if (!mine.bad[std::size_t(k)]) {
      mine.bad[std::size_t(k)] = 1;
      f_->first_seen[std::size_t(k)] = {pattern, v};
    }
  }
  mine.patterns += any;
}
template void bad_pixel_scan::add<float>(const float*, int64_t);
template void bad_pixel_scan::add<uint16_t>(const uint16_t*, int64_t);

std::string bad_pixel_scan::finish(dataset& d, const gather_texts& gather) {
  const int64_t n0 = n0_, n1 = n1_, m = n0 * n1;
  const bad_pixel_settings& settings = settings_;
  const bool check_saturation = settings.saturation_value.has_value();
  const double saturation = settings.saturation_value.value_or(0);
  // Stored (as in the file) index of FFT-order pixel k: the patterns were shifted on read.
  auto stored_index = [&](int64_t k) {
    if (!d.info.patterns_centred) return k;
    return ((k / n1 + n0 / 2) % n0) * n1 + (k % n1 + n1 / 2) % n1;
  };
  rank_findings& mine = f_->mine;
  for (int64_t k = 0; k < m; ++k)
    if (mine.bad[std::size_t(k)]) {
      mine.examples[stored_index(k)] = f_->first_seen[std::size_t(k)];
      if (mine.examples.size() > k_examples) mine.examples.erase(std::prev(mine.examples.end()));
    }

  rank_findings all = mine;
  if (gather) {
    all = rank_findings{};
    all.bad.assign(std::size_t(m), 0);
    for (const std::string& text : gather(mine.to_text())) all.add(rank_findings::from_text(text, std::size_t(m)));
  }

  const int64_t masked = std::count(all.bad.begin(), all.bad.end(), uint8_t(1));
  bad_pixel_summary& sum = d.bad_pixels;
  sum.saturation_value = settings.saturation_value;
  sum.max_masked_fraction = settings.max_masked_fraction;
  sum.masked_pixels = masked;
  sum.nonfinite_values = all.nonfinite;
  sum.saturated_values = all.saturated;
  sum.patterns = all.patterns;

  const double fraction = double(masked) / double(m);
  const std::string saturation_text =
      check_saturation ? cat("values >= [preprocess] saturation_value = ", number_text(saturation),
                             dtype_maximum(d.info.stored_dtype) == settings.saturation_value
                                 ? cat(" (the maximum of the stored ", dtype_text(d.info.stored_dtype), ")")
                                 : std::string())
                       : std::string("no saturation check ([preprocess] saturation_value = false)");
  std::string pixels_text;
  for (const auto& [pixel, e] : all.examples)
    pixels_text += cat(pixels_text.empty() ? "" : ", ", "(", pixel / n1, ", ", pixel % n1, ") = ",
                       number_text(e.value), " in pattern ", e.pattern);
  if (masked > int64_t(all.examples.size())) pixels_text += ", ...";
  char percent[32];
  std::snprintf(percent, sizeof percent, "%.3g", 100 * fraction);
  const std::string found = cat(masked, " of ", m, " detector pixels (", percent, " %) ",
                                "are bad in at least one of ", all.patterns, " patterns: ", all.nonfinite,
                                " non-finite values (NaN, inf), ", all.saturated, " saturated values (",
                                saturation_text, "); first pixels (row, column) of the stored detector: ",
                                pixels_text);
  if (masked == m)
    fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "': no valid detector pixel is left: ", found);
  if (fraction > settings.max_masked_fraction)
    fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "': ", found, "; that is more than [preprocess] "
         "max_masked_fraction = ", number_text(settings.max_masked_fraction), " of the detector. ",
         check_saturation ? "Is the saturation value right? Set [preprocess] saturation_value (false: no "
                            "saturation check), or raise max_masked_fraction if so many pixels are really bad"
                          : "Raise [preprocess] max_masked_fraction if so many pixels are really bad");
  bad_ = std::move(all.bad);
  d.detector_mask.clear();
  if (masked == 0) return "";
  d.detector_mask.resize(std::size_t(m));
  for (int64_t k = 0; k < m; ++k) d.detector_mask[std::size_t(k)] = bad_[std::size_t(k)] ? 0 : 1;
  return cat("masked ", found, ". They are left out of the loss in every pattern and saved as the result's "
             "'mask'");
}

template <class T>
double bad_pixel_scan::mask(T* p) const {
  // In the order of the float32 sums: a uint16 count converts to the same double as its float32.
  const int64_t m = n0_ * n1_;
  double pattern_sum = 0;
  for (int64_t k = 0; k < m; ++k) {
    if (bad_[std::size_t(k)]) p[k] = 0;
    pattern_sum += p[k];
  }
  return pattern_sum;
}
template double bad_pixel_scan::mask<float>(float*) const;
template double bad_pixel_scan::mask<uint16_t>(uint16_t*) const;

void refuse_no_intensity(const dataset& d, bool holds_intensity) {
  if (d.patterns == d.all_patterns && !holds_intensity)
    fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "' holds no intensity (all patterns are zero",
         d.bad_pixels.masked_pixels > 0 ? " outside the masked pixels" : "", ")");
}

std::string mask_bad_pixels(dataset& d, const bad_pixel_settings& settings, const gather_texts& gather) {
  const int64_t m = d.n0 * d.n1;
  bad_pixel_scan scan(d, settings);
  // The patterns as float32 (d.targets) or as uint16 counts (d.counts): the same values, exactly.
  const bool counts = d.targets.empty() && !d.counts.empty();
  for (int64_t local = 0; local < d.patterns; ++local) {
    if (counts) scan.add(d.counts.data() + local * m, d.first + local);
    else scan.add(d.targets.data() + local * m, d.first + local);
  }
  const std::string warning = scan.finish(d, gather);
  // Masked pixels are 0 in every pattern; the totals leave them out.
  double total = 0;
  for (int64_t local = 0; local < d.patterns; ++local)
    total += counts ? scan.mask(d.counts.data() + local * m) : scan.mask(d.targets.data() + local * m);
  d.total_intensity = total;
  d.mean_total_intensity = d.patterns > 0 ? total / double(d.patterns) : 0.0;
  refuse_no_intensity(d, d.mean_total_intensity > 0);
  return warning;
}

gather_texts bad_pixel_gather(parallel_context& par) {
  // Ranks holding every pattern ("replicated") find the same pixels; sharded ones combine theirs.
  if (par.world_size() > 1 && par.sharding() == shard::mode::patterns)
    return [&par](const std::string& mine) { return par.all_texts(mine); };
  return {};
}

void mask_bad_pixels(dataset& d, const toml::table& preprocess, const std::string& origin, parallel_context& par) {
  const bad_pixel_settings settings = read_bad_pixel_settings(preprocess, origin, d.info.stored_dtype);
  const std::string warning = mask_bad_pixels(d, settings, bad_pixel_gather(par));
  if (!warning.empty() && par.is_root()) log_warning("preprocess", warning);
}

std::string bad_pixels_json(const dataset& d) {
  const bad_pixel_summary& s = d.bad_pixels;
  nlohmann::ordered_json j;
  j["masked_pixels"] = s.masked_pixels;
  j["saturation_value"] = s.saturation_value ? nlohmann::ordered_json(*s.saturation_value) : nullptr;
  j["saturated_values"] = s.saturated_values;
  j["nonfinite_values"] = s.nonfinite_values;
  j["patterns"] = s.patterns;
  j["max_masked_fraction"] = s.max_masked_fraction;
  return j.dump();
}

}  // namespace tycho::host
