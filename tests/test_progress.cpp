// Progress a person watches (tycho/host/progress.hpp): the formatting of durations, bars and
// the plain iteration line; a run on a terminal (a pseudo-terminal here) draws bars for reading,
// preprocessing and the iterations and ends with the summary; not on a terminal it prints the
// plain lines scripts parse, and the summary.
#include <gtest/gtest.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>

#include "run_command.hpp"
#include "test_paths.hpp"
#include "tycho/host/progress.hpp"

using namespace tycho::host;
namespace fs = std::filesystem;

TEST(Progress, Durations) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(7.4), "0:07");
  EXPECT_EQ(format_duration(754), "12:34");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "-:--");
  EXPECT_EQ(format_duration(NAN), "-:--");
}

TEST(Progress, BarTextHasCountPercentTimesAndEta) {
  // 37 of 100 in 35 s: 35 / 37 · 63 = 59.6 s to go; the bar (26 wide, 9 = floor(0.37 · 26)
  // filled) takes what the figures leave of the 80 columns.
  EXPECT_EQ(progress_bar_text("iteration", 37, 100, 35.0, "loss 1.478e-02", 80),
            "iteration  37/100 [#########-----------------]  37%  loss 1.478e-02  0:35 < 1:00");
  EXPECT_EQ(progress_bar_text("reading", 768, 768, 0.3, "", 60),
            "reading 768/768 [########################] 100%  0:00 < 0:00");
  EXPECT_EQ(progress_bar_text("reading", 0, 768, 0.0, "", 60),
            "reading   0/768 [------------------------]   0%  0:00 < -:--");
  // No room for a bar of 10: the line keeps the figures.
  EXPECT_EQ(progress_bar_text("iteration", 1, 4, 2.0, "loss 1.0e-01", 40), "iteration 1/4  25%  loss 1.0e-01  0:02 < 0:06");
  for (int width : {50, 80, 120}) EXPECT_LE(progress_bar_text("iteration", 5, 1000, 9.0, "loss 1e-3", width).size(), std::size_t(width));
}

TEST(Progress, PlainIterationLineKeepsItsFormat) {
  EXPECT_EQ(iteration_line(3, 100, 4.033776e-02, 0.2204), "iteration    3/100  loss 4.033776e-02  0.220 s/it");
  EXPECT_EQ(iteration_line(12345, 20000, 1.5, 12.0), "iteration 12345/20000  loss 1.500000e+00  12.000 s/it");
}

TEST(Progress, StageReportsReachTheWatcherAndNothingWithout) {
  std::vector<std::string> seen;
  set_stage_watcher([&](const std::string& s, int64_t done, int64_t total) {
    seen.push_back(s + " " + std::to_string(done) + "/" + std::to_string(total));
  });
  report_stage("reading", 0, 10);
  report_stage("reading", 10, 10);
  set_stage_watcher(nullptr);
  report_stage("reading", 5, 10);
  EXPECT_EQ(seen, (std::vector<std::string>{"reading 0/10", "reading 10/10"}));
}

namespace {
// Runs `argv` with stdout and stderr on a new pseudo-terminal; returns what it printed.
std::string run_on_terminal(const std::vector<std::string>& argv, const std::string& term, int& status) {
  int master = -1;
  winsize ws{};
  ws.ws_col = 100;
  ws.ws_row = 30;
  const pid_t pid = forkpty(&master, nullptr, nullptr, &ws);
  if (pid == 0) {
    setenv("TERM", term.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(master, buf, sizeof buf)) > 0;) out.append(buf, std::size_t(n));  // EIO at the end
  close(master);
  waitpid(pid, &status, 0);
  return out;
}

std::vector<std::string> short_run(const fs::path& out) {
  return {tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml", "--iterations",
          "2", "-o", out.string(), "--set", "output.previews=false", "--set", "reconstruct.threads=1"};
}
}  // namespace

class ProgressRun : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("tycho_progress_" + std::to_string(::getpid()));
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_;
};

TEST_F(ProgressRun, TerminalGetsBarsAndSummary) {
  int status = 0;
  const std::string out = run_on_terminal(short_run(tmp_ / "r.zip"), "xterm", status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("\r\033[Kreading 768/768 ["), std::string::npos) << out;
  EXPECT_NE(out.find("\r\033[Kpreprocessing 1/1 ["), std::string::npos) << out;
  EXPECT_NE(out.find("\r\033[Kiteration 2/2 [####"), std::string::npos) << out;
  EXPECT_NE(out.find("] 100%  loss "), std::string::npos) << out;
  EXPECT_EQ(out.find("iteration    1/2  loss"), std::string::npos) << "plain lines on a terminal:\n" << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("done: 2 iterations in 0:[0-9]{2} \\([0-9.]+ s/it\\), final loss "
                                               "[0-9.]+e-0[0-9]; result in " + (tmp_ / "r.zip").string())))
      << out;
}

TEST_F(ProgressRun, DumbTerminalAndPipesGetPlainLines) {
  int status = 0;
  const std::string out = run_on_terminal(short_run(tmp_ / "r.zip"), "dumb", status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_EQ(out.find("\033[K"), std::string::npos) << out;
  EXPECT_NE(out.find("iteration    2/2  loss "), std::string::npos) << out;

  auto r = tycho::test::run_command(short_run(tmp_ / "p.zip"));
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out.find("\033["), std::string::npos) << r.out;
  const auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_TRUE(std::regex_match(lines[0], std::regex(R"(iteration    1/2  loss [0-9.]+e[-+][0-9]+  [0-9.]+ s/it)"))) << lines[0];
  EXPECT_EQ(lines[2], "wrote " + (tmp_ / "p.zip").string());
  EXPECT_EQ(lines[3].rfind("done: 2 iterations in ", 0), 0u) << lines[3];
  // Reading and preprocessing report their time in the log.
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(session: read 768 patterns \(14 MiB as uint16 counts, read as the stored uint16\) in [0-9.]+ s)")))
      << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(session: preprocessed in [0-9.]+ s)"))) << r.err;
}
