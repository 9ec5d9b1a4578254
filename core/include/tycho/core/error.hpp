// The exception type inside libtycho (core and host): the SDK's, so an error thrown by a
// plugin helper and one thrown by the runtime are one type. Converted to a tycho_status and the
// thread's last-error message at the C boundary (host/src/c_api.cpp).
#pragma once

#include <tycho/sdk/error.hpp>

namespace tycho {
using sdk::cat;
using sdk::error;
using sdk::fail;
}  // namespace tycho
