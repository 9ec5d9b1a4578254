#include "results/zip_archive.hpp"

#include <tycho/core/error.hpp>
#include <tycho/sdk/checked.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

namespace tycho::host {

namespace {
std::string libzip_text(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string text = zip_error_strerror(&e);
  zip_error_fini(&e);
  return text;
}
struct member_close {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

// The SDK's errors (npy headers, member sizes) as the host's, so the command names them.
template <class F>
auto sdk_as_host(F&& f) {
  try {
    return f();
  } catch (const sdk::error& e) {
    fail(e.status, e.what());
  }
}
}  // namespace

zip_archive::zip_archive(const std::string& path) : path_(path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0)
    fail(TYCHO_ERR_BAD_DATA, "'", path, "' is not a tycho result or prepared file: it is empty (0 bytes)");
  int code = 0;
  zip_ = zip_open(path.c_str(), ZIP_RDONLY, &code);
  if (zip_ == nullptr)
    fail(code == ZIP_ER_NOENT ? TYCHO_ERR_NOT_FOUND : TYCHO_ERR_BAD_DATA, "'", path,
         "' is not a tycho result or prepared file: it is not a readable zip archive (libzip: ", libzip_text(code),
         "); the file is truncated, corrupt or of another kind");
  try {
    const zip_int64_t n = zip_get_num_entries(zip_, 0);
    std::set<std::string> names;
    for (zip_int64_t i = 0; i < n; ++i) {
      zip_stat_t st;
      zip_stat_init(&st);
      if (zip_stat_index(zip_, zip_uint64_t(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
          !(st.valid & ZIP_STAT_SIZE))
        fail(TYCHO_ERR_BAD_DATA, "'", path, "': entry #", i, " of its zip directory cannot be read (",
             zip_strerror(zip_), "): the file is corrupt");
      entry e;
      e.name = st.name;
      e.size = st.size;
      e.comp_size = (st.valid & ZIP_STAT_COMP_SIZE) ? st.comp_size : st.size;
      e.method = (st.valid & ZIP_STAT_COMP_METHOD) ? int(st.comp_method) : 0;
      e.encrypted = (st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE;
      e.index = st.index;
      if (!names.insert(e.name).second)
        fail(TYCHO_ERR_BAD_DATA, "'", path, "': member '", sdk::printable(e.name),
             "' appears twice; expected each member once (readers disagree which one is meant): the file is "
             "corrupt or crafted");
      entries_.push_back(std::move(e));
    }
  } catch (...) {
    zip_discard(zip_);
    throw;
  }
}

bool zip_archive::looks_like_zip(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  unsigned char magic[4] = {0, 0, 0, 0};
  const bool read = std::fread(magic, 1, 4, f) == 4;
  std::fclose(f);
  return read && magic[0] == 'P' && magic[1] == 'K' &&
         ((magic[2] == 3 && magic[3] == 4) || (magic[2] == 5 && magic[3] == 6));
}

zip_archive::~zip_archive() {
  if (zip_ != nullptr) zip_discard(zip_);
}

const zip_archive::entry* zip_archive::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

std::string zip_archive::where(const entry& e) const {
  return cat("'", path_, "': member '", sdk::printable(e.name), "'");
}

std::string zip_archive::read_text(const entry& e, uint64_t most) {
  const std::string w = where(e);
  if (e.encrypted) fail(TYCHO_ERR_BAD_DATA, w, " is encrypted");
  sdk_as_host([&] {
    sdk::check_member_size(e.size, e.comp_size, e.method, w);
    return 0;
  });
  if (e.size > most) fail(TYCHO_ERR_BAD_DATA, w, " declares ", e.size, " bytes; expected at most ", most);
  std::unique_ptr<zip_file_t, member_close> f(zip_fopen_index(zip_, e.index, 0));
  if (!f) fail(TYCHO_ERR_BAD_DATA, w, " cannot be opened (", zip_strerror(zip_), "): the file is corrupt");
  std::string text(std::size_t(e.size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const zip_int64_t got = zip_fread(f.get(), text.data() + done, text.size() - done);
    if (got <= 0)
      fail(TYCHO_ERR_BAD_DATA, w, " ends after ", done, " of its ", e.size, " bytes",
           got < 0 ? cat(" (", zip_file_strerror(f.get()), ")") : std::string(), ": the file is truncated or corrupt");
    done += std::size_t(got);
  }
  char extra;
  const zip_int64_t got = zip_fread(f.get(), &extra, 1);  // to the end: libzip checks the CRC there
  if (got != 0)
    fail(TYCHO_ERR_BAD_DATA, w,
         got < 0 ? cat(": ", zip_file_strerror(f.get())) : std::string(" is longer than it declares"),
         ": the file is corrupt");
  return text;
}

sdk::npy::stored_header zip_archive::npy_header(const entry& e) {
  const std::string w = where(e);
  if (e.encrypted) fail(TYCHO_ERR_BAD_DATA, w, " is encrypted");
  sdk_as_host([&] {
    sdk::check_member_size(e.size, e.comp_size, e.method, w);
    return 0;
  });
  std::unique_ptr<zip_file_t, member_close> f(zip_fopen_index(zip_, e.index, 0));
  if (!f) fail(TYCHO_ERR_BAD_DATA, w, " cannot be opened (", zip_strerror(zip_), "): the file is corrupt");
  const auto read = [&](void* dst, std::size_t n) {
    const zip_int64_t got = zip_fread(f.get(), dst, n);
    if (got != zip_int64_t(n)) fail(TYCHO_ERR_BAD_DATA, w, " ends inside its .npy header: the file is truncated");
  };
  return sdk_as_host([&] { return sdk::npy::read_stored_header(read, e.size, w); });
}

}  // namespace tycho::host
