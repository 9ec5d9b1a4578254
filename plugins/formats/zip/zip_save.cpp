// save: every array becomes "<name>.npy" stored uncompressed (so a reader can use the bytes in
// place, and numpy.load reads it as an .npz), the manifest becomes a deflated manifest.json.
// The archive is written to a temporary file beside `path`, flushed, then renamed over it, so
// a crash or an error never leaves a half-written file at `path`.
#include <fcntl.h>
#include <unistd.h>

#include <tycho/sdk.hpp>
#include <tycho/sdk/npy.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "zip_io.hpp"

namespace tycho::zip_plugin {

// The SDK's .npy codec writes and reads the bytes as they are in memory.
static_assert(std::endian::native == std::endian::little, "the .npy codec assumes a little-endian host");

namespace {

namespace fs = std::filesystem;
using sdk::cat;
using sdk::fail;

// Memory the CPU can read directly; pinned buffers are what engines copy results into.
bool host_readable(DLDeviceType type) {
  return type == kDLCPU || type == kDLCUDAHost || type == kDLROCMHost;
}

uint64_t byte_count(const DLTensor& t) {
  return uint64_t(sdk::element_count(t)) * (t.dtype.bits / 8u);
}

// The producer of array i, when the record hands its bytes over as they are produced (ABI 1.3).
const tycho_array_producer* producer_of(const tycho_record& rec, int64_t i) {
  if (rec.struct_size < offsetof(tycho_record, producers) + sizeof(rec.producers) || rec.producers == nullptr)
    return nullptr;
  return rec.producers[i].produce != nullptr ? &rec.producers[i] : nullptr;
}
bool late_manifest(const tycho_record& rec) {
  return rec.struct_size >= offsetof(tycho_record, manifest_context) + sizeof(rec.manifest_context) &&
         rec.manifest != nullptr && rec.manifest_json == nullptr;
}

// Checks every array before a byte is written and returns each member's .npy preamble.
std::vector<std::string> npy_headers(const tycho_record& rec, const std::string& path) {
  if (rec.n_arrays < 0 || (rec.n_arrays > 0 && rec.arrays == nullptr))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "cannot save ", path, ": the record has ", rec.n_arrays,
         " arrays but no array list");
  std::vector<std::string> headers;
  std::set<std::string> names;
  for (int64_t i = 0; i < rec.n_arrays; ++i) {
    const tycho_named_array& a = rec.arrays[i];
    if (a.name == nullptr || *a.name == '\0')
      fail(TYCHO_ERR_INVALID_ARGUMENT, "cannot save ", path, ": array #", i, " has no name");
    const std::string where = cat("cannot save member '", a.name, ".npy' of ", path);
    if (!names.insert(a.name).second)
      fail(TYCHO_ERR_INVALID_ARGUMENT, where, ": two arrays are named '", a.name, "'");
    const DLTensor& t = a.tensor;
    if (!host_readable(t.device.device_type))
      fail(TYCHO_ERR_INVALID_ARGUMENT, where, ": the tensor is on device type ",
           int(t.device.device_type), ", expected host memory (kDLCPU)");
    if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr))
      fail(TYCHO_ERR_INVALID_ARGUMENT, where, ": the tensor has no valid shape");
    for (int k = 0; k < t.ndim; ++k)
      if (t.shape[k] < 0)
        fail(TYCHO_ERR_INVALID_ARGUMENT, where, ": negative extent in shape ", sdk::shape_string(t));
    if (!sdk::npy::descr_of(t.dtype))
      fail(TYCHO_ERR_UNSUPPORTED, where, ": dtype ", sdk::npy::dtype_text(t.dtype),
           " has no .npy equivalent here, expected ", sdk::npy::stored_dtypes());
    if (!sdk::is_contiguous(t))
      fail(TYCHO_ERR_INVALID_ARGUMENT, where, ": the tensor is not C-contiguous");
    if (t.data == nullptr && byte_count(t) > 0 && producer_of(rec, i) == nullptr)
      fail(TYCHO_ERR_INVALID_ARGUMENT, where, ": the tensor has no data");
    headers.push_back(sdk::npy::write_header(t.dtype, t.shape, t.ndim));
  }
  return headers;
}

// "<path>.tmp.<pid>.<n>": beside the target (rename stays within one file system) and unique
// among the threads and processes writing there.
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return cat(path, ".tmp.", ::getpid(), ".", counter++);
}

// Removes the temporary file on every way out; after a successful rename it is already gone.
struct temporary_file {
  std::string path;
  ~temporary_file() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

void add_member(zip_t* za, const std::string& member, zip_source_t* src, int32_t method,
                const std::string& path) {
  if (src == nullptr)
    fail(TYCHO_ERR_IO, "cannot save member '", member, "' of ", path, ": ", zip_strerror(za));
  const zip_int64_t index = zip_file_add(za, member.c_str(), src, ZIP_FL_ENC_UTF_8);
  if (index < 0) {
    zip_source_free(src);  // still ours: the archive only takes it on success
    fail(TYCHO_ERR_IO, "cannot save member '", member, "' of ", path, ": ", zip_strerror(za));
  }
  if (zip_set_file_compression(za, zip_uint64_t(index), method, 0) != 0)
    fail(TYCHO_ERR_IO, "cannot save member '", member, "' of ", path, ": ", zip_strerror(za));
}

// libzip deletes an archive with no entries instead of writing it; an empty zip is just the
// 22-byte end-of-central-directory record (numpy and libzip both read it).
void write_empty_archive(const std::string& tmp, const std::string& path) {
  const char eocd[22] = {'P', 'K', 5, 6};
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out.write(eocd, sizeof eocd);
  if (!out.flush()) fail(TYCHO_ERR_IO, "cannot write ", path, " (temporary file ", tmp, ")");
}

// A member whose bytes come as libzip asks for them, at zip_close, member after member: a
// produced array (its .npy preamble, then the producer's bytes) or the late manifest. The first
// failure is kept, so the save reports the producer's own message.
struct produced_member {
  std::string header;                          // the .npy preamble, or the manifest's text
  const tycho_array_producer* producer = nullptr;
  const tycho_record* record = nullptr;        // the late manifest's
  uint64_t size = 0, at = 0;                   // total bytes (preamble included), bytes given
  tycho_status* status = nullptr;
  std::string* error = nullptr;

  zip_int64_t fail_with(tycho_status st, std::string why) {
    if (*status == TYCHO_OK) {
      *status = st;
      *error = std::move(why);
    }
    return -1;
  }
  zip_int64_t read(unsigned char* dst, uint64_t len) {
    uint64_t given = 0;
    while (given < len && at < size) {
      if (at < header.size()) {
        const uint64_t n = std::min<uint64_t>(len - given, header.size() - at);
        std::memcpy(dst + given, header.data() + at, n);
        given += n;
        at += n;
        continue;
      }
      const uint64_t n = std::min<uint64_t>(len - given, size - at);
      if (const tycho_status st = producer->produce(producer->context, dst + given, n); st != TYCHO_OK) {
        const char* why = sdk::host() != nullptr ? sdk::host()->last_error() : nullptr;
        return fail_with(st, why != nullptr && *why ? why : "an array's producer failed");
      }
      given += n;
      at += n;
    }
    return zip_int64_t(given);
  }
  static zip_int64_t callback(void* self, void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
    auto& m = *static_cast<produced_member*>(self);
    switch (cmd) {
      case ZIP_SOURCE_OPEN:
        if (m.record != nullptr) {  // the manifest, asked once the arrays are written
          const char* text = m.record->manifest(m.record->manifest_context);
          if (text == nullptr) {
            const char* why = sdk::host() != nullptr ? sdk::host()->last_error() : nullptr;
            return m.fail_with(TYCHO_ERR_INTERNAL, why != nullptr && *why ? why : "the manifest's producer failed");
          }
          m.header = text;
          m.size = m.header.size();
        }
        m.at = 0;
        return 0;
      case ZIP_SOURCE_READ:
        return m.read(static_cast<unsigned char*>(data), len);
      case ZIP_SOURCE_CLOSE:
        return 0;
      case ZIP_SOURCE_STAT: {
        auto* st = static_cast<zip_stat_t*>(data);
        zip_stat_init(st);
        if (m.record == nullptr || m.size > 0) {  // the manifest's size is known once it is made
          st->size = m.size;
          st->valid |= ZIP_STAT_SIZE;
        }
        return sizeof(zip_stat_t);
      }
      case ZIP_SOURCE_ERROR:
        return zip_error_to_data(nullptr, data, len);  // the reason is kept in status/error
      case ZIP_SOURCE_FREE:
        return 0;
      case ZIP_SOURCE_SUPPORTS:
        return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                                              ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
      default:
        return -1;
    }
  }
};

void write_archive(const tycho_record& rec, const std::vector<std::string>& headers,
                   const std::string& tmp, const std::string& path) {
  const bool manifest_later = late_manifest(rec);
  if (rec.n_arrays == 0 && rec.manifest_json == nullptr && !manifest_later) return write_empty_archive(tmp, path);
  int code = 0;
  archive_ptr za(zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code));
  if (!za) fail(TYCHO_ERR_IO, "cannot create ", tmp, " to save ", path, ": ", zip_error_text(code));
  // Header + tensor bytes as two fragments: libzip reads the tensor in place at zip_close, so
  // even a huge array is never copied (and members over 4 GiB get ZIP64 automatically).
  std::vector<std::array<zip_buffer_fragment_t, 2>> fragments(std::size_t(rec.n_arrays));
  // Produced members (and the late manifest): libzip asks for their bytes member by member.
  std::deque<produced_member> produced;
  tycho_status produced_status = TYCHO_OK;
  std::string produced_error;
  auto produced_source = [&](produced_member m) {
    m.status = &produced_status;
    m.error = &produced_error;
    produced.push_back(std::move(m));
    return zip_source_function(za.get(), &produced_member::callback, &produced.back());
  };
  for (int64_t i = 0; i < rec.n_arrays; ++i) {
    const DLTensor& t = rec.arrays[i].tensor;
    const uint64_t bytes = byte_count(t);
    if (const tycho_array_producer* p = producer_of(rec, i)) {
      produced_member m;
      m.header = headers[std::size_t(i)];
      m.producer = p;
      m.size = m.header.size() + bytes;
      add_member(za.get(), cat(rec.arrays[i].name, ".npy"), produced_source(std::move(m)), ZIP_CM_STORE, path);
      continue;
    }
    auto& f = fragments[std::size_t(i)];
    f[0] = {reinterpret_cast<zip_uint8_t*>(const_cast<char*>(headers[std::size_t(i)].data())),
            headers[std::size_t(i)].size()};
    f[1] = {bytes ? sdk::data_of<zip_uint8_t>(t) : nullptr, bytes};
    const std::string member = cat(rec.arrays[i].name, ".npy");
    add_member(za.get(), member, zip_source_buffer_fragment(za.get(), f.data(), bytes ? 2 : 1, 0),
               ZIP_CM_STORE, path);
  }
  if (rec.manifest_json != nullptr)
    add_member(za.get(), "manifest.json",
               zip_source_buffer(za.get(), rec.manifest_json, std::strlen(rec.manifest_json), 0),
               ZIP_CM_DEFLATE, path);
  else if (manifest_later) {
    produced_member m;
    m.record = &rec;
    add_member(za.get(), "manifest.json", produced_source(std::move(m)), ZIP_CM_DEFLATE, path);
  }
  if (zip_close(za.get()) != 0) {
    if (produced_status != TYCHO_OK) fail(produced_status, "cannot write ", path, ": ", produced_error);
    fail(TYCHO_ERR_IO, "cannot write ", path, " (temporary file ", tmp, "): ", zip_strerror(za.get()));
  }
  za.release();  // closed: nothing left to discard
}

// The data reaches the disk before the rename makes it visible, so a power cut leaves either
// the old file or the complete new one.
void flush_to_disk(const std::string& tmp, const std::string& path) {
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(TYCHO_ERR_IO, "cannot reopen ", tmp, " to save ", path, ": ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail(TYCHO_ERR_IO, "cannot flush ", path, " to disk: ", std::strerror(err));
}

[[noreturn]] void already_exists(const std::string& path) {
  fail(TYCHO_ERR_IO, "cannot save ", path, ": it already exists (save in overwrite mode to replace it)");
}

void publish(const std::string& tmp, const std::string& path, tycho_save_mode mode) {
  std::error_code ec;
  if (mode == TYCHO_SAVE_NEW) {
    // A hard link never replaces an existing file, so a file created meanwhile is kept.
    fs::create_hard_link(tmp, path, ec);
    if (!ec) return;  // the temporary name is removed by its guard
    if (ec == std::errc::file_exists) already_exists(path);
    // File systems without hard links: check, then rename (a small race, as with "w" modes).
    if (fs::exists(fs::symlink_status(path, ec))) already_exists(path);
  }
  fs::rename(tmp, path, ec);
  if (ec) fail(TYCHO_ERR_IO, "cannot save ", path, ": renaming ", tmp, " over it failed: ", ec.message());
}

}  // namespace

void save_record(const tycho_record& rec, const char* path_c, tycho_save_mode mode) {
  const std::string path = path_c;
  if (mode != TYCHO_SAVE_NEW && mode != TYCHO_SAVE_OVERWRITE)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "cannot save ", path, ": unknown save mode ", int(mode));
  const std::vector<std::string> headers = npy_headers(rec, path);

  std::error_code ec;
  if (mode == TYCHO_SAVE_NEW && fs::exists(fs::symlink_status(path, ec))) already_exists(path);
  // Renaming over a folder, a symbolic link, a FIFO or a device would replace it (a link's
  // target would not be written): only a regular file is ever replaced.
  if (const fs::file_status st = fs::symlink_status(path, ec); !ec && fs::exists(st) && !fs::is_regular_file(st))
    fail(TYCHO_ERR_IO, "cannot save ", path, ": it exists and is not a regular file (a folder, symbolic link, FIFO "
         "or device), which saving would replace");
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty() && !fs::is_directory(folder, ec))
    fail(TYCHO_ERR_NOT_FOUND, "cannot save ", path, ": folder ", folder.string(), " does not exist");

  const temporary_file tmp{temporary_name(path)};
  write_archive(rec, headers, tmp.path, path);
  flush_to_disk(tmp.path, path);
  publish(tmp.path, path, mode);
}

}  // namespace tycho::zip_plugin
