// Scalar helpers shared by the cuda engine's kernels and host code (and by the CPU-side tests,
// which check them against the cpu engine's formulas): complex float arithmetic, the DFT
// frequency of an index, the window origin of a probe centre, and the sub-pixel phase ramp.
// Plain C++ when not compiled by nvcc, so tests include this header without CUDA.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TYCHO_HD __host__ __device__
#else
#define TYCHO_HD
#endif

namespace tycho::cuda_math {

// complex64 as cuFFT stores it (cufftComplex = float2): 8 bytes, 8-byte aligned, so one
// 64-bit load or store per element.
struct alignas(8) c32 {
  float x, y;
};

TYCHO_HD inline c32 mul(c32 a, c32 b) { return {a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x}; }
TYCHO_HD inline c32 scale(c32 a, float s) { return {a.x * s, a.y * s}; }
TYCHO_HD inline c32 add(c32 a, c32 b) { return {a.x + b.x, a.y + b.y}; }
TYCHO_HD inline c32 conj(c32 a) { return {a.x, -a.y}; }
TYCHO_HD inline float norm(c32 a) { return a.x * a.x + a.y * a.y; }

// Signed frequency of DFT index k in natural order: 0, 1, ..., ⌈n/2⌉−1, −⌊n/2⌋, ..., −1.
TYCHO_HD inline int64_t frequency(int64_t k, int64_t n) { return k < (n + 1) / 2 ? k : k - n; }

// The window of a probe centre c (object pixels) along an axis of n window pixels: top-left
// t = c − n/2 (integer division, as the cpu engine), integer part ⌊t⌋ selects the object patch,
// the fraction t − ⌊t⌋ ∈ [0, 1) shifts the probe.
struct window_origin {
  int64_t index;
  double fraction;
};
TYCHO_HD inline window_origin origin_of(double centre, int64_t n) {
  const double t = centre - double(n / 2);
  const double f = floor(t);
  return {int64_t(f), t - f};
}

// Phase of exp(sign · 2πi f(k) δ / n), in double as the cpu engine computes it.
TYCHO_HD inline double ramp_phase(int64_t k, int64_t n, double delta, double sign) {
  return sign * 2.0 * 3.14159265358979323846 * double(frequency(k, n)) * delta / double(n);
}

// The ramp's value, rounded to complex64 like the cpu engine's tables.
TYCHO_HD inline c32 ramp(int64_t k, int64_t n, double delta, double sign) {
  const double p = ramp_phase(k, n, delta, sign);
  return {float(cos(p)), float(sin(p))};
}

}  // namespace tycho::cuda_math
