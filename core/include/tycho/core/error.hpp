// The exception type inside libtycho (core and host). Converted to a tycho_status and the
// thread's last-error message at the C boundary (host/src/c_api.cpp), never thrown across it.
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
