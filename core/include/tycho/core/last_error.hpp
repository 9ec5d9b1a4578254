// The per-thread last-error message behind tycho_last_error() and host->set_error.
#pragma once

#include <tycho/tycho_status.h>

#include <string>

namespace tycho {
tycho_status set_last_error(tycho_status status, const std::string& message);
const char* last_error();
}  // namespace tycho
