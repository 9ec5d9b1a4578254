// A 2-D single-precision FFTW plan pair for one window shape, made once (the FFTW planner is
// not thread-safe, so planning takes a process-wide lock) and executed out of place from many
// threads on buffers from fft_buffer (FFTW's SIMD alignment). Out of place because FFTW_ESTIMATE
// picks a buffered algorithm for in-place 2-D transforms that copies and allocates per call.
#pragma once

#include <fftw3.h>

#include <complex>
#include <cstdint>
#include <memory>

namespace tycho::cpu {

struct fftwf_deleter {
  void operator()(void* p) const { fftwf_free(p); }
};
using fft_buffer = std::unique_ptr<std::complex<float>[], fftwf_deleter>;
fft_buffer make_fft_buffer(int64_t n);

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
  void forward(std::complex<float>* in, std::complex<float>* out) const;
  void backward(std::complex<float>* in, std::complex<float>* out) const;

 private:
  fftwf_plan forward_ = nullptr, backward_ = nullptr;
};

}  // namespace tycho::cpu
