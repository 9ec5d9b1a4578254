// FFTW's planner, made thread-safe once per process (fftw_make_planner_thread_safe, libfftw3_threads)
// before core plans a double-precision transform: ranks run as threads of one process, and the cpu
// engine and the SDK's probe plan at the same time (they make the same call).
#pragma once

namespace tycho {
void make_fftw_planner_thread_safe();
}
