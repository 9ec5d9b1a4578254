// The manifest.json of a result or prepared file, read through accessors that check each value
// and, when it is missing or not what a tycho manifest holds, throw an error naming the file,
// the member, the key and what was expected:
//   'r.zip': member 'manifest.json' has calibration.object_pixel_A = "x", expected 2 finite numbers > 0 (Å)
// No text of the JSON library ("[json.exception.type_error.302] ...") reaches the user: every
// read a caller makes goes through here. Errors are TYCHO_ERR_BAD_DATA.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tycho::host {

class manifest_reader {
 public:
  manifest_reader() = default;
  // Parses `text`, the member's bytes. Refuses text that is not JSON (a NaN, a truncated member)
  // as a corrupt file, naming the byte where parsing stopped; and JSON that is not an object.
  manifest_reader(const std::string& text, std::string path);

  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return j_; }

  // The value at the dotted `key` ("calibration.object_pixel_A"); nullptr when absent (or when
  // a step of the path is not an object).
  const nlohmann::json* find(std::string_view key) const;
  // The value at `key`, refused when absent: "... has no <key>; expected <expected>".
  const nlohmann::json& at(std::string_view key, std::string_view expected) const;
  // Throws "... has <key> = <value, abridged>, expected <expected>" (or "has no <key>; expected
  // ..." for a missing one).
  [[noreturn]] void refuse(std::string_view key, const nlohmann::json* value, std::string_view expected) const;

  std::string string(std::string_view key) const;
  bool boolean(std::string_view key) const;
  // An integer in [lo, hi] (a float, a string or a larger value refused).
  int64_t integer(std::string_view key, int64_t lo, int64_t hi) const;
  // `n` integers, each in [lo, hi].
  std::vector<int64_t> integers(std::string_view key, std::size_t n, int64_t lo, int64_t hi) const;
  // A finite number > 0 (`what` says what it is, e.g. "a pixel size in Å").
  double positive(std::string_view key, std::string_view what) const;
  // A finite number.
  double finite(std::string_view key, std::string_view what) const;
  // `n` finite numbers; with `nulls_as_nan`, null entries (JSON has no NaN: an unknown value)
  // become NaN. `positive`: each (non-null) value > 0.
  std::vector<double> numbers(std::string_view key, std::size_t n, bool positive, bool nulls_as_nan,
                              std::string_view what) const;
  // A finite number, or null (NaN); absent: NaN.
  double number_or_null(std::string_view key, std::string_view what) const;

 private:
  nlohmann::json j_;
  std::string path_;
};

// The JSON value as a short text for a message (at most ~80 characters; control characters
// escaped by the JSON dump itself).
std::string json_excerpt(const nlohmann::json& v);

}  // namespace tycho::host
