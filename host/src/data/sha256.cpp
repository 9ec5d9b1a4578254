#include "data/sha256.hpp"

#include <tycho/core/error.hpp>

#include <fstream>
#include <vector>

namespace tycho::host {

sha256::sha256() { sha256_init(&ctx_); }

void sha256::update(const void* data, std::size_t size) {
  sha256_update(&ctx_, size, static_cast<const uint8_t*>(data));
}

std::array<uint8_t, 32> sha256::digest() {
  static_assert(SHA256_DIGEST_SIZE == 32);
  std::array<uint8_t, 32> out{};
  sha256_digest(&ctx_, out.size(), out.data());  // also resets the context
  return out;
}

std::string sha256::hex_digest() {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest()) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(TYCHO_ERR_IO, "cannot read '", path, "' to compute its SHA-256");
  sha256 h;
  std::vector<char> buf(std::size_t(1) << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    if (in.gcount() > 0) h.update(buf.data(), std::size_t(in.gcount()));
  }
  if (in.bad()) fail(TYCHO_ERR_IO, "error reading '", path, "' to compute its SHA-256");
  return h.hex_digest();
}

}  // namespace tycho::host
