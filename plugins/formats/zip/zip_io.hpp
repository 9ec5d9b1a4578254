// The two operations behind the format vtable, and libzip handles that close themselves.
// Both operations throw tycho::sdk::error; the SDK's format adapter (zip_format.cpp) turns that
// into a status, and has refused empty paths and a missing record before they run.
#pragma once

#include <tycho/tycho_components.h>

#include <zip.h>

#include <memory>
#include <string>

namespace tycho::zip_plugin {

// Writes `rec` to `path` atomically (temporary file beside it, then renamed over it).
void save_record(const tycho_record& rec, const char* path, tycho_save_mode mode);

// Reads every *.npy member and manifest.json; the result frees itself through ->release.
tycho_record* load_record(const char* path);

// An archive that is discarded (nothing written) unless zip_close succeeded and released it.
struct archive_discard {
  void operator()(zip_t* za) const { zip_discard(za); }
};
using archive_ptr = std::unique_ptr<zip_t, archive_discard>;

struct member_close {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};
using member_ptr = std::unique_ptr<zip_file_t, member_close>;

// libzip's text for an error code from zip_open.
inline std::string zip_error_text(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string text = zip_error_strerror(&e);
  zip_error_fini(&e);
  return text;
}

}  // namespace tycho::zip_plugin
