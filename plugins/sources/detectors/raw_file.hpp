// A data file read by byte offset, for the detector formats that are not HDF5 (Merlin .mib,
// Gatan .dm3/.dm4, EMPAD .raw). Reads are positioned (pread), so one open file serves any
// order of requests; every short read is refused naming the file, the offset and what was
// being read, so a truncated file is an error, never zeros.
#pragma once

#include <cstdint>
#include <string>

namespace tycho::detectors {

class raw_file {
 public:
  // Opens `path` read-only; `given` is the path as the config wrote it (a relative one gets a
  // hint about where it resolved), `reads` what the source reads, for the message of a missing
  // file (e.g. "the mib source reads Merlin .mib files"). Throws tycho::sdk::error.
  raw_file(const std::string& path, const std::string& given, const std::string& reads);
  ~raw_file();
  raw_file(const raw_file&) = delete;
  raw_file& operator=(const raw_file&) = delete;

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }

  // Reads `bytes` at `offset` into `dst`, or throws TYCHO_ERR_BAD_DATA naming the file, the
  // offset and `what` when the file ends first (TYCHO_ERR_IO on a system error).
  void read_at(uint64_t offset, uint64_t bytes, void* dst, const std::string& what) const;

 private:
  std::string name_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A path beside `path` with its extension replaced (".hdr" for "scan.mib"): "" when `path` has
// no extension.
std::string with_extension(const std::string& path, const std::string& extension);

// Whether a regular file exists at `path`.
bool file_exists(const std::string& path);

// A small text file (a .hdr, an .xml) read whole, at most `most_bytes`; throws naming the file
// when it is larger or unreadable.
std::string read_text_file(const std::string& path, uint64_t most_bytes, const std::string& what);

}  // namespace tycho::detectors
