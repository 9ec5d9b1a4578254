// The exception type shared by the runtime and the SDK: a message plus the tycho_status it
// becomes at the C boundary (sdk::guarded in plugins, the C API in libtycho). Never thrown
// across the ABI.
#pragma once

#include <tycho/tycho_status.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace tycho::sdk {

// An error with a status; thrown inside plugins, caught by guarded().
struct error : std::runtime_error {
  tycho_status status;
  error(tycho_status s, const std::string& what) : std::runtime_error(what), status(s) {}
};

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

}  // namespace tycho::sdk
