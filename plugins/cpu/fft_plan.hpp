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

template <class Real>
class fft_plan_2d {
 public:
  // measure = true runs FFTW_MEASURE (faster transforms, slower set-up, and the chosen
  // algorithm may differ between runs); false uses FFTW_ESTIMATE (deterministic).
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

}  // namespace tycho::cpu
