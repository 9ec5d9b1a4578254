// A 2-D FFTW plan pair for one window shape and one precision (float: FFTW's single-precision
// fftwf_ interface; double: its fftw_ interface), made once (the FFTW planner is not
// thread-safe: FFTW's own planner lock, fftw(f)_make_planner_thread_safe, serialises planning
// process-wide) and executed out of place from many
// threads on buffers from make_fft_buffer (FFTW's SIMD alignment). Out of place because
// FFTW_ESTIMATE picks a buffered algorithm for in-place 2-D transforms that copies and
// allocates per call.
#pragma once

#include <fftw3.h>

#include <complex>
#include <cstdint>
#include <memory>
#include <string>

namespace tycho::cpu {

// FFTW's types for one real type.
template <class Real>
struct fftw_types;
template <>
struct fftw_types<float> {
  using plan = fftwf_plan;
};
template <>
struct fftw_types<double> {
  using plan = fftw_plan;
};

template <class Real>
struct fftw_deleter {
  void operator()(std::complex<Real>* p) const;  // fftwf_free or fftw_free
};
template <class Real>
using fft_buffer = std::unique_ptr<std::complex<Real>[], fftw_deleter<Real>>;
template <class Real>
fft_buffer<Real> make_fft_buffer(int64_t n);

// FFTW_MEASURE plans are kept as FFTW wisdom, one file per machine (CPU model and feature flags),
// window and precision, in $TYCHO_FFT_WISDOM_DIR, else $XDG_CACHE_HOME/tycho, else
// ~/.cache/tycho: the first process to plan a window measures (under an exclusive lock on the
// file), every later one makes the same plans from the file, so runs stay bit-identical. The
// plans are single-threaded (each engine thread runs its own transforms), so the thread count
// does not enter. Empty when no folder can be named (no HOME).
std::string fft_wisdom_folder();
template <class Real>
std::string fft_wisdom_path(int64_t n0, int64_t n1);

template <class Real>
class fft_plan_2d {
 public:
  // measure = true: FFTW_MEASURE, through the wisdom file above (faster transforms; the first
  // process on a machine and window pays the measuring); false: FFTW_ESTIMATE.
  fft_plan_2d(int64_t n0, int64_t n1, bool measure);
  ~fft_plan_2d();
  fft_plan_2d(const fft_plan_2d&) = delete;
  fft_plan_2d& operator=(const fft_plan_2d&) = delete;

  // Unnormalised transforms from `in` to `out` (distinct buffers; `in` is overwritten):
  // forward exp(−2πi k·r), backward exp(+2πi k·r).
  void forward(std::complex<Real>* in, std::complex<Real>* out) const;
  void backward(std::complex<Real>* in, std::complex<Real>* out) const;

 private:
  typename fftw_types<Real>::plan forward_ = nullptr, backward_ = nullptr;
};

// 1-D transforms along one axis of an n0 x n1 C-order array: every row (axis 1, contiguous) or
// every column (axis 0, stride n1) in one FFTW call. A sub-pixel shift exp(−2πi k·δ / N) is
// separable, so the engine applies it one axis at a time (cpu_engine.hpp). Planned like
// fft_plan_2d (same lock, same flags); executed from many threads on make_fft_buffer buffers.
template <class Real>
class fft_plan_axis {
 public:
  fft_plan_axis(int64_t n0, int64_t n1, int axis, bool measure);
  ~fft_plan_axis();
  fft_plan_axis(const fft_plan_axis&) = delete;
  fft_plan_axis& operator=(const fft_plan_axis&) = delete;

  // Unnormalised, `in` to `out` (distinct; `in` is overwritten), as fft_plan_2d.
  void forward(std::complex<Real>* in, std::complex<Real>* out) const;
  void backward(std::complex<Real>* in, std::complex<Real>* out) const;

 private:
  typename fftw_types<Real>::plan forward_ = nullptr, backward_ = nullptr;
};

}  // namespace tycho::cpu
