// FFTW's planner, made thread-safe once per process (fftw_make_planner_thread_safe, libfftw3_threads)
// before core plans a double-precision transform: ranks run as threads of one process, and the cpu
// engine and the SDK's probe plan at the same time (they make the same call).
#pragma once

#include <complex>
#include <cstdint>

struct fftw_plan_s;

namespace tycho {
void make_fftw_planner_thread_safe();

// One in-place 2-D complex transform (double precision, unnormalised, FFTW_ESTIMATE) of the
// (n0, n1) C-contiguous array at `data`, which must outlive it: planned once under the
// thread-safe planner, run any number of times. sign: FFTW_FORWARD (−1) or FFTW_BACKWARD (+1).
// Throws tycho::error when FFTW cannot plan it. Not copyable; one thread per object.
class fftw_transform_2d {
 public:
  fftw_transform_2d(std::complex<double>* data, int64_t n0, int64_t n1, int sign);
  ~fftw_transform_2d();
  fftw_transform_2d(const fftw_transform_2d&) = delete;
  fftw_transform_2d& operator=(const fftw_transform_2d&) = delete;
  void run();

 private:
  fftw_plan_s* plan_ = nullptr;
};
}  // namespace tycho
