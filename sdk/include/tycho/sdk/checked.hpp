// Overflow-safe sizes. Every size read from a file (an HDF5 dataspace, an .npy header, a zip
// member, a manifest) is untrusted: a crafted shape whose product wraps past 2^63 would size a
// small buffer that a reader then writes past. Products of such sizes go through these helpers
// before anything is allocated; the throwing forms name the file and array (`where`).
//
// Header-only, no state: thread-safe. Errors: tycho::sdk::error with TYCHO_ERR_BAD_DATA.
#pragma once

#include <tycho/sdk/error.hpp>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace tycho::sdk {

// a · b for a, b >= 0; nullopt when either is negative or the product exceeds int64.
[[nodiscard]] inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b for a, b >= 0; nullopt when either is negative or the sum exceeds int64.
[[nodiscard]] inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of `dims` (each >= 0), nullopt when a dimension is negative or it overflows.
[[nodiscard]] inline std::optional<int64_t> checked_product(const int64_t* dims, std::size_t n) {
  int64_t r = 1;
  for (std::size_t i = 0; i < n; ++i) {
    auto next = checked_mul(r, dims[i]);
    if (!next) return std::nullopt;
    r = *next;
  }
  return r;
}

// `value` when it lies in [lo, hi], else throws "<what> is <value>; expected a whole number from
// <lo> to <hi><unit>" (TYCHO_ERR_BAD_DATA; `status` for a setting). Every integer a file or a
// setting gives is checked so before arithmetic uses it (a step count of 2^63 - 1 incremented,
// a padded size near 2^63 multiplied).
inline int64_t integer_in_range(int64_t value, int64_t lo, int64_t hi, const std::string& what,
                                const char* unit = "", tycho_status status = TYCHO_ERR_BAD_DATA) {
  if (value < lo || value > hi)
    fail(status, what, " is ", value, "; expected a whole number from ", lo, " to ", hi, unit);
  return value;
}

// The product of `factors` (each >= 0, e.g. patterns, pixels, bytes per value), or throws
// "<what> needs <a> x <b> x ... bytes, which exceeds 2^63" (`status`) when it overflows int64:
// the size a buffer is asked for, checked before the request.
inline int64_t checked_size_or_fail(std::initializer_list<int64_t> factors, const std::string& what,
                                    tycho_status status = TYCHO_ERR_BAD_DATA) {
  const auto product = checked_product(factors.begin(), factors.size());
  if (!product) {
    std::string text;
    for (int64_t f : factors) text += (text.empty() ? "" : " x ") + std::to_string(f);
    fail(status, what, " needs ", text, " bytes, which exceeds 2^63 (or a factor is negative)");
  }
  return *product;
}

// A whole-numbered double (a count as float32 or float64) as decimal text, exactly, without
// converting it to an integer type it may not fit (2^64 does not fit int64: converting it is
// undefined behaviour).
inline std::string whole_number_text(double v) {
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

namespace detail {
inline std::string dims_text(const int64_t* dims, std::size_t n) {
  std::string s = "(";
  for (std::size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  if (n == 1) s += ",";
  return s + ")";
}
}  // namespace detail

// The bytes of an array of shape `dims` with `element_bytes` per element, or throws
// "<where> has shape (...): ... exceeds 64-bit sizes" (TYCHO_ERR_BAD_DATA). A negative
// dimension (an HDF5 size above 2^63 read as int64) is refused the same way.
inline int64_t array_bytes_or_fail(const int64_t* dims, std::size_t n, int64_t element_bytes,
                                   const std::string& where) {
  for (std::size_t i = 0; i < n; ++i)
    if (dims[i] < 0)
      fail(TYCHO_ERR_BAD_DATA, where, " has shape ", detail::dims_text(dims, n), ": dimension ", i,
           " is negative or above 2^63, expected sizes >= 0");
  const auto count = checked_product(dims, n);
  const auto bytes = count ? checked_mul(*count, element_bytes) : std::nullopt;
  if (!bytes)
    fail(TYCHO_ERR_BAD_DATA, where, " has shape ", detail::dims_text(dims, n), ", whose size in bytes (",
         element_bytes, " per element) exceeds 2^63: the file's shape is corrupt or crafted");
  return *bytes;
}
inline int64_t array_bytes_or_fail(const std::vector<int64_t>& dims, int64_t element_bytes,
                                   const std::string& where) {
  return array_bytes_or_fail(dims.data(), dims.size(), element_bytes, where);
}

// Refuses a data set of scan[0] x scan[1] patterns of detector[0] x detector[1] pixels whose
// float32 patterns (what every source delivers) or whose (P, 2) float64 positions would not
// fit 64-bit sizes. Every source calls it on the shape its file declares, before info().
inline void check_data_shape(const int64_t scan[2], const int64_t detector[2], const std::string& where) {
  const int64_t dims[4] = {scan[0], scan[1], detector[0], detector[1]};
  bool ok = scan[0] >= 0 && scan[1] >= 0 && detector[0] >= 0 && detector[1] >= 0;
  if (ok) {
    const auto patterns = checked_mul(scan[0], scan[1]);
    const auto pixels = checked_mul(detector[0], detector[1]);
    const auto values = patterns && pixels ? checked_mul(*patterns, *pixels) : std::nullopt;
    ok = values && checked_mul(*values, 4) && checked_mul(*patterns, 16);
  }
  if (!ok)
    fail(TYCHO_ERR_BAD_DATA, where, " declares ", scan[0], " x ", scan[1], " patterns of ", detector[0], " x ",
         detector[1], " pixels (shape ", detail::dims_text(dims, 4), "), whose size as float32 exceeds 2^63 bytes: "
         "the file's shape is corrupt or crafted");
}

// Refuses a zip member whose declared (uncompressed) size its stored bytes cannot produce, so
// that nothing that size is allocated for it: a stored member (zip method 0) holds exactly its
// bytes; deflate (method 8) inflates at most 1032:1 (a 258-byte match per 2 bits). Other
// methods are not bounded here.
inline void check_member_size(uint64_t declared, uint64_t compressed, int zip_method, const std::string& where) {
  constexpr uint64_t k_deflate_most_ratio = 1032;
  constexpr uint64_t k_slack = 1u << 16;  // a tiny member's fixed costs
  if (zip_method == 0 && declared != compressed)
    fail(TYCHO_ERR_BAD_DATA, where, " declares ", declared, " bytes but stores ", compressed,
         " (uncompressed): the member is corrupt or crafted");
  if (zip_method == 8 && compressed < (std::numeric_limits<uint64_t>::max() - k_slack) / k_deflate_most_ratio &&
      declared > compressed * k_deflate_most_ratio + k_slack)
    fail(TYCHO_ERR_BAD_DATA, where, " declares ", declared, " bytes from ", compressed,
         " compressed bytes, more than deflate can produce (at most 1032:1): the member is corrupt or crafted");
}

}  // namespace tycho::sdk
