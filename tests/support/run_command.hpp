// Running a program as a user would (the `tycho` command, python3) and capturing its exit
// status, stdout and stderr; plus a fresh temporary folder per test.
//
//   auto r = tycho::test::run_command({tycho::test::tycho_exe(), "plugins"},
//                                     {"TYCHO_PLUGIN_PATH=/some/dir"});
//   EXPECT_TRUE(r.exited_with(0)) << r.describe();
//
// The command runs through /bin/sh with `exec env ...`, so the status seen is the program's
// own: a program killed by a signal reports the signal, not the shell's 128 + n.
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_paths.hpp"

namespace tycho::test {

struct command_result {
  bool exited = false;   // terminated normally: exit_code is valid
  int exit_code = -1;
  bool signalled = false;  // killed by a signal: term_signal is valid
  int term_signal = 0;
  std::string command;   // the shell text that was run
  std::string out, err;  // stdout and stderr

  bool exited_with(int code) const { return exited && exit_code == code; }

  std::string status_text() const {
    if (exited) return "exit status " + std::to_string(exit_code);
    if (signalled)
      return "killed by signal " + std::to_string(term_signal) + " (" +
             std::string(strsignal(term_signal)) + ")";
    return "unknown termination";
  }

  // For assertion messages: the command, how it ended, and both streams.
  std::string describe() const {
    std::ostringstream os;
    os << "command: " << command << "\n" << status_text() << "\n--- stdout ---\n" << out
       << "--- stderr ---\n" << err << "--------------";
    return os.str();
  }

  // Lines of stderr (without the newline), empty lines skipped.
  std::vector<std::string> err_lines() const { return split_lines(err); }
  std::vector<std::string> out_lines() const { return split_lines(out); }

  static std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream is(text);
    for (std::string line; std::getline(is, line);)
      if (!line.empty()) lines.push_back(line);
    return lines;
  }
};

// The last "tycho: error: " line of a command that must fail with exit status 2 (a failed
// expectation when it did not).
inline std::string error_line(const command_result& r) {
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  std::string message;
  for (const auto& line : r.err_lines())
    if (line.rfind("tycho: error: ", 0) == 0) message = line;
  return message;
}

// Single-quotes `s` for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

// Runs argv[0] with the arguments, the extra environment entries ("NAME=value") and, when
// `cwd` is not empty, in that folder. stdin is /dev/null.
inline command_result run_command(const std::vector<std::string>& argv,
                                  const std::vector<std::string>& env = {},
                                  const std::string& cwd = "") {
  command_result r;
  char err_template[] = "/tmp/tycho_test_stderr_XXXXXX";
  int fd = mkstemp(err_template);
  if (fd < 0) {
    r.err = std::string("mkstemp failed: ") + std::strerror(errno);
    return r;
  }
  close(fd);
  const std::string err_path = err_template;

  std::string cmd;
  if (!cwd.empty()) cmd += "cd " + shell_quote(cwd) + " && ";
  cmd += "exec env";
  for (const auto& e : env) cmd += " " + shell_quote(e);
  for (const auto& a : argv) cmd += " " + shell_quote(a);
  cmd += " </dev/null 2>" + shell_quote(err_path);
  r.command = cmd;

  std::fflush(nullptr);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    r.err = std::string("popen failed: ") + std::strerror(errno);
    std::remove(err_path.c_str());
    return r;
  }
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  int status = pclose(pipe);
  if (status != -1) {
    if (WIFEXITED(status)) {
      r.exited = true;
      r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      r.signalled = true;
      r.term_signal = WTERMSIG(status);
    }
  }
  std::ifstream in(err_path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  return r;
}

// The `tycho` command of the build tree.
inline std::string tycho_exe() { return binary_dir() + "/bin/tycho"; }

// A Python interpreter that can import numpy: Debian's /usr/bin/python3 first, then
// `python3` on PATH; "" if neither (the caller skips).
inline const std::string& python_with_numpy() {
  static const std::string found = [] {
    for (const char* candidate : {"/usr/bin/python3", "python3"}) {
      auto r = run_command({candidate, "-c", "import numpy"});
      if (r.exited_with(0)) return std::string(candidate);
    }
    return std::string();
  }();
  return found;
}

// A fresh, empty folder for one test, removed with everything in it at the end of the test
// (kept when TYCHO_KEEP_TEST_FILES is set, for inspection).
class temp_folder {
 public:
  temp_folder() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "tycho_test_" + std::to_string(getpid()) + "_";
    if (info) name += std::string(info->test_suite_name()) + "." + info->name();
    path_ = std::filesystem::temp_directory_path() / name;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::create_directories(path_);
  }
  ~temp_folder() {
    if (std::getenv("TYCHO_KEEP_TEST_FILES")) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_folder(const temp_folder&) = delete;
  temp_folder& operator=(const temp_folder&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

  // Names of the entries in the folder, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string write(const std::string& name, const std::string& text) const {
    std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

// Runs `argv` (argv[0] a path, no shell) with RLIMIT_DATA = limit, stderr into the file `log`,
// stdout discarded; returns its exit status (-1 if killed) and its peak RSS (bytes).
inline std::pair<int, uint64_t> run_with_data_limit(const std::vector<std::string>& argv, uint64_t limit, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit l{rlim_t(limit), rlim_t(limit)};
    setrlimit(RLIMIT_DATA, &l);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, uint64_t(usage.ru_maxrss) * 1024u};
}

}  // namespace tycho::test
