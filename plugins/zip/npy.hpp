// NumPy .npy headers: which DLPack dtype a descr names, and building / parsing the preamble
// (magic, version, length, padded dict) that precedes an array's raw little-endian bytes.
// Format reference: numpy/lib/format.py (versions 1.0, 2.0 and 3.0 differ only in the width
// of the length field and the header's text encoding).
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tycho::zip_plugin {

// DLPack v0.6 (the ABI's version) has no boolean type code. numpy's '|b1' maps to code 6,
// which is kDLBool from DLPack 0.8 on, so bool arrays keep their dtype through a round trip
// and read naturally once the ABI moves to a newer dlpack.h. Each element is one byte, 0 or 1.
inline constexpr uint8_t dl_bool_code = 6;

// '<f4', '|u1', ... for a dtype this codec stores; nullopt for anything else (bfloat16,
// vector lanes, odd widths).
std::optional<std::string> npy_descr(DLDataType dtype);

// "float32", "bool", "uint8x4": for messages.
std::string npy_dtype_name(DLDataType dtype);

// The list of dtypes npy_descr accepts, for "expected ..." messages.
const char* npy_supported_dtypes();

// The complete preamble for a C-order array: version 1.0, or 2.0 when the dict does not fit
// a 16-bit length. Padded with spaces and ended by '\n' to a multiple of 64 bytes, as numpy
// writes it, so the array data that follows is 64-byte aligned within the member.
std::string npy_header(DLDataType dtype, const int64_t* shape, int ndim);

struct npy_array_header {
  DLDataType dtype{};
  std::vector<int64_t> shape;
  bool fortran_order = false;
  uint64_t header_bytes = 0;  // preamble size: the array data starts here
  uint64_t data_bytes = 0;    // element count × element size
};

// Reads the preamble through `read` (which delivers exactly n bytes or throws) and parses it
// with the SDK's parser (tycho/sdk/npy.hpp), then applies this codec's rules: a dtype of the
// table above (bool included), little-endian data, and nothing after the array data.
// `member_bytes` is the member's total size, so that a bogus length or shape is refused before
// anything is allocated, and the data must fill the member exactly. Errors are
// TYCHO_ERR_BAD_DATA and start with `where` (the member and the file).
npy_array_header read_npy_header(const std::function<void(void*, std::size_t)>& read,
                                 uint64_t member_bytes, const std::string& where);

// Copies a Fortran-order array into C order (same shape, `element_bytes` per element).
void fortran_to_c_order(const void* src, void* dst, const std::vector<int64_t>& shape,
                        std::size_t element_bytes);

}  // namespace tycho::zip_plugin
