// The exception type inside libtycho (core and host): a message plus the tycho_status it
// becomes at the C boundary (host/src/runtime/c_api.cpp, the command's main). Never thrown across the
// ABI. Plugins have their own, tycho::sdk::error (tycho/sdk/error.hpp), which their guarded()
// turns into a status before it could reach the runtime; core depends on the ABI only, so the
// two types are kept apart on purpose and never meet.
#pragma once

#include <tycho/tycho_status.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace tycho {

struct error : std::runtime_error {
  tycho_status status;
  error(tycho_status s, const std::string& what) : std::runtime_error(what), status(s) {}
};

// The arguments streamed into one string (10 significant digits for floating-point values).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  os.precision(10);
  (os << ... << args);
  return os.str();
}

template <class... Args>
[[noreturn]] void fail(tycho_status status, const Args&... args) {
  throw error(status, cat(args...));
}

}  // namespace tycho
