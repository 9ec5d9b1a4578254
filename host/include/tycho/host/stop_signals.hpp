// SIGINT and SIGTERM (Ctrl-C, a SLURM time limit) for the `tycho` command, and SIGPIPE.
//
// install_stop_signal_handlers() ignores SIGPIPE (a closed stdout, `tycho ... | head -1`, must
// not kill a run: writes to it fail instead, and the command stops printing) and catches SIGINT
// and SIGTERM:
//   - while a defer_stop_signals scope lives (the iterations, a save), the signal is recorded
//     and the work polls stop_signal(): the run stops between mini-batches and saves the state
//     of its last complete iteration; a save completes first;
//   - otherwise nothing is lost by stopping at once: the handler prints one line to stderr and
//     ends the process by the same signal (its default action).
// Async-signal-safe: the handler only writes to an atomic flag, to stderr and re-raises.
#pragma once

namespace tycho::host {

void install_stop_signal_handlers();

// The signal recorded while deferred (SIGINT, SIGTERM), 0 when none.
int stop_signal();

// "SIGINT", "SIGTERM", or "signal N".
const char* stop_signal_name(int sig);

// While one lives (on any thread), SIGINT and SIGTERM are recorded instead of ending the process.
class defer_stop_signals {
 public:
  defer_stop_signals();
  ~defer_stop_signals();
  defer_stop_signals(const defer_stop_signals&) = delete;
  defer_stop_signals& operator=(const defer_stop_signals&) = delete;
};

}  // namespace tycho::host
