// One logging sink for the runtime and plugins: stderr, one line per message, filtered by
// the level set with set_log_level() (default: info; TYCHO_LOG_LEVEL=debug|info|warning|error).
#pragma once

#include <tycho/tycho_host_api.h>

#include <set>
#include <string>

namespace tycho::host {
void set_log_level(tycho_log_level level);
tycho_log_level log_level();
void log(tycho_log_level level, const std::string& component, const std::string& message);
// In a run of several ranks: prefixes this thread's lines with "rank r/W" and, on ranks other
// than 0, drops info lines (rank 0 speaks for the run; warnings and errors come from all).
void set_log_rank(int rank, int world_size);
// A second pass over the same data (the scan geometry search's second read) need not say again
// what the first said: while a log_recording lives on a thread, every line that thread logs is
// kept in its log_lines; while a log_repeats_dropped lives, a line already in its log_lines is
// not logged again (on that thread). One of each per thread at a time.
struct log_lines {
  std::set<std::string> seen;  // "level component: message"
};
class log_recording {
 public:
  explicit log_recording(log_lines& into);
  ~log_recording();
  log_recording(const log_recording&) = delete;
  log_recording& operator=(const log_recording&) = delete;
};
class log_repeats_dropped {
 public:
  explicit log_repeats_dropped(const log_lines& seen);
  ~log_repeats_dropped();
  log_repeats_dropped(const log_repeats_dropped&) = delete;
  log_repeats_dropped& operator=(const log_repeats_dropped&) = delete;
};
inline void log_info(const std::string& c, const std::string& m) { log(TYCHO_LOG_INFO, c, m); }
inline void log_warning(const std::string& c, const std::string& m) {
  log(TYCHO_LOG_WARNING, c, m);
}
}  // namespace tycho::host
