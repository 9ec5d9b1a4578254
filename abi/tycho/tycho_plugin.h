/* What a plugin library exports: one `extern "C"` entry function that returns a static
 * descriptor listing its components.
 *
 *   TYCHO_PLUGIN_EXPORT const tycho_plugin_descriptor* tycho_plugin_entry(void);
 *
 * The host reads `struct_size` and `abi_version` (the first two fields, frozen forever)
 * before anything else, refuses another major version or a newer minor than its own, then
 * calls `init` with the host table, then reads the components. */
#ifndef TYCHO_PLUGIN_H
#define TYCHO_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "tycho_components.h"
#include "tycho_host_api.h"
#include "tycho_status.h"
#include "tycho_version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TYCHO_PLUGIN_EXPORT __declspec(dllexport)
#else
#define TYCHO_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Bits of tycho_component::devices: 1u << DLDeviceType. */
#define TYCHO_DEVICE_BIT(dl_device_type) (1u << (unsigned)(dl_device_type))

typedef struct tycho_component {
  uint32_t struct_size;
  uint32_t abi_version;
  tycho_component_kind kind;
  const char* name;        /* how the config names it: "emd", "cpu", "amplitude", "adam", "zip" */
  const char* version;     /* the component's own version, e.g. "1.0.0" */
  const char* description; /* one line for `tycho plugins` */
  uint32_t devices;        /* TYCHO_DEVICE_BIT(kDLCPU) | ...: where it can run */
  /* NULL-terminated list of config keys this component reads from its table; the host
   * rejects any other key with the nearest valid name suggested. */
  const char* const* config_keys;
  const void* vtable;      /* tycho_<kind>_vtable, by `kind` */
} tycho_component;

typedef struct tycho_plugin_descriptor {
  uint32_t struct_size;    /* frozen: always first */
  uint32_t abi_version;    /* frozen: always second; TYCHO_ABI_VERSION the plugin was built with */
  const char* name;
  const char* version;
  /* Called once after the version check, before any component is used. May be NULL. */
  tycho_status (*init)(const tycho_host_api* host);
  int64_t n_components;
  const tycho_component* components;
} tycho_plugin_descriptor;

#define TYCHO_PLUGIN_ENTRY_SYMBOL "tycho_plugin_entry"
typedef const tycho_plugin_descriptor* (*tycho_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
