#include "tycho/host/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tycho::host {
namespace {
tycho_log_level initial_level() {
  const char* env = std::getenv("TYCHO_LOG_LEVEL");
  if (env == nullptr) return TYCHO_LOG_INFO;
  if (std::strcmp(env, "debug") == 0) return TYCHO_LOG_DEBUG;
  if (std::strcmp(env, "warning") == 0) return TYCHO_LOG_WARNING;
  if (std::strcmp(env, "error") == 0) return TYCHO_LOG_ERROR;
  return TYCHO_LOG_INFO;
}
std::atomic<int> g_level{initial_level()};
std::mutex g_mutex;
thread_local int t_rank = -1, t_world = 1;
thread_local log_lines* t_recording = nullptr;
thread_local const log_lines* t_dropping = nullptr;
}  // namespace

log_recording::log_recording(log_lines& into) { t_recording = &into; }
log_recording::~log_recording() { t_recording = nullptr; }
log_repeats_dropped::log_repeats_dropped(const log_lines& seen) { t_dropping = &seen; }
log_repeats_dropped::~log_repeats_dropped() { t_dropping = nullptr; }

void set_log_rank(int rank, int world_size) {
  t_rank = world_size > 1 ? rank : -1;
  t_world = world_size;
}

void set_log_level(tycho_log_level level) { g_level = level; }
tycho_log_level log_level() { return static_cast<tycho_log_level>(g_level.load()); }

void log(tycho_log_level level, const std::string& component, const std::string& message) {
  if (level < g_level.load()) return;
  if (t_rank > 0 && level == TYCHO_LOG_INFO) return;
  static const char* names[] = {"debug", "info", "warning", "error"};
  if (t_recording != nullptr || t_dropping != nullptr) {
    std::string line = std::string(names[level]) + " " + component + ": " + message;
    if (t_dropping != nullptr && t_dropping->seen.count(line) != 0) return;
    if (t_recording != nullptr) t_recording->seen.insert(std::move(line));
  }
  std::lock_guard lock(g_mutex);
  if (t_rank >= 0)
    std::fprintf(stderr, "[tycho %s] rank %d/%d %s: %s\n", names[level], t_rank, t_world, component.c_str(),
                 message.c_str());
  else
    std::fprintf(stderr, "[tycho %s] %s: %s\n", names[level], component.c_str(), message.c_str());
}
}  // namespace tycho::host
