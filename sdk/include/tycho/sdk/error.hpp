// The exception type shared by the runtime and the SDK: a message plus the tycho_status it
// becomes at the C boundary (sdk::guarded in plugins, the C API in libtycho). Never thrown
// across the ABI.
#pragma once

#include <tycho/tycho_status.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

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

// Text read from a file (a header, a name) as a message may quote it: control characters and
// NUL bytes as \xNN, so that they reach no terminal raw and cut no line; at most `most` bytes,
// then "...".
inline std::string printable(std::string_view text, std::size_t most = 200) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < most; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
    } else {
      out += char(c);
    }
  }
  if (text.size() > most) out += "...";
  return out;
}

template <class... Args>
[[noreturn]] void fail(tycho_status status, const Args&... args) {
  throw error(status, cat(args...));
}

}  // namespace tycho::sdk
