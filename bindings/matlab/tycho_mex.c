/* The MEX gateway of tycho for GNU Octave and MATLAB: one entry point over the C API of
 * abi/tycho/tycho.h, dispatched on its first argument. The .m functions beside it
 * (tycho_reconstruct, tycho_session_*) are the interface; call those, not this.
 *
 *   tycho_mex('version')                         -> '0.1.0'
 *   h = tycho_mex('create', toml_text, base_dir, overrides)   overrides: cellstr of 'key=value'
 *   completed = tycho_mex('run', h, iterations, progress_fn)  progress_fn: [] or a handle
 *   a = tycho_mex('get', h, name)
 *   tycho_mex('save', h, path, overwrite)
 *   tycho_mex('free', h)
 *   [rank, world_size] = tycho_mex('rank', h)
 *
 * Handles are small positive numbers indexing a table of live sessions, so a stale or made-up
 * handle is an error instead of a crash. The MEX file stays locked in memory while a session
 * lives, and frees every session when Octave/MATLAB exits or clears it.
 *
 * Arrays: tycho's are row-major (C order); MATLAB's are column-major. `get` converts so that
 * indices mean the same thing: a (d0, d1) tensor becomes a d0 x d1 matrix with A(i, j) =
 * t[i-1][j-1]; a (d0,) tensor a d0 x 1 column; a (d0, d1, d2) stack (object: slices, H, W;
 * probe: modes, N0, N1) becomes d1 x d2 x d0, with A(i, j, s) = t[s-1][i-1][j-1], so that
 * A(:, :, 1) is the first slice as an H x W image. complex64 -> single complex, complex128 ->
 * double complex, float64 -> double, float32 -> single, uint8 -> uint8; values are copied bit
 * for bit.
 *
 * Errors are raised with the identifier 'tycho:<status name>', e.g.
 * 'tycho:TYCHO_ERR_INVALID_ARGUMENT', and tycho's message. */
#include <tycho/tycho.h>

#include "mex.h"

#include <stdio.h>
#include <string.h>

#define MAX_SESSIONS 256

static tycho_session* sessions[MAX_SESSIONS + 1]; /* index = handle; 0 unused */
static int live_sessions = 0;

static void free_all_sessions(void) {
  for (int i = 1; i <= MAX_SESSIONS; ++i) {
    if (sessions[i]) {
      tycho_session_destroy(sessions[i]);
      sessions[i] = NULL;
    }
  }
  live_sessions = 0;
}

/* Raises error(struct('identifier', id, 'message', message)) rather than mexErrMsgIdAndTxt,
 * which in Octave prefixes the message with "tycho_mex: ": the caller sees tycho's message as
 * it is. Does not return. */
static void fail(const char* id, const char* message) {
  const char* fields[] = {"identifier", "message"};
  mxArray* err = mxCreateStructMatrix(1, 1, 2, fields);
  mxSetField(err, 0, "identifier", mxCreateString(id));
  mxSetField(err, 0, "message", mxCreateString(message));
  mexCallMATLAB(0, NULL, 1, &err, "error");
  mexErrMsgIdAndTxt(id, "%s", message); /* not reached */
}

static void fail_status(tycho_status st) {
  char id[96];
  snprintf(id, sizeof id, "tycho:%s", tycho_status_string(st));
  fail(id, tycho_last_error());
}

static char* string_arg(const mxArray* a, const char* what) {
  char message[160];
  if (!mxIsChar(a)) {
    snprintf(message, sizeof message, "tycho_mex: %s must be a char array", what);
    fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", message);
  }
  return mxArrayToString(a); /* freed by mxFree, or at the end of the MEX call */
}

static int handle_arg(const mxArray* a) {
  char message[160];
  double h = (mxIsDouble(a) && mxGetNumberOfElements(a) == 1 && !mxIsComplex(a)) ? mxGetScalar(a) : -1;
  if (h < 1 || h > MAX_SESSIONS || h != (double)(int)h || !sessions[(int)h]) {
    snprintf(message, sizeof message, "tycho_mex: no live tycho session with this handle (freed, or not one from tycho_session_create)");
    fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", message);
  }
  return (int)h;
}

static void need_args(int nrhs, int n, const char* usage) {
  if (nrhs != n) {
    char message[200];
    snprintf(message, sizeof message, "tycho_mex: usage: %s", usage);
    fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", message);
  }
}

static void cmd_create(int nlhs, mxArray* plhs[], int nrhs, const mxArray* prhs[]) {
  need_args(nrhs, 4, "h = tycho_mex('create', toml_text, base_dir, overrides)");
  (void)nlhs;
  char* text = string_arg(prhs[1], "the config text");
  char* base_dir = string_arg(prhs[2], "base_dir");
  const mxArray* cell = prhs[3];
  if (!mxIsCell(cell) && !mxIsEmpty(cell)) fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", "tycho_mex: overrides must be a cell array of 'key=value' strings");
  int64_t n = mxIsCell(cell) ? (int64_t)mxGetNumberOfElements(cell) : 0;
  const char** overrides = n ? (const char**)mxCalloc((size_t)n, sizeof(char*)) : NULL;
  for (int64_t i = 0; i < n; ++i) {
    const mxArray* item = mxGetCell(cell, (mwIndex)i);
    if (!item || !mxIsChar(item)) fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", "tycho_mex: every override must be a 'key=value' string");
    overrides[i] = mxArrayToString(item);
  }
  int slot = 0;
  for (int i = 1; i <= MAX_SESSIONS && !slot; ++i)
    if (!sessions[i]) slot = i;
  if (!slot) fail("tycho:TYCHO_ERR_OUT_OF_MEMORY", "tycho_mex: too many live sessions (256); free some with tycho_session_free");

  tycho_session_options options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.base_dir = base_dir[0] ? base_dir : NULL;
  options.overrides = overrides;
  options.n_overrides = n;
  tycho_session* s = NULL;
  tycho_status st = tycho_session_create_ex(text, &options, &s);
  if (st != TYCHO_OK) fail_status(st);
  sessions[slot] = s;
  if (live_sessions++ == 0) mexLock();
  plhs[0] = mxCreateDoubleScalar((double)slot);
}

typedef struct progress_context {
  const mxArray* fn;
  mxArray* error; /* error(struct) the progress function raised, raised again after the run */
} progress_context;

/* Calls tycho_progress_call(fn, p) (an .m file beside this one), which never raises. */
static int on_progress(const tycho_progress* p, void* user_data) {
  progress_context* ctx = (progress_context*)user_data;
  const char* fields[] = {"iteration", "iterations_total", "loss", "seconds"};
  mxArray* info = mxCreateStructMatrix(1, 1, 4, fields);
  mxSetField(info, 0, "iteration", mxCreateDoubleScalar((double)p->iteration));
  mxSetField(info, 0, "iterations_total", mxCreateDoubleScalar((double)p->iterations_total));
  mxSetField(info, 0, "loss", mxCreateDoubleScalar(p->loss));
  mxSetField(info, 0, "seconds", mxCreateDoubleScalar(p->seconds));
  mxArray* in[2] = {(mxArray*)ctx->fn, info};
  mxArray* out[2] = {NULL, NULL};
  mxArray* trapped = mexCallMATLABWithTrap(2, out, 2, in, "tycho_progress_call");
  mxDestroyArray(info);
  if (trapped) { /* tycho_progress_call itself is missing: not on the path */
    ctx->error = mxCreateStructMatrix(1, 1, 0, NULL);
    mxAddField(ctx->error, "identifier");
    mxAddField(ctx->error, "message");
    mxSetField(ctx->error, 0, "identifier", mxCreateString("tycho:TYCHO_ERR_NOT_FOUND"));
    mxSetField(ctx->error, 0, "message", mxCreateString("tycho_progress_call.m, beside tycho_mex, is not on the path"));
    return 1;
  }
  int stop = mxGetNumberOfElements(out[0]) == 1 && mxGetScalar(out[0]) != 0;
  if (mxIsStruct(out[1])) ctx->error = out[1];
  else mxDestroyArray(out[1]);
  mxDestroyArray(out[0]);
  return stop;
}

static void cmd_run(int nlhs, mxArray* plhs[], int nrhs, const mxArray* prhs[]) {
  need_args(nrhs, 4, "completed = tycho_mex('run', h, iterations, progress_fn)");
  (void)nlhs;
  int h = handle_arg(prhs[1]);
  if (!mxIsNumeric(prhs[2]) || mxGetNumberOfElements(prhs[2]) != 1)
    fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", "tycho_mex: iterations must be a number (0: the configured [reconstruct] iterations)");
  double iterations = mxGetScalar(prhs[2]);
  if (!(iterations >= 0 && iterations <= 1e15) || iterations != (double)(int64_t)iterations)
    fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", "tycho_mex: iterations must be a whole number in [0, 1e15]");
  progress_context ctx = {prhs[3], NULL};
  int with_progress = !mxIsEmpty(prhs[3]);
  if (with_progress && !mxIsClass(prhs[3], "function_handle"))
    fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", "tycho_mex: progress must be a function handle or []");
  tycho_status st = tycho_session_run(sessions[h], (int64_t)iterations, with_progress ? on_progress : NULL, &ctx);
  if (ctx.error) mexCallMATLAB(0, NULL, 1, &ctx.error, "error"); /* does not return */
  if (st != TYCHO_OK && st != TYCHO_ERR_CANCELLED) fail_status(st);
  plhs[0] = mxCreateLogicalScalar(st == TYCHO_OK);
}

/* Copies a row-major tensor into a column-major array with the same index meaning (above).
 * Returns NULL with `why` filled for a tensor it cannot convert (the caller frees the tensor
 * before raising: a MEX error does not return). */
static mxArray* to_matlab(const DLTensor* t, const char* name, char* why, size_t why_size) {
  mxClassID cls;
  int complex = 0;
  size_t elem;
  if (t->dtype.code == kDLComplex && t->dtype.bits == 64) { cls = mxSINGLE_CLASS; complex = 1; elem = 4; }
  else if (t->dtype.code == kDLComplex && t->dtype.bits == 128) { cls = mxDOUBLE_CLASS; complex = 1; elem = 8; }
  else if (t->dtype.code == kDLFloat && t->dtype.bits == 32) { cls = mxSINGLE_CLASS; elem = 4; }
  else if (t->dtype.code == kDLFloat && t->dtype.bits == 64) { cls = mxDOUBLE_CLASS; elem = 8; }
  else if (t->dtype.code == kDLUInt && t->dtype.bits == 8) { cls = mxUINT8_CLASS; elem = 1; }
  else {
    snprintf(why, why_size, "tycho_mex: array '%s' has a dtype (DLPack code %d, %d bits) this gateway does not convert",
             name, t->dtype.code, t->dtype.bits);
    return NULL;
  }
  if (t->device.device_type != kDLCPU || t->strides != NULL || t->ndim < 1 || t->ndim > 3 || t->dtype.lanes != 1) {
    snprintf(why, why_size, "tycho_mex: array '%s' is not a compact host array of 1 to 3 dimensions", name);
    return NULL;
  }
  /* (d0,) -> d0 x 1; (d0, d1) -> d0 x d1; (d0, d1, d2) -> d1 x d2 x d0. */
  size_t d0 = (size_t)t->shape[0], d1 = t->ndim > 1 ? (size_t)t->shape[1] : 1, d2 = t->ndim > 2 ? (size_t)t->shape[2] : 1;
  size_t rows = t->ndim == 3 ? d1 : d0, cols = t->ndim == 3 ? d2 : d1, pages = t->ndim == 3 ? d0 : 1;
  mwSize dims[3] = {rows, cols, pages};
  mxArray* a = mxCreateNumericArray(t->ndim == 3 ? 3 : 2, dims, cls, complex ? mxCOMPLEX : mxREAL);
  const char* src = (const char*)t->data + t->byte_offset;
  char* re = (char*)mxGetData(a);
  char* im = complex ? (char*)mxGetImagData(a) : NULL;
  size_t step = complex ? 2 * elem : elem; /* bytes per element in the tensor */
  for (size_t p = 0; p < pages; ++p)
    for (size_t j = 0; j < cols; ++j)
      for (size_t i = 0; i < rows; ++i) {
        size_t to = i + rows * (j + cols * p);   /* column-major */
        size_t from = (p * rows + i) * cols + j; /* row-major (page, row, column) */
        memcpy(re + to * elem, src + from * step, elem);
        if (complex) memcpy(im + to * elem, src + from * step + elem, elem);
      }
  return a;
}

static void cmd_get(int nlhs, mxArray* plhs[], int nrhs, const mxArray* prhs[]) {
  need_args(nrhs, 3, "a = tycho_mex('get', h, name)");
  (void)nlhs;
  int h = handle_arg(prhs[1]);
  char* name = string_arg(prhs[2], "the array name");
  DLManagedTensor* t = NULL;
  tycho_status st = tycho_session_get(sessions[h], name, &t);
  if (st != TYCHO_OK) fail_status(st);
  char why[256] = "";
  mxArray* a = to_matlab(&t->dl_tensor, name, why, sizeof why);
  t->deleter(t);
  if (!a) fail("tycho:TYCHO_ERR_UNSUPPORTED", why);
  plhs[0] = a;
}

static void cmd_save(int nlhs, mxArray* plhs[], int nrhs, const mxArray* prhs[]) {
  need_args(nrhs, 4, "tycho_mex('save', h, path, overwrite)");
  (void)nlhs; (void)plhs;
  int h = handle_arg(prhs[1]);
  char* path = string_arg(prhs[2], "the path");
  int overwrite = mxGetNumberOfElements(prhs[3]) == 1 && mxGetScalar(prhs[3]) != 0;
  tycho_status st = tycho_session_save(sessions[h], path, overwrite ? TYCHO_SAVE_OVERWRITE : TYCHO_SAVE_NEW);
  if (st != TYCHO_OK) fail_status(st);
}

static void cmd_free(int nlhs, mxArray* plhs[], int nrhs, const mxArray* prhs[]) {
  need_args(nrhs, 2, "tycho_mex('free', h)");
  (void)nlhs; (void)plhs;
  int h = handle_arg(prhs[1]);
  tycho_session_destroy(sessions[h]);
  sessions[h] = NULL;
  if (--live_sessions == 0) mexUnlock();
}

static void cmd_rank(int nlhs, mxArray* plhs[], int nrhs, const mxArray* prhs[]) {
  need_args(nrhs, 2, "[rank, world_size] = tycho_mex('rank', h)");
  int h = handle_arg(prhs[1]);
  plhs[0] = mxCreateDoubleScalar(tycho_session_rank(sessions[h]));
  if (nlhs > 1) plhs[1] = mxCreateDoubleScalar(tycho_session_world_size(sessions[h]));
}

static void cmd_evaluate(int nlhs, mxArray* plhs[], int nrhs, const mxArray* prhs[]) {
  need_args(nrhs, 4, "json = tycho_mex('evaluate', result_path, truth_path, [sigma_A, fov_fraction, slice_thickness_A])");
  (void)nlhs;
  char* result = string_arg(prhs[1], "the result path");
  char* truth = string_arg(prhs[2], "the truth path");
  if (!mxIsDouble(prhs[3]) || mxIsComplex(prhs[3]) || mxGetNumberOfElements(prhs[3]) != 3)
    fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", "tycho_mex: the options must be [sigma_A, fov_fraction, slice_thickness_A] (0: the default)");
  const double* o = mxGetPr(prhs[3]);
  tycho_evaluate_options options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.sigma_A = o[0];
  options.fov_fraction = o[1];
  options.slice_thickness_A = o[2];
  char* json = NULL;
  tycho_status st = tycho_evaluate(result, truth, &options, &json);
  mxFree(result);
  mxFree(truth);
  if (st != TYCHO_OK) fail_status(st);
  plhs[0] = mxCreateString(json);
  tycho_free_string(json);
}

void mexFunction(int nlhs, mxArray* plhs[], int nrhs, const mxArray* prhs[]) {
  static int registered = 0;
  if (!registered) {
    mexAtExit(free_all_sessions);
    registered = 1;
  }
  if (nrhs < 1 || !mxIsChar(prhs[0])) fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", "tycho_mex: the first argument is a command ('create', 'run', 'get', 'save', 'free', 'rank', 'evaluate', 'version')");
  char* cmd = mxArrayToString(prhs[0]);
  if (strcmp(cmd, "version") == 0) {
    if (tycho_abi_version() >> 16 != TYCHO_ABI_VERSION_MAJOR) fail("tycho:TYCHO_ERR_ABI_MISMATCH", "tycho_mex: the loaded libtycho has another ABI major version than tycho.h of this build");
    plhs[0] = mxCreateString(tycho_version());
  } else if (strcmp(cmd, "create") == 0) cmd_create(nlhs, plhs, nrhs, prhs);
  else if (strcmp(cmd, "run") == 0) cmd_run(nlhs, plhs, nrhs, prhs);
  else if (strcmp(cmd, "get") == 0) cmd_get(nlhs, plhs, nrhs, prhs);
  else if (strcmp(cmd, "save") == 0) cmd_save(nlhs, plhs, nrhs, prhs);
  else if (strcmp(cmd, "free") == 0) cmd_free(nlhs, plhs, nrhs, prhs);
  else if (strcmp(cmd, "rank") == 0) cmd_rank(nlhs, plhs, nrhs, prhs);
  else if (strcmp(cmd, "evaluate") == 0) cmd_evaluate(nlhs, plhs, nrhs, prhs);
  else {
    char message[200];
    snprintf(message, sizeof message, "tycho_mex: unknown command '%s'", cmd);
    fail("tycho:TYCHO_ERR_INVALID_ARGUMENT", message);
  }
  mxFree(cmd);
}
