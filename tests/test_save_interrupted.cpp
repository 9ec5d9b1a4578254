// A save killed in the middle leaves the previous file intact (plugins/formats/zip/zip_save.cpp writes
// a temporary file beside the target, flushes it and renames it over the target). A helper
// program (tests/helpers/save_record_helper.cpp) saves a large record over an existing result;
// the test kills it with SIGKILL as soon as a temporary file "<target>.tmp.*" appears.
//
// Deterministic: whatever the timing, a temporary file left behind by the killed process means
// it died before the rename, so the target must be the previous file, byte for byte; no
// temporary file left means the rename happened, so the target must be the complete new file.
// Both are checked on every attempt; attempts repeat (with a larger record, so the save takes
// longer) until three kills landed mid-save, within a bounded number of attempts and time.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

extern char** environ;

namespace fs = std::filesystem;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Entries of `folder` whose name starts with `prefix`.
std::vector<std::string> entries_with_prefix(const fs::path& folder, const std::string& prefix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

// Starts the helper saving `mib` MiB over `target`; its stdout goes to /dev/null.
pid_t start_helper(const std::string& target, int64_t mib) {
  const std::string helper = TYCHO_SAVE_RECORD_HELPER, plugins = tycho::test::plugin_dir(),
                    size = std::to_string(mib);
  std::vector<char*> argv = {const_cast<char*>(helper.c_str()), const_cast<char*>(plugins.c_str()),
                             const_cast<char*>(target.c_str()), const_cast<char*>(size.c_str()), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

TEST(SaveInterrupted, KilledSaveLeavesThePreviousFile) {
  tycho::test::temp_folder tmp;
  const std::string target = tmp / "result.zip";
  const std::string tmp_prefix = "result.zip.tmp.";

  // The previous result: a small record saved through the same format.
  {
    std::vector<int32_t> values = {1, 2, 3};
    std::vector<tycho::owned_array> arrays = {
        tycho::owned_array::from_vector("previous", DLDataType{kDLInt, 32, 1}, {3}, values)};
    tycho::host::save_record(tycho::host::format_for_path(tycho::test::plugins(), target), arrays,
                             "{\"format\": \"previous\"}", target, TYCHO_SAVE_OVERWRITE);
  }
  const std::string previous = read_bytes(target);
  ASSERT_FALSE(previous.empty());

  int killed_mid_save = 0, completed = 0, attempts = 0;
  int64_t mib = 64;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  for (; attempts < 16 && killed_mid_save < 3 && std::chrono::steady_clock::now() < give_up; ++attempts) {
    SCOPED_TRACE(testing::Message() << "attempt " << attempts << ", " << mib << " MiB");
    const pid_t pid = start_helper(target, mib);
    ASSERT_GT(pid, 0) << "cannot start " << TYCHO_SAVE_RECORD_HELPER;
    // Poll for the temporary file; kill as soon as it is there (or stop polling if the helper
    // ended first, or after 60 s).
    int status = 0;
    bool ended = false, seen = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!seen && std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        ended = true;
        break;
      }
      seen = !entries_with_prefix(tmp.path(), tmp_prefix).empty();
      if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!ended) {
      kill(pid, SIGKILL);
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
    }
    const auto left = entries_with_prefix(tmp.path(), tmp_prefix);
    if (!left.empty()) {
      // Died before the rename: the target is the previous file, byte for byte.
      ++killed_mid_save;
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
      EXPECT_EQ(read_bytes(target), previous) << "the target changed although the save did not finish";
      for (const auto& name : left) fs::remove(tmp.path() / name);
    } else {
      // The save finished (before the kill, or the helper ended): the complete new file.
      ++completed;
      EXPECT_FALSE(ended && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) << "the helper failed: " << status;
      auto rec = tycho::test::load_result(target);
      EXPECT_EQ(rec.array("big", target).count(), mib << 18);
      std::ofstream(target, std::ios::binary | std::ios::trunc) << previous;  // back to the previous file
      if (mib < 512) mib *= 2;  // a longer save is easier to catch
    }
  }
  RecordProperty("attempts", attempts);
  RecordProperty("killed_mid_save", killed_mid_save);
  EXPECT_GE(killed_mid_save, 1) << "no kill landed during a save in " << attempts << " attempts (" << completed
                                << " saves finished first)";

  // Only the target is left, and it is the previous file, which numpy still loads.
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"result.zip"});
  EXPECT_EQ(read_bytes(target), previous);
  const std::string& python = tycho::test::python_with_numpy();
  if (python.empty()) GTEST_SKIP() << "no python3 with numpy";
  auto r = tycho::test::run_command(
      {python, "-c", "import sys, numpy; d = numpy.load(sys.argv[1]); print(d['previous'].tolist())", target});
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out, "[1, 2, 3]\n") << r.describe();
}

}  // namespace
