// The run configuration: a TOML document, the typed view of one table handed to plugins
// (the opaque `tycho_config` of the ABI), and the key check with nearest-name suggestions.
#pragma once

#include <tycho/tycho_host_api.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace toml {
inline namespace v3 {
class table;
}
}  // namespace toml

namespace tycho {

// A parsed TOML document plus where relative paths resolve from.
class config_document {
 public:
  // Parses TOML text; `origin` names it in errors (a file path or "<string>").
  static config_document parse(const std::string& text, const std::string& origin,
                               const std::string& base_dir);
  // Parses TOML text that was written by to_toml() after parse() had expanded it (a config stored
  // in a prepared file or result): "${" in its strings is literal (an escaped "$${" or an
  // environment value), so nothing is expanded again.
  static config_document parse_expanded(const std::string& text, const std::string& origin,
                                        const std::string& base_dir);
  static config_document load_file(const std::string& path);

  config_document(config_document&&) noexcept;
  config_document& operator=(config_document&&) noexcept;
  ~config_document();

  const toml::table& root() const;
  toml::table& root();
  const std::string& origin() const { return origin_; }
  const std::string& base_dir() const { return base_dir_; }
  // The table at a dotted path ("reconstruct.object"); an empty table if absent.
  const toml::table& table_at(const std::string& dotted) const;
  // Sets a value from "key=value" text (the value parsed as TOML, else taken as a string).
  void set_from_text(const std::string& assignment);
  std::string to_toml() const;
  // A deep copy (one per thread when ranks run as threads of one process).
  config_document clone() const;

 private:
  config_document();
  std::unique_ptr<toml::table> root_;
  std::string origin_;
  std::string base_dir_;
};

// Resolves `path` against `base_dir` unless it is absolute or base_dir is empty; lexically
// normalised. The same rule as the SDK's tycho::sdk::resolve_path, so the runtime and every
// plugin resolve config paths alike (a test compares the two).
std::string resolve_path(const std::string& base_dir, const std::string& path);

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(const std::string& a, const std::string& b);
// The candidate nearest to `word`, or "" if none is reasonably close.
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

// Throws a TYCHO_ERR_INVALID_ARGUMENT error naming `[table_name] key` and the nearest
// allowed key for every key of `table` not in `allowed` (sub-tables listed in `allowed` too).
void check_keys(const toml::table& table, const std::string& table_name,
                const std::vector<std::string>& allowed, const std::string& origin);

}  // namespace tycho

// The ABI's opaque config handle: one table of a document.
struct tycho_config {
  const toml::table* table;
  std::string name;      // e.g. "[data]", for messages
  std::string base_dir;  // resolves relative paths
};

namespace tycho {
// The config functions of the host table (tycho_host_api::config_get_*).
tycho_status config_get_string(const tycho_config* cfg, const char* key, const char** out);
tycho_status config_get_double(const tycho_config* cfg, const char* key, double* out);
tycho_status config_get_int(const tycho_config* cfg, const char* key, int64_t* out);
tycho_status config_get_bool(const tycho_config* cfg, const char* key, int* out);
const char* config_base_dir(const tycho_config* cfg);
}  // namespace tycho
