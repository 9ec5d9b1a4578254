// SHA-256 of a byte stream and of a file, for the checksum a prepared file records of its
// source. Computed by Nettle (libnettle, Debian's nettle-dev), so the digest is the standard
// one: `sha256sum FILE` and Python's hashlib.sha256 print the same hex text.
// Not thread-safe per object; separate objects may be used on separate threads.
#pragma once

#include <nettle/sha2.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tycho::host {

class sha256 {
 public:
  sha256();
  void update(const void* data, std::size_t size);
  std::array<uint8_t, 32> digest();  // finishes; the object is then spent
  std::string hex_digest();          // lower-case hex of digest()

 private:
  sha256_ctx ctx_;
};

// The SHA-256 of a file's bytes, hex; throws TYCHO_ERR_IO when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace tycho::host
