// The plugin's one component: the `zip` format (NumPy-compatible .zip/.npz records), behind the
// ABI's format vtable (tycho/sdk/format.hpp catches every exception at the boundary).
#include <tycho/sdk.hpp>
#include <tycho/sdk/format.hpp>

#include "zip_io.hpp"

namespace {
using namespace tycho::sdk;

struct zip_format {
  static void save(const tycho_record& rec, const char* path, tycho_save_mode mode) {
    tycho::zip_plugin::save_record(rec, path, mode);
  }
  static tycho_record* load(const char* path) { return tycho::zip_plugin::load_record(path); }
  static constexpr bool produced_arrays = true;  // save streams them (zip_save.cpp)
};

// The format reads no config keys ([output] format and path are the runtime's).
const char* const no_config_keys[] = {nullptr};
const tycho_setting no_settings[] = {end_of_settings()};

const tycho_component components[] = {with_settings(
    component(TYCHO_COMPONENT_FORMAT, "zip", "1.0.0",
              "NumPy-compatible .zip/.npz: one uncompressed .npy per array plus manifest.json", TYCHO_DEVICE_BIT(kDLCPU),
              no_config_keys, format_vtable<zip_format>("zip", ".zip")),
    no_settings)};

}  // namespace

TYCHO_PLUGIN("zip", "1.0.0", components)
