#include "npy.hpp"

#include <tycho/sdk.hpp>
#include <tycho/sdk/npy.hpp>

#include <bit>
#include <cstring>
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

// The table's dtype for a descr, without the byte-order character; nullopt if none.
std::optional<DLDataType> table_dtype(std::string_view code) {
  for (const auto& e : dtype_table)
    if (code == e.code) return e.dtype;
  return std::nullopt;
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
                               sdk::npy::shape_text(std::vector<int64_t>(shape, shape + ndim)), ", }");
  std::string out = wrap(dict, 1);
  if (out.size() - (magic_bytes + 4) > 0xffff) out = wrap(dict, 2);  // too long for 16 bits
  return out;
}

npy_array_header read_npy_header(const std::function<void(void*, std::size_t)>& read,
                                 uint64_t member_bytes, const std::string& where) {
  // The SDK parses the preamble; this codec's dtype set (with bool), its refusal of big-endian
  // data and its "the data fills the member exactly" rule are applied here.
  const sdk::npy::header p = sdk::npy::read_preamble(read, member_bytes, where);
  char order = '=';
  const auto dtype = table_dtype(sdk::npy::descr_code(p.descr, &order));
  if (!dtype)
    fail(TYCHO_ERR_BAD_DATA, where, ": unsupported .npy dtype '", p.descr, "', expected one of ",
         npy_supported_dtypes());
  if (order == '>' && dtype->bits > 8)
    fail(TYCHO_ERR_BAD_DATA, where, ": big-endian .npy dtype '", p.descr,
         "', expected little-endian ('<')");
  npy_array_header h;
  h.dtype = *dtype;
  h.shape = p.shape;
  h.fortran_order = p.fortran_order;
  h.header_bytes = p.header_bytes;
  h.data_bytes = sdk::npy::array_bytes(h.shape, h.dtype.bits / 8u, where);
  if (member_bytes - h.header_bytes != h.data_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": holds ", member_bytes - h.header_bytes,
         " bytes of array data, expected ", h.data_bytes, " for shape ",
         sdk::npy::shape_text(h.shape), " of ", npy_dtype_name(h.dtype));
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
