// Checks of a manifest.json read from a result or prepared file: the file is untrusted, so its
// version and the numbers that size or bound work are checked strictly, with the member named.
#pragma once

#include <tycho/core/error.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace tycho::host {

// Refuses a manifest whose "format_version" is absent, not an integer (a string "1", a float
// 1.5) or not `expected`. `what` names the kind of file ("tycho result", "prepared file").
inline void check_format_version(const nlohmann::json& manifest, int expected, const std::string& path,
                                 const char* what, const char* remedy) {
  const auto it = manifest.find("format_version");
  if (it == manifest.end())
    fail(TYCHO_ERR_BAD_DATA, "'", path, "': member 'manifest.json' has no \"format_version\"; expected ", expected,
         " for a ", what);
  if (!it->is_number_integer())
    fail(TYCHO_ERR_BAD_DATA, "'", path, "': member 'manifest.json' has \"format_version\": ", it->dump(),
         ", expected the integer ", expected, " for a ", what);
  if (it->get<int64_t>() != expected)
    fail(TYCHO_ERR_BAD_DATA, "'", path, "' is a ", what, " of format version ", it->get<int64_t>(),
         " (member 'manifest.json'); this tycho reads version ", expected, ": ", remedy);
}

// The most iterations a saved run's schedule may span: a manifest's count beyond it (e.g. 2^62)
// would make a resumed run go on for ever.
inline constexpr int64_t k_most_schedule_iterations = 100'000'000;

// The iteration count `object[key]` (`name` is its dotted path, for the message): an integer in
// [0, k_most_schedule_iterations]. A float, a string or 2^62 is refused, naming the member.
inline int64_t iteration_count(const nlohmann::json& object, const char* key, const char* name,
                               const std::string& path) {
  const auto it = object.find(key);
  if (it == object.end())
    fail(TYCHO_ERR_BAD_DATA, "'", path, "': member 'manifest.json' has no ", name);
  if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(k_most_schedule_iterations)) ||
      it->get<int64_t>() < 0 || it->get<int64_t>() > k_most_schedule_iterations)
    fail(TYCHO_ERR_BAD_DATA, "'", path, "': member 'manifest.json' has ", name, " = ", it->dump(),
         ", expected an integer from 0 to ", k_most_schedule_iterations);
  return it->get<int64_t>();
}

}  // namespace tycho::host
