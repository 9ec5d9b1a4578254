#include "tycho/core/fftw_planner.hpp"

#include <fftw3.h>

#include <mutex>

#include "tycho/core/error.hpp"

namespace tycho {
void make_fftw_planner_thread_safe() {
  static std::once_flag once;
  std::call_once(once, [] { fftw_make_planner_thread_safe(); });
}

fftw_transform_2d::fftw_transform_2d(std::complex<double>* data, int64_t n0, int64_t n1, int sign) {
  make_fftw_planner_thread_safe();
  auto* p = reinterpret_cast<fftw_complex*>(data);
  plan_ = fftw_plan_dft_2d(int(n0), int(n1), p, p, sign, FFTW_ESTIMATE);
  if (plan_ == nullptr) fail(TYCHO_ERR_INTERNAL, "FFTW could not plan a ", n0, " x ", n1, " transform");
}

fftw_transform_2d::~fftw_transform_2d() {
  make_fftw_planner_thread_safe();
  fftw_destroy_plan(plan_);
}

void fftw_transform_2d::run() { fftw_execute(plan_); }
}  // namespace tycho
