// The TOML side of typed settings (tycho/host/settings.hpp): checks of a table's values
// against declarations, and reads of the runtime's keys with their declared defaults.
// Host-internal (toml++ stays out of the public headers).
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>
#include <vector>

#include "tycho/host/settings.hpp"

namespace tycho::host {

// Refuses a value in `t` (the table [where]) whose declared type, range or allowed values it
// breaks: "config key 'threads' in [reconstruct] must be an integer (declared by engine 'cpu'),
// got a string". Keys without a declaration are not looked at (check_keys has their names).
void check_setting_values(const toml::table& t, const std::string& where, const std::vector<setting_decl>& decls,
                          const std::string& owner);

// The declared types only (and finite elements of arrays of numbers), not ranges: what the
// runtime checks of its own tables before any work, whose ranges its readers check with
// messages of their own.
void check_setting_types(const toml::table& t, const std::string& where, const std::vector<setting_decl>& decls,
                         const std::string& owner);

// The value of the runtime's key `key` of [table] in `t` (read_key's checks and messages),
// else its declared default parsed from the TOML text, else nullopt.
// T: std::string, int64_t, double or bool.
template <class T>
std::optional<T> setting_value(const toml::table& t, const std::string& table, const char* key);

}  // namespace tycho::host
