// Typed settings: one declaration per config key (type, default, range or allowed values, unit,
// one line of doc), for the runtime's own tables (host/src/settings/host_settings.cpp) and for every
// component's table (tycho_component::settings, ABI 1.1). The host checks a table's values
// against them before any data is read, `tycho plugins --keys NAME` prints them, and
// docs/config-reference.md is checked against them (tests/test_settings.cpp).
#pragma once

#include <tycho/tycho_plugin.h>

#include <optional>
#include <string>
#include <vector>

namespace tycho::host {

struct setting_decl {
  std::string key;
  tycho_setting_type type = TYCHO_SETTING_STRING;
  std::optional<std::string> default_text;  // as TOML writes it; none: required or derived
  uint32_t bounds = 0;                      // TYCHO_SETTING_HAS_MIN | ...
  double min = 0, max = 0;
  std::vector<std::string> allowed;         // a string's allowed values; empty: any
  std::string unit;
  std::string doc;
  // A mixed key's forms as docs/config-reference.md's type column writes them (`boolean or
  // "auto"`), for listings; empty: the type's name (a component's mixed key says them in its doc).
  std::string forms;
};

// Copies a component's NULL-key-terminated array (stepping by its struct_size); throws
// TYCHO_ERR_ABI_MISMATCH naming `owner` when the array is malformed.
std::vector<setting_decl> read_settings(const tycho_setting* settings, const std::string& owner);

// "string", "integer", "number", "bool", "array of integers", ...
const char* setting_type_name(tycho_setting_type type);

// The runtime's own declarations of table `table` ("data", "reconstruct", "reconstruct.object",
// "parallel", ...); throws TYCHO_ERR_NOT_FOUND for a table the runtime has no keys in.
const std::vector<setting_decl>& host_settings(const std::string& table);
// The tables host_settings knows, in the order of docs/config-reference.md.
const std::vector<std::string>& host_setting_tables();
// The keys' names.
std::vector<std::string> setting_keys(const std::vector<setting_decl>& decls);

// A table of the declarations for people: key, type, default, unit/range, doc; one per line.
std::string settings_text(const std::vector<setting_decl>& decls);

}  // namespace tycho::host
