/* Plugin discovery however libtycho was loaded: dlopen()s the library by the name given (a
 * relative path such as "lib/libtycho.so", or a bare "libtycho.so.1" found through a relative
 * LD_LIBRARY_PATH entry, as Python's ctypes.CDLL does), then leaves the folder it was started in,
 * and makes a session of the MoS2 example with the cpu engine. That only works if libtycho found
 * its plugins beside itself. Standard error is captured to check the log line naming every
 * plugin folder searched.
 *
 * usage: tycho_c_api_dlopen_test LIBRARY EXAMPLES_DIR(absolute) EXPECTED_PLUGIN_DIR(absolute) */
#include <tycho/tycho.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef tycho_status (*create_fn)(const char*, const char*, tycho_session**);
typedef void (*destroy_fn)(tycho_session*);
typedef const char* (*last_error_fn)(void);

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s LIBRARY EXAMPLES_DIR EXPECTED_PLUGIN_DIR\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "FAIL: dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  create_fn create = (create_fn)dlsym(lib, "tycho_session_create");
  destroy_fn destroy = (destroy_fn)dlsym(lib, "tycho_session_destroy");
  last_error_fn last_error = (last_error_fn)dlsym(lib, "tycho_last_error");
  if (!create || !destroy || !last_error) {
    fprintf(stderr, "FAIL: tycho_session_create/destroy/last_error not exported\n");
    return 1;
  }
  /* A relative name would now resolve elsewhere: libtycho must have kept where it really is. */
  if (chdir("/") != 0) return 1;

  char log_path[] = "/tmp/tycho_dlopen_log_XXXXXX";
  int fd = mkstemp(log_path);
  if (fd < 0) return 1;
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  const char* config = "[data]\npath = \"data/mos2_80kV_32x24_counts.h5\"\n[reconstruct]\nengine = \"cpu\"\n";
  tycho_session* s = NULL;
  tycho_status st = create(config, argv[2], &s);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);

  char log[16384] = {0};
  FILE* f = fopen(log_path, "rb");
  size_t n = f ? fread(log, 1, sizeof log - 1, f) : 0;
  log[n] = '\0';
  if (f) fclose(f);
  remove(log_path);
  fprintf(stderr, "%s", log);

  int failed = 0;
  if (st != TYCHO_OK) {
    fprintf(stderr, "FAIL: tycho_session_create with the library loaded as '%s': %s\n", argv[1], last_error());
    failed = 1;
  }
  char expected[4200];
  snprintf(expected, sizeof expected, "'%s' (", argv[3]);
  if (strstr(log, "plugin folders searched: ") == NULL || strstr(log, expected) == NULL) {
    fprintf(stderr, "FAIL: no log line naming the plugin folder %s\n", expected);
    failed = 1;
  }
  destroy(s);
  printf(failed ? "FAILED\n" : "plugins found with the library loaded as '%s'\n", argv[1]);
  return failed;
}
