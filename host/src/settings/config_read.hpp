// Typed reads of one config key, with errors that name the key and its table.
#pragma once

#include <tycho/core/error.hpp>
#include <tycho/sdk/error.hpp>

#include <toml++/toml.h>

#include <cmath>
#include <optional>
#include <string>
#include <type_traits>

namespace tycho::host {

// A config value as an error message quotes it ("got ..."): a string quoted (printable, cut at
// 200 bytes), a number or boolean as written, otherwise its kind ("a table", "an array").
inline std::string config_value_text(const toml::node& node) {
  if (const auto* s = node.as_string()) return cat("\"", sdk::printable(s->get()), "\"");
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return cat(f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (node.is_table()) return "a table";
  if (node.is_array()) return "an array";
  return "a value of another type";
}

template <class T>
std::optional<T> read_key(const toml::table& t, const char* key, const std::string& where) {
  auto node = t[key];
  if (!node) return std::nullopt;
  if constexpr (std::is_same_v<T, double>) {
    if (node.is_integer() || node.is_floating_point()) {
      // TOML spells nan and inf; no setting means them (they would reach a run's arithmetic).
      // (value<double>() declines a non-finite float, and an integer a double cannot hold exactly,
      // 2^53 + 1: read the node itself, to name the value.)
      const double v = node.is_floating_point() ? node.as_floating_point()->get() : double(node.as_integer()->get());
      if (!std::isfinite(v))
        fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in [", where, "] must be a finite number, got ", v);
      return v;
    }
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in [", where, "] must be a number");
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (node.is_integer()) return node.template value<int64_t>();
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in [", where, "] must be an integer");
  } else if constexpr (std::is_same_v<T, bool>) {
    if (node.is_boolean()) return node.template value<bool>();
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in [", where, "] must be true or false");
  } else {
    if (node.is_string()) return node.template value<std::string>();
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in [", where, "] must be a string");
  }
}

}  // namespace tycho::host
