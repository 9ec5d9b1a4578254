// The simulation behind the `simulate` source: a known object and the SDK's probe, and the
// cpu engine's single-slice forward model evaluated pattern by pattern on demand. Holds the
// object and the probe only, never the patterns.
//
// Conventions (the cpu engine's, plugins/engines/cpu/cpu_engine.cpp, and docs/conventions.md):
// - positions are laid out as core's layout_object (core/src/geometry.cpp) does with
//   scan_origin_A = 0 and padding = object_padding_px: the probe centre of pattern (i, j) lies
//   at (p + N0/2 + i·step/dx0, p + N1/2 + j·step/dx1) object pixels, and the object is
//   ceil((R−1)·step/dx + 1) + N + 2p + 1 pixels along each axis;
// - the window's top-left corner is centre − N/2; its integer part selects the object patch,
//   its fractional part shifts the (centred) probe by a Fourier phase ramp;
// - Ψ = F[P_j · O_j] with the unitary DFT, I = |Ψ|², Σ|P|² = 1, so a pattern of a phase object
//   sums to 1 (fraction of the beam); then centred (fftshift), and with a dose, Poisson counts.
#pragma once

#include <fftw3.h>

#include <complex>
#include <cstdint>
#include <memory>
#include <vector>

#include "simulate_config.hpp"

namespace tycho::simulate {

using cfloat = std::complex<float>;

struct fftwf_deleter {
  void operator()(void* p) const { fftwf_free(p); }
};
using fft_buffer = std::unique_ptr<cfloat[], fftwf_deleter>;

class simulator {
 public:
  explicit simulator(settings s);
  ~simulator();
  simulator(const simulator&) = delete;
  simulator& operator=(const simulator&) = delete;

  const settings& config() const { return s_; }
  int64_t patterns() const { return s_.scan[0] * s_.scan[1]; }
  double pixel_A(int axis) const { return pixel_A_[axis]; }
  int64_t object_rows() const { return h_; }
  int64_t object_cols() const { return w_; }

  // Patterns [first, first + count) in scan order, centred, into dst (count, N0, N1).
  void read(int64_t first, int64_t count, float* dst) const;

 private:
  struct scratch;
  void make_object();
  void pattern(int64_t index, scratch& t, float* out) const;

  settings s_;
  int64_t n0_ = 0, n1_ = 0, h_ = 0, w_ = 0;
  double pixel_A_[2] = {0, 0};
  double first_px_[2] = {0, 0};
  std::vector<cfloat> object_;          // (h, w), exp(i φ)
  fft_buffer probe_spectrum_;           // F[P] / M in natural order (unnormalised FFTW)
  fftwf_plan forward_ = nullptr, backward_ = nullptr;
};

}  // namespace tycho::simulate
