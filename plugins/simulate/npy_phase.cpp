#include "npy_phase.hpp"

#include <tycho/sdk.hpp>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace tycho::simulate {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

using sdk::cat;
using sdk::fail;

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  fail(TYCHO_ERR_BAD_DATA, "config key 'object_phase_npy': '", path, "' ", what);
}

// The value text of `key` in the header dict ("'descr': '<f4', ..."), up to the next
// top-level comma or the closing brace; quotes and parentheses are kept.
std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  std::size_t at = std::string::npos;
  for (const char* q : {"'", "\""}) {
    at = header.find(q + key + q);
    if (at != std::string::npos) break;
  }
  if (at == std::string::npos) bad(path, cat("has a .npy header without '", key, "': ", header));
  std::size_t colon = header.find(':', at + key.size() + 2);
  if (colon == std::string::npos) bad(path, cat("has a malformed .npy header: ", header));
  std::size_t i = colon + 1, depth = 0;
  std::string v;
  for (; i < header.size(); ++i) {
    char c = header[i];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    v += c;
  }
  std::size_t b = v.find_first_not_of(" \t\n"), e = v.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
}

std::vector<int64_t> parse_shape(const std::string& text, const std::string& path) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    bad(path, cat("has a malformed shape ", text, " in its .npy header"));
  std::vector<int64_t> dims;
  std::size_t i = 1;
  while (i < text.size() - 1) {
    while (i < text.size() - 1 && (std::isspace(static_cast<unsigned char>(text[i])) || text[i] == ',')) ++i;
    if (i >= text.size() - 1) break;
    if (!std::isdigit(static_cast<unsigned char>(text[i])))
      bad(path, cat("has a malformed shape ", text, " in its .npy header"));
    int64_t v = 0;
    while (i < text.size() - 1 && std::isdigit(static_cast<unsigned char>(text[i]))) {
      int d = text[i++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10) bad(path, "has a shape that overflows");
      v = v * 10 + d;
    }
    dims.push_back(v);
  }
  return dims;
}

}  // namespace

phase_map read_npy_phase(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    fail(TYCHO_ERR_NOT_FOUND, "config key 'object_phase_npy': '", path, "' does not exist");
  if (std::filesystem::is_directory(path, ec)) bad(path, "is a directory, expected a .npy file");
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) bad(path, cat("cannot be read: ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, "cannot be opened for reading");

  unsigned char pre[12] = {};
  if (!in.read(reinterpret_cast<char*>(pre), 10) || std::memcmp(pre, "\x93NUMPY", 6) != 0)
    bad(path, "is not a NumPy .npy file (no \\x93NUMPY magic)");
  const int major = pre[6];
  uint64_t header_len = 0, fixed = 0;
  if (major == 1) {
    header_len = uint64_t(pre[8]) | uint64_t(pre[9]) << 8;
    fixed = 10;
  } else if (major == 2 || major == 3) {
    if (!in.read(reinterpret_cast<char*>(pre + 10), 2)) bad(path, "is truncated in its header");
    header_len = uint64_t(pre[8]) | uint64_t(pre[9]) << 8 | uint64_t(pre[10]) << 16 | uint64_t(pre[11]) << 24;
    fixed = 12;
  } else {
    bad(path, cat("has .npy format version ", major, ".", int(pre[7]), "; versions 1.0, 2.0 and 3.0 are read"));
  }
  if (fixed + header_len > file_bytes) bad(path, "is truncated in its header");
  std::string header(std::size_t(header_len), '\0');
  if (!in.read(header.data(), std::streamsize(header_len))) bad(path, "is truncated in its header");

  std::string descr = dict_value(header, "descr", path);
  std::string order = dict_value(header, "fortran_order", path);
  std::vector<int64_t> shape = parse_shape(dict_value(header, "shape", path), path);
  if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"')) descr = descr.substr(1, descr.size() - 2);
  int bytes = 0;
  if (descr == "<f4" || descr == "=f4") bytes = 4;
  else if (descr == "<f8" || descr == "=f8") bytes = 8;
  else bad(path, cat("has dtype '", descr, "'; expected a little-endian float32 ('<f4') or float64 ('<f8') phase map"));
  if (order != "False" && order != "True") bad(path, cat("has fortran_order = ", order, " in its .npy header"));
  const bool fortran = order == "True";
  if (shape.size() != 2)
    bad(path, cat("holds a ", shape.size(), "-D array; expected a 2-D phase map (rows, cols) in radians"));
  if (shape[0] <= 0 || shape[1] <= 0 || shape[0] > (int64_t(1) << 20) || shape[1] > (int64_t(1) << 20))
    bad(path, cat("has shape (", shape[0], ", ", shape[1], "); expected 1 to 1048576 pixels per axis"));
  const uint64_t count = uint64_t(shape[0]) * uint64_t(shape[1]);
  if (file_bytes - fixed - header_len < count * uint64_t(bytes))
    bad(path, cat("is truncated: a (", shape[0], ", ", shape[1], ") ", bytes == 4 ? "float32" : "float64",
                  " array needs ", count * uint64_t(bytes), " bytes of data, the file holds ",
                  file_bytes - fixed - header_len));

  std::vector<char> raw(std::size_t(count) * std::size_t(bytes));
  if (!in.read(raw.data(), std::streamsize(raw.size()))) bad(path, "could not be read to the end");
  phase_map m;
  m.shape[0] = shape[0];
  m.shape[1] = shape[1];
  m.phase.resize(std::size_t(count));
  for (uint64_t k = 0; k < count; ++k) {
    double v;
    if (bytes == 4) {
      float f;
      std::memcpy(&f, raw.data() + k * 4, 4);
      v = f;
    } else {
      std::memcpy(&v, raw.data() + k * 8, 8);
    }
    if (!std::isfinite(v)) {
      uint64_t r = fortran ? k % uint64_t(shape[0]) : k / uint64_t(shape[1]);
      uint64_t c = fortran ? k / uint64_t(shape[0]) : k % uint64_t(shape[1]);
      bad(path, cat("holds a non-finite phase (", v, ") at (", r, ", ", c, ")"));
    }
    // Fortran order: element k is (k % rows, k / rows).
    uint64_t dst = fortran ? (k % uint64_t(shape[0])) * uint64_t(shape[1]) + k / uint64_t(shape[0]) : k;
    m.phase[std::size_t(dst)] = v;
  }
  return m;
}

}  // namespace tycho::simulate
