#include "tycho/sdk/hdf5/h5_guard.hpp"

#include <tycho/sdk.hpp>

#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace tycho::h5 {
namespace {

// The child's exit statuses; anything else (a sanitizer's report exits with 1) counts as a crash.
constexpr int k_walk_done = 0;
constexpr int k_walk_threw = 86;

bool guard_disabled() {
  const char* v = std::getenv("TYCHO_HDF5_GUARD");
  return v != nullptr && std::strcmp(v, "0") == 0;
}

}  // namespace

double default_guard_timeout_s() {
  if (const char* v = std::getenv("TYCHO_HDF5_GUARD_TIMEOUT_S")) {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (end != v && *end == '\0' && t > 0 && t < 1e7) return t;
  }
  return 120.0;
}

void guard_metadata_walk(const std::string& file, const std::function<void()>& walk, double timeout_s) {
  if (guard_disabled()) return;
  const pid_t child = fork();
  if (child < 0) {
    tycho::sdk::log(TYCHO_LOG_WARNING, "hdf5",
                    tycho::sdk::cat("could not fork to check '", file, "' in a guard process (",
                                    std::strerror(errno), "): reading it unguarded"));
    return;
  }
  if (child == 0) {
    // The child: walk quietly (the parent repeats the walk and logs what it finds), then leave
    // without running atexit handlers, destructors or HDF5's own shutdown (the parent's state).
    static tycho_host_api quiet{};
    if (tycho::sdk::host() != nullptr) {
      quiet = *tycho::sdk::host();
      quiet.log = [](tycho_log_level, const char*, const char*) {};
      tycho::sdk::host_slot() = &quiet;
    }
    int status = k_walk_done;
    try {
      walk();
    } catch (...) {
      status = k_walk_threw;
    }
    _exit(status);
  }
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (auto pause = std::chrono::microseconds(200);; pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
    const pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) return;  // someone else reaped it (a SIGCHLD = SIG_IGN caller): unguarded
    if (clock::now() > deadline) {
      kill(child, SIGKILL);
      while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      tycho::sdk::fail(TYCHO_ERR_BAD_DATA, "'", file, "': the HDF5 library did not finish reading this file's metadata in ",
                       timeout_s, " s (in a guard process, now stopped): the file is corrupt or crafted, or its storage does "
                       "not answer; tycho does not read it (TYCHO_HDF5_GUARD_TIMEOUT_S sets the limit)");
    }
    std::this_thread::sleep_for(pause);
  }
  if (WIFEXITED(status) && (WEXITSTATUS(status) == k_walk_done || WEXITSTATUS(status) == k_walk_threw)) return;
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  const std::string how = WIFSIGNALED(status)
                              ? tycho::sdk::cat("died of signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")")
                              : tycho::sdk::cat("ended with status ", WEXITSTATUS(status));
  tycho::sdk::fail(TYCHO_ERR_BAD_DATA, "'", file, "': the HDF5 library (", major, ".", minor, ".", release,
                   ") crashed reading this file's metadata: a guard process ", how,
                   ". The file is corrupt or crafted; tycho does not read it");
}

}  // namespace tycho::h5
