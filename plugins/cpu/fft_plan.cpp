#include "fft_plan.hpp"

#include <new>

namespace tycho::cpu {
namespace {
// FFTW's own planner lock (fftw3f_threads, fftw3_threads) serialises every plan made or
// destroyed in the process, by any plugin; installed when this library is loaded, before it
// makes a plan.
[[maybe_unused]] const bool k_planner_thread_safe = [] {
  fftwf_make_planner_thread_safe();
  fftw_make_planner_thread_safe();
  return true;
}();

// The two FFTW interfaces behind one set of names.
void* fft_malloc(float*, std::size_t bytes) { return fftwf_malloc(bytes); }
void* fft_malloc(double*, std::size_t bytes) { return fftw_malloc(bytes); }
fftwf_plan plan_2d(float*, int n0, int n1, std::complex<float>* in, std::complex<float>* out, int sign,
                   unsigned flags) {
  return fftwf_plan_dft_2d(n0, n1, reinterpret_cast<fftwf_complex*>(in), reinterpret_cast<fftwf_complex*>(out),
                           sign, flags);
}
fftw_plan plan_2d(double*, int n0, int n1, std::complex<double>* in, std::complex<double>* out, int sign,
                  unsigned flags) {
  return fftw_plan_dft_2d(n0, n1, reinterpret_cast<fftw_complex*>(in), reinterpret_cast<fftw_complex*>(out),
                          sign, flags);
}
void destroy_plan(fftwf_plan p) { fftwf_destroy_plan(p); }
void destroy_plan(fftw_plan p) { fftw_destroy_plan(p); }
void execute(fftwf_plan p, std::complex<float>* in, std::complex<float>* out) {
  fftwf_execute_dft(p, reinterpret_cast<fftwf_complex*>(in), reinterpret_cast<fftwf_complex*>(out));
}
void execute(fftw_plan p, std::complex<double>* in, std::complex<double>* out) {
  fftw_execute_dft(p, reinterpret_cast<fftw_complex*>(in), reinterpret_cast<fftw_complex*>(out));
}
}  // namespace

template <>
void fftw_deleter<float>::operator()(std::complex<float>* p) const {
  fftwf_free(p);
}
template <>
void fftw_deleter<double>::operator()(std::complex<double>* p) const {
  fftw_free(p);
}

template <class Real>
fft_buffer<Real> make_fft_buffer(int64_t n) {
  auto* p = static_cast<std::complex<Real>*>(fft_malloc(static_cast<Real*>(nullptr),
                                                        sizeof(std::complex<Real>) * std::size_t(n)));
  if (p == nullptr) throw std::bad_alloc();
  return fft_buffer<Real>(p);
}

template <class Real>
fft_plan_2d<Real>::fft_plan_2d(int64_t n0, int64_t n1, bool measure) {
  auto in = make_fft_buffer<Real>(n0 * n1), out = make_fft_buffer<Real>(n0 * n1);
  // Out-of-place transforms may destroy their input: callers only pass scratch buffers.
  unsigned flags = (measure ? FFTW_MEASURE : FFTW_ESTIMATE) | FFTW_DESTROY_INPUT;
  Real* tag = nullptr;
  forward_ = plan_2d(tag, int(n0), int(n1), in.get(), out.get(), FFTW_FORWARD, flags);
  backward_ = plan_2d(tag, int(n0), int(n1), in.get(), out.get(), FFTW_BACKWARD, flags);
  if (forward_ == nullptr || backward_ == nullptr) throw std::bad_alloc();
}

template <class Real>
fft_plan_2d<Real>::~fft_plan_2d() {
  if (forward_) destroy_plan(forward_);
  if (backward_) destroy_plan(backward_);
}

template <class Real>
void fft_plan_2d<Real>::forward(std::complex<Real>* in, std::complex<Real>* out) const {
  execute(forward_, in, out);
}

template <class Real>
void fft_plan_2d<Real>::backward(std::complex<Real>* in, std::complex<Real>* out) const {
  execute(backward_, in, out);
}

template fft_buffer<float> make_fft_buffer<float>(int64_t);
template fft_buffer<double> make_fft_buffer<double>(int64_t);
template class fft_plan_2d<float>;
template class fft_plan_2d<double>;
}  // namespace tycho::cpu
