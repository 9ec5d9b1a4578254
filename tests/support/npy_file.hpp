// Writing small .npy files for tests (format version 1.0, C order), byte for byte as numpy does
// for a header that fits: the header padded with spaces to a multiple of 64 bytes, then '\n'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace tycho::test {

// A .npy file (version 1.0) of `descr` and `shape`, C order.
inline void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, std::size_t bytes) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += "), }";
  const std::size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char((total - 10) & 0xff);
  out += char((total - 10) >> 8);
  out += dict;
  out.append(total - out.size() - 1, ' ');
  out += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write(out.data(), std::streamsize(out.size()));
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
}

}  // namespace tycho::test
