// Progress a person watches: a bar with elapsed time, ETA and rate on a terminal, plain lines
// otherwise, for the long stages (reading, preprocessing) and the iterations; and the run's
// final summary. The `tycho` command owns the display; the runtime only reports stages.
#pragma once

#include <tycho/tycho.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

namespace tycho::host {

// ---- stages: the runtime reports, whoever installed a watcher shows it
// Called with done = 0 when a stage starts, then as work completes, done = total at its end.
// Process-wide, set once before the work (not thread-safe against concurrent set); reports
// come from the thread doing the work. No watcher: reports are dropped.
using stage_watcher = std::function<void(const std::string& stage, int64_t done, int64_t total)>;
void set_stage_watcher(stage_watcher watcher);
void report_stage(const std::string& stage, int64_t done, int64_t total);

// ---- formatting, exposed for tests
// "0:07", "12:34", "1:02:03" (hours:minutes:seconds; negative or non-finite: "-:--").
std::string format_duration(double seconds);
// One line of a bar, at most `width` characters:
//   "iteration  37/100 [######------]  37%  loss 1.478e-02  0.96 s/it  0:35 < 1:00"
// label: "iteration", "reading"; tail: what follows the percentage before the times ("" for
// none); elapsed_s: since the stage started; the ETA is elapsed / done · (total − done).
std::string progress_bar_text(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                              const std::string& tail, int width);
// The plain line of one iteration, which tests and scripts parse:
//   "iteration    3/100  loss 4.033776e-02  0.220 s/it"
std::string iteration_line(int64_t iteration, int64_t total, double loss, double seconds);

// ---- the display
class progress_display {
 public:
  enum class style { bar, lines, quiet };
  // quiet: nothing; several ranks, or `fd` not a terminal, or TERM=dumb: lines; else a bar.
  static style choose(bool quiet, bool several_ranks, int fd);

  progress_display(style s, std::FILE* out);
  style mode() const { return style_; }
  // A stage report (report_stage's arguments): a bar redrawn in place; nothing in lines mode
  // (the session logs each stage's time on stderr).
  void stage(const std::string& name, int64_t done, int64_t total);
  // One iteration done; `iterations_before`: those of earlier invocations (a resumed run).
  void iteration(const tycho_progress& p, int64_t iterations_before);
  // After the last iteration: ends the bar's line.
  void end_iterations();
  // "done: 100 iterations (converged) in 1:36 (0.96 s/it), final loss 1.432149e-02; result in X,
  // previews in Y"; `why`: why the run ended (session::end_reason), left out when empty.
  void summary(int64_t iterations, double seconds, double final_loss, const std::string& result,
               const std::string& sheet, const std::string& why = "");

 private:
  int width() const;
  style style_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point stage_start_, iterations_start_;
  bool iterations_started_ = false, line_open_ = false;
};

}  // namespace tycho::host
