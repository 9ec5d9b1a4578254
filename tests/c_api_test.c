/* The embedding API from plain C11, linked against libtycho.so only: proves the public headers
 * are C-clean and that a C program can run the main job, read results and save them.
 * Prints "N passed, M failed" and exits non-zero on any failure. */
#include <tycho/tycho.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed = 0, failed = 0;
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (cond) {                                                                  \
      ++passed;                                                                  \
    } else {                                                                     \
      ++failed;                                                                  \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              tycho_last_error());                                               \
    }                                                                            \
  } while (0)

typedef struct progress_log {
  int calls;
  double first_loss, last_loss;
  int64_t iterations[16], totals[16];
} progress_log;

static int on_progress(const tycho_progress* p, void* user) {
  progress_log* log = (progress_log*)user;
  if (log->calls == 0) log->first_loss = p->loss;
  log->last_loss = p->loss;
  if (log->calls < 16) {
    log->iterations[log->calls] = p->iteration;
    log->totals[log->calls] = p->iterations_total;
  }
  log->calls++;
  return 0;
}

static int stop_at_iteration_7(const tycho_progress* p, void* user) {
  (void)user;
  return p->iteration >= 7 ? 1 : 0;
}

static char* read_text(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = (char*)malloc((size_t)n + 1);
  size_t got = fread(text, 1, (size_t)n, f);
  text[got] = '\0';
  fclose(f);
  return text;
}

/* `--failing-loss EXAMPLES_DIR`, run with TYCHO_PLUGIN_PATH naming the folder of the test plugin
 * whose loss "failing" always fails: its own message, set on the engine's worker thread, must
 * reach the caller whole, with the plugin's status. */
static int failing_loss_main(const char* examples) {
  char config[1024];
  snprintf(config, sizeof config,
           "[data]\npath = \"data/mos2_80kV_32x24_counts.h5\"\n"
           "[reconstruct]\nloss = \"failing\"\niterations = 1\n");
  tycho_session* s = NULL;
  tycho_status st = tycho_session_create(config, examples, &s);
  CHECK(st == TYCHO_OK);
  if (st != TYCHO_OK) return 1;
  CHECK(tycho_session_run(s, 1, NULL, NULL) == TYCHO_ERR_BAD_DATA);
  CHECK(strstr(tycho_last_error(), "failing loss: deliberate failure (test plugin)") != NULL);
  fprintf(stderr, "last error: %s\n", tycho_last_error());
  tycho_session_destroy(s);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--failing-loss") == 0) return failing_loss_main(argv[2]);
  if (argc < 3) {
    fprintf(stderr, "usage: %s EXAMPLES_DIR OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const char* examples = argv[1];
  char config_path[4096], out_path[4096];
  snprintf(config_path, sizeof config_path, "%s/mos2.toml", examples);
  snprintf(out_path, sizeof out_path, "%s/c_api_result.zip", argv[2]);

  CHECK(tycho_abi_version() == TYCHO_ABI_VERSION);
  CHECK(strcmp(tycho_version(), TYCHO_VERSION_STRING) == 0);
  CHECK(strcmp(tycho_status_string(TYCHO_ERR_NOT_FOUND), "TYCHO_ERR_NOT_FOUND") == 0);

  char* text = read_text(config_path);
  CHECK(text != NULL);
  if (!text) return 1;

  tycho_session* s = NULL;
  tycho_status st = tycho_session_create(text, examples, &s);
  CHECK(st == TYCHO_OK);
  if (st != TYCHO_OK) return 1;

  progress_log log;
  memset(&log, 0, sizeof log);
  CHECK(tycho_session_run(s, 3, on_progress, &log) == TYCHO_OK);
  /* A second run continues both counters: 1/3 2/3 3/3, then 4/5 5/5. */
  CHECK(tycho_session_run(s, 2, on_progress, &log) == TYCHO_OK);
  CHECK(log.calls == 5);
  for (int i = 0; i < 5 && i < log.calls; ++i) {
    CHECK(log.iterations[i] == i + 1);
    CHECK(log.totals[i] == (i < 3 ? 3 : 5));
  }
  CHECK(log.last_loss < log.first_loss);

  DLManagedTensor* obj = NULL;
  CHECK(tycho_session_get(s, "object", &obj) == TYCHO_OK);
  if (obj) {
    CHECK(obj->dl_tensor.ndim == 3);
    CHECK(obj->dl_tensor.dtype.code == kDLComplex && obj->dl_tensor.dtype.bits == 64);
    CHECK(obj->dl_tensor.shape[0] == 1 && obj->dl_tensor.shape[1] > 96 && obj->dl_tensor.shape[2] > 96);
    CHECK(obj->dl_tensor.device.device_type == kDLCPU);
    /* The object changed from its initial value of ones somewhere in the middle. */
    const float* z = (const float*)obj->dl_tensor.data;
    int64_t mid = (obj->dl_tensor.shape[1] / 2) * obj->dl_tensor.shape[2] + obj->dl_tensor.shape[2] / 2;
    CHECK(fabsf(z[2 * mid] - 1.0f) + fabsf(z[2 * mid + 1]) > 1e-4f);
    obj->deleter(obj);
  }
  DLManagedTensor* hist = NULL;
  CHECK(tycho_session_get(s, "loss_history", &hist) == TYCHO_OK);
  if (hist) {
    CHECK(hist->dl_tensor.ndim == 1 && hist->dl_tensor.shape[0] == 5);
    const double* h = (const double*)hist->dl_tensor.data;
    CHECK(fabs(h[4] - log.last_loss) < 1e-12);
    hist->deleter(hist);
  }
  DLManagedTensor* pos = NULL;
  CHECK(tycho_session_get(s, "positions", &pos) == TYCHO_OK);
  if (pos) {
    CHECK(pos->dl_tensor.shape[0] == 32 * 24 && pos->dl_tensor.shape[1] == 2);
    pos->deleter(pos);
  }
  /* The mask the loss used (every array a saved result holds is reachable): (N0, N1) uint8 of
   * 0/1; the MoS2 example is 96 x 96, unpadded, with no bad pixels, so all ones. */
  DLManagedTensor* mask = NULL;
  CHECK(tycho_session_get(s, "mask", &mask) == TYCHO_OK);
  if (mask) {
    const DLTensor* m = &mask->dl_tensor;
    CHECK(m->ndim == 2 && m->shape[0] == 96 && m->shape[1] == 96);
    CHECK(m->dtype.code == kDLUInt && m->dtype.bits == 8 && m->dtype.lanes == 1);
    int64_t ones = 0;
    for (int64_t k = 0; k < m->shape[0] * m->shape[1]; ++k) ones += ((const uint8_t*)m->data)[k] == 1;
    CHECK(ones == 96 * 96);
    mask->deleter(mask);
  }
  /* Adam's state, as saved for `--from`: "m" shaped like the object. */
  DLManagedTensor* adam_m = NULL;
  CHECK(tycho_session_get(s, "optimizer.object.m", &adam_m) == TYCHO_OK);
  if (adam_m) {
    CHECK(adam_m->dl_tensor.ndim == 3 && adam_m->dl_tensor.shape[1] > 96);
    adam_m->deleter(adam_m);
  }
  DLManagedTensor* none = NULL;
  CHECK(tycho_session_get(s, "nonsense", &none) == TYCHO_ERR_NOT_FOUND && none == NULL);
  CHECK(strstr(tycho_last_error(), "nonsense") != NULL);
  CHECK(strstr(tycho_last_error(), "available: object, probe, positions_px, positions_A, loss_history, "
                                   "optimizer.object.m") != NULL);
  CHECK(strstr(tycho_last_error(), ", mask)") != NULL);

  /* A callback that returns non-zero stops the run with TYCHO_ERR_CANCELLED after that
   * iteration (here the 2nd of this call: iterations 6 and 7 of the session). */
  CHECK(tycho_session_run(s, 10, stop_at_iteration_7, NULL) == TYCHO_ERR_CANCELLED);
  DLManagedTensor* h7 = NULL;
  CHECK(tycho_session_get(s, "loss_history", &h7) == TYCHO_OK);
  if (h7) {
    CHECK(h7->dl_tensor.shape[0] == 7);
    h7->deleter(h7);
  }

  remove(out_path);
  CHECK(tycho_session_save(s, out_path, TYCHO_SAVE_NEW) == TYCHO_OK);
  FILE* f = fopen(out_path, "rb");
  CHECK(f != NULL);
  if (f) fclose(f);
  /* "w" mode refuses to replace an existing file; "o" replaces it. */
  CHECK(tycho_session_save(s, out_path, TYCHO_SAVE_NEW) == TYCHO_ERR_IO);
  CHECK(tycho_session_save(s, out_path, TYCHO_SAVE_OVERWRITE) == TYCHO_OK);
  tycho_session_destroy(s);

  /* The saved result against the ground truth, as `tycho evaluate` prints it: 7 iterations of
   * the main job reach a local-phase Pearson of ~0.78 (6 iterations: 0.755, 100: 0.93). */
  char truth_path[4096];
  snprintf(truth_path, sizeof truth_path, "%s/data/mos2_ground_truth.npz", examples);
  char* json = NULL;
  CHECK(tycho_evaluate(out_path, truth_path, NULL, &json) == TYCHO_OK);
  CHECK(json != NULL);
  if (json) {
    const char* p = strstr(json, "\"pearson\": ");
    CHECK(p != NULL);
    double pearson = p ? strtod(p + strlen("\"pearson\": "), NULL) : 0;
    CHECK(pearson > 0.7 && pearson < 0.9);
    CHECK(strstr(json, "\"iterations\": 7") != NULL);
    CHECK(strstr(json, "\"sigma_A\": 2.0") != NULL);
    /* The defaults spelled out give the same text; another σ another one. */
    tycho_evaluate_options eo;
    memset(&eo, 0, sizeof eo);
    eo.struct_size = sizeof eo;
    eo.sigma_A = 2.0;
    eo.fov_fraction = 0.8;
    char* same = NULL;
    CHECK(tycho_evaluate(out_path, truth_path, &eo, &same) == TYCHO_OK);
    CHECK(same != NULL && strcmp(same, json) == 0);
    tycho_free_string(same);
    eo.sigma_A = 1.0;
    char* other = NULL;
    CHECK(tycho_evaluate(out_path, truth_path, &eo, &other) == TYCHO_OK);
    CHECK(other != NULL && strstr(other, "\"sigma_A\": 1.0") != NULL);
    tycho_free_string(other);
    /* Bad options and paths: refused with a message naming them, and no text. */
    eo.sigma_A = NAN;
    char* none_json = (char*)1;
    CHECK(tycho_evaluate(out_path, truth_path, &eo, &none_json) == TYCHO_ERR_INVALID_ARGUMENT && none_json == NULL);
    CHECK(strstr(tycho_last_error(), "options->sigma_A") != NULL);
    eo.sigma_A = 0;
    eo.fov_fraction = 1.5;
    CHECK(tycho_evaluate(out_path, truth_path, &eo, &none_json) == TYCHO_ERR_INVALID_ARGUMENT);
    CHECK(strstr(tycho_last_error(), "options->fov_fraction") != NULL);
    eo.struct_size = 4;
    CHECK(tycho_evaluate(out_path, truth_path, &eo, &none_json) == TYCHO_ERR_ABI_MISMATCH);
    CHECK(tycho_evaluate(out_path, "no-such-truth.npz", NULL, &none_json) != TYCHO_OK && none_json == NULL);
    CHECK(strstr(tycho_last_error(), "no-such-truth.npz") != NULL);
    CHECK(tycho_evaluate(NULL, truth_path, NULL, &none_json) == TYCHO_ERR_INVALID_ARGUMENT);
    CHECK(tycho_evaluate(out_path, truth_path, NULL, NULL) == TYCHO_ERR_INVALID_ARGUMENT);
  }
  tycho_free_string(json);
  tycho_free_string(NULL);

  /* Bad input: an unknown key is refused with a suggestion, and no session is made. */
  tycho_session* bad = NULL;
  st = tycho_session_create("[reconstruct]\nbatchsize = 3\n[data]\npath = \"data/mos2_80kV_32x24_counts.h5\"\n",
                            examples, &bad);
  CHECK(st == TYCHO_ERR_INVALID_ARGUMENT && bad == NULL);
  CHECK(strstr(tycho_last_error(), "batch_size") != NULL);
  CHECK(tycho_session_create(NULL, NULL, &bad) == TYCHO_ERR_INVALID_ARGUMENT);

  /* Options: overrides as --set; a run of one rank has rank 0, world size 1 and a barrier that
   * returns at once. */
  const char* overrides[] = {"reconstruct.iterations=2", "reconstruct.batch_size=64"};
  tycho_session_options opts;
  memset(&opts, 0, sizeof opts);
  opts.struct_size = sizeof opts;
  opts.base_dir = examples;
  opts.overrides = overrides;
  opts.n_overrides = 2;
  tycho_session* ex = NULL;
  CHECK(tycho_session_create_ex(text, &opts, &ex) == TYCHO_OK);
  if (ex) {
    CHECK(tycho_session_rank(ex) == 0);
    CHECK(tycho_session_world_size(ex) == 1);
    CHECK(tycho_session_barrier(ex) == TYCHO_OK);
    CHECK(tycho_session_run(ex, 0, NULL, NULL) == TYCHO_OK);
    DLManagedTensor* h = NULL;
    CHECK(tycho_session_get(ex, "loss_history", &h) == TYCHO_OK);
    if (h) {
      CHECK(h->dl_tensor.shape[0] == 2); /* reconstruct.iterations=2 took effect */
      h->deleter(h);
    }
    tycho_session_destroy(ex);
  }
  /* A bad override names its key; a struct_size from an older caller that lacks fields is refused. */
  const char* bad_override[] = {"reconstruct.batchsize=64"};
  opts.overrides = bad_override;
  opts.n_overrides = 1;
  CHECK(tycho_session_create_ex(text, &opts, &bad) == TYCHO_ERR_INVALID_ARGUMENT && bad == NULL);
  CHECK(strstr(tycho_last_error(), "batch_size") != NULL);
  opts.struct_size = 8;
  CHECK(tycho_session_create_ex(text, &opts, &bad) == TYCHO_ERR_ABI_MISMATCH);
  tycho_shutdown();
  /* After tycho_shutdown no session can be made: an error, not a crash inside MPI. */
  CHECK(tycho_session_create_ex(text, NULL, &bad) == TYCHO_ERR_INVALID_ARGUMENT && bad == NULL);
  CHECK(strstr(tycho_last_error(), "tycho_shutdown") != NULL);

  free(text);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
