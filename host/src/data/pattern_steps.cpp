#include "data/pattern_steps.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "data/detector_padding.hpp"

namespace tycho::host {

bool quarter_turns_of(double deg, int& turns) {
  const double q = deg / 90.0;
  const double r = std::round(q);
  if (std::abs(q - r) > 1e-9) return false;
  turns = int(((int64_t(r) % 4) + 4) % 4);
  return true;
}

// out(k) = in(T R(−θ) k), θ = turns · 90°, T the transpose when `transpose` (the convention of
// rotation_estimate). The output is (m0, m1) = (n1, n0) when the axes swap. An exact permutation
// (−f of the Nyquist frequency of an even axis is itself, modulo n).
namespace {
template <class T>
void orient(const T* in, int64_t n0, int64_t n1, T* out, int turns, bool transpose) {
  const bool swap = (turns % 2 == 1) != transpose;
  const int64_t m0 = swap ? n1 : n0, m1 = swap ? n0 : n1;
  for (int64_t i = 0; i < m0; ++i) {
    const int64_t k0 = fft_frequency(i, m0);
    for (int64_t j = 0; j < m1; ++j) {
      const int64_t k1 = fft_frequency(j, m1);
      // R(−θ) k for θ = 0, 90, 180, 270: (k0, k1), (k1, −k0), (−k0, −k1), (−k1, k0).
      int64_t a = k0, b = k1;
      switch (turns) {
        case 1: a = k1; b = -k0; break;
        case 2: a = -k0; b = -k1; break;
        case 3: a = -k1; b = k0; break;
        default: break;
      }
      if (transpose) std::swap(a, b);
      out[i * m1 + j] = in[fft_index(a, n0) * n1 + fft_index(b, n1)];
    }
  }
}
}  // namespace

void orient_pattern(const float* in, int64_t n0, int64_t n1, float* out, int turns, bool transpose) {
  orient(in, n0, n1, out, turns, transpose);
}

void orient_counts(const uint16_t* in, int64_t n0, int64_t n1, uint16_t* out, int turns, bool transpose) {
  orient(in, n0, n1, out, turns, transpose);
}

void orient_mask(const uint8_t* in, int64_t n0, int64_t n1, uint8_t* out, int turns, bool transpose) {
  orient(in, n0, n1, out, turns, transpose);
}

void pattern_steps::set_shape(const preprocess_settings& s, std::array<int64_t, 2> detector) {
  in = detector;
  cropped = s.crop[0] > 0 ? s.crop : detector;
  binning = s.binning;
  binned = {cropped[0] / binning, cropped[1] / binning};
  out = binned;
  to0.clear();
  to1.clear();
  if (binning <= 1) return;
  // Block c' = ⌊c / b⌋ of centred index c, back in FFT order.
  const int64_t n0 = cropped[0], n1 = cropped[1], m0 = binned[0], m1 = binned[1], b = binning;
  to0.resize(std::size_t(n0));
  to1.resize(std::size_t(n1));
  for (int64_t i = 0; i < n0; ++i) to0[std::size_t(i)] = ((i + n0 / 2) % n0 / b - m0 / 2 + m0) % m0;
  for (int64_t j = 0; j < n1; ++j) to1[std::size_t(j)] = ((j + n1 / 2) % n1 / b - m1 / 2 + m1) % m1;
}

void pattern_steps::set_placement(const preprocess_settings& s, const com_fit_result& f, int64_t ry) {
  recentre = s.recentre;
  fit = f;
  scan_ry = ry;
  // The scan's rotation moves the positions (scan_map.hpp), never the patterns: only a transposed
  // detector is reordered here, so the object keeps the scan's handedness.
  turns = 0;
  transpose = s.transpose;
  const bool swap = (turns % 2 == 1) != transpose;
  out = swap ? std::array<int64_t, 2>{binned[1], binned[0]} : binned;
}

const float* pattern_steps::shape(const float* raw, pattern_scratch& w) const {
  const float* p = raw;
  // 1. crop: the centred (M0, M1) pixels, frequencies −⌊M/2⌋ … ⌈M/2⌉ − 1, still FFT order.
  if (cropped != in) {
    const int64_t m0 = cropped[0], m1 = cropped[1], n0 = in[0], n1 = in[1];
    w.a.resize(std::size_t(m0 * m1));
    for (int64_t i = 0; i < m0; ++i)
      for (int64_t j = 0; j < m1; ++j)
        w.a[std::size_t(i * m1 + j)] = p[fft_index(fft_frequency(i, m0), n0) * n1 + fft_index(fft_frequency(j, m1), n1)];
    p = w.a.data();
  }
  // 2. binning: sum b x b pixels of the centred pattern, in double, in the pixels' order.
  if (binning > 1) {
    const int64_t n0 = cropped[0], n1 = cropped[1], m1 = binned[1], m = binned[0] * binned[1];
    w.acc.assign(std::size_t(m), 0.0);
    for (int64_t i = 0; i < n0; ++i)
      for (int64_t j = 0; j < n1; ++j)
        w.acc[std::size_t(to0[std::size_t(i)] * m1 + to1[std::size_t(j)])] += p[i * n1 + j];
    w.b.resize(std::size_t(m));
    for (int64_t k = 0; k < m; ++k) w.b[std::size_t(k)] = float(w.acc[std::size_t(k)]);
    p = w.b.data();
  }
  return p;
}

std::array<int64_t, 2> pattern_steps::shift(int64_t j) const {
  const double i = double(j / scan_ry), k = double(j % scan_ry);
  return {int64_t(std::llround(fit.at(0, i, k))), int64_t(std::llround(fit.at(1, i, k)))};
}

void pattern_steps::transform(const float* raw, int64_t j, float* dst, pattern_scratch& w) const {
  const float* p = shape(raw, w);
  const int64_t n0 = binned[0], n1 = binned[1], m = n0 * n1;
  // Where the shaped pattern lies: in w.a (crop only) or w.b (binning); recentre reads it from
  // the other buffer.
  std::vector<float>& free_buffer = p == w.b.data() ? w.a : w.b;
  // 6. recentre: shift by the fitted COM, rounded (pixels from outside are 0).
  if (recentre) {
    const auto [s0, s1] = shift(j);
    if (s0 != 0 || s1 != 0) {
      free_buffer.resize(std::size_t(m));
      float* q = free_buffer.data();
      for (int64_t a = 0; a < n0; ++a) {
        const int64_t f0 = fft_frequency(a, n0) + s0;
        for (int64_t b = 0; b < n1; ++b) {
          const int64_t f1 = fft_frequency(b, n1) + s1;
          q[a * n1 + b] = has_frequency(f0, n0) && has_frequency(f1, n1) ? p[fft_index(f0, n0) * n1 + fft_index(f1, n1)]
                                                                         : 0.f;
        }
      }
      p = q;
    }
  }
  // 7. transpose and quarter turns: the pattern in scan axes.
  if (turns != 0 || transpose) {
    if (p == dst) {  // in place: from a copy
      std::vector<float>& copy = p == w.a.data() ? w.b : w.a;
      copy.assign(p, p + m);
      p = copy.data();
    }
    orient_pattern(p, n0, n1, dst, turns, transpose);
  } else if (p != dst) {
    std::copy(p, p + m, dst);
  }
}

std::array<double, 2> pattern_com(const float* p, int64_t n0, int64_t n1) {
  double tot = 0, m0 = 0, m1 = 0;
  for (int64_t i = 0; i < n0; ++i) {
    const double f0 = double(fft_frequency(i, n0));
    double row = 0, row1 = 0;
    for (int64_t j = 0; j < n1; ++j) {
      const double v = double(p[i * n1 + j]);
      row += v;
      row1 += v * double(fft_frequency(j, n1));
    }
    tot += row;
    m0 += f0 * row;
    m1 += row1;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (!(tot > 0)) return {nan, nan};
  return {m0 / tot, m1 / tot};
}

void normalise_pattern(float* p, int64_t m, double own, double mean) {
  if (!(own > 0)) return;
  const double f = mean / own;
  for (int64_t k = 0; k < m; ++k) p[k] = float(double(p[k]) * f);
}

}  // namespace tycho::host
