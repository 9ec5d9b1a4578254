// What a benchmark record says about where and when it ran: date, commit, machine, memory.
#pragma once

#include <string>

namespace tycho::bench {

struct machine_info {
  std::string cpu;        // "model name" of /proc/cpuinfo
  unsigned cores = 0;     // std::thread::hardware_concurrency()
  double memory_GiB = 0;  // MemTotal of /proc/meminfo
};

machine_info this_machine();
// UTC now as 2025-01-31T12:34:56Z.
std::string iso_utc_now();
// `git rev-parse --short HEAD` of `source_dir`, "-dirty" appended when `git status --porcelain`
// lists anything; "unknown" if git fails.
std::string git_commit(const std::string& source_dir);
// getrusage(RUSAGE_SELF).ru_maxrss in MiB: the peak resident set of this whole process.
double peak_rss_MiB();
// CPU seconds spent by the whole machine (/proc/stat, not idle) and by this process
// (getrusage, all threads), with a steady-clock time: two samples give how much CPU other
// processes took meanwhile, which skews the timings on a shared machine.
struct cpu_sample {
  double machine_busy_s = 0, self_s = 0, wall_s = 0;
};
cpu_sample sample_cpu();
// Mean number of cores busy with other processes between `a` and `b` (0: none).
double other_cpu_load(const cpu_sample& a, const cpu_sample& b);
// Appends `line` and a newline to `path` (created if missing). Throws std::runtime_error.
void append_line(const std::string& path, const std::string& line);

}  // namespace tycho::bench
