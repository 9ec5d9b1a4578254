#include "npy_phase.hpp"

#include <tycho/sdk.hpp>
#include <tycho/sdk/npy.hpp>

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

  const auto read = [&](void* dst, std::size_t n) {
    if (!in.read(static_cast<char*>(dst), std::streamsize(n))) bad(path, "is truncated in its header");
  };
  const sdk::npy::header h = sdk::npy::read_header(read, file_bytes, cat("config key 'object_phase_npy': '", path, "'"));
  const std::string& descr = h.descr;
  const std::vector<int64_t>& shape = h.shape;
  int bytes = 0;
  if (!h.big_endian && h.dtype && h.dtype->code == kDLFloat && h.dtype->bits == 32) bytes = 4;
  else if (!h.big_endian && h.dtype && h.dtype->code == kDLFloat && h.dtype->bits == 64) bytes = 8;
  else bad(path, cat("has dtype '", descr, "'; expected a little-endian float32 ('<f4') or float64 ('<f8') phase map"));
  const bool fortran = h.fortran_order;
  if (shape.size() != 2)
    bad(path, cat("holds a ", shape.size(), "-D array; expected a 2-D phase map (rows, cols) in radians"));
  if (shape[0] <= 0 || shape[1] <= 0 || shape[0] > (int64_t(1) << 20) || shape[1] > (int64_t(1) << 20))
    bad(path, cat("has shape (", shape[0], ", ", shape[1], "); expected 1 to 1048576 pixels per axis"));
  const uint64_t count = uint64_t(shape[0]) * uint64_t(shape[1]);

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
