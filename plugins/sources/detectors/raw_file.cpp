#include "raw_file.hpp"

#include <tycho/sdk.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tycho::detectors {

using sdk::fail;

raw_file::raw_file(const std::string& path, const std::string& given, const std::string& reads) : name_(path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (std::filesystem::path(given).is_relative() && given != path)
      fail(TYCHO_ERR_NOT_FOUND, "data file '", path, "' does not exist ([data] path = \"", given,
           "\" is relative to the config file's folder; ", reads, ")");
    fail(TYCHO_ERR_NOT_FOUND, "data file '", path, "' does not exist (", reads, ")");
  }
  if (!S_ISREG(st.st_mode)) fail(TYCHO_ERR_BAD_DATA, "data file '", path, "' is not a regular file (", reads, ")");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(TYCHO_ERR_IO, "cannot open '", path, "' for reading: ", std::strerror(errno));
  size_ = uint64_t(st.st_size);
}

raw_file::~raw_file() {
  if (fd_ >= 0) ::close(fd_);
}

void raw_file::read_at(uint64_t offset, uint64_t bytes, void* dst, const std::string& what) const {
  if (offset > size_ || bytes > size_ - offset)
    fail(TYCHO_ERR_BAD_DATA, "'", name_, "' is truncated: ", what, " needs ", bytes, " bytes at offset ", offset,
         ", but the file ends at ", size_);
  auto* out = static_cast<unsigned char*>(dst);
  uint64_t done = 0;
  while (done < bytes) {
    const uint64_t chunk = std::min<uint64_t>(bytes - done, uint64_t(1) << 30);
    const ssize_t n = ::pread(fd_, out + done, std::size_t(chunk), off_t(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(TYCHO_ERR_IO, "reading '", name_, "' at offset ", offset + done, " failed (", what, "): ", std::strerror(errno));
    }
    if (n == 0)
      fail(TYCHO_ERR_BAD_DATA, "'", name_, "' is truncated: ", what, " needs ", bytes, " bytes at offset ", offset,
           ", but the file ends at ", offset + done, " (it shrank while open)");
    done += uint64_t(n);
  }
}

std::string with_extension(const std::string& path, const std::string& extension) {
  std::filesystem::path p(path);
  if (!p.has_extension()) return "";
  return p.replace_extension(extension).string();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_text_file(const std::string& path, uint64_t most_bytes, const std::string& what) {
  raw_file f(path, path, what);
  if (f.size() > most_bytes)
    fail(TYCHO_ERR_BAD_DATA, "'", path, "' is ", f.size(), " bytes, more than the ", most_bytes, " a ", what,
         " may have: it is not one, or it is corrupt");
  std::string text(std::size_t(f.size()), '\0');
  f.read_at(0, f.size(), text.data(), what);
  return text;
}

}  // namespace tycho::detectors
