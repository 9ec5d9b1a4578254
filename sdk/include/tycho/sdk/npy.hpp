// The one NumPy .npy codec of tycho, header-only: the reader of .npy preambles (magic, version,
// length, header dict) that the plugins reading .npy data share (the `npy` source, simulate's
// object_phase_npy), and the codec of stored arrays (write_header, read_stored_header,
// fortran_to_c_order) that the `zip` format writes and reads its members with.
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
#include <type_traits>
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

// "float32", "complex64", "bool": for messages (defined with the codec below).
inline std::string dtype_text(DLDataType dtype);

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
    // The header's bytes as they are, NUL and control characters escaped (\x00).
    fail(TYCHO_ERR_BAD_DATA, where_, ": malformed .npy header: ", printable(what), " (at character ", pos_,
         " of \"", printable(text), s_.size() > 200 ? "...\"" : "\"", ")");
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
    if (rest.substr(0, 4) == "True") {  // C++17: no starts_with
      pos_ += 4;
      return true;
    }
    if (rest.substr(0, 5) == "False") {
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
    fail(TYCHO_ERR_BAD_DATA, where, ": its .npy header declares shape ", shape_text(h.shape), " of ",
         dtype_text(*h.dtype), " ('", printable(h.descr), "'), ", h.data_bytes, " bytes of data, but only ",
         total_bytes - h.header_bytes, " follow the header: the header lies about the shape, or the array is truncated");
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

// `n` little-endian values of a plain numeric dtype (float16/32/64, (u)int8/16/32) at `src`
// (unaligned) to float or double: what a reader of stored detector data widens them to. Other
// dtypes are the caller's to refuse before the call (they convert as int32 here).
template <class Out>
inline void convert_values(DLDataType t, const unsigned char* src, Out* dst, std::size_t n) {
  auto each = [&](auto stored) {
    using T = decltype(stored);
    for (std::size_t k = 0; k < n; ++k) {
      T v;
      std::memcpy(&v, src + k * sizeof(T), sizeof(T));
      dst[k] = static_cast<Out>(v);
    }
  };
  if (t.code == kDLFloat && t.bits == 32) {
    if constexpr (std::is_same_v<Out, float>)
      std::memcpy(dst, src, n * 4);
    else
      each(float());
  } else if (t.code == kDLFloat && t.bits == 64) {
    each(double());
  } else if (t.code == kDLFloat && t.bits == 16) {
    for (std::size_t k = 0; k < n; ++k) {
      uint16_t h;
      std::memcpy(&h, src + 2 * k, 2);
      dst[k] = static_cast<Out>(half_to_float(h));
    }
  } else if (t.code == kDLUInt && t.bits == 8) {
    each(uint8_t());
  } else if (t.code == kDLUInt && t.bits == 16) {
    each(uint16_t());
  } else if (t.code == kDLUInt && t.bits == 32) {
    each(uint32_t());
  } else if (t.code == kDLInt && t.bits == 8) {
    each(int8_t());
  } else if (t.code == kDLInt && t.bits == 16) {
    each(int16_t());
  } else {
    each(int32_t());
  }
}

// ---------------------------------------------------------------- the codec of stored arrays
// What the `zip` format (and any plugin that stores arrays as .npy) writes and reads back: the
// numeric dtypes of dtype_of_code plus bool, little-endian, C order on write. The bytes are
// written and read as they lie in memory, so these functions need a little-endian host.

// DLPack v0.6 (the ABI's version) has no boolean type code. numpy's '|b1' maps to code 6,
// which is kDLBool from DLPack 0.8 on, so bool arrays keep their dtype through a round trip
// and read naturally once the ABI moves to a newer dlpack.h. Each element is one byte, 0 or 1.
inline constexpr uint8_t bool_code = 6;

// The descr code (without byte order) of a dtype the codec stores; nullopt for anything else
// (bfloat16, vector lanes, odd widths).
inline std::optional<std::string> stored_code(DLDataType dtype) {
  if (dtype.code == bool_code && dtype.bits == 8 && dtype.lanes == 1) return std::string("b1");
  for (const char* code : {"f2", "f4", "f8", "c8", "c16", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"}) {
    const DLDataType t = *dtype_of_code(code);
    if (t.code == dtype.code && t.bits == dtype.bits && t.lanes == dtype.lanes) return std::string(code);
  }
  return std::nullopt;
}

// '<f4', '|u1', ... for a dtype the codec stores; nullopt for anything else.
inline std::optional<std::string> descr_of(DLDataType dtype) {
  const auto code = stored_code(dtype);
  if (!code) return std::nullopt;
  return std::string(dtype.bits == 8 ? "|" : "<") + *code;
}

// "float32", "bool", "uint8x4": for messages.
inline std::string dtype_text(DLDataType dtype) {
  if (dtype.code == bool_code && dtype.bits == 8) return dtype.lanes == 1 ? "bool" : cat("boolx", dtype.lanes);
  const char* base = dtype.code == kDLFloat     ? "float"
                     : dtype.code == kDLInt     ? "int"
                     : dtype.code == kDLUInt    ? "uint"
                     : dtype.code == kDLComplex ? "complex"
                     : dtype.code == kDLBfloat  ? "bfloat"
                                                : "?";
  std::string s = cat(base, int(dtype.bits));
  if (dtype.lanes != 1) s += cat("x", dtype.lanes);
  return s;
}

// The dtypes descr_of accepts, for "expected ..." messages.
inline const char* stored_dtypes() {
  return "float16/32/64 ('<f2', '<f4', '<f8'), complex64/128 ('<c8', '<c16'), "
         "int8/16/32/64 ('|i1', '<i2', '<i4', '<i8'), uint8/16/32/64 ('|u1', '<u2', '<u4', "
         "'<u8') or bool ('|b1')";
}

namespace detail {
// Preamble = magic + 2 version bytes + length field + dict + spaces + '\n', to a multiple of 64.
inline std::string wrap_preamble(const std::string& dict, int major) {
  constexpr std::size_t magic_bytes = 6, align = 64;
  const std::size_t length_field = major == 1 ? 2 : 4;
  const std::size_t fixed = magic_bytes + 2 + length_field;
  const std::size_t total = (fixed + dict.size() + 1 + align - 1) / align * align;
  const std::size_t header_len = total - fixed;
  std::string out("\x93NUMPY", magic_bytes);
  out += char(major);
  out += char(0);
  for (std::size_t i = 0; i < length_field; ++i) out += char((header_len >> (8 * i)) & 0xff);
  out += dict;
  out.append(total - out.size() - 1, ' ');
  out += '\n';
  return out;
}
}  // namespace detail

// The complete preamble for a C-order array of `dtype` and `shape`: version 1.0, or 2.0 when the
// dict does not fit a 16-bit length. Padded with spaces and ended by '\n' to a multiple of 64
// bytes, as numpy writes it, so the array data that follows is 64-byte aligned. Throws
// TYCHO_ERR_UNSUPPORTED for a dtype descr_of does not take.
inline std::string write_header(DLDataType dtype, const int64_t* shape, int ndim) {
  const auto descr = descr_of(dtype);
  if (!descr) fail(TYCHO_ERR_UNSUPPORTED, "no .npy dtype for ", dtype_text(dtype));
  const std::string dict = cat("{'descr': '", *descr, "', 'fortran_order': False, 'shape': ",
                               shape_text(std::vector<int64_t>(shape, shape + ndim)), ", }");
  std::string out = detail::wrap_preamble(dict, 1);
  if (out.size() - 10 > 0xffff) out = detail::wrap_preamble(dict, 2);  // too long for 16 bits
  return out;
}

// A stored array's preamble, read back with the codec's rules.
struct stored_header {
  DLDataType dtype{};
  std::vector<int64_t> shape;
  bool fortran_order = false;
  uint64_t header_bytes = 0;  // preamble size: the array data starts here
  uint64_t data_bytes = 0;    // element count × element size
};

// Reads a preamble through `read` and applies the codec's rules: a dtype descr_of takes (bool
// included), little-endian data, and data that fills the `member_bytes` exactly (so a bogus
// length or shape is refused before anything is allocated). Errors are TYCHO_ERR_BAD_DATA and
// start with `where` (the member and the file).
inline stored_header read_stored_header(const std::function<void(void*, std::size_t)>& read,
                                        uint64_t member_bytes, const std::string& where) {
  const header p = read_preamble(read, member_bytes, where);
  char order = '=';
  const std::string_view code = descr_code(p.descr, &order);
  const std::optional<DLDataType> dtype =
      code == "b1" ? std::optional<DLDataType>(DLDataType{bool_code, 8, 1}) : dtype_of_code(code);
  if (!dtype)
    fail(TYCHO_ERR_BAD_DATA, where, ": unsupported .npy dtype '", printable(p.descr), "', expected one of ",
         stored_dtypes());
  if (order == '>' && dtype->bits > 8)
    fail(TYCHO_ERR_BAD_DATA, where, ": big-endian .npy dtype '", printable(p.descr), "', expected little-endian ('<')");
  stored_header h;
  h.dtype = *dtype;
  h.shape = p.shape;
  h.fortran_order = p.fortran_order;
  h.header_bytes = p.header_bytes;
  h.data_bytes = array_bytes(h.shape, h.dtype.bits / 8u, where);
  if (member_bytes - h.header_bytes != h.data_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": holds ", member_bytes - h.header_bytes, " bytes of array data, but its .npy "
         "header declares shape ", shape_text(h.shape), " of ", dtype_text(h.dtype), ", ", h.data_bytes,
         " bytes: the header lies about the shape, or the member is truncated");
  return h;
}

// Copies a Fortran-order array into C order (same shape, `element_bytes` per element).
inline void fortran_to_c_order(const void* src, void* dst, const std::vector<int64_t>& shape,
                               std::size_t element_bytes) {
  const std::size_t ndim = shape.size();
  for (int64_t d : shape)
    if (d == 0) return;
  // Element (i0, ..., in-1) sits at Σ ik·stride[k] in Fortran order, stride[k] = Π_{j<k} dj.
  std::vector<uint64_t> stride(ndim, 1);
  for (std::size_t k = 1; k < ndim; ++k) stride[k] = stride[k - 1] * uint64_t(shape[k - 1]);
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst);
  std::vector<int64_t> index(ndim, 0);
  uint64_t offset = 0;  // Fortran element offset of `index`
  // Walks the output in C order (last index fastest), keeping `offset` in step.
  for (;;) {
    std::memcpy(out, in + offset * element_bytes, element_bytes);
    out += element_bytes;
    std::size_t k = ndim;
    while (k > 0) {
      --k;
      if (++index[k] < shape[k]) {
        offset += stride[k];
        break;
      }
      offset -= stride[k] * uint64_t(shape[k] - 1);
      index[k] = 0;
      if (k == 0) return;
    }
    if (ndim == 0) return;
  }
}

}  // namespace tycho::sdk::npy
