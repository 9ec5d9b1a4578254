#include "tycho/host/settings.hpp"

#include <tycho/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "settings/config_read.hpp"
#include "settings/settings_read.hpp"

namespace tycho::host {

namespace {
std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// "an integer", "a number", ... for messages.
std::string with_article(tycho_setting_type type) {
  switch (type) {
    case TYCHO_SETTING_INTEGER: return "an integer";
    case TYCHO_SETTING_INTEGER_LIST: return "an array of integers";
    case TYCHO_SETTING_NUMBER_LIST: return "an array of numbers";
    case TYCHO_SETTING_STRING_LIST: return "an array of strings";
    case TYCHO_SETTING_MIXED: return "a value of the documented types";
    default: return cat("a ", setting_type_name(type));
  }
}

// What a TOML node is, for "got ...".
std::string node_kind(const toml::node& n) {
  if (n.is_string()) return "a string";
  if (n.is_integer()) return "an integer";
  if (n.is_floating_point()) return "a float";
  if (n.is_boolean()) return "a bool";
  if (n.is_array()) return "an array";
  if (n.is_table()) return "a table";
  return "a date or time";
}

bool has_type(const toml::node& n, tycho_setting_type type) {
  auto all = [&](auto pred) {
    const toml::array* a = n.as_array();
    if (a == nullptr) return false;
    for (const auto& e : *a)
      if (!pred(e)) return false;
    return true;
  };
  switch (type) {
    case TYCHO_SETTING_STRING: return n.is_string();
    case TYCHO_SETTING_INTEGER: return n.is_integer();
    case TYCHO_SETTING_NUMBER: return n.is_integer() || n.is_floating_point();
    case TYCHO_SETTING_BOOL: return n.is_boolean();
    case TYCHO_SETTING_INTEGER_LIST: return all([](const toml::node& e) { return e.is_integer(); });
    case TYCHO_SETTING_NUMBER_LIST: return all([](const toml::node& e) { return e.is_integer() || e.is_floating_point(); });
    case TYCHO_SETTING_STRING_LIST: return all([](const toml::node& e) { return e.is_string(); });
    case TYCHO_SETTING_MIXED: return true;
  }
  return false;
}

std::string range_text(const setting_decl& d) {
  std::string lo = d.bounds & TYCHO_SETTING_HAS_MIN
                       ? cat(d.bounds & TYCHO_SETTING_MIN_EXCLUSIVE ? "> " : ">= ", number_text(d.min))
                       : "";
  std::string hi = d.bounds & TYCHO_SETTING_HAS_MAX
                       ? cat(d.bounds & TYCHO_SETTING_MAX_EXCLUSIVE ? "< " : "<= ", number_text(d.max))
                       : "";
  return lo.empty() ? hi : hi.empty() ? lo : lo + " and " + hi;
}

// Both bounds also as an interval ("in [0, 1000]", "in (0, 1]"), as the runtime's own range
// messages write them; empty with one bound or none.
std::string interval_text(const setting_decl& d) {
  if (!(d.bounds & TYCHO_SETTING_HAS_MIN) || !(d.bounds & TYCHO_SETTING_HAS_MAX)) return "";
  return cat(", i.e. in ", d.bounds & TYCHO_SETTING_MIN_EXCLUSIVE ? "(" : "[", number_text(d.min), ", ",
             number_text(d.max), d.bounds & TYCHO_SETTING_MAX_EXCLUSIVE ? ")" : "]");
}

bool in_range(const setting_decl& d, double v) {
  if (d.bounds & TYCHO_SETTING_HAS_MIN) {
    if (d.bounds & TYCHO_SETTING_MIN_EXCLUSIVE ? !(v > d.min) : !(v >= d.min)) return false;
  }
  if (d.bounds & TYCHO_SETTING_HAS_MAX) {
    if (d.bounds & TYCHO_SETTING_MAX_EXCLUSIVE ? !(v < d.max) : !(v <= d.max)) return false;
  }
  return true;
}

std::string allowed_text(const std::vector<std::string>& allowed) {
  std::string s;
  for (std::size_t i = 0; i < allowed.size(); ++i)
    s += cat(i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ", "\"", allowed[i], "\"");
  return s;
}
}  // namespace

const char* setting_type_name(tycho_setting_type type) {
  switch (type) {
    case TYCHO_SETTING_STRING: return "string";
    case TYCHO_SETTING_INTEGER: return "integer";
    case TYCHO_SETTING_NUMBER: return "number";
    case TYCHO_SETTING_BOOL: return "bool";
    case TYCHO_SETTING_INTEGER_LIST: return "array of integers";
    case TYCHO_SETTING_NUMBER_LIST: return "array of numbers";
    case TYCHO_SETTING_STRING_LIST: return "array of strings";
    case TYCHO_SETTING_MIXED: return "mixed";
  }
  return "unknown";
}

std::vector<setting_decl> read_settings(const tycho_setting* settings, const std::string& owner) {
  std::vector<setting_decl> out;
  if (settings == nullptr) return out;
  const std::size_t stride = settings->struct_size;
  if (stride < sizeof(tycho_setting))  // 1.1 is the first minor with settings: nothing may be shorter
    fail(TYCHO_ERR_ABI_MISMATCH, owner, ": its settings are ", stride, " bytes each, expected at least ",
         sizeof(tycho_setting));
  for (std::size_t i = 0; i < 4096; ++i) {
    const auto& s = *reinterpret_cast<const tycho_setting*>(reinterpret_cast<const char*>(settings) + i * stride);
    if (s.key == nullptr) return out;
    if (s.struct_size != stride) fail(TYCHO_ERR_ABI_MISMATCH, owner, ": setting '", s.key, "' has another struct size");
    if (s.type < TYCHO_SETTING_STRING || s.type > TYCHO_SETTING_MIXED)
      fail(TYCHO_ERR_ABI_MISMATCH, owner, ": setting '", s.key, "' has an unknown type ", int(s.type));
    setting_decl d;
    d.key = s.key;
    d.type = s.type;
    if (s.default_text != nullptr) d.default_text = s.default_text;
    d.bounds = s.bounds;
    d.min = s.min;
    d.max = s.max;
    for (const char* const* a = s.allowed; a != nullptr && *a != nullptr; ++a) d.allowed.emplace_back(*a);
    d.unit = s.unit ? s.unit : "";
    d.doc = s.doc ? s.doc : "";
    out.push_back(std::move(d));
  }
  fail(TYCHO_ERR_ABI_MISMATCH, owner, ": its settings array has no end (a setting with key NULL)");
}

namespace {
// The declared type, and finite elements in an array of numbers (TOML spells nan and inf; no
// setting means them: scan_origin_A = [nan, 0] passed here and failed in the engine).
void check_type(const toml::node& n, const setting_decl& d, const std::string& head, const std::string& owner) {
  if (!has_type(n, d.type))
    fail(TYCHO_ERR_INVALID_ARGUMENT, head, with_article(d.type), " (declared by ", owner, "), got ", node_kind(n));
  if (d.type == TYCHO_SETTING_NUMBER_LIST) {
    const toml::array& a = *n.as_array();
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double v = a[i].is_integer() ? double(a[i].as_integer()->get()) : a[i].as_floating_point()->get();
      if (!std::isfinite(v))
        fail(TYCHO_ERR_INVALID_ARGUMENT, head, "an array of finite numbers (declared by ", owner, "), got ",
             number_text(v), " at index ", i);
    }
  }
}
}  // namespace

void check_setting_types(const toml::table& t, const std::string& where, const std::vector<setting_decl>& decls,
                         const std::string& owner) {
  for (const auto& d : decls)
    if (const toml::node* n = t.get(d.key))
      check_type(*n, d, cat("config key '", d.key, "' in [", where, "] must be "), owner);
}

void check_setting_values(const toml::table& t, const std::string& where, const std::vector<setting_decl>& decls,
                          const std::string& owner) {
  for (const auto& d : decls) {
    const toml::node* n = t.get(d.key);
    if (n == nullptr) continue;
    const std::string head = cat("config key '", d.key, "' in [", where, "] must be ");
    check_type(*n, d, head, owner);
    if (d.type == TYCHO_SETTING_STRING && !d.allowed.empty()) {
      const std::string v = *n->value<std::string>();
      bool ok = false;
      for (const auto& a : d.allowed) ok = ok || a == v;
      if (!ok) fail(TYCHO_ERR_INVALID_ARGUMENT, head, allowed_text(d.allowed), " (declared by ", owner, "), got \"", v, "\"");
    }
    if ((d.type == TYCHO_SETTING_INTEGER || d.type == TYCHO_SETTING_NUMBER) && d.bounds != 0) {
      // An integer node as its int64 value: toml++'s value<double>() is empty for an integer
      // a double cannot hold exactly (2^53 + 1), whose dereference read garbage.
      const double v = n->is_integer() ? double(n->as_integer()->get()) : n->as_floating_point()->get();
      if (!std::isfinite(v))
        fail(TYCHO_ERR_INVALID_ARGUMENT, head, "a finite number, ", range_text(d), " (declared by ", owner, "), got ",
             number_text(v));
      if (!in_range(d, v))
        fail(TYCHO_ERR_INVALID_ARGUMENT, head, range_text(d), interval_text(d), " (declared by ", owner, "), got ",
             n->is_integer() ? std::to_string(n->as_integer()->get()) : number_text(v));
    }
  }
}

std::vector<std::string> setting_keys(const std::vector<setting_decl>& decls) {
  std::vector<std::string> keys;
  for (const auto& d : decls) keys.push_back(d.key);
  return keys;
}

std::string settings_text(const std::vector<setting_decl>& decls) {
  if (decls.empty()) return "  (no keys)\n";
  std::size_t w = 3;
  for (const auto& d : decls) w = std::max(w, d.key.size());
  std::string out;
  for (const auto& d : decls) {
    std::string line = cat("  ", d.key, std::string(w - d.key.size() + 2, ' '),
                           d.forms.empty() ? std::string(setting_type_name(d.type)) : d.forms);
    if (!d.unit.empty() && d.forms.empty()) line += cat(", ", d.unit);  // forms name the unit themselves
    line += cat("; default ", d.default_text ? *d.default_text : std::string("none"));
    if (!d.allowed.empty()) line += cat("; one of ", allowed_text(d.allowed));
    if (d.bounds != 0) line += cat("; ", range_text(d));
    out += line + "\n      " + d.doc + "\n";
  }
  return out;
}

namespace {
const setting_decl& find_decl(const std::string& table, const char* key) {
  for (const auto& d : host_settings(table))
    if (d.key == key) return d;
  fail(TYCHO_ERR_INTERNAL, "settings: [", table, "] declares no key '", key, "'");
}

template <class T>
std::optional<T> parse_default(const setting_decl& d, const std::string& table) {
  if (!d.default_text) return std::nullopt;
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + *d.default_text);
  } catch (const toml::parse_error&) {
    fail(TYCHO_ERR_INTERNAL, "settings: the default of [", table, "] ", d.key, " is not TOML: ", *d.default_text);
  }
  return read_key<T>(parsed, "v", table);
}
}  // namespace

template <class T>
std::optional<T> setting_value(const toml::table& t, const std::string& table, const char* key) {
  const setting_decl& d = find_decl(table, key);
  if (auto v = read_key<T>(t, key, table)) return v;
  return parse_default<T>(d, table);
}

template std::optional<std::string> setting_value<std::string>(const toml::table&, const std::string&, const char*);
template std::optional<int64_t> setting_value<int64_t>(const toml::table&, const std::string&, const char*);
template std::optional<double> setting_value<double>(const toml::table&, const std::string&, const char*);
template std::optional<bool> setting_value<bool>(const toml::table&, const std::string&, const char*);

}  // namespace tycho::host
