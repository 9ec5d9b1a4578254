#include "npy_file.hpp"

#include <tycho/core/error.hpp>

#include <cstring>
#include <filesystem>

namespace tycho::host {

bool is_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[6] = {};
  return in.read(magic, 6) && std::memcmp(magic, "\x93NUMPY", 6) == 0;
}

npy_file::npy_file(const std::string& path, const std::string& key)
    : in_(path, std::ios::binary), path_(path), key_(key), where_("'" + path + "'") {
  if (!in_) fail(TYCHO_ERR_NOT_FOUND, key_, ": cannot open '", path_, "'");
  const uint64_t total = std::filesystem::file_size(path_);
  header_ = sdk::npy::read_header([this](void* dst, std::size_t bytes) { read(dst, bytes); }, total, where_);
}

void npy_file::read(void* dst, std::size_t bytes) {
  if (!in_.read(static_cast<char*>(dst), std::streamsize(bytes)))
    fail(TYCHO_ERR_BAD_DATA, key_, ": '", path_, "' is truncated");
}

}  // namespace tycho::host
