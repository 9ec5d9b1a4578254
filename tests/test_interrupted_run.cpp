// Runs that are interrupted lose nothing (docs/guarantees.md, issue 12):
//   - SIGINT (Ctrl-C) or SIGTERM (a SLURM time limit) during a CPU run: the run stops at the
//     next mini-batch, saves the state of its last complete iteration to its output (exit status
//     128 + the signal), and `--from` that file continues to the same result as a run that was
//     never interrupted, bit for bit;
//   - [output] checkpoint_every: a run killed with SIGKILL after a checkpoint resumes from it to
//     the same result, bit for bit;
//   - a closed stdout (`tycho ... | head -1`) costs the run nothing.
// Added test time: about 15 s on 2 cores (MoS2, 4 iterations, a few runs).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tycho/host/result_record.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

extern char** environ;

namespace fs = std::filesystem;
using tycho::test::load_result;
using tycho::test::run_command;

namespace {

constexpr int k_total = 4;  // the run's iterations

std::vector<std::string> run_args(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct",
                                   tycho::test::source_dir() + "/examples/mos2.toml", "--set",
                                   "reconstruct.iterations=" + std::to_string(k_total), "--set",
                                   "output.previews=false"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

struct spawned_run {
  int status = 0;           // waitpid's
  std::string out;          // stdout up to the end
  std::string err;          // stderr
};

// Runs `argv`, reading its stdout; when a line holds `trigger`, sends `sig` (once). stderr goes
// to a file in `folder`.
spawned_run run_and_signal(const std::vector<std::string>& argv, const std::string& trigger, int sig,
                           const tycho::test::temp_folder& folder) {
  spawned_run r;
  int out_pipe[2];
  if (pipe(out_pipe) != 0) return r;
  const std::string err_path = folder / "stderr.txt";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    return r;
  }
  bool sent = false;
  char buf[4096];
  for (ssize_t n; (n = read(out_pipe[0], buf, sizeof buf)) > 0;) {
    r.out.append(buf, std::size_t(n));
    if (!sent && r.out.find(trigger) != std::string::npos) {
      kill(pid, sig);
      sent = true;
    }
  }
  close(out_pipe[0]);
  waitpid(pid, &r.status, 0);
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

// Every array of `b` equals `c`'s, byte for byte, and the histories agree.
void expect_same_result(const std::string& b, const std::string& c) {
  auto rb = load_result(b), rc = load_result(c);
  ASSERT_EQ(rb.arrays.size(), rc.arrays.size());
  for (const auto& y : rc.arrays) {
    const auto& x = rb.array(y.name, b);
    EXPECT_EQ(x.shape, y.shape) << y.name;
    EXPECT_TRUE(x.bytes == y.bytes) << y.name << " of the resumed run differs from the uninterrupted run";
  }
  auto mb = nlohmann::json::parse(rb.manifest_json), mc = nlohmann::json::parse(rc.manifest_json);
  EXPECT_EQ(mb.at("history").at("loss"), mc.at("history").at("loss"));
  EXPECT_EQ(mb.at("optimizer_state"), mc.at("optimizer_state"));
}

int64_t iterations_in(const std::string& path) {
  return nlohmann::json::parse(load_result(path).manifest_json).at("history").at("iterations").get<int64_t>();
}

TEST(InterruptedRun, SignalSavesAResumableStateAndCheckpointsSurviveSigkill) {
  tycho::test::temp_folder tmp;
  const std::string whole = tmp / "whole.zip";
  auto c = run_command(run_args({"-q", "-o", whole}));
  ASSERT_TRUE(c.exited_with(0)) << c.describe();

  for (const int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string a = tmp / ("stopped-" + std::to_string(sig) + ".zip");
    const std::string b = tmp / ("resumed-" + std::to_string(sig) + ".zip");
    auto ra = run_and_signal(run_args({"-o", a}), "iteration    1/", sig, tmp);
    ASSERT_TRUE(WIFEXITED(ra.status)) << "status " << ra.status << "\n" << ra.err;
    EXPECT_EQ(WEXITSTATUS(ra.status), 128 + sig) << ra.err;
    ASSERT_TRUE(fs::is_regular_file(a)) << ra.out << ra.err;
    const int64_t done = iterations_in(a);
    EXPECT_GE(done, 1);
    EXPECT_LT(done, k_total) << "the signal arrived after the run ended; the test proves nothing";
    const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    EXPECT_NE(ra.err.find("tycho: interrupted by " + name + " during iteration " + std::to_string(done + 1) +
                          ": saved the state after iteration " + std::to_string(done) + " to '" + a + "'"),
              std::string::npos)
        << ra.err;
    EXPECT_NE(ra.out.find("wrote " + a + " (the state after iteration " + std::to_string(done) + " of 4)"),
              std::string::npos)
        << ra.out;
    auto rb = run_command(run_args({"-q", "--from", a, "-o", b}));
    ASSERT_TRUE(rb.exited_with(0)) << rb.describe();
    expect_same_result(b, whole);
  }

  // Checkpoints every iteration; SIGKILL (nothing can be saved then) after the first.
  const std::string k = tmp / "checkpointed.zip", kb = tmp / "from-checkpoint.zip";
  auto rk = run_and_signal(run_args({"--set", "output.checkpoint_every=1", "-o", k}),
                           "(checkpoint after iteration 1)", SIGKILL, tmp);
  EXPECT_TRUE(WIFSIGNALED(rk.status) && WTERMSIG(rk.status) == SIGKILL) << rk.status << rk.err;
  ASSERT_TRUE(fs::is_regular_file(k));
  const int64_t at = iterations_in(k);
  EXPECT_GE(at, 1);
  EXPECT_LT(at, k_total);
  for (const auto& e : fs::directory_iterator(tmp.path()))
    if (e.path().filename().string().rfind("checkpointed.zip.tmp", 0) == 0) fs::remove(e.path());  // a save SIGKILL cut
  auto rkb = run_command(run_args({"-q", "--from", k, "-o", kb}));
  ASSERT_TRUE(rkb.exited_with(0)) << rkb.describe();
  expect_same_result(kb, whole);
}

// `tycho ... | head -1`: head reads the first progress line and exits; the run goes on without
// its stdout and saves its result.
TEST(InterruptedRun, ClosedStdoutLosesNothing) {
  tycho::test::temp_folder tmp;
  const std::string out = tmp / "result.zip";
  std::string cmd;
  for (const auto& a : run_args({"--iterations", "3", "-o", out})) cmd += tycho::test::shell_quote(a) + " ";
  auto r = run_command({"bash", "-c", cmd + "| head -1; exit ${PIPESTATUS[0]}"});
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out.rfind("iteration    1/3  loss ", 0), 0u) << r.out;
  ASSERT_TRUE(fs::is_regular_file(out)) << r.describe();
  EXPECT_EQ(iterations_in(out), 3);
  EXPECT_EQ(r.err.find("tycho: error"), std::string::npos) << r.err;
}

}  // namespace
