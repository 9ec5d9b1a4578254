// Deterministic sums for engines (header-only, not included by sdk.hpp): the same bits for any
// number of ranks, threads and devices (docs/guarantees.md, "The same bits on any number of ranks").
//
// A float sum depends on its order; an integer sum does not. So an engine in deterministic mode
// ([reconstruct] deterministic = true) quantises every per-position contribution to a gradient
// (each position's share of ∂L/∂O*, ∂L/∂P*, ...) to an int64 on a grid fixed before the batch,
// adds the integers (threads, then ranks through the reducer: MPI_INT64_T, ncclInt64, on a GPU
// integer atomics), and converts the total to floating point once, before the optimizer. Each
// contribution is rounded on its own, to a grid the same on every rank, so the total is one
// number whatever cuts the batch into pieces; the conversion is a fixed function of it. The loss
// (a double per pattern) is summed exactly (exact_sum: no grid at all).
//
// The grid of a tensor is its quantum 2^g: a value v becomes n = round(v · 2^-g) (quantise()).
// What bounds g, and what happens when the bound is wrong (grid_schedule):
// - each n must stay below 2^value_bits in modulus, value_bits = min(51, 62 − ⌈log2 N⌉) for N
//   contributions to one element per batch (positions × modes, from the configured global batch
//   size): 51 for the exact rounding trick of quantise(), and then N of them add up below 2^62,
//   one bit short of int64's range (the overflow margin). So g must satisfy max|v| < 2^(g + value_bits).
// - the bound on max|v| is chosen before the batch: within an iteration, the largest |v| of the
//   previous batch (over every rank) with 2^3 of headroom (a quantum 2^-47 of it); at the start of
//   an iteration (and of a run), a coarse grid: g a multiple of 16 with 2^2 to 2^17 of headroom,
//   which the sums must confirm (below).
// - after the batch the sums carry, per tensor, a one-hot of every rank's largest |v| exponent
//   and a count of NaN and infinite values; every rank reads the same totals and decides alike
//   (settle()): if a value reached 2^(g + value_bits) the batch's integers are not trusted (never
//   a silent wrap): g is raised to fit the largest |v| found and the batch is computed again with
//   the same contributions (the float computation does not depend on g) and so the same maximum,
//   which then fits. At the start of an iteration the grid must also be the coarse grid of the
//   batch's own largest |v|, else the batch is computed again on that grid: so the grid of every
//   batch depends only on the iteration's own data, and a run resumed from a saved iteration (or
//   one that ran on another number of ranks) quantises alike. The coarse grid moves only when
//   the largest contribution crosses a power of 2^16, so that second computation is rare (the
//   run's log counts them).
// - non-finite values: the sums are not converted; the engine writes NaN gradients and loss, as
//   a float sum would have (the run then stops on its non-finite loss).
// Precision: every sum is exact; each contribution is rounded to its grid, a 2^-47 to 2^-33 of the
// batch's largest |v| (below float32's 2^-24 relative rounding for anything within 2^-9 to 2^-23
// of the largest; a float64 engine keeps 47 bits there instead of 53).
//
// The sums the host reduces are one int64 tensor (the engine's TYCHO_TENSOR_FIXED_POINT_SUMS):
// the engine's grid-quantised arrays first, then the `header` below. Everything here is plain
// C++17 on int64 and double, so it compiles for the host code of a CUDA engine too.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace tycho::sdk::fixed_point {

// ---------------------------------------------------------------- values on a grid

// n = round(scaled), scaled = v · 2^-g, by adding and subtracting 1.5·2^52 in double: the sum
// lies in [2^52, 2^53), where the spacing of doubles is 1, so the addition rounds to the nearest
// integer (ties to even) exactly and the difference of the bit patterns is that integer, for
// |scaled| < 2^51. Larger values give an unspecified integer (no undefined behaviour): the
// grid's check then refuses the sums. A vectorising compiler turns this into two additions.
inline constexpr double k_magic = 6755399441055744.0;  // 1.5 · 2^52
inline constexpr int64_t k_magic_bits = 0x4338000000000000;  // its bit pattern
inline constexpr int k_most_value_bits = 51;
inline int64_t quantise(double scaled) {
  const double shifted = scaled + k_magic;
  int64_t bits = 0;
  std::memcpy(&bits, &shifted, sizeof bits);
  return int64_t(uint64_t(bits) - uint64_t(k_magic_bits));  // modulo 2^64: no overflow for huge |scaled|
}

// a + b modulo 2^64: sums of quantised values may pass the int64 range on a batch whose grid is
// too fine (the grid's check then refuses the sums); the wrap must be defined behaviour, and the
// total is exact whenever it fits, in any order of the additions.
inline int64_t wrapping_add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
// 2^-g, the factor that takes a value to its grid (g within grid_schedule's clamp: exact).
inline double scale_of(int g) { return std::ldexp(1.0, -g); }
// An integer total on grid g as a double: rounded once to 53 bits, then scaled exactly.
inline double value_of(int64_t n, int g) { return std::ldexp(double(n), g); }

// ---------------------------------------------------------------- the grids of a batch

// Bits of n per value for `contributions` (≥ 1) values added into one element: N · 2^bits < 2^62.
inline int value_bits_for(int64_t contributions) {
  int log2n = 0;
  while (log2n < 62 && (int64_t(1) << log2n) < contributions) ++log2n;
  return std::clamp(62 - log2n, 8, k_most_value_bits);
}

// ilogb of a finite double > 0, or of the largest |v| a tensor held on one rank.
inline constexpr int k_least_exponent = -1100;  // below every finite double's ilogb (−1074)
inline constexpr int k_exponent_buckets = 2200;  // [−1100, 1100): every ilogb, plus g's reach

// What the reduced sums say about one tensor, the same on every rank.
struct tensor_report {
  bool any = false;       // some rank quantised a nonzero value
  int max_exponent = 0;   // ilogb of the largest |v| over every rank (when any)
  int64_t non_finite = 0; // NaN or infinite values, over every rank
};

// The grid of each tensor before each batch, and whether a batch's sums stand (the rules at the
// top of this file). One per engine; every rank's instance goes through the same states.
class grid_schedule {
 public:
  static constexpr int k_coarse_step = 16;     // grids that start an iteration: multiples of 16
  static constexpr int k_coarse_headroom = 2;  // ... at least 2^2 above their batch's largest |v|
  static constexpr int k_headroom = 3;         // within an iteration: 2^3 above the last batch's
  static constexpr int k_least_grid = -1000, k_most_grid = 900;  // 2^-g stays a normal double

  grid_schedule() = default;
  // `tensors` tensors, `contributions` values per element per batch at most (positions × modes).
  grid_schedule(int tensors, int64_t contributions)
      : bits_(value_bits_for(contributions)), grid_(static_cast<std::size_t>(tensors), 0),
        guess_(static_cast<std::size_t>(tensors), 0) {
    for (int& g : guess_) g = coarse(-20);  // no history: a guess, which the first batch corrects
    grid_ = guess_;
  }
  int tensors() const { return int(grid_.size()); }
  int value_bits() const { return bits_; }
  // The quantum exponent of tensor t for the batch about to be computed.
  int grid(int t) const { return grid_[std::size_t(t)]; }
  // Whether the batch about to be computed starts an iteration's chain of grids.
  bool starts_chain() const { return reset_; }
  // The batches computed again so far (the coarse grid moved, or a value overflowed).
  int64_t recomputed() const { return recomputed_; }

  // After the batch's sums are complete (reduced over every rank): true when they stand (the
  // engine converts them; the next batch's grids are set, and a new chain starts after a batch
  // that `ends_iteration`); false when the batch must be computed again on the grids now set.
  // Non-finite values: true (the engine writes NaN), grids unchanged.
  bool settle(const std::vector<tensor_report>& reports, bool ends_iteration) {
    for (const auto& r : reports)
      if (r.non_finite > 0) return true;
    bool again = false;
    for (std::size_t t = 0; t < grid_.size(); ++t) {
      const tensor_report& r = reports[t];
      if (!r.any) continue;
      const int wanted = reset_ ? coarse(r.max_exponent) : grid_[t];
      const bool fits = r.max_exponent + 1 <= wanted + bits_;
      const int next = reset_ ? wanted : fits ? grid_[t] : fine(r.max_exponent);
      if (next != grid_[t]) {
        grid_[t] = next;
        again = true;
      }
    }
    if (again) {
      ++recomputed_;
      return false;
    }
    if (reset_) guess_ = grid_;  // the next iteration starts from this iteration's first grids
    for (std::size_t t = 0; t < grid_.size(); ++t)
      if (reports[t].any) grid_[t] = fine(reports[t].max_exponent);
    reset_ = ends_iteration;
    if (reset_) grid_ = guess_;
    return true;
  }

 private:
  // Headroom k_headroom above 2^(e+1) > max|v|: max|v| < 2^(g + bits − k_headroom).
  int fine(int e) const { return std::clamp(e + 1 + k_headroom - bits_, k_least_grid, k_most_grid); }
  int coarse(int e) const {
    const int least = e + 1 + k_coarse_headroom - bits_;
    const int g = least >= 0 ? (least + k_coarse_step - 1) / k_coarse_step * k_coarse_step
                             : -((-least) / k_coarse_step * k_coarse_step);
    return std::clamp(g, k_least_grid / k_coarse_step * k_coarse_step, k_most_grid / k_coarse_step * k_coarse_step);
  }
  int bits_ = k_most_value_bits;
  std::vector<int> grid_, guess_;
  bool reset_ = true;
  int64_t recomputed_ = 0;
};

// ---------------------------------------------------------------- exact sums of doubles

// Σ of finite doubles, exactly, in any order: a fixed-point number with 32-bit digits (each held
// in an int64, carries left for the end) from 2^-1152 to 2^1152, so every double falls on it
// whole (its 53 bits over at most three digits) and 2^31 of them add without overflow. For the
// loss: one value per pattern, so the cost does not matter. Non-finite values are counted.
class exact_sum {
 public:
  static constexpr int k_digits = 72;
  static constexpr int k_offset = 1152;  // the digits hold Σ d_i · 2^(32 i − 1152)
  static constexpr int k_words = k_digits + 1;  // as stored in a sums tensor: digits, non-finite count

  void add(double x) {
    if (!std::isfinite(x)) {
      ++non_finite_;
      return;
    }
    if (x == 0) return;
    int e = 0;
    const double m = std::frexp(x, &e);                // x = m · 2^e, 1/2 ≤ |m| < 1
    const int64_t mant = int64_t(std::ldexp(m, 53));   // exact: |mant| < 2^53
    const int low = e - 53 + k_offset;                 // the position of mant's lowest bit (≥ 26)
    const uint64_t a = uint64_t(mant < 0 ? -mant : mant);
    const int r = low % 32, first = low / 32;
    // The three 32-bit digits of a · 2^r (at most 85 bits).
    const uint64_t digit[3] = {(a << r) & 0xffffffffu, (a >> (32 - r)) & 0xffffffffu,
                               r == 0 ? 0u : (a >> (64 - r)) & 0xffffffffu};
    for (int k = 0; k < 3; ++k)
      digits_[std::size_t(first + k)] += mant < 0 ? -int64_t(digit[k]) : int64_t(digit[k]);
  }
  // Adds another sum (another thread's).
  void add(const exact_sum& o) {
    for (int i = 0; i < k_digits; ++i) digits_[std::size_t(i)] += o.digits_[std::size_t(i)];
    non_finite_ += o.non_finite_;
  }
  void clear() {
    digits_.fill(0);
    non_finite_ = 0;
  }
  int64_t non_finite() const { return non_finite_; }
  // To and from k_words int64 of a sums tensor (the reducer adds them as they are: exact).
  void store(int64_t* words) const {
    std::memcpy(words, digits_.data(), sizeof(int64_t) * k_digits);
    words[k_digits] = non_finite_;
  }
  static exact_sum load(const int64_t* words) {
    exact_sum s;
    std::memcpy(s.digits_.data(), words, sizeof(int64_t) * k_digits);
    s.non_finite_ = words[k_digits];
    return s;
  }
  // The sum as a double (NaN when a value was not finite): the top 64 bits of the exact total
  // with the rest folded into a sticky bit, rounded once. A fixed function of the exact total, so
  // the same bits for the same values added in any order.
  double value() const {
    if (non_finite_ > 0) return std::numeric_limits<double>::quiet_NaN();
    std::array<int64_t, k_digits> d = digits_;
    normalise(d);
    const bool negative = d[k_digits - 1] < 0;
    if (negative) {
      for (auto& x : d) x = -x;
      normalise(d);
    }
    int top = k_digits - 1;
    while (top >= 0 && d[std::size_t(top)] == 0) --top;
    if (top < 0) return 0.0;
    // The 64 bits from the highest set bit down (of the top three digits, x = d2·2^64 + d1·2^32
    // + d0), and whether anything below them is set.
    auto digit = [&](int i) { return i >= 0 ? uint64_t(d[std::size_t(i)]) : uint64_t(0); };
    const uint64_t d2 = digit(top), d1 = digit(top - 1), d0 = digit(top - 2);
    int shift = 0;  // 0..31: brings d2's highest bit to bit 95
    while ((d2 << shift & 0x80000000u) == 0) ++shift;
    uint64_t mant = (d2 << 32 | d1) << shift;
    bool sticky = false;
    if (shift > 0) {
      mant |= d0 >> (32 - shift);
      sticky = (d0 & ((uint64_t(1) << (32 - shift)) - 1)) != 0;
    } else {
      sticky = d0 != 0;
    }
    for (int i = top - 3; i >= 0; --i) sticky = sticky || d[std::size_t(i)] != 0;
    if (sticky) mant |= 1u;  // decides ties and halfway cases alike (64 > 53 + 1 bits)
    const int exponent = 32 * (top - 2) - shift + 32 - k_offset;  // of mant's lowest bit
    const double v = std::ldexp(double(mant), exponent);
    return negative ? -v : v;
  }

 private:
  // Carries: every digit into [0, 2^32) but the top one, which keeps the sign.
  static void normalise(std::array<int64_t, k_digits>& d) {
    for (int i = 0; i + 1 < k_digits; ++i) {
      const int64_t carry = d[std::size_t(i)] >> 32;  // floor division (arithmetic shift)
      d[std::size_t(i)] -= carry * (int64_t(1) << 32);
      d[std::size_t(i) + 1] += carry;
    }
  }
  std::array<int64_t, k_digits> digits_{};
  int64_t non_finite_ = 0;
};

// ---------------------------------------------------------------- the header of a sums tensor

// After an engine's grid-quantised arrays, a sums tensor holds:
//   [0]                      1 from each rank: the number of ranks after the reduction
//   [1 + t]                  the grid exponent tensor t was quantised with, from each rank
//                            (after the reduction: ranks × g when every rank used g)
//   per tensor t, from 1 + T + t·(1 + k_exponent_buckets):
//                            NaN and infinite values; then a one-hot of the rank's largest |v|'s
//                            exponent (ilogb − k_least_exponent): after the reduction the highest
//                            bucket set is the largest over every rank
//   the loss: exact_sum::k_words
struct header {
  static constexpr std::size_t words(int tensors) { return loss_at(tensors) + exact_sum::k_words; }
  static constexpr std::size_t loss_at(int tensors) {
    return 1 + std::size_t(tensors) * (2 + std::size_t(k_exponent_buckets));
  }
  // One rank's part (`h` zeroed first, words(T) long): the grids it used, per tensor the
  // largest |v · 2^-g| it quantised (0: none; g its grid) and its non-finite count, and its loss.
  static void write(int64_t* h, const grid_schedule& grids, const double* largest_scaled, const int64_t* non_finite,
                    const exact_sum& loss) {
    const int T = grids.tensors();
    h[0] = 1;
    for (int t = 0; t < T; ++t) {
      h[1 + t] = grids.grid(t);
      int64_t* part = h + 1 + T + std::size_t(t) * (1 + k_exponent_buckets);
      part[0] = non_finite[t];
      const double v = largest_scaled[t];
      if (v > 0) {  // ilogb of the value itself: of the scaled one, plus g (an infinite one: the top)
        const int e = std::isfinite(v) ? std::ilogb(v) + grids.grid(t) : k_least_exponent + k_exponent_buckets - 1;
        part[1 + (std::clamp(e, k_least_exponent, k_least_exponent + k_exponent_buckets - 1) - k_least_exponent)] = 1;
      }
    }
    loss.store(h + loss_at(T));
  }
  // What every rank reads from the reduced header. Throws (via the caller's check) when the
  // ranks did not quantise on the same grids: the engines of a run disagree.
  static std::vector<tensor_report> read(const int64_t* h, const grid_schedule& grids, bool& same_grids) {
    const int T = grids.tensors();
    std::vector<tensor_report> out(static_cast<std::size_t>(T));
    same_grids = h[0] >= 1;
    for (int t = 0; t < T; ++t) {
      same_grids = same_grids && h[1 + t] == h[0] * int64_t(grids.grid(t));
      const int64_t* part = h + 1 + T + std::size_t(t) * (1 + k_exponent_buckets);
      tensor_report& r = out[std::size_t(t)];
      r.non_finite = part[0];
      for (int b = k_exponent_buckets - 1; b >= 0; --b)
        if (part[1 + b] != 0) {
          r.any = true;
          r.max_exponent = b + k_least_exponent;
          break;
        }
    }
    return out;
  }
  static exact_sum loss(const int64_t* h, int tensors) {
    return exact_sum::load(h + loss_at(tensors));
  }
};

}  // namespace tycho::sdk::fixed_point
