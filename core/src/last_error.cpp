#include "tycho/core/last_error.hpp"

namespace tycho {
namespace {
thread_local std::string t_last_error;
}

tycho_status set_last_error(tycho_status status, const std::string& message) {
  t_last_error = message;
  return status;
}

const char* last_error() { return t_last_error.c_str(); }
}  // namespace tycho
