// SHA-256 (FIPS 180-4) of a byte stream and of a file, for the checksum a prepared file records
// of its source. Self-contained (no crypto library in the dependency set); the digest is the
// standard one: `sha256sum FILE` and Python's hashlib.sha256 print the same hex text.
#pragma once

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
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes
};

// The SHA-256 of a file's bytes, hex; throws TYCHO_ERR_IO when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace tycho::host
