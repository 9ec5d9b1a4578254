/* The embedding API of libtycho: run a reconstruction from C, C++, Python (ctypes), Julia,
 * Rust or MATLAB.
 *
 *   tycho_session* s;
 *   if (tycho_session_create(toml_text, base_dir, &s) != TYCHO_OK) puts(tycho_last_error());
 *   tycho_session_run(s, 100, on_progress, NULL);
 *   DLManagedTensor* obj; tycho_session_get(s, "object", &obj);  ... obj->deleter(obj);
 *   tycho_session_save(s, "result.zip", TYCHO_SAVE_OVERWRITE);
 *   tycho_session_destroy(s);
 *
 * Every function returning tycho_status sets the thread's last-error message on failure. */
#ifndef TYCHO_H
#define TYCHO_H

#include <stdint.h>

#include <dlpack/dlpack.h>

#include "tycho_components.h"
#include "tycho_status.h"
#include "tycho_version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TYCHO_API __declspec(dllexport)
#else
#define TYCHO_API __attribute__((visibility("default")))
#endif

typedef struct tycho_session tycho_session;

/* Progress after each iteration. Return 0 to go on, non-zero to stop (the run then returns
 * TYCHO_ERR_CANCELLED with everything computed so far kept). */
typedef struct tycho_progress {
  uint32_t struct_size;
  int64_t iteration;        /* 1-based, counted over the session's whole life (resumed ones too) */
  int64_t iterations_total; /* the iteration this run call ends at, counted the same way: a
                               second run(3) after a first run(3) reports 4/6, 5/6, 6/6 */
  double loss;              /* mean loss per pattern of this iteration */
  double seconds;           /* wall time of this iteration */
} tycho_progress;
typedef int (*tycho_progress_fn)(const tycho_progress* progress, void* user_data);

/* TYCHO_ABI_VERSION of the loaded library, (major << 16) | minor. */
TYCHO_API uint32_t tycho_abi_version(void);
/* Release version, e.g. "0.1.0". */
TYCHO_API const char* tycho_version(void);
/* A constant English name for a status, e.g. "TYCHO_ERR_NOT_FOUND". */
TYCHO_API const char* tycho_status_string(tycho_status status);
/* The calling thread's last error message ("" if none). Valid until the next tycho call. */
TYCHO_API const char* tycho_last_error(void);

/* Parses and validates the TOML configuration, loads plugins (build tree, install tree and
 * TYCHO_PLUGIN_PATH), reads the data and prepares the engine. `base_dir` resolves relative
 * paths in the config (NULL: the current directory). */
TYCHO_API tycho_status tycho_session_create(const char* toml_text, const char* base_dir,
                                            tycho_session** out);
/* Runs `iterations` more iterations (epochs over all positions), a fixed count; 0: the configured
 * [reconstruct] iterations: N, or with "auto" (the default) until the stopping rule ends the run,
 * at most max_iterations in all (docs/config-reference.md, "When a run stops"). */
TYCHO_API tycho_status tycho_session_run(tycho_session* session, int64_t iterations,
                                         tycho_progress_fn progress, void* user_data);
/* A copy of "object" (slices,H,W c64; c128 when [reconstruct] precision = "float64"), "probe"
 * (modes,N0,N1, the object's dtype), "positions_px" (P,2 f64,
 * probe centres in object pixels; "positions" is the same), "positions_A" (P,2 f64, Å) or
 * "loss_history" (iterations f64), owned by the caller: call (*out)->deleter(*out). With
 * [reconstruct] validation_fraction > 0 also "held_out_loss" ((1,) f64: the held-out patterns'
 * mean loss at the end of the last run; NaN before one). TYCHO_ERR_NOT_FOUND for any other name. */
TYCHO_API tycho_status tycho_session_get(tycho_session* session, const char* name,
                                         DLManagedTensor** out);
/* Saves the result (arrays, manifest with resolved config and provenance) through the
 * configured format plugin, atomically. */
TYCHO_API tycho_status tycho_session_save(tycho_session* session, const char* path,
                                          tycho_save_mode mode);
TYCHO_API void tycho_session_destroy(tycho_session* session);

/* ---- data-parallel runs (several ranks: processes under mpirun / srun / torchrun) */

/* Options of tycho_session_create_ex. Zero-initialise, set struct_size; append-only. */
typedef struct tycho_session_options {
  uint32_t struct_size;
  const char* base_dir;          /* resolves relative paths in the config; NULL: current dir */
  /* "key=value" overrides applied in order, as `tycho reconstruct --set` (NULL: none). */
  const char* const* overrides;
  int64_t n_overrides;
  /* Bring your own cluster: a communicator the caller already has, adopted for this session's
   * reducer and never freed by tycho: an MPI_Comm* for [parallel] reducer = "mpi", an
   * ncclComm_t* for "nccl". NULL: the launcher's environment decides (one rank when there is
   * none). */
  void* communicator;
} tycho_session_options;

/* As tycho_session_create, with options. Every rank creates its session with the same
 * configuration (rank 0's is checked against each rank's); each rank reads its share of the
 * patterns. If one rank fails here, the others fail after [parallel] timeout_s at most. */
TYCHO_API tycho_status tycho_session_create_ex(const char* toml_text, const tycho_session_options* options,
                                               tycho_session** out);
/* This session's rank in [0, world size) and the number of ranks (1 for a run of one). Only
 * rank 0 should write files: tycho_session_save writes on whichever rank calls it. */
TYCHO_API int32_t tycho_session_rank(const tycho_session* session);
TYCHO_API int32_t tycho_session_world_size(const tycho_session* session);
/* Returns when every rank's session has called it (for a script's own files and timing). */
TYCHO_API tycho_status tycho_session_barrier(tycho_session* session);
/* ---- accuracy against a ground truth (ABI 1.3): what `tycho evaluate` prints */

/* Options of tycho_evaluate. Zero-initialise, set struct_size; a field left 0 takes its default.
 * Append-only. */
typedef struct tycho_evaluate_options {
  uint32_t struct_size;
  double sigma_A;           /* σ of the local-phase Gaussian, Å, > 0; 0: 2 (the data READMEs' metric) */
  double fov_fraction;      /* inner fraction of the scanned field of view compared, (0, 1]; 0: 0.8 */
  double slice_thickness_A; /* depth of each slice of a multislice result, Å, > 0; 0: the result's own */
} tycho_evaluate_options;

/* The accuracy of a saved result (`result_path`, written by tycho_session_save or `tycho
 * reconstruct`) against a ground truth (`truth_path`: an .npz with phase or phase_total,
 * pixel_size_A and scan_origin_A; optionally phase_slices, phase_top/phase_bottom with
 * layer_depths_A, positions_true_A; docs/embedding.md): the local-phase Pearson correlation and
 * RMS error in the inner field of view after integer registration, per-depth figures for a
 * multislice result, and the corrected positions' RMS error, as one JSON object, the text `tycho
 * evaluate` prints. `*json` is a NUL-terminated UTF-8 string owned by the caller: free it with
 * tycho_free_string. `options` NULL: the defaults. On failure *json is NULL and the status
 * (TYCHO_ERR_NOT_FOUND, _IO, _BAD_DATA, _INVALID_ARGUMENT) comes with a message naming the file,
 * array or option. Reads only; thread-safe (no session involved). */
TYCHO_API tycho_status tycho_evaluate(const char* result_path, const char* truth_path,
                                      const tycho_evaluate_options* options, char** json);
/* Frees a string tycho returned (tycho_evaluate's JSON); NULL is a no-op. */
TYCHO_API void tycho_free_string(char* text);

/* After the last session is destroyed: releases what tycho started for the process (MPI, when
 * tycho initialised it). Optional: otherwise that happens at exit. No session may be created
 * after it. */
TYCHO_API void tycho_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
