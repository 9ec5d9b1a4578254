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
  auto scratch = make_fft_buffer(n0 * n1);
  auto* d = reinterpret_cast<fftwf_complex*>(scratch.get());
  unsigned flags = measure ? FFTW_MEASURE : FFTW_ESTIMATE;
  std::lock_guard lock(planner_mutex());
  forward_ = fftwf_plan_dft_2d(int(n0), int(n1), d, d, FFTW_FORWARD, flags);
  backward_ = fftwf_plan_dft_2d(int(n0), int(n1), d, d, FFTW_BACKWARD, flags);
  if (forward_ == nullptr || backward_ == nullptr) throw std::bad_alloc();
}

fft_plan_2d::~fft_plan_2d() {
  std::lock_guard lock(planner_mutex());
  if (forward_) fftwf_destroy_plan(forward_);
  if (backward_) fftwf_destroy_plan(backward_);
}

void fft_plan_2d::forward(std::complex<float>* data) const {
  auto* d = reinterpret_cast<fftwf_complex*>(data);
  fftwf_execute_dft(forward_, d, d);
}

void fft_plan_2d::backward(std::complex<float>* data) const {
  auto* d = reinterpret_cast<fftwf_complex*>(data);
  fftwf_execute_dft(backward_, d, d);
}
}  // namespace tycho::cpu
