// One logging sink for the runtime and plugins: stderr, one line per message, filtered by
// the level set with set_log_level() (default: info; TYCHO_LOG_LEVEL=debug|info|warning|error).
#pragma once

#include <tycho/tycho_host_api.h>

#include <string>

namespace tycho::host {
void set_log_level(tycho_log_level level);
tycho_log_level log_level();
void log(tycho_log_level level, const std::string& component, const std::string& message);
// In a run of several ranks: prefixes this thread's lines with "rank r/W" and, on ranks other
// than 0, drops info lines (rank 0 speaks for the run; warnings and errors come from all).
void set_log_rank(int rank, int world_size);
inline void log_info(const std::string& c, const std::string& m) { log(TYCHO_LOG_INFO, c, m); }
inline void log_warning(const std::string& c, const std::string& m) {
  log(TYCHO_LOG_WARNING, c, m);
}
}  // namespace tycho::host
