// The host's one exception barrier: where a host function is called from C (the embedding API,
// the bootstrap channel a reducer calls), every exception stops here and becomes a status plus
// the calling thread's last-error message (tycho/core/last_error.hpp). Plugins have theirs in
// the SDK (tycho::sdk::guarded), on the SDK's error type; the host's is core's tycho::error.
#pragma once

#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/sdk/error.hpp>

#include <filesystem>
#include <new>
#include <string>

namespace tycho::host {

// Runs f (returning a tycho_status); an exception becomes that status's message. `who`
// ("bootstrap", or "" for none) prefixes the messages that do not name their origin.
template <class F>
tycho_status status_barrier(const char* who, F&& f) noexcept {
  const std::string prefix = who != nullptr && *who != '\0' ? cat(who, ": ") : std::string();
  try {
    return f();
  } catch (const error& e) {
    return set_last_error(e.status, e.what());
  } catch (const sdk::error& e) {  // an SDK helper's refusal (tycho/sdk/checked.hpp) inside the host
    return set_last_error(e.status, e.what());
  } catch (const std::bad_alloc&) {
    return set_last_error(TYCHO_ERR_OUT_OF_MEMORY, cat(prefix, "out of host memory"));
  } catch (const std::filesystem::filesystem_error& e) {  // its own text names no file: say which
    return set_last_error(TYCHO_ERR_IO, cat(prefix, "cannot access '", e.path1().string(), "': ", e.code().message()));
  } catch (const std::exception& e) {
    return set_last_error(TYCHO_ERR_INTERNAL, e.what());
  } catch (...) {
    return set_last_error(TYCHO_ERR_INTERNAL, cat(prefix, "unknown exception"));
  }
}

}  // namespace tycho::host
