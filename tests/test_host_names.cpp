// The host wires components it knows only by what they say about themselves (issue 10): no
// file in host/ names a built-in component in a string ("cpu", "cuda", \"mpi\", ...), except
// host/src/settings/config_defaults.hpp, which holds the config's defaults. An engine's memory comes from
// its plan_memory, an optimizer's state from state_arrays, the reducer from the device kinds
// it sums (tycho_component::devices).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_paths.hpp"

namespace fs = std::filesystem;

namespace {

// A built-in component's name quoted as a string, or as an escaped quote inside one.
const std::regex k_builtin_name(R"re(\\?"(cpu|cuda|mpi|nccl|adam|sgd|amplitude|zip|emd|cxi|npy|hdf5|simulate)\\?")re");

std::vector<std::string> offending_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (std::regex_search(line, k_builtin_name)) out.push_back(std::to_string(n) + ": " + line);
  }
  return out;
}

TEST(HostNames, TheMatcherFindsQuotedNames) {
  EXPECT_EQ(offending_lines("p.model = engine == \"cuda\" ? a : b;\n").size(), 1u);
  EXPECT_EQ(offending_lines("fail(\"use reducer = \\\"nccl\\\"\");\n").size(), 1u);
  EXPECT_EQ(offending_lines("// CUDA device memory; a cpu engine\nkDLCUDA\n\"cpux\"\n").size(), 0u);
}

TEST(HostNames, NoBuiltInComponentIsNamedOutsideTheConfigDefaults) {
  const fs::path host = fs::path(tycho::test::source_dir()) / "host";
  const fs::path allowed = host / "src" / "settings" / "config_defaults.hpp";
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(host)) {
    if (!entry.is_regular_file() || entry.path() == allowed) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".cpp" && ext != ".hpp" && ext != ".h" && ext != ".txt") continue;
    ++files;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    for (const auto& line : offending_lines(text.str()))
      ADD_FAILURE() << entry.path().string() << ":" << line
                    << "\n  (name built-in components only in host/src/settings/config_defaults.hpp; learn the rest from "
                       "what the component reports)";
  }
  EXPECT_GT(files, 20);
}

}  // namespace
