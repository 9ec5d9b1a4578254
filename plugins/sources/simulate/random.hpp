// Counter-based random numbers for the simulator: every stream is a pure function of
// (seed, stream, index), so the object and each pattern's noise do not depend on the order or
// the split of the reads, nor on the thread that computes them. Fixed definitions (splitmix64,
// xoshiro256**, Box–Muller, numpy's PTRS Poisson sampler): identical on every platform, unlike
// the <random> distributions.
#pragma once

#include <cmath>
#include <cstdint>

namespace tycho::simulate {

// splitmix64 step: a well-mixed 64-bit value from a 64-bit state.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Random streams tagged by what they are for.
enum class stream : uint64_t { object = 1, noise = 2 };

// xoshiro256**, seeded from (seed, stream, index) through splitmix64.
class rng {
 public:
  rng(uint64_t seed, stream which, uint64_t index) {
    uint64_t h = seed;
    h = splitmix64(h) ^ (uint64_t(which) * 0xD1B54A32D192ED03ull);
    h = splitmix64(h) ^ index;
    uint64_t st = splitmix64(h);
    for (auto& w : s_) w = splitmix64(st);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1), 53 bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  // Standard normal (Box–Muller, one value per call).
  double normal() {
    double u1 = 1.0 - uniform();  // (0, 1]
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Poisson(lambda): inversion below 10, else Hörmann's transformed rejection (PTRS), as numpy.
  double poisson(double lambda);

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// log Γ(x) for x ≥ 1 (numpy's random_loggam): pure, so safe from many threads (std::lgamma
// may write the global `signgam`).
inline double log_gamma(double x) {
  static constexpr double a[10] = {8.333333333333333e-02, -2.777777777777778e-03,
                                   7.936507936507937e-04, -5.952380952380952e-04,
                                   8.417508417508418e-04, -1.917526917526918e-03,
                                   6.410256410256410e-03, -2.955065359477124e-02,
                                   1.796443723688307e-01, -1.39243221690590e+00};
  if (x == 1.0 || x == 2.0) return 0.0;
  double x0 = x;
  int64_t n = 0;
  if (x <= 7.0) {
    n = int64_t(7 - x);
    x0 = x + double(n);
  }
  const double x2 = 1.0 / (x0 * x0);
  double gl0 = a[9];
  for (int k = 8; k >= 0; --k) gl0 = gl0 * x2 + a[k];
  double gl = gl0 / x0 + 0.5 * 1.8378770664093453 + (x0 - 0.5) * std::log(x0) - x0;
  if (x <= 7.0)
    for (int64_t k = 1; k <= n; ++k) {
      gl -= std::log(x0 - 1.0);
      x0 -= 1.0;
    }
  return gl;
}

inline double rng::poisson(double lambda) {
  if (!(lambda > 0)) return 0.0;
  if (lambda < 10.0) {
    // Inversion by sequential search.
    const double u = uniform();
    double p = std::exp(-lambda), cdf = p;
    int64_t k = 0;
    while (u > cdf && k < 1000) {
      ++k;
      p *= lambda / double(k);
      cdf += p;
    }
    return double(k);
  }
  const double slam = std::sqrt(lambda), loglam = std::log(lambda);
  const double b = 0.931 + 2.53 * slam;
  const double a = -0.059 + 0.02483 * b;
  const double invalpha = 1.1239 + 1.1328 / (b - 3.4);
  const double vr = 0.9277 - 3.6224 / (b - 2);
  for (;;) {
    const double U = uniform() - 0.5, V = uniform();
    const double us = 0.5 - std::fabs(U);
    const double k = std::floor((2 * a / us + b) * U + lambda + 0.43);
    if (us >= 0.07 && V <= vr) return k;
    if (k < 0 || (us < 0.013 && V > us)) continue;
    if (std::log(V) + std::log(invalpha) - std::log(a / (us * us) + b) <=
        -lambda + k * loglam - log_gamma(k + 1))
      return k;
  }
}

}  // namespace tycho::simulate
