/* The table of host functions handed to every plugin at load time (as SQLite hands its API
 * to extensions), so plugins never link against libtycho.
 *
 * Append-only: new functions go at the end; read `struct_size` before using a newer field.
 *
 * Thread-safety: every function of this table may be called from any thread, concurrently
 * (engines call losses, and so these, from several threads at once), as each entry states.
 * The table itself is immutable and lives as long as the process. */
#ifndef TYCHO_HOST_API_H
#define TYCHO_HOST_API_H

#include <stddef.h>
#include <stdint.h>

#include "tycho_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A read-only view of one TOML table of the run's configuration (e.g. [data]).
 * Owned by the host; valid for the duration of the call it is passed to. */
typedef struct tycho_config tycho_config;

typedef enum tycho_log_level {
  TYCHO_LOG_DEBUG = 0,
  TYCHO_LOG_INFO = 1,
  TYCHO_LOG_WARNING = 2,
  TYCHO_LOG_ERROR = 3
} tycho_log_level;

typedef struct tycho_host_api {
  uint32_t struct_size;
  uint32_t abi_version; /* TYCHO_ABI_VERSION of the host */

  /* Logging: one line, UTF-8, no trailing newline needed. Thread-safe: lines from several
   * threads are written whole, never interleaved. */
  void (*log)(tycho_log_level level, const char* component, const char* message);

  /* Sets the calling thread's last-error message; returns `status` so a plugin can write
   * `return host->set_error(TYCHO_ERR_BAD_DATA, "...")`. Thread-safe: the message is the
   * calling thread's own (thread-local). */
  tycho_status (*set_error)(tycho_status status, const char* message);

  /* Config look-ups in one table. Keys may be dotted ("object.learning_rate").
   * Return TYCHO_ERR_NOT_FOUND when the key is absent (no error message is set then),
   * TYCHO_ERR_INVALID_ARGUMENT (with a message naming the key) when it has another type.
   * Strings are owned by the config and live as long as it does.
   * Thread-safe: the config is read-only while a plugin sees it, so any thread may read it
   * concurrently; a failure's message goes to the calling thread's last error. */
  tycho_status (*config_get_string)(const tycho_config* cfg, const char* key, const char** out);
  tycho_status (*config_get_double)(const tycho_config* cfg, const char* key, double* out);
  tycho_status (*config_get_int)(const tycho_config* cfg, const char* key, int64_t* out);
  tycho_status (*config_get_bool)(const tycho_config* cfg, const char* key, int* out);
  /* Directory of the config file (for resolving relative paths), "" for in-memory text.
   * Thread-safe (read-only). */
  const char* (*config_base_dir)(const tycho_config* cfg);

  /* Host allocations: memory a plugin hands to the host (strings in tycho_record, for
   * example) must come from here so the host can free it. 64-byte aligned. Thread-safe
   * (the C library's allocator): memory may be freed on another thread than allocated it. */
  void* (*alloc)(size_t bytes);
  void (*free)(void* p);

  /* ---- appended in ABI 1.0 (before its release) */
  /* The calling thread's last-error message (what set_error or a failed host call left).
   * Thread-safe: thread-local; valid until the calling thread's next host call. */
  const char* (*last_error)(void);
  /* The table's name for messages, e.g. "[data]". Thread-safe (read-only). */
  const char* (*config_table_name)(const tycho_config* cfg);
} tycho_host_api;

#ifdef __cplusplus
}
#endif
#endif
