// Where the tests find the source tree, the build tree and the shipped example data.
#pragma once

#include <string>

namespace tycho::test {
inline std::string source_dir() { return TYCHO_SOURCE_DIR; }
inline std::string binary_dir() { return TYCHO_BINARY_DIR; }
inline std::string plugin_dir() { return std::string(TYCHO_BINARY_DIR) + "/lib/tycho/plugins"; }
inline std::string example_data(const std::string& name) {
  return std::string(TYCHO_SOURCE_DIR) + "/examples/data/" + name;
}
}  // namespace tycho::test

namespace tycho::test {
// The shared data folder beside the checkout (../shared/data/mos2), where CI has it too.
inline std::string shared_data(const std::string& name) {
  return std::string(TYCHO_SOURCE_DIR) + "/../shared/data/mos2/" + name;
}
}  // namespace tycho::test
