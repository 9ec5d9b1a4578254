// The host's own look into a zip archive (results, prepared files) before a format plugin or a
// reader inflates anything: the entries' names and declared sizes, manifest.json's text, and
// each .npy member's header (only its first bytes are inflated). A reader checks these against
// what the manifest implies, so that a member that would inflate to more (a zip bomb) is
// refused first. Errors are TYCHO_ERR_BAD_DATA and name the file and the member.
// Not thread-safe: one thread per zip_archive.
#pragma once

#include <tycho/sdk/npy.hpp>

#include <zip.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tycho::host {

class zip_archive {
 public:
  struct entry {
    std::string name;
    uint64_t size = 0;        // declared uncompressed size
    uint64_t comp_size = 0;   // stored bytes
    int method = 0;           // 0 stored, 8 deflated, ...
    bool encrypted = false;
    zip_uint64_t index = 0;
  };

  // Opens `path` read-only. Refuses a file that is not a readable zip archive ("... the file is
  // truncated or corrupt"), an entry libzip cannot describe, and two entries of the same name
  // (readers would disagree which one is meant: tycho read the first, Python's zipfile the last).
  explicit zip_archive(const std::string& path);
  ~zip_archive();
  zip_archive(const zip_archive&) = delete;
  zip_archive& operator=(const zip_archive&) = delete;

  // Whether the file at `path` starts as a zip archive does ("PK\3\4", or "PK\5\6" for an empty
  // one): such a file is looked into before a format plugin reads it, whatever format that is.
  static bool looks_like_zip(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<entry>& entries() const { return entries_; }
  const entry* find(std::string_view name) const;  // nullptr when absent

  // The whole member as text, refused when it declares more than `most` bytes or more than its
  // stored bytes can hold (tycho/sdk/checked.hpp check_member_size); read to its end, so that
  // libzip checks its CRC.
  std::string read_text(const entry& e, uint64_t most);
  // The member's .npy header (the zip format's codec, sdk::npy::read_stored_header): its dtype,
  // shape and data size, which must fill the member's declared size exactly. Only the header's
  // bytes are read.
  sdk::npy::stored_header npy_header(const entry& e);

 private:
  std::string where(const entry& e) const;
  std::string path_;
  zip_t* zip_ = nullptr;
  std::vector<entry> entries_;
};

}  // namespace tycho::host
