// One registry of the built-in plugins (build tree), shared by the tests that read results or
// call components the way the host does. Loaded once per test binary, never unloaded.
#pragma once

#include <tycho/host/registry.hpp>
#include <tycho/host/result_record.hpp>

#include <string>

#include "test_paths.hpp"

namespace tycho::test {

inline const tycho::host::registry& plugins() {
  static tycho::host::registry* reg = [] {
    auto* r = new tycho::host::registry;
    r->load_directories({plugin_dir()});
    return r;
  }();
  return *reg;
}

// A saved result or .npz, read through the format component its extension names.
inline tycho::host::loaded_record load_result(const std::string& path) {
  return tycho::host::load_record(tycho::host::format_for_path(plugins(), path), path);
}

}  // namespace tycho::test
