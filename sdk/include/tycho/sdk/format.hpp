// A format component from a C++ class: the tycho_format_vtable and its one exception barrier.
//
//   struct my_format {
//     // Writes atomically (a temporary file beside `path`, renamed over it).
//     static void save(const tycho_record& rec, const char* path, tycho_save_mode mode);
//     // Reads every array and the manifest; the record frees itself through ->release.
//     static tycho_record* load(const char* path);
//     // Optional: save takes produced arrays and a late manifest (TYCHO_FORMAT_PRODUCED_ARRAYS).
//     static constexpr bool produced_arrays = true;
//   };
//   component(TYCHO_COMPONENT_FORMAT, "mine", "1.0.0", "...", TYCHO_DEVICE_BIT(kDLCPU), keys,
//             tycho::sdk::format_vtable<my_format>("mine", ".mine"))
//
// The adapter refuses an empty path and a NULL record or output before the class sees the call
// (errors name "<name> format"), and sets *out to NULL first, so a failed load leaves no record
// behind.
#pragma once

#include <tycho/sdk/adapter.hpp>

namespace tycho::sdk {

namespace detail {
TYCHO_SDK_DETECT(format_has_produced_arrays, T::produced_arrays);
}  // namespace detail

// The trampolines of format class F: each vtable function inside guarded().
template <class F>
struct format_adapter {
  static inline component_identity id{"?", "format", TYCHO_DEVICE_BIT(kDLCPU)};

  static tycho_status save(const tycho_record* rec, const char* path, tycho_save_mode mode) {
    return guarded([&] {
      if (path == nullptr || *path == '\0') fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": save: empty file path");
      if (rec == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": cannot save ", path, ": no record");
      F::save(*rec, path, mode);
    });
  }
  static tycho_status load(const char* path, tycho_record** out) {
    if (out != nullptr) *out = nullptr;  // callers see NULL on failure
    return guarded([&] {
      if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": load: no output pointer");
      if (path == nullptr || *path == '\0') fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": load: empty file path");
      *out = F::load(path);
    });
  }
  static constexpr uint32_t flags() {
    if constexpr (detail::format_has_produced_arrays<F>::value)
      return F::produced_arrays ? TYCHO_FORMAT_PRODUCED_ARRAYS : 0u;
    else
      return 0u;
  }
  static inline tycho_format_vtable vtable = {sizeof(tycho_format_vtable), TYCHO_ABI_VERSION, nullptr, &save, &load,
                                              flags()};
};

// The vtable of format class F, named `name` in messages, for files ending in `extension`
// (".zip"; a static string). One per class F.
template <class F>
const tycho_format_vtable* format_vtable(const char* name, const char* extension) {
  format_adapter<F>::id.name = name;
  format_adapter<F>::vtable.extension = extension;
  return &format_adapter<F>::vtable;
}

}  // namespace tycho::sdk
