#include "tycho/core/fftw_planner.hpp"

#include <fftw3.h>

#include <mutex>

namespace tycho {
void make_fftw_planner_thread_safe() {
  static std::once_flag once;
  std::call_once(once, [] { fftw_make_planner_thread_safe(); });
}
}  // namespace tycho
