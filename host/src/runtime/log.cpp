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
}  // namespace

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
  std::lock_guard lock(g_mutex);
  if (t_rank >= 0)
    std::fprintf(stderr, "[tycho %s] rank %d/%d %s: %s\n", names[level], t_rank, t_world, component.c_str(),
                 message.c_str());
  else
    std::fprintf(stderr, "[tycho %s] %s: %s\n", names[level], component.c_str(), message.c_str());
}
}  // namespace tycho::host
