// The plugin's one component: the `zip` format (NumPy-compatible .zip/.npz records).
// Each vtable function runs under guarded(), so no exception crosses the C boundary.
#include <tycho/sdk.hpp>

#include "zip_io.hpp"

namespace {

tycho_status save(const tycho_record* rec, const char* path, tycho_save_mode mode) {
  return tycho::sdk::guarded([&] { tycho::zip_plugin::save_record(rec, path, mode); });
}

tycho_status load(const char* path, tycho_record** out) {
  if (out != nullptr) *out = nullptr;  // callers see NULL on failure
  return tycho::sdk::guarded([&] {
    if (out == nullptr) tycho::sdk::fail(TYCHO_ERR_INVALID_ARGUMENT, "load: no output pointer");
    *out = tycho::zip_plugin::load_record(path);
  });
}

const tycho_format_vtable zip_vtable = {sizeof(tycho_format_vtable), TYCHO_ABI_VERSION, ".zip",
                                        &save, &load};

const char* const no_config_keys[] = {nullptr};

const tycho_component components[] = {tycho::sdk::component(
    TYCHO_COMPONENT_FORMAT, "zip", "1.0.0",
    "NumPy-compatible .zip/.npz: one uncompressed .npy per array plus manifest.json",
    TYCHO_DEVICE_BIT(kDLCPU), no_config_keys, &zip_vtable)};

}  // namespace

TYCHO_PLUGIN("zip", "1.0.0", components)
