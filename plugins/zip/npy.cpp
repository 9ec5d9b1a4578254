#include "npy.hpp"

#include <tycho/sdk.hpp>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <limits>
#include <string_view>

namespace tycho::zip_plugin {

// The codec writes and reads the bytes as they are in memory.
static_assert(std::endian::native == std::endian::little, "the .npy codec assumes a little-endian host");

namespace {

using sdk::cat;
using sdk::fail;

constexpr char magic[] = "\x93NUMPY";
constexpr std::size_t magic_bytes = 6;
constexpr std::size_t align = 64;

struct dtype_entry {
  const char* code;  // descr without the byte-order character
  DLDataType dtype;
};

// What numpy calls each supported dtype, without the byte order ('<' or '|' by size).
constexpr dtype_entry dtype_table[] = {
    {"f2", {kDLFloat, 16, 1}},  {"f4", {kDLFloat, 32, 1}},    {"f8", {kDLFloat, 64, 1}},
    {"c8", {kDLComplex, 64, 1}}, {"c16", {kDLComplex, 128, 1}}, {"i1", {kDLInt, 8, 1}},
    {"i2", {kDLInt, 16, 1}},    {"i4", {kDLInt, 32, 1}},      {"i8", {kDLInt, 64, 1}},
    {"u1", {kDLUInt, 8, 1}},    {"u2", {kDLUInt, 16, 1}},     {"u4", {kDLUInt, 32, 1}},
    {"u8", {kDLUInt, 64, 1}},   {"b1", {dl_bool_code, 8, 1}},
};

bool same(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

std::string shape_repr(const int64_t* shape, int ndim) {
  // Python's tuple repr: "()", "(5,)", "(3, 4)".
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += cat(i ? ", " : "", shape[i]);
  return s + (ndim == 1 ? ",)" : ")");
}

// Preamble = magic + 2 version bytes + length field + dict + spaces + '\n', to a multiple of 64.
std::string wrap(const std::string& dict, int major) {
  const std::size_t length_field = major == 1 ? 2 : 4;
  const std::size_t fixed = magic_bytes + 2 + length_field;
  const std::size_t total = (fixed + dict.size() + 1 + align - 1) / align * align;
  const std::size_t header_len = total - fixed;
  std::string out(magic, magic_bytes);
  out += char(major);
  out += char(0);
  for (std::size_t i = 0; i < length_field; ++i) out += char((header_len >> (8 * i)) & 0xff);
  out += dict;
  out.append(total - out.size() - 1, ' ');
  out += '\n';
  return out;
}

// A parser for the one Python literal numpy writes: a dict of 'descr' (str), 'fortran_order'
// (bool) and 'shape' (tuple of ints). Tolerates whatever whitespace, quote style and trailing
// commas other writers produce; anything else is an error that quotes the header.
class header_parser {
 public:
  header_parser(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  npy_array_header parse() {
    npy_array_header h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{', "at the start of the dict");
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':', cat("after key '", key, "'").c_str());
      if (key == "descr") {
        if (peek('[')) bad("a structured dtype (a list descr); only plain numeric dtypes are supported");
        h.dtype = parse_descr(string_literal());
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
  DLDataType parse_descr(const std::string& descr) {
    std::string_view code(descr);
    char order = '=';
    if (!code.empty() && std::strchr("<>|=", code[0])) {
      order = code[0];
      code.remove_prefix(1);
    }
    for (const auto& e : dtype_table) {
      if (code != e.code) continue;
      if (order == '>' && e.dtype.bits > 8)
        bad(cat("big-endian dtype '", descr, "', expected little-endian ('<')"));
      return e.dtype;
    }
    bad(cat("unsupported dtype '", descr, "', expected one of ", npy_supported_dtypes()));
  }

  std::string_view s_;
  const std::string& where_;
  std::size_t pos_ = 0;
};

uint64_t little_endian(const unsigned char* p, std::size_t n) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

}  // namespace

std::optional<std::string> npy_descr(DLDataType dtype) {
  for (const auto& e : dtype_table)
    if (same(e.dtype, dtype)) return std::string(dtype.bits == 8 ? "|" : "<") + e.code;
  return std::nullopt;
}

std::string npy_dtype_name(DLDataType dtype) {
  std::string s = dtype.code == dl_bool_code && dtype.bits == 8 ? "bool" : sdk::dtype_name(dtype);
  if (dtype.lanes != 1) s += cat("x", dtype.lanes);
  return s;
}

const char* npy_supported_dtypes() {
  return "float16/32/64 ('<f2', '<f4', '<f8'), complex64/128 ('<c8', '<c16'), "
         "int8/16/32/64 ('|i1', '<i2', '<i4', '<i8'), uint8/16/32/64 ('|u1', '<u2', '<u4', "
         "'<u8') or bool ('|b1')";
}

std::string npy_header(DLDataType dtype, const int64_t* shape, int ndim) {
  const auto descr = npy_descr(dtype);
  if (!descr) fail(TYCHO_ERR_UNSUPPORTED, "no .npy dtype for ", npy_dtype_name(dtype));
  const std::string dict = cat("{'descr': '", *descr, "', 'fortran_order': False, 'shape': ",
                               shape_repr(shape, ndim), ", }");
  std::string out = wrap(dict, 1);
  if (out.size() - (magic_bytes + 4) > 0xffff) out = wrap(dict, 2);  // too long for 16 bits
  return out;
}

npy_array_header read_npy_header(const std::function<void(void*, std::size_t)>& read,
                                 uint64_t member_bytes, const std::string& where) {
  unsigned char prefix[12];
  if (member_bytes < 10) fail(TYCHO_ERR_BAD_DATA, where, ": too short for a .npy array (", member_bytes, " bytes)");
  read(prefix, 8);
  if (std::memcmp(prefix, magic, magic_bytes) != 0)
    fail(TYCHO_ERR_BAD_DATA, where, ": not a .npy array (no \\x93NUMPY magic)");
  const int major = prefix[6], minor = prefix[7];
  if (major < 1 || major > 3 || minor != 0)
    fail(TYCHO_ERR_BAD_DATA, where, ": .npy format version ", major, ".", minor,
         ", expected 1.0, 2.0 or 3.0");
  const std::size_t length_field = major == 1 ? 2 : 4;
  read(prefix + 8, length_field);
  const uint64_t fixed = 8 + length_field;
  const uint64_t header_len = little_endian(prefix + 8, length_field);
  if (fixed + header_len > member_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": the .npy header claims ", header_len, " bytes but the member holds ",
         member_bytes);
  std::string text(header_len, '\0');
  read(text.data(), text.size());

  npy_array_header h = header_parser(text, where).parse();
  h.header_bytes = fixed + header_len;
  uint64_t count = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / uint64_t(d))
      fail(TYCHO_ERR_BAD_DATA, where, ": shape ", shape_repr(h.shape.data(), int(h.shape.size())),
           " overflows");
    count *= uint64_t(d);
  }
  const uint64_t element = h.dtype.bits / 8;
  if (count > std::numeric_limits<uint64_t>::max() / element)
    fail(TYCHO_ERR_BAD_DATA, where, ": shape overflows");
  h.data_bytes = count * element;
  if (member_bytes - h.header_bytes != h.data_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": holds ", member_bytes - h.header_bytes,
         " bytes of array data, expected ", h.data_bytes, " for shape ",
         shape_repr(h.shape.data(), int(h.shape.size())), " of ", npy_dtype_name(h.dtype));
  return h;
}

void fortran_to_c_order(const void* src, void* dst, const std::vector<int64_t>& shape,
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

}  // namespace tycho::zip_plugin
