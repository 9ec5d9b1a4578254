#include "data/bad_pixels.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/sharding.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
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

// Hexadecimal text of a value's bits (exact, for the exchange between ranks), and back.
template <class T, class U>
void append_bits(std::string& text, T value) {
  static_assert(sizeof(T) == sizeof(U));
  U bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  char buf[2 * sizeof(U) + 1];
  std::snprintf(buf, sizeof buf, sizeof(U) == 8 ? "%016llx" : "%08llx", static_cast<unsigned long long>(bits));
  text += buf;
}
template <class T, class U>
bool parse_bits(const std::string& text, std::size_t at, T& value) {
  U bits = 0;
  for (std::size_t i = 0; i < 2 * sizeof(U); ++i) {
    const char c = text[at + i];
    const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return false;
    bits = U(bits << 4) | U(v);
  }
  std::memcpy(&value, &bits, sizeof bits);
  return true;
}

// What one rank found, as exchanged between the ranks.
struct rank_findings {
  int64_t nonfinite = 0, saturated = 0, patterns = 0;
  std::vector<uint8_t> bad;                 // FFT order, 1 = bad
  std::map<int64_t, example> examples;      // by stored pixel index: its first few
  // For the detection (empty when it is off): the patterns added, the smallest positive value,
  // and per pixel (FFT order) the sum and the largest of its usable values.
  int64_t added = 0;
  float min_positive = std::numeric_limits<float>::infinity();
  std::vector<double> sum;
  std::vector<float> max;

  std::string to_text() const {
    std::string t = cat(nonfinite, " ", saturated, " ", patterns, " ", added, " ");
    append_bits<float, uint32_t>(t, min_positive);
    t += '\n';
    for (uint8_t b : bad) t += b ? '1' : '0';
    t += sum.empty() ? "\n-\n-\n" : "\n";
    if (!sum.empty()) {
      t.reserve(t.size() + sum.size() * 24 + 2);
      for (double v : sum) append_bits<double, uint64_t>(t, v);
      t += '\n';
      for (float v : max) append_bits<float, uint32_t>(t, v);
      t += '\n';
    }
    for (const auto& [pixel, e] : examples) t += cat(pixel, " ", e.pattern, " ", number_text(e.value), "\n");
    return t;
  }

  static rank_findings from_text(const std::string& text, std::size_t pixels) {
    rank_findings f;
    std::istringstream in(text);
    std::string mask, min_bits, sums, maxima;
    auto disagree = [] { fail(TYCHO_ERR_INTERNAL, "the ranks' bad-pixel reports do not agree on the detector's size"); };
    if (!(in >> f.nonfinite >> f.saturated >> f.patterns >> f.added >> min_bits >> mask >> sums >> maxima) ||
        mask.size() != pixels || min_bits.size() != 8 || !parse_bits<float, uint32_t>(min_bits, 0, f.min_positive))
      disagree();
    f.bad.resize(pixels);
    for (std::size_t k = 0; k < pixels; ++k) f.bad[k] = mask[k] == '1';
    if (sums != "-") {
      if (sums.size() != 16 * pixels || maxima.size() != 8 * pixels) disagree();
      f.sum.resize(pixels);
      f.max.resize(pixels);
      for (std::size_t k = 0; k < pixels; ++k)
        if (!parse_bits<double, uint64_t>(sums, 16 * k, f.sum[k]) || !parse_bits<float, uint32_t>(maxima, 8 * k, f.max[k]))
          disagree();
    }
    int64_t pixel = 0, pattern = 0;
    std::string value;
    while (in >> pixel >> pattern >> value) f.examples[pixel] = {pattern, std::strtof(value.c_str(), nullptr)};
    return f;
  }

  // Adds another rank's findings: the union of the bad pixels, the sums of the counts (and of
  // the pixels' values, in rank order), the maxima, and for each pixel the earliest pattern. The
  // first few pixels of the union are among each rank's first few, so keeping k_examples per
  // rank is enough.
  void add(const rank_findings& o) {
    nonfinite += o.nonfinite;
    saturated += o.saturated;
    patterns += o.patterns;
    added += o.added;
    min_positive = std::min(min_positive, o.min_positive);
    for (std::size_t k = 0; k < bad.size(); ++k) bad[k] |= o.bad[k];
    if (sum.size() != o.sum.size())
      fail(TYCHO_ERR_INTERNAL, "the ranks' bad-pixel reports do not agree on [preprocess] detect_bad_pixels");
    for (std::size_t k = 0; k < sum.size(); ++k) {
      sum[k] += o.sum[k];
      max[k] = std::max(max[k], o.max[k]);
    }
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
  if (auto node = pre["detect_bad_pixels"]) {
    if (!node.is_boolean())
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin,
           ": [preprocess] detect_bad_pixels must be true (search the data for dead and hot detector pixels, the "
           "default) or false");
    s.detect = *node.value<bool>();
  }
  s.origin = origin;
  if (auto node = pre["bad_pixels"]) {
    const std::string expected =
        ": [preprocess] bad_pixels must be an array of [row, column] pairs of integers >= 0, the detector pixels to "
        "mask in the data's own (stored) frame, e.g. bad_pixels = [[12, 40], [0, 95]]";
    const toml::array* list = node.as_array();
    if (!list) fail(TYCHO_ERR_INVALID_ARGUMENT, origin, expected);
    for (std::size_t i = 0; i < list->size(); ++i) {
      const toml::array* pair = (*list)[i].as_array();
      const auto r = pair && pair->size() == 2 ? (*pair)[0].value_exact<int64_t>() : std::nullopt;
      const auto c = pair && pair->size() == 2 ? (*pair)[1].value_exact<int64_t>() : std::nullopt;
      if (!r || !c || *r < 0 || *c < 0) {
        std::ostringstream entry;
        (*list)[i].visit([&](const auto& v) { entry << v; });
        fail(TYCHO_ERR_INVALID_ARGUMENT, origin, expected, "; entry ", i, " is ", entry.str());
      }
      s.given.push_back({*r, *c});
    }
  }
  return s;
}

struct bad_pixel_scan::findings {
  rank_findings mine;
  std::vector<example> first_seen;
};

namespace {

// FFT-order index of the stored (centred when the patterns are) pixel (r, c), and back.
int64_t fft_index(const dataset& d, int64_t r, int64_t c) {
  if (!d.info.patterns_centred) return r * d.n1 + c;
  return ((r + d.n0 - d.n0 / 2) % d.n0) * d.n1 + (c + d.n1 - d.n1 / 2) % d.n1;
}
int64_t stored_index(const dataset& d, int64_t k) {
  if (!d.info.patterns_centred) return k;
  return ((k / d.n1 + d.n0 / 2) % d.n0) * d.n1 + (k % d.n1 + d.n1 / 2) % d.n1;
}

// The median of v (reordered), the mean of the two middle values for an even count.
double median_of(std::vector<double>& v) {
  const std::size_t n = v.size(), h = n / 2;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(h), v.end());
  const double upper = v[h];
  if (n % 2 == 1) return upper;
  return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + std::ptrdiff_t(h)));
}

// The median and 1.4826 × the median absolute deviation of v (a normal law's standard
// deviation, robust to the few bad pixels among many).
std::array<double, 2> robust_centre_spread(std::vector<double> v) {
  const double med = median_of(v);
  for (double& x : v) x = std::abs(x - med);
  return {med, 1.4826 * median_of(v)};
}

struct detection {
  std::vector<found_bad_pixel> found;  // stored order
  std::vector<int64_t> stored;         // their stored indices
  int64_t compared = 0;
  double scale_mean = 0, scale_dead = 0, scale_max = 0;
};

// The search for dead and hot pixels (the statistic in bad_pixels.hpp) on the scan's per-pixel
// sums and maxima over P patterns (FFT order), among the pixels not `excluded` (FFT order).
// `quantum`: the data's smallest step (1 for counts), for the spread's floor.
detection detect_dead_and_hot(const dataset& d, const std::vector<double>& sum, const std::vector<float>& max,
                              int64_t P, double quantum, const std::vector<uint8_t>& excluded) {
  detection out;
  const int64_t n0 = d.n0, n1 = d.n1, m = n0 * n1;
  if (P <= 0) return out;
  // Stored order: neighbours on the detector are neighbours here.
  const std::size_t pixels = static_cast<std::size_t>(m);
  std::vector<double> a(pixels), b(pixels);
  std::vector<uint8_t> usable(pixels);
  for (int64_t k = 0; k < m; ++k) {
    const std::size_t s = std::size_t(stored_index(d, k));
    usable[s] = !excluded[std::size_t(k)];
    a[s] = std::sqrt(std::max(0.0, sum[std::size_t(k)] / double(P)));
    b[s] = std::sqrt(std::max(0.0, double(max[std::size_t(k)])));
  }
  struct compared_pixel {
    int64_t s;
    double hot, dead, spike, hi_a, lo_a, hi_b;
  };
  std::vector<compared_pixel> px;
  for (int64_t r = 0; r < n0; ++r)
    for (int64_t c = 0; c < n1; ++c) {
      const int64_t s = r * n1 + c;
      if (!usable[std::size_t(s)]) continue;
      double na[8], nb[8];
      int n = 0;
      for (int64_t dr = -1; dr <= 1; ++dr)
        for (int64_t dc = -1; dc <= 1; ++dc) {
          const int64_t rr = r + dr, cc = c + dc;
          if ((dr == 0 && dc == 0) || rr < 0 || rr >= n0 || cc < 0 || cc >= n1) continue;
          const std::size_t t = std::size_t(rr * n1 + cc);
          if (!usable[t]) continue;
          na[n] = a[t];
          nb[n] = b[t];
          ++n;
        }
      if (n < 3) continue;  // too few neighbours to compare with
      std::sort(na, na + n);
      std::sort(nb, nb + n);
      const int second = n >= 5 ? 1 : 0;  // the second largest / smallest (the extreme at a corner)
      const double hi_a = na[n - 1 - second], lo_a = na[second], hi_b = nb[n - 1 - second];
      px.push_back({s, a[std::size_t(s)] - hi_a, lo_a - a[std::size_t(s)], b[std::size_t(s)] - hi_b, hi_a, lo_a, hi_b});
    }
  out.compared = int64_t(px.size());
  if (out.compared < bad_pixel_least_compared) return out;
  std::vector<double> v(px.size());
  auto spread_of = [&](double compared_pixel::*field) {
    for (std::size_t i = 0; i < px.size(); ++i) v[i] = px[i].*field;
    return robust_centre_spread(v);
  };
  const double floor_mean = 0.5 * std::sqrt(std::max(0.0, quantum) / double(P));
  auto [med_hot, sd_hot] = spread_of(&compared_pixel::hot);
  auto [med_dead, sd_dead] = spread_of(&compared_pixel::dead);
  auto [med_spike, sd_spike] = spread_of(&compared_pixel::spike);
  sd_hot = std::max(sd_hot, floor_mean);
  sd_dead = std::max(sd_dead, floor_mean);
  sd_spike = std::max(sd_spike, sd_hot * std::sqrt(double(P)));
  out.scale_mean = sd_hot;
  out.scale_dead = sd_dead;
  out.scale_max = sd_spike;
  auto z = [](double x, double med, double sd) { return sd > 0 && std::isfinite(sd) ? (x - med) / sd : 0.0; };
  // Far from the neighbours in size too: at least bad_pixel_least_ratio times the reference (or
  // at most its inverse), on the square-root scale its square root. Without it noise-free data,
  // whose spread is their structure alone, would flag a pixel 0.4 % above its neighbours.
  const double ratio = std::sqrt(bad_pixel_least_ratio);
  for (const compared_pixel& p : px) {
    const double own_a = a[std::size_t(p.s)], own_b = b[std::size_t(p.s)];
    const double z_dead = own_a * ratio < p.lo_a ? z(p.dead, med_dead, sd_dead) : 0.0;
    const double z_hot = own_a > ratio * p.hi_a ? z(p.hot, med_hot, sd_hot) : 0.0;
    const double z_spike = own_b > ratio * p.hi_b ? z(p.spike, med_spike, sd_spike) : 0.0;
    // Dead first (a dead pixel's maximum is low too); of the two hot tests, the one it fails more
    // clearly says how (a pixel hot in a few patterns raises its mean a little, its maximum a lot).
    const bool hot = z_hot > bad_pixel_threshold, spikes = z_spike > bad_pixel_threshold;
    const char* reason = z_dead > bad_pixel_threshold     ? "dead"
                         : spikes && (!hot || z_spike > z_hot) ? "hot_in_some_patterns"
                         : hot                               ? "hot"
                                                             : nullptr;
    if (!reason) continue;
    found_bad_pixel f;
    f.row = p.s / n1;
    f.column = p.s % n1;
    f.reason = reason;
    f.mean = own_a * own_a;
    f.neighbours_mean = f.reason == "dead" ? p.lo_a * p.lo_a : p.hi_a * p.hi_a;
    f.max = own_b * own_b;
    f.neighbours_max = p.hi_b * p.hi_b;
    f.score = f.reason == "dead" ? z_dead : f.reason == "hot" ? z_hot : z_spike;
    out.found.push_back(std::move(f));
    out.stored.push_back(p.s);
  }
  return out;
}

std::string found_text(const found_bad_pixel& f) {
  char buf[256];
  if (f.reason == "dead")
    std::snprintf(buf, sizeof buf, "(%lld, %lld) dead: mean %.4g per pattern where its neighbours hold %.4g (z = %.0f)",
                  (long long)f.row, (long long)f.column, f.mean, f.neighbours_mean, f.score);
  else if (f.reason == "hot")
    std::snprintf(buf, sizeof buf, "(%lld, %lld) hot: mean %.4g per pattern where its neighbours hold %.4g (z = %.0f)",
                  (long long)f.row, (long long)f.column, f.mean, f.neighbours_mean, f.score);
  else
    std::snprintf(buf, sizeof buf,
                  "(%lld, %lld) hot in some patterns: up to %.6g where its neighbours reach %.6g (z = %.0f)",
                  (long long)f.row, (long long)f.column, f.max, f.neighbours_max, f.score);
  return buf;
}

}  // namespace

bad_pixel_scan::bad_pixel_scan(const dataset& d, const bad_pixel_settings& settings)
    : f_(std::make_unique<findings>()), settings_(settings), n0_(d.n0), n1_(d.n1) {
  if (d.n0 != d.info.detector_shape[0] || d.n1 != d.info.detector_shape[1])
    fail(TYCHO_ERR_INTERNAL, "bad pixels are masked on the measured detector, before any padding");
  const std::size_t m = std::size_t(n0_ * n1_);
  f_->mine.bad.assign(m, 0);
  f_->first_seen.resize(m);
  if (settings_.detect) {
    f_->mine.sum.assign(m, 0.0);
    f_->mine.max.assign(m, 0.0f);
  }
  // Pixels masked whatever their values: given by hand, or by the detector's own mask.
  premasked_.assign(m, 0);
  for (const auto& [r, c] : settings_.given) {
    if (r >= n0_ || c >= n1_)
      fail(TYCHO_ERR_INVALID_ARGUMENT, settings_.origin.empty() ? std::string("the config") : settings_.origin,
           ": [preprocess] bad_pixels names the pixel [", r, ", ", c, "], outside the ", n0_, " x ", n1_,
           " detector of data '", d.description, "' (rows 0 to ", n0_ - 1, ", columns 0 to ", n1_ - 1,
           ", in the data's own (stored) frame)");
    premasked_[std::size_t(fft_index(d, r, c))] = 1;
  }
  if (!d.source_mask.empty()) {
    if (d.source_mask.size() != m)
      fail(TYCHO_ERR_INTERNAL, "the source's detector mask has ", d.source_mask.size(), " pixels, the detector ", m);
    for (int64_t s = 0; s < n0_ * n1_; ++s)
      if (d.source_mask[std::size_t(s)]) premasked_[std::size_t(fft_index(d, s / n1_, s % n1_))] = 1;
  }
}
bad_pixel_scan::~bad_pixel_scan() = default;

template <class T>
void bad_pixel_scan::add(const T* p, int64_t pattern) {
  const int64_t m = n0_ * n1_;
  const bool check_saturation = settings_.saturation_value.has_value();
  const double saturation = settings_.saturation_value.value_or(0);
  rank_findings& mine = f_->mine;
  const bool detect = !mine.sum.empty();
  double* sum = detect ? mine.sum.data() : nullptr;
  float* max = detect ? mine.max.data() : nullptr;
  const uint8_t* premasked = premasked_.data();
  bool any = false;
  float min_positive = mine.min_positive;
  for (int64_t k = 0; k < m; ++k) {
    if (premasked[k]) continue;  // masked anyway: its values are not looked at
    const float v = float(p[k]);  // a uint16 count is its float32 exactly
    const bool nonfinite = !std::isfinite(v);
    const bool saturated = !nonfinite && check_saturation && double(v) >= saturation;
    if (!nonfinite && !saturated) {
      if (detect) {
        sum[k] += double(v);
        max[k] = std::max(max[k], v);
        if (v > 0 && v < min_positive) min_positive = v;
      }
      continue;
    }
    any = true;
    mine.nonfinite += nonfinite;
    mine.saturated += saturated;
    if (!mine.bad[std::size_t(k)]) {
      mine.bad[std::size_t(k)] = 1;
      f_->first_seen[std::size_t(k)] = {pattern, v};
    }
  }
  mine.min_positive = min_positive;
  mine.patterns += any;
  ++mine.added;
}
template void bad_pixel_scan::add<float>(const float*, int64_t);
template void bad_pixel_scan::add<uint16_t>(const uint16_t*, int64_t);

std::string bad_pixel_scan::finish(dataset& d, const gather_texts& gather) {
  const int64_t n0 = n0_, n1 = n1_, m = n0 * n1;
  const bad_pixel_settings& settings = settings_;
  const bool check_saturation = settings.saturation_value.has_value();
  const double saturation = settings.saturation_value.value_or(0);
  rank_findings& mine = f_->mine;
  for (int64_t k = 0; k < m; ++k)
    if (mine.bad[std::size_t(k)]) {
      mine.examples[stored_index(d, k)] = f_->first_seen[std::size_t(k)];
      if (mine.examples.size() > k_examples) mine.examples.erase(std::prev(mine.examples.end()));
    }

  rank_findings all = mine;
  if (gather) {
    all = rank_findings{};
    all.bad.assign(std::size_t(m), 0);
    if (settings.detect) {
      all.sum.assign(std::size_t(m), 0.0);
      all.max.assign(std::size_t(m), 0.0f);
    }
    for (const std::string& text : gather(mine.to_text())) all.add(rank_findings::from_text(text, std::size_t(m)));
  }

  bad_pixel_summary& sum = d.bad_pixels;
  sum = bad_pixel_summary{};
  sum.saturation_value = settings.saturation_value;
  sum.max_masked_fraction = settings.max_masked_fraction;
  sum.nonfinite_values = all.nonfinite;
  sum.saturated_values = all.saturated;
  sum.patterns = all.patterns;
  sum.value_pixels = std::count(all.bad.begin(), all.bad.end(), uint8_t(1));
  sum.given = settings.given;
  std::sort(sum.given.begin(), sum.given.end());
  sum.given.erase(std::unique(sum.given.begin(), sum.given.end()), sum.given.end());
  for (uint8_t v : d.source_mask) sum.detector_mask_pixels += v != 0;
  sum.detect = settings.detect;
  sum.threshold = bad_pixel_threshold;

  // The search, among the pixels no other cause masks.
  std::vector<uint8_t> bad = all.bad;
  for (int64_t k = 0; k < m; ++k) bad[std::size_t(k)] |= premasked_[std::size_t(k)];
  if (settings.detect) {
    const DLDataType t = d.info.stored_dtype;
    const double quantum = t.code == kDLUInt || t.code == kDLInt ? 1.0
                           : std::isfinite(all.min_positive)      ? double(all.min_positive)
                                                                  : 0.0;
    detection found = detect_dead_and_hot(d, all.sum, all.max, all.added, quantum, bad);
    sum.compared_pixels = found.compared;
    sum.scale_mean = found.scale_mean;
    sum.scale_dead = found.scale_dead;
    sum.scale_max = found.scale_max;
    for (int64_t s : found.stored) bad[std::size_t(fft_index(d, s / n1, s % n1))] = 1;
    sum.found = std::move(found.found);
  }
  const int64_t masked = std::count(bad.begin(), bad.end(), uint8_t(1));
  sum.masked_pixels = masked;

  // What was decided, in words: the log's.
  const double fraction = double(masked) / double(m);
  const std::string saturation_text =
      check_saturation ? cat("values >= [preprocess] saturation_value = ", number_text(saturation),
                             dtype_maximum(d.info.stored_dtype) == settings.saturation_value
                                 ? cat(" (the maximum of the stored ", dtype_text(d.info.stored_dtype), ")")
                                 : std::string())
                       : std::string("no saturation check ([preprocess] saturation_value = false)");
  std::vector<std::string> parts;
  if (sum.value_pixels > 0) {
    std::string pixels_text;
    for (const auto& [pixel, e] : all.examples)
      pixels_text += cat(pixels_text.empty() ? "" : ", ", "(", pixel / n1, ", ", pixel % n1, ") = ",
                         number_text(e.value), " in pattern ", e.pattern);
    if (sum.value_pixels > int64_t(all.examples.size())) pixels_text += ", ...";
    parts.push_back(cat(sum.value_pixels, " with bad values in at least one of ", all.patterns, " patterns: ",
                        all.nonfinite, " non-finite values (NaN, inf), ", all.saturated, " saturated values (",
                        saturation_text, "); first pixels (row, column) of the stored detector: ", pixels_text));
  }
  if (!sum.given.empty()) {
    std::string listed;
    for (std::size_t i = 0; i < sum.given.size() && i < 10; ++i)
      listed += cat(i ? ", " : "", "(", sum.given[i][0], ", ", sum.given[i][1], ")");
    if (sum.given.size() > 10) listed += ", ...";
    parts.push_back(cat(sum.given.size(), " given in [preprocess] bad_pixels: ", listed));
  }
  if (sum.detector_mask_pixels > 0)
    parts.push_back(cat(sum.detector_mask_pixels, " marked bad by the detector's own mask, as the '", d.source_name,
                        "' source reads it"));
  if (!sum.found.empty()) {
    int64_t dead = 0, hot = 0, spikes = 0;
    std::string listed;
    for (std::size_t i = 0; i < sum.found.size(); ++i) {
      const found_bad_pixel& f = sum.found[i];
      (f.reason == "dead" ? dead : f.reason == "hot" ? hot : spikes) += 1;
      if (i < 10) listed += cat(i ? ", " : "", found_text(f));
    }
    if (sum.found.size() > 10) listed += ", ...";
    parts.push_back(cat(sum.found.size(), " found in the data (", dead, " dead, ", hot, " hot, ", spikes,
                        " hot in some patterns; [preprocess] detect_bad_pixels = false leaves them): ", listed));
  }
  char percent[32];
  std::snprintf(percent, sizeof percent, "%.3g", 100 * fraction);
  std::string found = cat(masked, " of ", m, " detector pixels (", percent, " %) are bad: ");
  for (std::size_t i = 0; i < parts.size(); ++i) found += (i ? "; " : "") + parts[i];
  if (masked == m)
    fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "': no valid detector pixel is left: ", found);
  if (fraction > settings.max_masked_fraction) {
    std::string hint;
    if (sum.value_pixels > 0)
      hint = check_saturation ? "Is the saturation value right? Set [preprocess] saturation_value (false: no saturation "
                                "check), or raise max_masked_fraction if so many pixels are really bad"
                              : "Raise [preprocess] max_masked_fraction if so many pixels are really bad";
    else
      hint = cat("Raise [preprocess] max_masked_fraction if so many pixels are really bad",
                 sum.found.empty() ? "" : ", or set detect_bad_pixels = false if the search is wrong about these data");
    fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "': ", found, "; that is more than [preprocess] "
         "max_masked_fraction = ", number_text(settings.max_masked_fraction), " of the detector. ", hint);
  }
  bad_ = std::move(bad);
  // The search's outcome, said even when it found nothing.
  if (!settings.detect)
    sum.note = "dead and hot detector pixels not searched for ([preprocess] detect_bad_pixels = false)";
  else if (sum.compared_pixels < bad_pixel_least_compared)
    sum.note = cat("dead and hot detector pixels not searched for: only ", sum.compared_pixels,
                   " pixels with enough neighbours to compare (at least ", bad_pixel_least_compared, " needed)");
  else
    sum.note = cat("searched ", sum.compared_pixels, " detector pixels over ", all.added, " patterns for dead and hot ones ",
                   "(each against its 3 x 3 neighbours, flagged beyond ", number_text(bad_pixel_threshold),
                   " robust standard deviations): ", sum.found.empty() ? std::string("none found")
                                                                        : cat(sum.found.size(), " found"));
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
  if (par.is_root()) log_bad_pixels(d, warning);
}

void log_bad_pixels(const dataset& d, const std::string& warning) {
  if (!d.bad_pixels.note.empty()) log_info("preprocess", d.bad_pixels.note);
  if (!warning.empty()) log_warning("preprocess", warning);
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
  j["value_pixels"] = s.value_pixels;
  nlohmann::ordered_json given = nlohmann::ordered_json::array();
  for (const auto& [r, c] : s.given) given.push_back({r, c});
  j["given"] = std::move(given);
  j["detector_mask_pixels"] = s.detector_mask_pixels;
  nlohmann::ordered_json detection;
  detection["enabled"] = s.detect;
  detection["compared_pixels"] = s.compared_pixels;
  detection["threshold"] = s.threshold;
  detection["scale_mean"] = s.scale_mean;
  detection["scale_dead"] = s.scale_dead;
  detection["scale_max"] = s.scale_max;
  nlohmann::ordered_json found = nlohmann::ordered_json::array();
  for (const found_bad_pixel& f : s.found) {
    nlohmann::ordered_json p;
    p["pixel"] = {f.row, f.column};
    p["reason"] = f.reason;
    p["mean"] = f.mean;
    p["neighbours_mean"] = f.neighbours_mean;
    p["max"] = f.max;
    p["neighbours_max"] = f.neighbours_max;
    p["score"] = f.score;
    found.push_back(std::move(p));
  }
  detection["found"] = std::move(found);
  j["detection"] = std::move(detection);
  return j.dump();
}

}  // namespace tycho::host
