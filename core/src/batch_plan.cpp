#include "tycho/core/batch_plan.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "tycho/core/error.hpp"
#include "tycho/core/geometry.hpp"

namespace tycho {

batching parse_batching(const std::string& name, const std::string& key) {
  if (name == "random") return batching::random;
  if (name == "compact") return batching::compact;
  fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' must be \"random\" or \"compact\", got \"", name, "\"");
}

const char* batching_name(batching kind) { return kind == batching::compact ? "compact" : "random"; }

std::vector<int64_t> held_out_patterns(int64_t patterns, double fraction, uint64_t seed, int64_t fold,
                                       const std::string& key) {
  if (!(fraction >= 0 && fraction <= 0.5))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' must be a number from 0 to 0.5, got ", fraction);
  const int64_t count = int64_t(std::llround(fraction * double(patterns)));
  if (count == 0) return {};
  if (count >= patterns)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' = ", fraction, " holds out all ", patterns,
         " patterns; at least one must remain in the batches");
  if (fold < 0 || fold >= patterns / count)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '[reconstruct] validation_fold' must be from 0 to ", patterns / count - 1, " (", patterns / count,
         " disjoint blocks of ", count, " of the ", patterns, " patterns), got ", fold);
  std::vector<int64_t> order = epoch_permutation(patterns, seed, -2);
  std::vector<int64_t> out(order.begin() + fold * count, order.begin() + (fold + 1) * count);
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t hilbert_index(uint32_t x, uint32_t y) {
  constexpr uint32_t n = 1u << 16;
  uint64_t d = 0;
  for (uint32_t s = n / 2; s > 0; s /= 2) {
    const uint32_t rx = (x & s) > 0, ry = (y & s) > 0;
    d += uint64_t(s) * uint64_t(s) * uint64_t((3 * rx) ^ ry);
    if (ry == 0) {  // rotate the quadrant so the curve continues
      if (rx == 1) {
        x = n - 1 - x;
        y = n - 1 - y;
      }
      std::swap(x, y);
    }
  }
  return d;
}

batch_plan::batch_plan(int64_t patterns, int64_t batch_size, uint64_t seed, batching kind,
                       const std::vector<double>& positions_px)
    : patterns_(patterns), batch_size_(batch_size), seed_(seed), kind_(kind) {
  if (patterns < 0 || batch_size <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "batch plan: ", patterns, " patterns in batches of ", batch_size);
  batches_ = (patterns + batch_size - 1) / batch_size;
  if (kind != batching::compact) return;
  if (positions_px.size() != std::size_t(2 * patterns))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "batch plan: compact batches need the ", patterns, " positions, got ",
         positions_px.size() / 2);
  // The positions' bounding box onto the 2^16 grid, one scale for both axes (px are square
  // enough: an anisotropic scan keeps its aspect, so the blocks stay compact in px).
  double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
  for (int64_t j = 0; j < patterns; ++j)
    for (int a = 0; a < 2; ++a) {
      const double p = positions_px[std::size_t(2 * j + a)];
      if (!std::isfinite(p)) fail(TYCHO_ERR_INVALID_ARGUMENT, "batch plan: position ", j, " is not finite");
      lo[a] = std::min(lo[a], p);
      hi[a] = std::max(hi[a], p);
    }
  const double extent = patterns > 0 ? std::max(hi[0] - lo[0], hi[1] - lo[1]) : 0.0;
  const double scale = extent > 0 ? 65535.0 / extent : 0.0;
  std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<std::size_t>(patterns));
  for (int64_t j = 0; j < patterns; ++j) {
    const auto q = [&](int a) {
      return uint32_t(std::clamp(std::lround((positions_px[std::size_t(2 * j + a)] - lo[a]) * scale), 0L, 65535L));
    };
    keyed[std::size_t(j)] = {hilbert_index(q(0), q(1)), j};
  }
  std::sort(keyed.begin(), keyed.end());  // ties by index: the same order everywhere
  hilbert_order_.resize(std::size_t(patterns));
  for (int64_t j = 0; j < patterns; ++j) hilbert_order_[std::size_t(j)] = keyed[std::size_t(j)].second;
}

int64_t batch_plan::start_of(int64_t k) const {
  // ⌊k P / B⌋ without overflow for any P, B that fit int64 (k ≤ B ≤ P).
  if (batches_ == 0) return 0;
  const int64_t q = patterns_ / batches_, r = patterns_ % batches_;
  return k * q + (k * r) / batches_;
}

void batch_plan::prepare(int64_t epoch) {
  if (epoch == epoch_) return;
  epoch_ = epoch;
  starts_.assign(std::size_t(batches_ + 1), 0);
  if (kind_ == batching::random) {
    order_ = epoch_permutation(patterns_, seed_, epoch);
    for (int64_t k = 0; k <= batches_; ++k) starts_[std::size_t(k)] = start_of(k);
    return;
  }
  const std::vector<int64_t> blocks = epoch_permutation(batches_, seed_, epoch);
  order_.clear();
  order_.reserve(std::size_t(patterns_));
  for (int64_t k = 0; k < batches_; ++k) {
    const int64_t b = blocks[std::size_t(k)];
    const int64_t first = start_of(b), last = start_of(b + 1);
    starts_[std::size_t(k)] = int64_t(order_.size());
    order_.insert(order_.end(), hilbert_order_.begin() + first, hilbert_order_.begin() + last);
  }
  starts_[std::size_t(batches_)] = patterns_;
}

const int64_t* batch_plan::batch(int64_t epoch, int64_t k, int64_t& count) {
  if (k < 0 || k >= batches_) fail(TYCHO_ERR_INTERNAL, "batch plan: batch ", k, " of ", batches_);
  prepare(epoch);
  count = starts_[std::size_t(k + 1)] - starts_[std::size_t(k)];
  return order_.data() + starts_[std::size_t(k)];
}

}  // namespace tycho
