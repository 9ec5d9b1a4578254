#include "tycho/core/config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "tycho/core/error.hpp"
#include "tycho/core/last_error.hpp"

namespace tycho {

config_document::config_document() : root_(std::make_unique<toml::table>()) {}
config_document::config_document(config_document&&) noexcept = default;
config_document& config_document::operator=(config_document&&) noexcept = default;
config_document::~config_document() = default;

namespace {
// "${NAME}" in a string value becomes the environment variable NAME, so that one config (or one
// batch script) serves many jobs: path = "run-${SLURM_JOB_ID}.zip". An unset variable is an
// error naming the key; "$${" stands for a literal "${".
std::string expand_environment(const std::string& value, const std::string& key, const std::string& origin) {
  std::string out;
  for (std::size_t i = 0; i < value.size();) {
    if (value.compare(i, 3, "$${") == 0) {
      out += "${";
      i += 3;
    } else if (value.compare(i, 2, "${") == 0) {
      const std::size_t end = value.find('}', i + 2);
      if (end == std::string::npos)
        fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": config key '", key, "': \"", value, "\" opens ${ without a closing }");
      const std::string name = value.substr(i + 2, end - i - 2);
      const char* v = name.empty() ? nullptr : std::getenv(name.c_str());
      if (v == nullptr)
        fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": config key '", key, "' uses the environment variable ", name,
             ", which is not set");
      out += v;
      i = end + 1;
    } else {
      out += value[i++];
    }
  }
  return out;
}

void expand_environment_in(toml::node& node, const std::string& key, const std::string& origin) {
  if (auto* t = node.as_table()) {
    for (auto&& [k, v] : *t) expand_environment_in(v, key.empty() ? std::string(k.str()) : key + "." + std::string(k.str()), origin);
  } else if (auto* a = node.as_array()) {
    for (std::size_t i = 0; i < a->size(); ++i) expand_environment_in((*a)[i], key + "[" + std::to_string(i) + "]", origin);
  } else if (auto* str = node.as_string()) {
    if (str->get().find("${") != std::string::npos) *str = expand_environment(str->get(), key, origin);
  }
}
}  // namespace

config_document config_document::parse(const std::string& text, const std::string& origin,
                                       const std::string& base_dir) {
  config_document doc = parse_expanded(text, origin, base_dir);
  expand_environment_in(*doc.root_, "", origin);
  return doc;
}

config_document config_document::parse_expanded(const std::string& text, const std::string& origin,
                                                const std::string& base_dir) {
  config_document doc;
  doc.origin_ = origin;
  doc.base_dir_ = base_dir;
  try {
    *doc.root_ = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ":", where.line, ":", where.column,
         ": TOML syntax error: ", e.description());
  }
  return doc;
}

config_document config_document::load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(TYCHO_ERR_NOT_FOUND, "config file '", path, "' cannot be opened");
  std::stringstream ss;
  ss << in.rdbuf();
  auto dir = std::filesystem::absolute(path).parent_path().string();
  return parse(ss.str(), path, dir);
}

const toml::table& config_document::root() const { return *root_; }
toml::table& config_document::root() { return *root_; }

const toml::table& config_document::table_at(const std::string& dotted) const {
  static const toml::table empty;
  auto node = root_->at_path(dotted);
  if (!node) return empty;
  if (auto* t = node.as_table()) return *t;
  fail(TYCHO_ERR_INVALID_ARGUMENT, origin_, ": '", dotted, "' must be a table ([", dotted, "])");
}

void config_document::set_from_text(const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "--set '", assignment, "': expected key=value");
  std::string key = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);
  // Parse the value as TOML; a bare word becomes a string.
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};
  }
  expand_environment_in(*parsed.get("v"), key, "--set " + key);
  toml::table* t = root_.get();
  std::size_t start = 0;
  for (std::size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1) {
    std::string part = key.substr(start, dot - start);
    auto* sub = (*t)[part].as_table();
    if (!sub) {
      t->insert_or_assign(part, toml::table{});
      sub = (*t)[part].as_table();
    }
    t = sub;
  }
  t->insert_or_assign(key.substr(start), *parsed.get("v"));
  // Messages about the configuration now concern the file and the command line together.
  if (origin_.find(" + --set") == std::string::npos) origin_ += " + --set";
}

config_document config_document::clone() const {
  config_document c;
  *c.root_ = *root_;
  c.origin_ = origin_;
  c.base_dir_ = base_dir_;
  return c;
}

std::string config_document::to_toml() const {
  std::ostringstream os;
  os << *root_;
  return os.str();
}

std::string resolve_path(const std::string& base_dir, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_absolute() || base_dir.empty()) return p.string();
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  // A key given without its unit suffix ("semiangle" for "semiangle_mrad") is the likeliest
  // slip of all: a candidate that extends the word with "_..." wins outright.
  for (const auto& c : candidates)
    if (c.size() > word.size() && c.compare(0, word.size(), word) == 0 && c[word.size()] == '_')
      return c;
  std::string best;
  std::size_t best_d = std::max<std::size_t>(3, word.size() / 2) + 1;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

void check_keys(const toml::table& table, const std::string& table_name,
                const std::vector<std::string>& allowed, const std::string& origin) {
  for (const auto& [k, v] : table) {
    std::string key(k.str());
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string msg = cat(origin, ": unknown key '", key, "' in [", table_name, "]");
    std::string near = nearest_name(key, allowed);
    if (!near.empty()) msg += cat("; did you mean '", near, "'?");
    std::string list;
    std::vector<std::string> listed;  // a key both the runtime and a component read is listed once
    for (const auto& a : allowed) {
      if (std::find(listed.begin(), listed.end(), a) != listed.end()) continue;
      listed.push_back(a);
      list += (list.empty() ? "" : ", ") + a;
    }
    msg += cat(" (allowed: ", list, ")");
    fail(TYCHO_ERR_INVALID_ARGUMENT, msg);
  }
}

// ---- the host table's config functions

namespace {
toml::node_view<const toml::node> lookup(const tycho_config* cfg, const char* key) {
  if (cfg == nullptr || cfg->table == nullptr || key == nullptr) return {};
  return cfg->table->at_path(key);
}
tycho_status wrong_type(const tycho_config* cfg, const char* key, const char* expected) {
  return set_last_error(TYCHO_ERR_INVALID_ARGUMENT,
                        cat("config key '", key, "' in ", cfg->name, " must be ", expected));
}
}  // namespace

tycho_status config_get_string(const tycho_config* cfg, const char* key, const char** out) {
  auto n = lookup(cfg, key);
  if (!n) return TYCHO_ERR_NOT_FOUND;
  auto* s = n.as_string();
  if (!s) return wrong_type(cfg, key, "a string");
  *out = s->get().c_str();
  return TYCHO_OK;
}

tycho_status config_get_double(const tycho_config* cfg, const char* key, double* out) {
  auto n = lookup(cfg, key);
  if (!n) return TYCHO_ERR_NOT_FOUND;
  // (value<double>() declines a non-finite float: read the float itself, to name the value.)
  std::optional<double> v;
  if (n.is_floating_point()) v = n.as_floating_point()->get();
  else if (n.is_integer()) v = n.value<double>();
  if (v) {
    // TOML spells nan and inf; no setting means them, and either would reach the arithmetic of
    // a run silently (a NaN object saved with exit status 0).
    if (!std::isfinite(*v))
      return set_last_error(TYCHO_ERR_INVALID_ARGUMENT,
                            cat("config key '", key, "' in ", cfg->name, " must be a finite number, got ", *v));
    *out = *v;
    return TYCHO_OK;
  }
  return wrong_type(cfg, key, "a number");
}

tycho_status config_get_int(const tycho_config* cfg, const char* key, int64_t* out) {
  auto n = lookup(cfg, key);
  if (!n) return TYCHO_ERR_NOT_FOUND;
  if (!n.is_integer()) return wrong_type(cfg, key, "an integer");
  *out = *n.value<int64_t>();
  return TYCHO_OK;
}

tycho_status config_get_bool(const tycho_config* cfg, const char* key, int* out) {
  auto n = lookup(cfg, key);
  if (!n) return TYCHO_ERR_NOT_FOUND;
  if (!n.is_boolean()) return wrong_type(cfg, key, "true or false");
  *out = *n.value<bool>() ? 1 : 0;
  return TYCHO_OK;
}

const char* config_base_dir(const tycho_config* cfg) {
  return cfg ? cfg->base_dir.c_str() : "";
}

}  // namespace tycho
