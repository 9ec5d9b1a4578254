// The host table handed to plugins: they reach logging, errors, config and allocation only
// through it, so no plugin links against libtycho.
#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "tycho/host/log.hpp"
#include "tycho/host/registry.hpp"

namespace tycho::host {
namespace {

void host_log(tycho_log_level level, const char* component, const char* message) {
  log(level, component ? component : "plugin", message ? message : "");
}

tycho_status host_set_error(tycho_status status, const char* message) {
  return set_last_error(status, message ? message : "");
}

void* host_alloc(size_t bytes) {
  size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;  // aligned_alloc needs a multiple
  return std::aligned_alloc(64, rounded);
}
void host_free(void* p) { std::free(p); }

const char* host_last_error() { return last_error(); }
const char* host_config_table_name(const tycho_config* cfg) {
  return cfg ? cfg->name.c_str() : "(no table)";
}

const tycho_host_api k_host_api = {
    sizeof(tycho_host_api), TYCHO_ABI_VERSION, &host_log,          &host_set_error,
    &config_get_string,     &config_get_double, &config_get_int,   &config_get_bool,
    &config_base_dir,       &host_alloc,        &host_free,        &host_last_error,
    &host_config_table_name,
};
}  // namespace

const tycho_host_api* host_api() { return &k_host_api; }

}  // namespace tycho::host
