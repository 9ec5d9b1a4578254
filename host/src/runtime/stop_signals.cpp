#include "tycho/host/stop_signals.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace tycho::host {

namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_deferred{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int sig) {
  if (g_deferred.load() > 0) {
    g_signal.store(sig);
    return;
  }
  // Nothing computed yet that could be kept (data still loading, or the command has finished):
  // end now, as the signal's default action would, with a line that says so.
  const char* msg = sig == SIGINT ? "tycho: interrupted (SIGINT) before anything could be kept: nothing was saved\n"
                                  : "tycho: interrupted (SIGTERM) before anything could be kept: nothing was saved\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, std::strlen(msg));
  (void)ignored;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = &on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes in progress continue
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_signal.load(); }

const char* stop_signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "a signal";
}

defer_stop_signals::defer_stop_signals() { g_deferred.fetch_add(1); }
defer_stop_signals::~defer_stop_signals() { g_deferred.fetch_sub(1); }

}  // namespace tycho::host
