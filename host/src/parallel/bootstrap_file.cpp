// The shared-file bootstrap channel: round k of the broadcasts is the file `<path>.<k>` (see
// bootstrap_channels.hpp for the protocol and what is left on disk).
//
// A round file: a 32-byte header, big-endian: magic "TYCHOBS1", round (u64), root (i32),
// world size (i32), bytes (u64); then the bytes. It appears by rename, so a reader that can open
// it sees all of it. An acknowledgement `<path>.<k>.ack<rank>` is an empty file.
#include <tycho/core/error.hpp>

#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "parallel/bootstrap_channels.hpp"

namespace tycho::host {
namespace {

using clock = std::chrono::steady_clock;
constexpr char k_magic[8] = {'T', 'Y', 'C', 'H', 'O', 'B', 'S', '1'};
constexpr size_t k_header_bytes = 32;

clock::time_point deadline_after(double seconds) {
  return clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
}

// Polling pause: from 1 ms up to 50 ms, never past the deadline.
void pause(std::chrono::microseconds& step, clock::time_point deadline) {
  const auto left = deadline - clock::now();
  if (left > clock::duration::zero())
    std::this_thread::sleep_for(std::min<clock::duration>(step, left));
  step = std::min(step * 2, std::chrono::microseconds(50000));
}

void write_all(int fd, const void* data, size_t n, const std::string& file) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail(TYCHO_ERR_IO, "cannot write '", file, "': ", std::strerror(errno));
    p += k;
    n -= size_t(k);
  }
}

// Reads exactly n bytes; false at a premature end of file.
bool read_all(int fd, void* data, size_t n, const std::string& file) {
  auto* p = static_cast<unsigned char*>(data);
  while (n > 0) {
    const ssize_t k = ::read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail(TYCHO_ERR_IO, "cannot read '", file, "': ", std::strerror(errno));
    if (k == 0) return false;
    p += k;
    n -= size_t(k);
  }
  return true;
}

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

file_channel::file_channel(int32_t rank, int32_t world_size, std::string path, double timeout_s)
    : rank_(rank), world_size_(world_size), path_(std::move(path)), timeout_s_(timeout_s) {
  if (world_size < 1) fail(TYCHO_ERR_INVALID_ARGUMENT, "file bootstrap: world size must be >= 1, got ", world_size);
  if (rank < 0 || rank >= world_size)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "file bootstrap: rank ", rank, " is not in [0, ", world_size, ")");
  if (path_.empty()) fail(TYCHO_ERR_INVALID_ARGUMENT, "file bootstrap, rank ", rank, ": no rendezvous file given");
  if (!(timeout_s > 0) || !std::isfinite(timeout_s))
    fail(TYCHO_ERR_INVALID_ARGUMENT, where(), ": the timeout must be > 0 s, got ", timeout_s);
  std::filesystem::path folder = std::filesystem::path(path_).parent_path();
  if (folder.empty()) folder = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec))
    fail(TYCHO_ERR_NOT_FOUND, where(), ": the folder of the rendezvous file, '", folder.string(),
         "', does not exist");
}

std::string file_channel::where() const { return cat("file bootstrap ", path_, ", rank ", rank_); }

void file_channel::broadcast(void* data, size_t bytes, int32_t root) {
  if (root < 0 || root >= world_size_)
    fail(TYCHO_ERR_INVALID_ARGUMENT, where(), ": root ", root, " is not in [0, ", world_size_, ")");
  if (data == nullptr && bytes > 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, where(), ": no buffer for ", bytes, " bytes");
  if (!broken_.empty()) fail(TYCHO_ERR_IO, where(), ": the channel failed earlier: ", broken_);
  const uint64_t round = round_++;
  if (world_size_ == 1) return;
  const auto deadline = deadline_after(timeout_s_);
  const std::string file = cat(path_, ".", round);
  const std::string at = cat(where(), ": broadcast round ", round, " (root ", root, ", ", bytes, " bytes)");
  auto ack_file = [&](int32_t r) { return cat(file, ".ack", r); };
  try {
    if (rank_ == root) {
      // Write beside the round file, then rename: readers never see a partial file.
      const std::string temp = cat(file, ".tmp", rank_, ".", ::getpid());
      {
        fd_closer f{::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
        if (f.fd < 0) fail(TYCHO_ERR_IO, at, ": cannot create '", temp, "': ", std::strerror(errno));
        unsigned char head[k_header_bytes];
        const uint64_t r64 = htobe64(round), b64 = htobe64(bytes);
        const uint32_t root32 = htobe32(uint32_t(root)), world32 = htobe32(uint32_t(world_size_));
        std::memcpy(head, k_magic, 8);
        std::memcpy(head + 8, &r64, 8);
        std::memcpy(head + 16, &root32, 4);
        std::memcpy(head + 20, &world32, 4);
        std::memcpy(head + 24, &b64, 8);
        write_all(f.fd, head, sizeof head, temp);
        if (bytes > 0) write_all(f.fd, data, bytes, temp);
      }
      if (::rename(temp.c_str(), file.c_str()) != 0) {
        const int e = errno;
        ::unlink(temp.c_str());
        fail(TYCHO_ERR_IO, at, ": cannot rename '", temp, "' to '", file, "': ", std::strerror(e));
      }
      // Wait until every other rank has read it.
      std::vector<char> acked(size_t(world_size_), 0);
      acked[size_t(rank_)] = 1;
      auto step = std::chrono::microseconds(1000);
      for (;;) {
        bool all = true;
        for (int32_t r = 0; r < world_size_; ++r) {
          if (acked[size_t(r)]) continue;
          if (::access(ack_file(r).c_str(), F_OK) == 0) acked[size_t(r)] = 1;
          else all = false;
        }
        if (all) break;
        if (clock::now() >= deadline) {
          std::string missing;
          int n = 0;
          for (int32_t r = 0; r < world_size_; ++r)
            if (!acked[size_t(r)]) missing += cat(n++ ? ", " : "", r);
          fail(TYCHO_ERR_IO, at, ": timed out after ", timeout_s_, " s: rank", n > 1 ? "s " : " ",
               missing, n > 1 ? " have" : " has", " not read '", file, "'");
        }
        pause(step, deadline);
      }
      // Everyone has the bytes: nothing of this round is needed any more.
      ::unlink(file.c_str());
      for (int32_t r = 0; r < world_size_; ++r)
        if (r != rank_) ::unlink(ack_file(r).c_str());
    } else {
      int fd = -1;
      auto step = std::chrono::microseconds(1000);
      for (;;) {
        fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) break;
        if (errno != ENOENT)
          fail(TYCHO_ERR_IO, at, ": cannot open '", file, "': ", std::strerror(errno));
        if (clock::now() >= deadline)
          fail(TYCHO_ERR_IO, at, ": timed out after ", timeout_s_, " s: rank ", root,
               " (the root) has not written '", file, "'");
        pause(step, deadline);
      }
      fd_closer f{fd};
      unsigned char head[k_header_bytes];
      if (!read_all(fd, head, sizeof head, file) || std::memcmp(head, k_magic, 8) != 0)
        fail(TYCHO_ERR_IO, at, ": '", file, "' is not a tycho bootstrap file");
      uint64_t r64, b64;
      uint32_t root32, world32;
      std::memcpy(&r64, head + 8, 8);
      std::memcpy(&root32, head + 16, 4);
      std::memcpy(&world32, head + 20, 4);
      std::memcpy(&b64, head + 24, 8);
      const uint64_t file_round = be64toh(r64), file_bytes = be64toh(b64);
      const auto file_root = int32_t(be32toh(root32)), file_world = int32_t(be32toh(world32));
      if (file_round != round || file_root != root || file_world != world_size_ || file_bytes != bytes)
        fail(TYCHO_ERR_IO, at, ": '", file, "' holds round ", file_round, " from root ", file_root,
             " of world size ", file_world, " with ", file_bytes,
             " bytes (every rank must broadcast the same size from the same root, in the same "
             "order; or the file is left from another run: use a fresh rendezvous file per run)");
      if (bytes > 0 && !read_all(fd, data, bytes, file))
        fail(TYCHO_ERR_IO, at, ": '", file, "' ends before its ", bytes, " bytes");
      const std::string ack = ack_file(rank_);
      fd_closer a{::open(ack.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
      if (a.fd < 0) fail(TYCHO_ERR_IO, at, ": cannot create '", ack, "': ", std::strerror(errno));
    }
  } catch (const error& e) {
    broken_ = e.what();
    throw;
  }
}

}  // namespace tycho::host
