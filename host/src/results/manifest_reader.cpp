#include "results/manifest_reader.hpp"

#include <tycho/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tycho::host {

std::string json_excerpt(const nlohmann::json& v) {
  // error_handler::replace: invalid UTF-8 in a crafted string does not throw from dump().
  std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

manifest_reader::manifest_reader(const std::string& text, std::string path) : path_(std::move(path)) {
  try {
    j_ = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // NaN and inf are not JSON (the writer stores unknown values as null): such a manifest, or a
    // truncated one, is a damaged file.
    fail(TYCHO_ERR_BAD_DATA, "'", path_, "': member 'manifest.json' is not valid JSON (it stops parsing at byte ",
         e.byte, " of ", text.size(), "; NaN and inf are not JSON): the file is corrupt");
  } catch (const nlohmann::json::exception&) {
    fail(TYCHO_ERR_BAD_DATA, "'", path_, "': member 'manifest.json' is not valid JSON: the file is corrupt");
  }
  if (!j_.is_object())
    fail(TYCHO_ERR_BAD_DATA, "'", path_, "': member 'manifest.json' holds ", json_excerpt(j_),
         "; expected a JSON object (a tycho manifest): the file is corrupt");
}

const nlohmann::json* manifest_reader::find(std::string_view key) const {
  const nlohmann::json* node = &j_;
  while (!key.empty()) {
    const std::size_t dot = key.find('.');
    const std::string part(key.substr(0, dot));
    if (!node->is_object()) return nullptr;
    const auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
    key = dot == std::string_view::npos ? std::string_view() : key.substr(dot + 1);
  }
  return node;
}

void manifest_reader::refuse(std::string_view key, const nlohmann::json* value, std::string_view expected) const {
  if (value == nullptr) {
    // The first level of the path that is missing, when it is not the key itself: "(no
    // 'calibration' at all)" says more than the key's own absence.
    std::string missing;
    for (std::size_t dot = key.find('.'); dot != std::string_view::npos; dot = key.find('.', dot + 1))
      if (find(key.substr(0, dot)) == nullptr) {
        missing = cat(" (no '", key.substr(0, dot), "' at all)");
        break;
      }
    fail(TYCHO_ERR_BAD_DATA, "'", path_, "': member 'manifest.json' has no ", key, missing, "; expected ", expected);
  }
  fail(TYCHO_ERR_BAD_DATA, "'", path_, "': member 'manifest.json' has ", key, " = ", json_excerpt(*value),
       ", expected ", expected);
}

const nlohmann::json& manifest_reader::at(std::string_view key, std::string_view expected) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) refuse(key, v, expected);
  return *v;
}

std::string manifest_reader::string(std::string_view key) const {
  const nlohmann::json& v = at(key, "a string");
  if (!v.is_string()) refuse(key, &v, "a string");
  return v.get<std::string>();
}

bool manifest_reader::boolean(std::string_view key) const {
  const nlohmann::json& v = at(key, "true or false");
  if (!v.is_boolean()) refuse(key, &v, "true or false");
  return v.get<bool>();
}

namespace {
std::string integer_range(int64_t lo, int64_t hi) { return cat("an integer from ", lo, " to ", hi); }
// An integer node within [lo, hi]: a float (1.5), a string or a value beyond int64 is not one.
bool integer_within(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {  // may exceed int64: compared as unsigned
    const uint64_t x = v.get<uint64_t>();
    return x <= uint64_t(std::max<int64_t>(hi, 0)) && x >= uint64_t(std::max<int64_t>(lo, 0));
  }
  const int64_t x = v.get<int64_t>();
  return x >= lo && x <= hi;
}
}  // namespace

int64_t manifest_reader::integer(std::string_view key, int64_t lo, int64_t hi) const {
  const std::string expected = integer_range(lo, hi);
  const nlohmann::json& v = at(key, expected);
  if (!integer_within(v, lo, hi)) refuse(key, &v, expected);
  return v.get<int64_t>();
}

std::vector<int64_t> manifest_reader::integers(std::string_view key, std::size_t n, int64_t lo, int64_t hi) const {
  const std::string expected = cat(n, " integers from ", lo, " to ", hi);
  const nlohmann::json& v = at(key, expected);
  if (!v.is_array() || v.size() != n) refuse(key, &v, expected);
  std::vector<int64_t> out;
  for (const auto& e : v) {
    if (!integer_within(e, lo, hi)) refuse(key, &v, expected);
    out.push_back(e.get<int64_t>());
  }
  return out;
}

double manifest_reader::positive(std::string_view key, std::string_view what) const {
  const std::string expected = cat("a finite number > 0 (", what, ")");
  const nlohmann::json& v = at(key, expected);
  if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) refuse(key, &v, expected);
  return v.get<double>();
}

double manifest_reader::finite(std::string_view key, std::string_view what) const {
  const std::string expected = cat("a finite number (", what, ")");
  const nlohmann::json& v = at(key, expected);
  if (!v.is_number() || !std::isfinite(v.get<double>())) refuse(key, &v, expected);
  return v.get<double>();
}

std::vector<double> manifest_reader::numbers(std::string_view key, std::size_t n, bool positive, bool nulls_as_nan,
                                             std::string_view what) const {
  const std::string expected = cat(n, " finite numbers", positive ? " > 0" : "", nulls_as_nan ? " (or null)" : "",
                                   " (", what, ")");
  const nlohmann::json& v = at(key, expected);
  if (!v.is_array() || v.size() != n) refuse(key, &v, expected);
  std::vector<double> out;
  for (const auto& e : v) {
    if (e.is_null() && nulls_as_nan) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    if (!e.is_number() || !std::isfinite(e.get<double>()) || (positive && !(e.get<double>() > 0)))
      refuse(key, &v, expected);
    out.push_back(e.get<double>());
  }
  return out;
}

double manifest_reader::number_or_null(std::string_view key, std::string_view what) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr || v->is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!v->is_number() || !std::isfinite(v->get<double>()))
    refuse(key, v, cat("a finite number or null (", what, ")"));
  return v->get<double>();
}

}  // namespace tycho::host
