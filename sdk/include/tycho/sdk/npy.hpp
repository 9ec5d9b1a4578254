// Header-only reader for NumPy .npy preambles (magic, version, length, header dict), shared by
// the plugins that read .npy data (the `npy` source, simulate's object_phase_npy, the `zip`
// format's members).
// Versions 1.0, 2.0 and 3.0 (they differ only in the width of the length field). The array's
// raw bytes follow the preamble; this header parses the dict and describes the array, the
// caller decides which dtypes, orders and shapes it accepts.
//
//   tycho::sdk::npy::header h = tycho::sdk::npy::read_header(read, total_bytes, "'x.npy'");
//
// read_preamble parses without interpreting the descr, for callers with their own dtype set;
// array_bytes sizes a shape with overflow checks.
//
// `read(dst, n)` must deliver exactly n bytes or throw. Errors are TYCHO_ERR_BAD_DATA and start
// with `where`.
#pragma once

#include <tycho/sdk/error.hpp>
#include <dlpack/dlpack.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tycho::sdk::npy {

struct header {
  std::string descr;                // as written, e.g. "<f4", "|u1", ">i2"
  std::optional<DLDataType> dtype;  // the plain numeric type descr names (nullopt: other)
  bool big_endian = false;          // descr starts with '>' and the element is wider than a byte
  bool fortran_order = false;
  std::vector<int64_t> shape;
  uint64_t header_bytes = 0;  // preamble size: the array data starts here
  uint64_t data_bytes = 0;    // element count × element size (0 when dtype is unknown)
};

// "(3, 4)", "(5,)", "()", as Python prints a tuple.
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The DLPack type of a descr without its byte-order character ("f4", "u2"); nullopt if none.
inline std::optional<DLDataType> dtype_of_code(std::string_view code) {
  struct entry {
    const char* code;
    DLDataType dtype;
  };
  static constexpr entry table[] = {
      {"f2", {kDLFloat, 16, 1}},   {"f4", {kDLFloat, 32, 1}},     {"f8", {kDLFloat, 64, 1}},
      {"c8", {kDLComplex, 64, 1}}, {"c16", {kDLComplex, 128, 1}}, {"i1", {kDLInt, 8, 1}},
      {"i2", {kDLInt, 16, 1}},     {"i4", {kDLInt, 32, 1}},       {"i8", {kDLInt, 64, 1}},
      {"u1", {kDLUInt, 8, 1}},     {"u2", {kDLUInt, 16, 1}},      {"u4", {kDLUInt, 32, 1}},
      {"u8", {kDLUInt, 64, 1}},
  };
  for (const auto& e : table)
    if (code == e.code) return e.dtype;
  return std::nullopt;
}

namespace detail {

// Parses the one Python literal numpy writes: {'descr': str, 'fortran_order': bool,
// 'shape': tuple of ints}, tolerating whitespace, either quote style and trailing commas.
class dict_parser {
 public:
  dict_parser(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  header parse() {
    header h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{', "at the start of the dict");
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':', "after a key");
      if (key == "descr") {
        if (peek('[')) bad("a structured dtype (a list descr); only plain numeric dtypes are supported");
        h.descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = bool_literal();
        have_order = true;
      } else if (key == "shape") {
        h.shape = tuple_literal();
        have_shape = true;
      } else {
        bad(cat("unexpected key '", key, "', expected 'descr', 'fortran_order' and 'shape'"));
      }
      if (!eat(',')) break;
    }
    expect('}', "to end the dict");
    skip_space();
    if (pos_ != s_.size()) bad("text after the dict");
    if (!have_descr || !have_order || !have_shape)
      bad("the dict lacks 'descr', 'fortran_order' or 'shape'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    std::string text(s_.substr(0, 200));
    text.erase(text.find_last_not_of(" \n") + 1);
    fail(TYCHO_ERR_BAD_DATA, where_, ": malformed .npy header: ", what, " (at character ", pos_,
         " of \"", text, s_.size() > 200 ? "...\"" : "\"", ")");
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool eat(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  void expect(char c, const char* context) {
    if (!eat(c)) bad(cat("expected '", c, "' ", context));
  }
  std::string string_literal() {
    skip_space();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) bad("expected a quoted string");
    const char quote = s_[pos_++];
    const std::size_t end = s_.find(quote, pos_);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string v(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return v;
  }
  bool bool_literal() {
    skip_space();
    const std::string_view rest = s_.substr(pos_);
    if (rest.starts_with("True")) {
      pos_ += 4;
      return true;
    }
    if (rest.starts_with("False")) {
      pos_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  std::vector<int64_t> tuple_literal() {
    expect('(', "to start the shape tuple");
    std::vector<int64_t> dims;
    while (!peek(')')) {
      dims.push_back(integer_literal());
      if (!eat(',')) break;
    }
    expect(')', "to end the shape tuple");
    return dims;
  }
  int64_t integer_literal() {
    skip_space();
    if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_])))
      bad("expected a non-negative integer in the shape");
    int64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      const int d = s_[pos_++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10) bad("a dimension overflows int64");
      v = v * 10 + d;
    }
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2's long suffix
    return v;
  }

  std::string_view s_;
  const std::string& where_;
  std::size_t pos_ = 0;
};

}  // namespace detail

// Reads and parses the preamble only: descr, fortran_order, shape and header_bytes are set,
// dtype stays nullopt and data_bytes 0. For callers with their own dtype set and data-size rules
// (the zip format); `total_bytes` bounds the header length as in read_header.
inline header read_preamble(const std::function<void(void*, std::size_t)>& read, uint64_t total_bytes,
                            const std::string& where) {
  unsigned char prefix[12] = {};
  if (total_bytes < 10)
    fail(TYCHO_ERR_BAD_DATA, where, ": too short for a .npy array (", total_bytes, " bytes)");
  read(prefix, 8);
  if (std::memcmp(prefix, "\x93NUMPY", 6) != 0)
    fail(TYCHO_ERR_BAD_DATA, where, ": not a NumPy .npy array (no \\x93NUMPY magic)");
  const int major = prefix[6], minor = prefix[7];
  if (major < 1 || major > 3 || minor != 0)
    fail(TYCHO_ERR_BAD_DATA, where, ": .npy format version ", major, ".", minor,
         ", expected 1.0, 2.0 or 3.0");
  const std::size_t length_field = major == 1 ? 2 : 4;
  read(prefix + 8, length_field);
  uint64_t header_len = 0;
  for (std::size_t i = 0; i < length_field; ++i) header_len |= uint64_t(prefix[8 + i]) << (8 * i);
  const uint64_t fixed = 8 + length_field;
  if (fixed + header_len > total_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": the .npy header claims ", header_len, " bytes but only ",
         total_bytes - fixed, " follow (truncated?)");
  std::string text(std::size_t(header_len), '\0');
  read(text.data(), text.size());

  header h = detail::dict_parser(text, where).parse();
  h.header_bytes = fixed + header_len;
  return h;
}

// The descr without its byte-order character ('<', '>', '|', '='), and that character ('='
// when there is none).
inline std::string_view descr_code(std::string_view descr, char* order = nullptr) {
  char o = '=';
  if (!descr.empty() && std::strchr("<>|=", descr[0])) {
    o = descr[0];
    descr.remove_prefix(1);
  }
  if (order) *order = o;
  return descr;
}

// Element count × element_bytes, refusing a shape whose size overflows uint64.
inline uint64_t array_bytes(const std::vector<int64_t>& shape, uint64_t element_bytes,
                            const std::string& where) {
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / uint64_t(d))
      fail(TYCHO_ERR_BAD_DATA, where, ": shape ", shape_text(shape), " overflows");
    count *= uint64_t(d);
  }
  if (element_bytes != 0 && count > std::numeric_limits<uint64_t>::max() / element_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": shape ", shape_text(shape), " overflows");
  return count * element_bytes;
}

// Reads and parses the preamble. `total_bytes` is the size of the whole .npy (file or member),
// so that a bogus length is refused before anything is allocated; when the dtype is known the
// data must hold at least data_bytes (more is allowed: callers that need "exactly" check it).
inline header read_header(const std::function<void(void*, std::size_t)>& read, uint64_t total_bytes,
                          const std::string& where) {
  header h = read_preamble(read, total_bytes, where);
  char order = '=';
  h.dtype = dtype_of_code(descr_code(h.descr, &order));
  if (!h.dtype) return h;
  h.big_endian = order == '>' && h.dtype->bits > 8;
  h.data_bytes = array_bytes(h.shape, h.dtype->bits / 8, where);
  if (total_bytes - h.header_bytes < h.data_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": is truncated: shape ", shape_text(h.shape), " of '", h.descr,
         "' needs ", h.data_bytes, " bytes of data, ", total_bytes - h.header_bytes, " follow the header");
  return h;
}

// IEEE half → float, by hand (no _Float16 needed).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits = 0;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp - 15 + 127) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace tycho::sdk::npy
