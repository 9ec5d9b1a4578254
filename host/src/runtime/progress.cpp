#include "tycho/host/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace tycho::host {

namespace {
// printf into a std::string (the runtime does not link fmt).
template <class... A>
std::string printf_text(const char* format, A... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

stage_watcher& watcher() {
  static stage_watcher w;
  return w;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

void set_stage_watcher(stage_watcher w) { watcher() = std::move(w); }

void report_stage(const std::string& stage, int64_t done, int64_t total) {
  if (watcher()) watcher()(stage, done, total);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--";
  const auto s = int64_t(std::llround(seconds));
  if (s >= 3600) return printf_text("%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
  return printf_text("%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
}

std::string progress_bar_text(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                              const std::string& tail, int width) {
  const int digits = int(std::to_string(std::max<int64_t>(total, 1)).size());
  const double fraction = total > 0 ? std::clamp(double(done) / double(total), 0.0, 1.0) : 0.0;
  const double eta = done > 0 ? elapsed_s / double(done) * double(total - done) : NAN;
  const std::string head = label + printf_text(" %*lld/%lld ", digits, (long long)done, (long long)total);
  std::string after = printf_text(" %3.0f%%", 100 * fraction);
  if (!tail.empty()) after += "  " + tail;
  after += "  " + format_duration(elapsed_s) + " < " + (done >= total ? "0:00" : format_duration(eta));
  // The bar takes what is left of the width, between 10 and 40 characters; without room for
  // 10 the line drops the bar.
  const int room = width - int(head.size()) - int(after.size()) - 2;
  if (room < 10) return head + after.substr(1);
  const int bar = std::min(room, 40), filled = int(std::floor(fraction * bar));
  return head + "[" + std::string(std::size_t(filled), '#') + std::string(std::size_t(bar - filled), '-') + "]" +
         after;
}

std::string iteration_line(int64_t iteration, int64_t total, double loss, double seconds) {
  return printf_text("iteration %4lld/%lld  loss %.6e  %.3f s/it", (long long)iteration, (long long)total, loss, seconds);
}

progress_display::style progress_display::choose(bool quiet, bool several_ranks, int fd) {
  if (quiet) return style::quiet;
  const char* term = std::getenv("TERM");
  if (several_ranks || !isatty(fd) || (term && std::strcmp(term, "dumb") == 0)) return style::lines;
  return style::bar;
}

progress_display::progress_display(style s, std::FILE* out) : style_(s), out_(out) {}

int progress_display::width() const {
  winsize ws{};
  if (ioctl(fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return int(ws.ws_col) - 1;
  return 79;
}

void progress_display::stage(const std::string& name, int64_t done, int64_t total) {
  if (style_ != style::bar) return;
  if (done == 0) stage_start_ = std::chrono::steady_clock::now();
  const std::string text = progress_bar_text(name, done, total, seconds_since(stage_start_), "", width());
  std::fprintf(out_, "\r\033[K%s%s", text.c_str(), done >= total ? "\n" : "");
  line_open_ = done < total;
  std::fflush(out_);
}

void progress_display::iteration(const tycho_progress& p, int64_t iterations_before) {
  if (style_ == style::quiet) return;
  if (!iterations_started_) {
    iterations_started_ = true;
    // The clock of this invocation's iterations starts at the first one's start.
    iterations_start_ = std::chrono::steady_clock::now() -
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(p.seconds));
  }
  // tycho_progress counts over the session's life: iterations_total is the iteration this run
  // call ends at (a resumed result's iterations included), not the length of this call.
  const int64_t total = p.iterations_total;
  if (style_ == style::lines) {
    std::fprintf(out_, "%s\n", iteration_line(p.iteration, total, p.loss, p.seconds).c_str());
  } else {
    // The ETA counts this invocation's iterations only: earlier ones ran in another process.
    const double elapsed = seconds_since(iterations_start_);
    const int64_t done_here = p.iteration - iterations_before;
    const std::string tail =
        printf_text("loss %.3e  %.3g s/it", p.loss, done_here > 0 ? elapsed / double(done_here) : p.seconds);
    const std::string text = progress_bar_text("iteration", done_here, p.iterations_total - iterations_before, elapsed, tail, width());
    std::fprintf(out_, "\r\033[K%s", text.c_str());
    line_open_ = true;
  }
  std::fflush(out_);
}

void progress_display::end_iterations() {
  if (line_open_) std::fputc('\n', out_);
  line_open_ = false;
  std::fflush(out_);
}

void progress_display::summary(int64_t iterations, double seconds, double final_loss, const std::string& result,
                               const std::string& sheet, const std::string& why) {
  if (style_ == style::quiet) return;
  std::string s = printf_text("done: %lld iteration%s%s in %s (%.3g s/it), final loss %.6e; result in ",
                              (long long)iterations, iterations == 1 ? "" : "s",
                              why.empty() ? "" : (" (" + why + ")").c_str(), format_duration(seconds).c_str(),
                              iterations > 0 ? seconds / double(iterations) : 0.0, final_loss) + result;
  if (!sheet.empty()) s += ", previews in " + sheet;
  std::fprintf(out_, "%s\n", s.c_str());
  std::fflush(out_);
}

}  // namespace tycho::host
