// Writing small .npy files for tests (format version 1.0, C order), byte for byte as numpy does
// for a header that fits: the header padded with spaces to a multiple of 64 bytes, then '\n'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

namespace tycho::test {

// The header of a .npy file (version 1.0) of `descr` and `shape_text` (the shape as the header
// spells it, e.g. "(2,)", "(3, 4)", "()"; tests of hostile input pass malformed ones too), padded
// with spaces to a multiple of 64 bytes and ended by '\n'.
inline std::string npy_header(const std::string& descr, const std::string& shape_text) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text + ", }";
  dict += std::string((64 - (10 + dict.size() + 1) % 64) % 64, ' ') + "\n";
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(dict.size() & 0xff);
  out += char(dict.size() >> 8);
  return out + dict;
}

// A whole .npy file: that header, then `data` as given.
inline std::string npy_bytes(const std::string& descr, const std::string& shape_text, const std::string& data) {
  return npy_header(descr, shape_text) + data;
}

// The bytes of the values in `v` (native order), as the data of a .npy.
template <class Container>
std::string bytes_of(const Container& v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), std::size(v) * sizeof(*std::data(v)));
}
template <class T>
std::string bytes_of(std::initializer_list<T> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(T));
}

// A .npy file (version 1.0) of `descr` and `shape`, C order.
inline void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, std::size_t bytes) {
  std::string shape_text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) shape_text += (i ? ", " : "") + std::to_string(shape[i]);
  shape_text += ")";
  const std::string header = npy_header(descr, shape_text);
  std::ofstream f(path, std::ios::binary);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
}

}  // namespace tycho::test
