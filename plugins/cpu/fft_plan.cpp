#include "fft_plan.hpp"

#include <mutex>
#include <new>

namespace tycho::cpu {
namespace {
std::mutex& planner_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

fft_buffer make_fft_buffer(int64_t n) {
  auto* p = static_cast<std::complex<float>*>(fftwf_malloc(sizeof(std::complex<float>) * std::size_t(n)));
  if (p == nullptr) throw std::bad_alloc();
  return fft_buffer(p);
}

fft_plan_2d::fft_plan_2d(int64_t n0, int64_t n1, bool measure) {
  auto in = make_fft_buffer(n0 * n1), out = make_fft_buffer(n0 * n1);
  auto* i = reinterpret_cast<fftwf_complex*>(in.get());
  auto* o = reinterpret_cast<fftwf_complex*>(out.get());
  // Out-of-place transforms may destroy their input: callers only pass scratch buffers.
  unsigned flags = (measure ? FFTW_MEASURE : FFTW_ESTIMATE) | FFTW_DESTROY_INPUT;
  std::lock_guard lock(planner_mutex());
  forward_ = fftwf_plan_dft_2d(int(n0), int(n1), i, o, FFTW_FORWARD, flags);
  backward_ = fftwf_plan_dft_2d(int(n0), int(n1), i, o, FFTW_BACKWARD, flags);
  if (forward_ == nullptr || backward_ == nullptr) throw std::bad_alloc();
}

fft_plan_2d::~fft_plan_2d() {
  std::lock_guard lock(planner_mutex());
  if (forward_) fftwf_destroy_plan(forward_);
  if (backward_) fftwf_destroy_plan(backward_);
}

void fft_plan_2d::forward(std::complex<float>* in, std::complex<float>* out) const {
  fftwf_execute_dft(forward_, reinterpret_cast<fftwf_complex*>(in), reinterpret_cast<fftwf_complex*>(out));
}

void fft_plan_2d::backward(std::complex<float>* in, std::complex<float>* out) const {
  fftwf_execute_dft(backward_, reinterpret_cast<fftwf_complex*>(in), reinterpret_cast<fftwf_complex*>(out));
}
}  // namespace tycho::cpu
