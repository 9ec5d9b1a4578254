// Zip archives written and read member by member (libzip), for the truth files, results and
// hostile inputs tests build by hand.
#pragma once

#include <gtest/gtest.h>
#include <zip.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tycho::test {

using zip_members = std::vector<std::pair<std::string, std::string>>;  // (member name, bytes)

// Writes `members` into the zip `path`, each replacing a member of the same name: into a copy of
// `base` when one is given, else into a new archive. `stored`: uncompressed members (else
// libzip's default, deflate). Fails the test naming the archive and the member.
inline void write_zip_members(const std::filesystem::path& path, const zip_members& members,
                              const std::filesystem::path& base = {}, bool stored = true) {
  if (!base.empty()) std::filesystem::copy_file(base, path, std::filesystem::copy_options::overwrite_existing);
  int err = 0;
  zip_t* z = zip_open(path.c_str(), base.empty() ? ZIP_CREATE | ZIP_TRUNCATE : 0, &err);
  ASSERT_NE(z, nullptr) << path;
  for (const auto& [name, bytes] : members) {
    zip_source_t* src = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
    const zip_int64_t i = zip_file_add(z, name.c_str(), src, ZIP_FL_OVERWRITE);
    ASSERT_GE(i, 0) << path << ": " << name << ": " << zip_strerror(z);
    if (stored) zip_set_file_compression(z, zip_uint64_t(i), ZIP_CM_STORE, 0);
  }
  ASSERT_EQ(zip_close(z), 0) << path;  // reads the buffers, which `members` still holds
}

// The bytes of member `name` of the zip `path`; none when the archive or the member is missing.
inline std::optional<std::string> read_zip_member(const std::filesystem::path& path, const std::string& name) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  if (z == nullptr) return std::nullopt;
  std::optional<std::string> bytes;
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(z, name.c_str(), 0, &st) == 0) {
    bytes.emplace(std::size_t(st.size), '\0');
    zip_file_t* f = zip_fopen(z, name.c_str(), 0);
    const zip_int64_t got = f != nullptr ? zip_fread(f, bytes->data(), st.size) : -1;
    if (f != nullptr) zip_fclose(f);
    if (got != zip_int64_t(st.size)) bytes.reset();
  }
  zip_discard(z);
  return bytes;
}

}  // namespace tycho::test
