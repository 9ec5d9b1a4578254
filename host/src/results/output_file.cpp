#include "tycho/host/output_file.hpp"

#include <tycho/core/error.hpp>
#include <tycho/sdk/error.hpp>

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "settings/config_read.hpp"

namespace tycho::host {

namespace fs = std::filesystem;

namespace {

const char* kind_of(fs::file_type t) {
  switch (t) {
    case fs::file_type::directory: return "a folder";
    case fs::file_type::symlink: return "a symbolic link";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::block: return "a block device";
    case fs::file_type::character: return "a character device";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

// The folder `path` is written into (its parent; "." for a bare name).
fs::path folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

void collect_data_files(const toml::table& t, const std::string& base_dir, std::vector<std::string>& out) {
  for (auto&& [key, node] : t) {
    if (const auto* sub = node.as_table()) {
      collect_data_files(*sub, base_dir, out);
    } else if (const auto* s = node.as_string()) {
      const std::string p = resolve_path(base_dir, s->get());
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) out.push_back(p);
    }
  }
}

}  // namespace

std::vector<std::string> run_input_files(const std::vector<const config_document*>& docs,
                                         const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths)
    if (!p.empty()) files.push_back(p);
  for (const config_document* d : docs)
    if (d) collect_data_files(d->table_at("data"), d->base_dir(), files);
  return files;
}

void check_file_name_text(const std::string& name, const std::string& what) {
  for (std::size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f)
      fail(TYCHO_ERR_INVALID_ARGUMENT, what, " '", sdk::printable(name), "' holds ",
           c == 0 ? "a NUL byte" : "a control character", " at byte ", i,
           "; expected a file name without NUL or control characters (the system would cut or garble it)");
  }
}

void check_output_file(const std::string& path, const std::vector<std::string>& inputs, bool overwrite,
                       const char* what, const char* example_name) {
  if (path.empty()) fail(TYCHO_ERR_INVALID_ARGUMENT, "the ", what, " file name is empty");
  check_file_name_text(path, cat("the ", what, " file name"));
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  const bool exists = !ec && fs::exists(st);
  if (exists) {
    for (const auto& in : inputs) {
      std::error_code eq;
      if (fs::equivalent(path, in, eq))
        fail(TYCHO_ERR_INVALID_ARGUMENT, "the ", what, " '", path, "' is an input of this run ('", in,
             "'): writing it would destroy that input; give another output file name (-o)");
    }
    if (st.type() == fs::file_type::directory)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "the ", what, " '", path, "' is a folder; give a file name, e.g. '",
           (fs::path(path) / example_name).string(), "'");
    if (st.type() != fs::file_type::regular)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "the ", what, " '", path, "' exists and is ", kind_of(st.type()),
           ", not a regular file: tycho writes a new file and renames it into place, which would replace it; "
           "give another output file name (-o)");
    if (!overwrite)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "the ", what, " '", path, "' already exists: give another output file name "
           "(-o), or --overwrite (or [output] overwrite = true) to replace it");
  }
  const fs::path folder = folder_of(path);
  const fs::file_status fst = fs::status(folder, ec);
  if (ec || !fs::exists(fst))
    fail(TYCHO_ERR_NOT_FOUND, "the folder '", folder.string(), "' of the ", what, " '", path, "' does not exist");
  if (!fs::is_directory(fst))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "'", folder.string(), "' (the folder of the ", what, " '", path,
         "') is not a folder");
  // A probe file, as the save will make its temporary file: access() does not see a read-only
  // mount, ACLs or quotas as reliably.
  const std::string probe = (folder / cat(".tycho-write-test.", ::getpid())).string();
  {
    std::ofstream test(probe, std::ios::binary | std::ios::trunc);
    const int err = errno;
    if (!test)
      fail(TYCHO_ERR_IO, "cannot write the ", what, " '", path, "': creating a file in '", folder.string(),
           "' failed (", std::strerror(err), ")");
  }
  fs::remove(probe, ec);
}

void check_free_space(const std::string& path, uint64_t bytes, const char* what) {
  struct statvfs sv {};
  const std::string folder = folder_of(path).string();
  if (::statvfs(folder.c_str(), &sv) != 0) return;  // not knowable here: the save reports it
  const uint64_t free_bytes = uint64_t(sv.f_bavail) * uint64_t(sv.f_frsize);
  if (free_bytes >= bytes) return;
  fail(TYCHO_ERR_IO, "the ", what, " '", path, "' needs about ", bytes / 1048576.0, " MiB but '", folder,
       "' has ", free_bytes / 1048576.0, " MiB free: free some space or write elsewhere (-o)");
}

bool configured_overwrite(const config_document& doc) {
  return read_key<bool>(doc.table_at("output"), "overwrite", "output").value_or(false);
}

int64_t configured_checkpoint_every(const config_document& doc) {
  const int64_t n = read_key<int64_t>(doc.table_at("output"), "checkpoint_every", "output").value_or(0);
  if (n < 0 || n > 1000000000)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'checkpoint_every' in [output] must be an integer from 0 (never) to ",
         "1000000000 iterations, got ", n);
  return n;
}

}  // namespace tycho::host
