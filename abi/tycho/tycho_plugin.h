/* What a plugin library exports: one `extern "C"` entry function that returns a static
 * descriptor listing its components.
 *
 *   TYCHO_PLUGIN_EXPORT const tycho_plugin_descriptor* tycho_plugin_entry(void);
 *
 * The host reads `struct_size` and `abi_version` (the first two fields, frozen forever)
 * before anything else, refuses another major version, and a newer minor than its own unless
 * the plugin's abi_version_required (ABI 1.1) says it needs no more than the host has; checks
 * the plugin's DLPack version; then calls `init` with the host table and reads the components.
 * Loading and the descriptor's functions run on one thread (the host's loader). */
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

/* ---- added in ABI 1.1: a typed declaration of one config key a component reads, so the host
 * checks every component's keys the same way (type, range, allowed values) before any data is
 * read, and `tycho plugins --keys NAME` documents them. */
typedef enum tycho_setting_type {
  TYCHO_SETTING_STRING = 1,
  TYCHO_SETTING_INTEGER = 2,        /* a TOML integer (100.0 is refused) */
  TYCHO_SETTING_NUMBER = 3,         /* a TOML integer or float */
  TYCHO_SETTING_BOOL = 4,
  TYCHO_SETTING_INTEGER_LIST = 5,   /* an array of integers */
  TYCHO_SETTING_NUMBER_LIST = 6,    /* an array of numbers */
  TYCHO_SETTING_STRING_LIST = 7,    /* an array of strings */
  TYCHO_SETTING_MIXED = 8           /* more than one type (e.g. a number or "auto"): the doc says
                                     * which; the component checks the value itself */
} tycho_setting_type;

/* Bits of tycho_setting::bounds. */
#define TYCHO_SETTING_HAS_MIN 1u        /* value >= min (or > min with MIN_EXCLUSIVE) */
#define TYCHO_SETTING_HAS_MAX 2u        /* value <= max (or < max with MAX_EXCLUSIVE) */
#define TYCHO_SETTING_MIN_EXCLUSIVE 4u
#define TYCHO_SETTING_MAX_EXCLUSIVE 8u

typedef struct tycho_setting {
  uint32_t struct_size;     /* sizeof(tycho_setting) the plugin was built with: the host steps
                             * through the array by the first element's struct_size */
  const char* key;          /* NULL ends the array */
  tycho_setting_type type;
  const char* default_text; /* the default as TOML writes it ("0", "\"estimate\"", "true");
                             * NULL: none (required, or derived from other values: doc says) */
  uint32_t bounds;          /* TYCHO_SETTING_HAS_MIN | ...: a number's or integer's range */
  double min, max;
  const char* const* allowed; /* a string's allowed values, NULL-terminated; NULL: any string */
  const char* unit;         /* "Å", "s", "mrad", "bytes"; NULL: none */
  const char* doc;          /* one line, no trailing period needed */
} tycho_setting;

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
  /* ---- appended in ABI 1.1 */
  uint32_t flags;          /* TYCHO_COMPONENT_* bits below; 0 for an ordinary component */
  /* Typed declarations of the keys in config_keys (NULL: none; a key listed in config_keys
   * without a declaration is accepted with any type, as in ABI 1.0). The host refuses a value
   * of another type, outside the range or not among the allowed values, naming the key, its
   * table, the component and the declared type. */
  const tycho_setting* settings;
} tycho_component;

/* Bits of tycho_component::flags (ABI 1.1). */
/* Plan only: this build cannot run the component (its runtime is missing, e.g. an engine
 * built without its GPU toolkit), but its vtable's description functions work, so `tycho
 * plan` can size a run for another machine. Only an engine's plan_memory is called; it is
 * never created, and it is left out of `tycho plugins`' list of usable components. */
#define TYCHO_COMPONENT_PLAN_ONLY 1u

typedef struct tycho_plugin_descriptor {
  uint32_t struct_size;    /* frozen: always first */
  uint32_t abi_version;    /* frozen: always second; TYCHO_ABI_VERSION the plugin was built with */
  const char* name;
  const char* version;
  /* Called once after the version check, before any component is used. May be NULL. */
  tycho_status (*init)(const tycho_host_api* host);
  int64_t n_components;
  const tycho_component* components;
  /* ---- appended in ABI 1.1 */
  /* The oldest host ABI, (major << 16) | minor, this plugin works with: the minor that added
   * the newest thing it needs (Vulkan's apiVersion in spirit). A host accepts a plugin built
   * against a newer minor than its own when this is not newer than the host: the host then
   * reads only the fields it knows (struct_size tells it where they end). 0: abi_version (the
   * plugin needs everything of the minor it was built with). */
  uint32_t abi_version_required;
  /* TYCHO_DLPACK_VERSION of the dlpack.h the plugin was built with (60 for 0.6); the host
   * refuses one outside [TYCHO_DLPACK_VERSION_MIN, TYCHO_DLPACK_VERSION_END). 0: not stated
   * (accepted, as from a 1.0 plugin). */
  uint32_t dlpack_version;
} tycho_plugin_descriptor;

#define TYCHO_PLUGIN_ENTRY_SYMBOL "tycho_plugin_entry"
typedef const tycho_plugin_descriptor* (*tycho_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
