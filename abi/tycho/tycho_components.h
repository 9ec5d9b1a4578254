/* The component kinds a plugin can provide, and the vtable of each.
 *
 * Every vtable starts with `struct_size` and `abi_version`; vtables are append-only within a
 * major version. Arrays cross as DLPack tensors (dlpack.h v0.6: DLTensor / DLManagedTensor).
 * Handles are opaque; whoever creates one destroys it through the same vtable.
 * Every function that can fail returns a tycho_status and sets the thread's last error
 * through tycho_host_api::set_error.
 *
 * Units and axes follow docs/conventions.md: lengths in Å, energies in eV, angles in mrad,
 * patterns (Qx, Qy) in C order, object (slices, H, W) and probe (modes, N0, N1) complex64. */
#ifndef TYCHO_COMPONENTS_H
#define TYCHO_COMPONENTS_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "tycho_host_api.h"

/* The DLPack header the ABI was compiled against, as one number: 60 for dlpack.h 0.6 (its
 * DLPACK_VERSION), 100 for 1.0 (DLPACK_MAJOR_VERSION.DLPACK_MINOR_VERSION). DLTensor and
 * DLManagedTensor, the only DLPack types that cross the ABI, have one layout from 0.6 on; an
 * older header (kDLGPU, no byte_offset guarantees) is refused at compile time here, and a
 * plugin records its header's version (tycho_plugin_descriptor::dlpack_version, ABI 1.1) for
 * the host to check at load. */
#if defined(DLPACK_MAJOR_VERSION)
#define TYCHO_DLPACK_VERSION (DLPACK_MAJOR_VERSION * 100 + DLPACK_MINOR_VERSION * 10)
#elif defined(DLPACK_VERSION)
#define TYCHO_DLPACK_VERSION DLPACK_VERSION
#else
#error "tycho: dlpack.h defines no version: tycho needs DLPack 0.6 or newer (libdlpack-dev)"
#endif
#if TYCHO_DLPACK_VERSION < 60 || TYCHO_DLPACK_VERSION >= 200
#error "tycho: needs dlpack.h 0.6 to 1.x (DLTensor with kDLCUDA and byte_offset)"
#endif
/* The DLPack versions a host accepts from a plugin: same DLTensor layout. */
#define TYCHO_DLPACK_VERSION_MIN 60
#define TYCHO_DLPACK_VERSION_END 200
#include "tycho_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tycho_component_kind {
  TYCHO_COMPONENT_SOURCE = 1,    /* reads diffraction data and calibrations */
  TYCHO_COMPONENT_ENGINE = 2,    /* forward model and gradients for one mini-batch */
  TYCHO_COMPONENT_LOSS = 3,      /* L(I, D) and dL/dI */
  TYCHO_COMPONENT_OPTIMIZER = 4, /* updates a parameter from its gradient */
  TYCHO_COMPONENT_REDUCER = 5,   /* all-reduce across ranks */
  TYCHO_COMPONENT_FORMAT = 6,    /* saves and loads records (result files) */
  /* ---- appended in ABI 1.3 */
  TYCHO_COMPONENT_CONSTRAINT = 7 /* changes object, probe or positions after each step */
} tycho_component_kind;

/* ---------------------------------------------------------------- source */

typedef struct tycho_source tycho_source;

/* What a data set holds. Unknown calibrations are NaN. */
typedef struct tycho_dataset_info {
  uint32_t struct_size;
  int64_t scan_shape[2];          /* (Rx, Ry) positions */
  int64_t detector_shape[2];      /* (Qx, Qy) pixels */
  DLDataType stored_dtype;        /* as stored on disk (uint16 counts, float32, ...) */
  double scan_step_A[2];          /* real-space scan step along Rx, Ry, Å */
  double detector_pixel_invA[2];  /* reciprocal pixel along Qx, Qy, Å⁻¹ */
  double energy_eV;               /* beam energy */
  double semiangle_mrad;          /* probe-forming aperture semiangle */
  double C10_A;                   /* defocus aberration C10 (= −defocus), Å */
  int32_t patterns_centred;       /* 1: zero frequency at index N/2 (fftshift order) */
  const char* description;        /* e.g. "file.h5:/datacube_root/datacube/data"; owned by source */
  /* ---- appended in ABI 1.3: the source delivers its stored dtype. 1: read() also fills a `dst`
   * whose dtype is stored_dtype (uint8, uint16 or float16; float32 is read()'s own), with the
   * values as stored, unconverted, so a host can keep integer counts as integers without a
   * float32 copy of the scan. 0, or a struct_size that ends before this field (an older
   * source): read() fills float32 only, and a host never asks for another dtype. */
  int32_t reads_stored_dtype;
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): X-ray data and far-field geometry.
   * These start at byte 128 on LP64, beyond the tail padding that follows reads_stored_dtype
   * (whose bytes a source built before them may leave undefined), so a struct_size that covers
   * a field tells that the source filled it. */
  double detector_distance_m;     /* specimen-to-detector distance, m; NaN: not recorded */
  double detector_pixel_m[2];     /* physical pixel size along Qx, Qy, m; NaN: not recorded.
                                   * With the distance, the host computes the reciprocal pixel
                                   * p / (λ z) from the run's wavelength (config or file), so
                                   * a source need not know it; detector_pixel_invA, when also
                                   * set, is then not used */
  int32_t radiation;              /* tycho_radiation: what the file says the beam is; 0 unknown */
} tycho_dataset_info;

/* What a beam is made of (tycho_dataset_info::radiation; [optics] radiation): it decides the
 * wavelength of the energy, λ = 12.2643 / sqrt(E (1 + 0.978476e-6 E)) Å for electrons and
 * λ = 12398.42 / E Å for X-ray photons (E in eV). */
typedef enum tycho_radiation {
  TYCHO_RADIATION_UNKNOWN = 0,
  TYCHO_RADIATION_ELECTRON = 1,
  TYCHO_RADIATION_XRAY = 2
} tycho_radiation;

typedef struct tycho_source_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  /* Opens the data set described by the [data] table. */
  tycho_status (*open)(const tycho_config* cfg, tycho_source** out);
  tycho_status (*info)(tycho_source* src, tycho_dataset_info* out);
  /* Reads patterns [first, first+count) in scan order (C order over Rx, Ry) into `dst`:
   * a host float32 tensor of shape (count, Qx, Qy), C-contiguous, as stored (still centred).
   * Since ABI 1.3, when info() set reads_stored_dtype = 1, `dst` may instead have the dtype
   * stored_dtype (the same shape): the stored values, unconverted. Any other dtype is refused
   * (TYCHO_ERR_INVALID_ARGUMENT). */
  tycho_status (*read)(tycho_source* src, int64_t first, int64_t count, DLTensor* dst);
  void (*close)(tycho_source* src);
  /* ---- appended (in ABI 1.0, before its release): positions listed by the data set (CXI translations, a positions dataset).
   * Fills `dst`, a host float64 tensor (P, 2), C-contiguous, P = scan_shape[0] * scan_shape[1],
   * with each pattern's probe position in Å, in scan order: column 0 along the Rx axis (object
   * axis 0), column 1 along Ry (object axis 1), measured from any fixed origin (only differences
   * and [preprocess] scan_origin_A's sub-pixel part place the object grid). Returns
   * TYCHO_ERR_UNSUPPORTED when the data set is a raster known only by its shape and
   * scan_step_A; a host reads it only when struct_size covers it, and treats NULL as
   * unsupported. The host calls it at most once, after info(). */
  tycho_status (*read_positions)(tycho_source* src, DLTensor* dst);
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): the detector's own mask (CXI's
   * /entry_1/instrument_1/detector_1/mask, an EIGER/ARINA master's pixel_mask). Fills `dst`, a
   * host uint8 tensor (Qx, Qy), C-contiguous, in the frame read() delivers the patterns in (as
   * stored, still centred): nonzero = a pixel the detector marks bad, 0 = good. The host masks
   * those pixels in every pattern (left out of the loss, saved as the result's mask) with the
   * bad pixels it finds itself. Returns TYCHO_ERR_UNSUPPORTED when the data set has no mask; a
   * host reads it only when struct_size covers it, treats NULL as no mask, and calls it at most
   * once, after info(). */
  tycho_status (*read_detector_mask)(tycho_source* src, DLTensor* dst);
} tycho_source_vtable;

/* ---------------------------------------------------------------- loss */

typedef struct tycho_loss tycho_loss;

typedef struct tycho_loss_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  tycho_status (*create)(const tycho_config* cfg, tycho_loss** out);
  /* For n patterns: model intensity I (n, N0, N1), measured D (same shape, float32, in the
   * units of D; D·measured_scale is in the units of I), optional mask (N0, N1) uint8,
   * 1 = use the pixel (NULL: all). Writes dL/dI (same shape and dtype as I) and adds Σ L over
   * the n patterns to *loss_sum. Pixels outside the mask get dL/dI = 0.
   * model_intensity and dloss float32 or float64 (the engine's precision), measured float32;
   * a loss that does not support float64 returns TYCHO_ERR_UNSUPPORTED.
   * Host tensors (kDLCPU): loss_sum is host memory, `stream` is NULL, the call is synchronous;
   * engines call it concurrently from several threads on the same instance, so it must be
   * thread-safe (keep per-call state on the stack).
   * Device tensors (kDLCUDA): loss_sum points to a double in device memory that the work
   * adds to, and the work is queued on `stream` (a cudaStream_t) without synchronising.
   * A loss that does not support the tensors' device returns TYCHO_ERR_UNSUPPORTED. */
  tycho_status (*evaluate)(tycho_loss* loss, const DLTensor* model_intensity,
                           const DLTensor* measured, const DLTensor* mask, double measured_scale,
                           DLTensor* dloss_dintensity, double* loss_sum, void* stream);
  void (*destroy)(tycho_loss* loss);
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): evaluate and the chain rule to the
   * far field in one pass over the pixels, the engines' fast path (an engine calls it where
   * struct_size covers it and it is not NULL, else evaluate on the intensities it forms). For n
   * patterns of M probe modes:
   *   far_field (n, M, N0, N1), complex64 or complex128 (the engine's precision): Ψ, such that
   *             the model intensity is I = intensity_scale · Σ_m |Ψ_m|² (summed over m in order);
   *   measured  (n, N0, N1), float32, or uint16 counts (each widened exactly to float32);
   *   mask, measured_scale, loss_sum, stream: as for evaluate;
   *   gradient  like far_field, not overlapping it: writes G_m = gradient_scale · (dL/dI)(I, D) · Ψ_m.
   * I, dL/dI and G in the far field's precision (Real): I = Real(intensity_scale) · (Re²+Im²),
   * G = Ψ · (dL/dI · Real(gradient_scale)), so that the gradient equals, bit for bit, that of
   * evaluate on the same I followed by the engine's own product; Σ L may differ from evaluate's
   * in the last bits (the order of the sum). With Ψ an engine's unnormalised far field and both
   * scales 1/(N0·N1), G is what the inverse transform takes to give ∂L/∂ψ*. The same threading
   * and device rules as evaluate; a loss that does not take the tensors (device, dtype, M)
   * returns TYCHO_ERR_UNSUPPORTED, and the engine then uses evaluate. */
  tycho_status (*evaluate_far_field)(tycho_loss* loss, const DLTensor* far_field, double intensity_scale,
                                     const DLTensor* measured, const DLTensor* mask, double measured_scale,
                                     double gradient_scale, DLTensor* gradient, double* loss_sum, void* stream);
} tycho_loss_vtable;

/* A loss instance bound to its vtable, as handed to an engine. Frozen at its ABI 1.0 layout:
 * it is embedded by value in tycho_engine_setup, so it can never grow. What a later minor adds
 * to the binding goes into tycho_loss_ref (sized, passed by pointer). */
typedef struct tycho_loss_binding {
  const tycho_loss_vtable* vtable;
  tycho_loss* instance;
} tycho_loss_binding;

/* ---- added in ABI 1.1: the same binding with a size, reached through a pointer
 * (tycho_engine_setup::loss_ref) so it can grow: append-only, read struct_size first. */
typedef struct tycho_loss_ref {
  uint32_t struct_size;
  const tycho_loss_vtable* vtable;
  tycho_loss* instance;
} tycho_loss_ref;

/* ---------------------------------------------------------------- memory planning */

/* ---- added in ABI 1.1. The memory problem of a run, as the host (`tycho plan`, the session's
 * check before anything is allocated) hands it to an engine's plan_memory. Counts in elements,
 * sizes in bytes. Append-only: read struct_size before a field a later minor adds. */
typedef struct tycho_memory_problem {
  uint32_t struct_size;
  int64_t patterns;                /* P, all devices together */
  int64_t window[2];               /* (N0, N1), the engine's window after any detector padding */
  int64_t target_bytes;            /* bytes per target pixel as the host hands them (4: float32) */
  int64_t object_shape[2];         /* (H, W) object pixels */
  int64_t slices;                  /* S */
  int64_t probe_modes;             /* K */
  int64_t batch_size;              /* B, global (split over the devices) */
  int64_t devices;                 /* W: devices (or processes) sharing the patterns */
  int64_t threads;                 /* [reconstruct] threads when given (> 0), else the host's default */
  int64_t complex_bytes;           /* 8: complex64, 16: complex128 ([reconstruct] precision) */
  int64_t object_optimizer_arrays; /* state arrays per object element (the optimizer's state_arrays) */
  int64_t probe_optimizer_arrays;  /* the same for the probe */
  /* ---- appended in ABI 1.3 */
  int32_t targets_streamed;        /* 1: the engine holds no targets, only one mini-batch's (its
                                    * share of batch_size), read through a tycho_target_reader */
} tycho_memory_problem;

/* One term of a memory report: bytes per device and how they were counted. */
#define TYCHO_MEMORY_TERM_NAME_MAX 32
#define TYCHO_MEMORY_TERM_FORMULA_MAX 224
typedef struct tycho_memory_term {
  char name[TYCHO_MEMORY_TERM_NAME_MAX];       /* "targets", "object", ...; NUL-terminated */
  uint64_t bytes;                              /* per device */
  char formula[TYCHO_MEMORY_TERM_FORMULA_MAX]; /* "768 patterns · 96·96 px · 4 B"; NUL-terminated */
} tycho_memory_term;

/* Bits of tycho_memory_report::flags: how the planner may look for a run that fits. */
#define TYCHO_MEMORY_ON_DEVICE 1u     /* the terms live in device memory (compared with the device's;
                                       * the host keeps a staging copy of the targets) */
#define TYCHO_MEMORY_BATCH_SCALES 2u  /* the terms grow with the per-device batch (a smaller batch fits) */
#define TYCHO_MEMORY_THREADS_SCALE 4u /* the terms grow with the threads (fewer threads fit) */

#define TYCHO_MEMORY_TERMS_MAX 16
typedef struct tycho_memory_report {
  uint32_t struct_size;  /* set by the host */
  uint32_t flags;        /* TYCHO_MEMORY_* */
  int64_t n_terms;       /* 0 < n_terms <= TYCHO_MEMORY_TERMS_MAX, without a total (the host sums) */
  tycho_memory_term terms[TYCHO_MEMORY_TERMS_MAX];
} tycho_memory_report;

/* ---------------------------------------------------------------- engine */

typedef struct tycho_engine tycho_engine;

/* Everything an engine needs, computed once by the host (optics, geometry, preprocessing).
 * `targets` and `mask` stay valid and unchanged until the engine is destroyed, so an engine
 * may read them in place; the other tensors are copied during create. */
typedef struct tycho_engine_setup {
  uint32_t struct_size;
  const tycho_config* config;     /* the [reconstruct] table */
  const DLTensor* targets;        /* (P, N0, N1) host, FFT natural order (not centred): float32, or
                                   * uint16 integer counts (exact; the engine widens them to float32
                                   * for the loss). An engine refuses a dtype it does not take. */
  const DLTensor* mask;           /* (N0, N1) uint8, 1 = valid, FFT natural order like the
                                   * targets (padding added by the host is 0); NULL: all valid */
  double target_scale;            /* model intensity = target · target_scale */
  /* (P, 2) float64: probe centre of each pattern in object pixels (row = axis 0, col = axis 1).
   * The window's top-left corner is centre − (N0/2, N1/2); its integer part selects the object
   * patch, its fractional part shifts the probe by a Fourier phase ramp. */
  const DLTensor* positions_px;
  /* complex64 or complex128, whatever the engine's precision: the engine converts. The host
   * hands complex64 on a fresh run and the saved arrays' dtype on a resumed one. */
  const DLTensor* object_init;    /* (slices, H, W) */
  const DLTensor* probe_init;     /* (modes, N0, N1), centred in its window */
  tycho_loss_binding loss;        /* frozen 1.0 layout; the same as *loss_ref */
  int32_t num_threads;            /* 0: all hardware threads */
  DLDevice device;
  /* ---- appended in ABI 1.1 */
  const tycho_loss_ref* loss_ref; /* the loss binding with a size (the same vtable and instance
                                   * as `loss`), valid as long as the setup */
  /* ---- appended in ABI 1.2: multislice and position correction. An engine reads these only
   * when struct_size covers them (a 1.1 host: one slice, no position gradient). */
  /* Slices S = object_init->shape[0] > 1: the Fresnel propagator over one slice,
   * H(k) = exp(−i π λ Δz |k|²) (docs/conventions.md; k in Å⁻¹ on the window's frequencies),
   * (N0, N1) complex128 in FFT natural order, computed by the host from the optics. The exit
   * wave of slice s is propagated to slice s + 1 as F⁻¹[H · F[ψ_s · O_s]] (F unitary).
   * NULL when S = 1. An engine that cannot propagate refuses S > 1 at create. */
  const DLTensor* slice_propagator;
  double slice_thickness_A;       /* Δz between consecutive slices, Å (0 when S = 1) */
  /* 1: every compute_batch also writes dL/dr_j, the derivative of pattern j's loss by its
   * probe centre r_j (object pixels, both axes), into TYCHO_TENSOR_POSITIONS_GRAD for each
   * pattern j of the batch (entries of other patterns are left as they were). 0: it need not.
   * An engine that cannot refuses 1 at create. */
  int32_t position_gradient;
  /* ---- appended in ABI 1.3: targets per mini-batch. NULL: the targets are in `targets`.
   * Non-NULL, with `targets` NULL: the engine holds no targets; it asks the host for each
   * mini-batch's through the reader (docs/streaming.md). An engine that cannot refuses at
   * create (the built-in cuda engine does in this version). */
  const struct tycho_target_reader* target_reader;
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): deterministic sums. 1: the host
   * finishes every batch of an engine that keeps its sums as integers (get_tensor of
   * TYCHO_TENSOR_FIXED_POINT_SUMS succeeds): after compute_batch it sums that tensor over the
   * ranks and calls finish_batch. 0 (or a setup that ends before this field): no host does, and
   * such an engine finishes each batch itself in compute_batch, as for one rank. */
  int32_t host_finishes_batches;
  /* The probe centres of every pattern of the run, every rank's ((P_all, 2) float64 host, valid
   * during create), of which positions_px is rows [scan_first, scan_first + P): what an engine
   * needs to lay out its integer sums alike on every rank (the cpu engine's row-offset classes).
   * NULL: positions_px is the whole scan (scan_first 0). */
  const DLTensor* scan_positions_px;
  int64_t scan_first;
} tycho_engine_setup;

/* ---- added in ABI 1.3: the host's reader of the targets of a mini-batch, handed to an engine
 * through tycho_engine_setup::target_reader when the targets are streamed (target_residency
 * "disk"). Append-only: read struct_size first. Valid, with its context, until the engine is
 * destroyed. */
typedef struct tycho_target_reader {
  uint32_t struct_size;
  DLDataType dtype;   /* what read() writes: float32, or uint16 integer counts */
  int64_t shape[3];   /* (P, N0, N1): the targets the engine would otherwise hold */
  /* Makes the targets of the `count` patterns `indices` (each in [0, P)), in that order,
   * readable at *batch: host memory of count·N0·N1 elements of `dtype`, C-contiguous
   * (count, N0, N1), FFT natural order, as `targets` would hold them (the same values, bit for
   * bit). The memory is the host's (no copy: the host reads the next batch ahead into another
   * buffer): valid until the next call of read for this setup or the engine's destruction,
   * read-only for the engine. count may be 0. Blocking; called by the thread that runs
   * compute_batch, never by two threads at once for one setup. Returns TYCHO_OK, or an error
   * with the thread's last error set (a read failure names the file). */
  tycho_status (*read)(void* context, const int64_t* indices, int64_t count, const void** batch);
  void* context;      /* the host's, passed to read */
} tycho_target_reader;

/* Tensors an engine exposes as views on its own memory (valid until the next call). Object,
 * probe and their gradients are complex64, or complex128 for an engine computing in float64
 * ([reconstruct] precision = "float64"); the host reads the run's precision from the object's
 * dtype. */
typedef enum tycho_tensor_id {
  TYCHO_TENSOR_OBJECT = 0,        /* (slices, H, W) complex64 or complex128 */
  TYCHO_TENSOR_PROBE = 1,         /* (modes, N0, N1), the object's dtype */
  TYCHO_TENSOR_OBJECT_GRAD = 2,   /* ∂L/∂O* summed over the last batch, same shape */
  TYCHO_TENSOR_PROBE_GRAD = 3,    /* ∂L/∂P* summed over the last batch, same shape */
  TYCHO_TENSOR_POSITIONS = 4,     /* (P, 2) float64, probe centres in object pixels; a host
                                   * engine's view is writable: the host moves the positions
                                   * between batches (position correction) */
  /* ---- appended in ABI 1.2 */
  TYCHO_TENSOR_POSITIONS_GRAD = 5, /* (P, 2) float64, dL/dr per pattern (setup position_gradient) */
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release) */
  TYCHO_TENSOR_FIXED_POINT_SUMS = 6 /* (n) int64 on the engine's device: the last compute_batch's
                                     * gradients and loss as integers, in the engine's own layout
                                     * (tycho_engine_vtable::finish_batch); only an engine that keeps
                                     * deterministic sums has it (else TYCHO_ERR_UNSUPPORTED) */
} tycho_tensor_id;

typedef struct tycho_engine_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  tycho_status (*create)(const tycho_engine_setup* setup, tycho_engine** out);
  /* Zeroes the gradients, then for the `count` patterns `indices` computes the model, the
   * loss (through setup->loss) and the Wirtinger gradients ∂L/∂O*, ∂L/∂P* (sums, not means).
   * `count` may be 0 (a rank that holds none of a batch's patterns): the gradients are zeros.
   * Host engines add Σ L over the batch to *loss_sum; device engines keep it for
   * collect_loss. Queued on the engine's stream: nothing here needs to synchronise. */
  tycho_status (*compute_batch)(tycho_engine* eng, const int64_t* indices, int64_t count,
                                double* loss_sum);
  tycho_status (*get_tensor)(tycho_engine* eng, tycho_tensor_id id, DLTensor* out);
  void (*destroy)(tycho_engine* eng);
  /* Copies a tensor into host memory of `bytes` bytes (its exact size), waiting for pending
   * work: how the host reads results whatever device the engine uses. */
  tycho_status (*read_tensor)(tycho_engine* eng, tycho_tensor_id id, void* host_dst, size_t bytes);
  /* The stream the engine queues its work on (a cudaStream_t), NULL for host engines: the
   * driver passes it to optimizers and reducers so nothing synchronises per batch. */
  void* (*stream)(tycho_engine* eng);
  /* Waits for the engine's queued work and adds the losses accumulated on the device since
   * the last call to *loss_sum. Device engines keep batch losses on the device (compute_batch
   * then leaves its loss_sum untouched), so the driver synchronises once per iteration, not
   * per batch. NULL for host engines, whose compute_batch adds to loss_sum directly. */
  tycho_status (*collect_loss)(tycho_engine* eng, double* loss_sum);
  /* ---- appended in ABI 1.1: the engine describes its memory, so the host plans any engine
   * (`tycho plan`, the session's check) without knowing it by name. Fills `out` (the host has
   * set out->struct_size) with the bytes per device this engine would allocate for `problem`,
   * term by term, from the shapes alone: nothing is allocated, no device is touched. `cfg` is
   * the [reconstruct] table. Pure and thread-safe: the planner calls it many times (with more
   * devices, a smaller batch, fewer threads, a binned detector) to find what would fit.
   * NULL (or a vtable of ABI 1.0): the engine cannot be planned and `tycho plan` says so. */
  tycho_status (*plan_memory)(const tycho_config* cfg, const tycho_memory_problem* problem,
                              tycho_memory_report* out);
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): deterministic sums, the same bits
   * for any number of ranks (docs/guarantees.md). An engine that keeps its batch sums as
   * integers on a grid fixed before the batch exposes them as TYCHO_TENSOR_FIXED_POINT_SUMS. With
   * setup->host_finishes_batches = 1, after each compute_batch (which then leaves the gradients and
   * the loss in those integers: a host engine adds nothing to loss_sum) the host sums that tensor
   * over the ranks in place (int64: exact, in any order) and calls finish_batch, which either
   * converts the sums into OBJECT_GRAD and PROBE_GRAD and adds the batch's loss over every rank to
   * *loss_sum (host engines; device engines keep it for collect_loss) and sets *again = 0, or sets
   * *again = 1: a value overflowed the grid (or the grid that starts an iteration moved), the grids
   * are changed and the host must compute the same batch again (compute_batch, the sum,
   * finish_batch). Every rank reads the same sums, so every rank decides alike. `flags`:
   * TYCHO_FINISH_ENDS_ITERATION on the last batch of an iteration (the next batch's grid then
   * depends on that iteration's data alone, so a run resumed there quantises as one that did not
   * stop). Device engines: queued on `stream`, and waits for the work it needs to decide. */
  tycho_status (*finish_batch)(tycho_engine* eng, uint32_t flags, int32_t* again, double* loss_sum, void* stream);
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): the part of the object gradient
   * the host reads after the next compute_batch calls. `boxes` holds n_boxes rows of four
   * int64 [row0, row1, col0, col1): half-open, disjoint boxes of the object's last two axes
   * (every slice), inside the object, covering every window of every pattern of the global batch
   * (on every rank). Until the next call, compute_batch need zero and sum its object gradient
   * only inside them: the host neither reads nor reduces it elsewhere (its values there are
   * unspecified). n_boxes = 0: the whole object, as before. Copied before it returns. NULL: the
   * engine always fills the whole object gradient (the host then treats it as n_boxes = 0). */
  tycho_status (*set_gradient_region)(tycho_engine* eng, const int64_t* boxes, int64_t n_boxes);
  /* ---- appended in ABI 1.3: the position gradient per iteration. For an engine created with
   * setup->position_gradient = 1: on = 0 lets the following compute_batch calls skip dL/dr (the
   * host needs it only on the iterations that move positions, e.g. every fifth for the scan
   * map's refinement), and take faster paths that cannot give it (the cpu engine's grouped
   * shifts); on = 1 restores it. Takes effect from the next compute_batch; not thread-safe
   * against it. NULL: the gradient is computed whenever the setup asked for it. */
  tycho_status (*set_position_gradient)(tycho_engine* eng, int32_t on);
  /* ---- appended in ABI 1.4: how precisely the data can place each probe position (the
   * Cramér–Rao bound the host weighs position corrections against). For the `count` patterns
   * `indices` (as compute_batch takes them), at the current object, probe and positions: the
   * Fisher information of pattern j's probe centre c (object pixels, both axes) under Poisson
   * counting of its model intensity,
   *   J_ab = Σ_k (∂λ_k/∂c_a)(∂λ_k/∂c_b) / λ_k,   λ_k = counts_per_target_unit · I_k / target_scale,
   * over the unmasked detector pixels k with I_k > 0, I_k the model intensity (Σ over the probe's
   * modes of the far field through every slice; setup->target_scale converts it to the targets'
   * units, counts_per_target_unit (> 0, finite; 1 for targets in counts) to counts). Any unbiased
   * estimate of c has a covariance of at least J⁻¹ (px²). Writes J_00, J_01, J_11 of each pattern,
   * in the order of `indices`, to `information` ((count, 3) float64, host memory). Blocking; not
   * thread-safe against compute_batch. Needs no targets. NULL: the engine cannot (the host then
   * decides without it and says so). */
  tycho_status (*position_information)(tycho_engine* eng, const int64_t* indices, int64_t count,
                                       double counts_per_target_unit, double* information);
} tycho_engine_vtable;

/* Bits of finish_batch's flags (ABI 1.3). */
#define TYCHO_FINISH_ENDS_ITERATION 1u

/* ---------------------------------------------------------------- optimizer */

typedef struct tycho_optimizer tycho_optimizer;

/* What the driver tells an optimizer at each step. Append-only. */
typedef struct tycho_step_info {
  uint32_t struct_size;
  double grad_scale;           /* multiply the gradient by this (1 / global batch size) */
  double learning_rate_scale;  /* the schedule's factor on the configured learning rate */
  int64_t iteration;           /* 1-based iteration (epoch) of this step */
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): a step on part of the parameter,
   * given only to an optimizer whose vtable says TYCHO_OPTIMIZER_TAKES_BOXES (read struct_size
   * first). n_boxes > 0: update only the elements inside the boxes, `boxes` holding n_boxes rows
   * of four int64 [row0, row1, col0, col1) of the parameter's last two axes (every index of the
   * leading axes; half-open, disjoint, inside the parameter); every other element keeps its value
   * and its state. box_steps[k] >= 1 is how many steps the elements of box k have taken, this
   * one included: what a rule with a bias correction counts (Adam's 1 − β^t) in place of the
   * optimizer's own step count. The gradient is only read inside the boxes. n_boxes = 0: the
   * whole parameter (boxes and box_steps ignored). */
  int64_t n_boxes;
  const int64_t* boxes;
  const int64_t* box_steps;
} tycho_step_info;

/* Bits of tycho_optimizer_vtable::flags (ABI 1.3). */
#define TYCHO_OPTIMIZER_TAKES_BOXES 1u /* step honours tycho_step_info's boxes (host parameters) */

typedef struct tycho_optimizer_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  /* cfg: the parameter's table, e.g. [reconstruct.object]; `param` gives shape, dtype, device. */
  tycho_status (*create)(const tycho_config* cfg, const DLTensor* param, tycho_optimizer** out);
  /* param ← update(param, grad · info->grad_scale) with the learning rate times
   * info->learning_rate_scale. Complex parameters are treated as pairs of independent reals.
   * `stream` is the engine's stream (NULL on the CPU). */
  tycho_status (*step)(tycho_optimizer* opt, DLTensor* param, const DLTensor* grad,
                       const tycho_step_info* info, void* stream);
  void (*destroy)(tycho_optimizer* opt);
  /* ---- appended (in ABI 1.0, before its release): the optimizer's state, so that a saved run resumes bit for bit
   * (`tycho reconstruct --from`). A host reads these only when struct_size covers them; an
   * optimizer without state may leave them NULL (it then resumes as created).
   * The state is `state_count` arrays (Adam: "m", "v"; SGD: "velocity"), each with the shape
   * and dtype of the parameter given to create (complex parameters hold pairs of independent
   * reals), plus a step count (the number of steps taken; Adam's bias correction uses it).
   * Before the first step the arrays are zeros and the count is 0. None of these may be
   * called while a step is in flight from another thread. */
  int64_t (*state_count)(tycho_optimizer* opt);
  /* Array i (0 <= i < state_count): *name (owned by the optimizer, valid while it lives) and
   * a host view (kDLCPU, C-contiguous) of its current values, valid until the next call on
   * `opt`. For device state the optimizer copies into a host staging buffer it owns, after
   * waiting for the device's pending work. `view` may be NULL to ask for the name only. */
  tycho_status (*state_array)(tycho_optimizer* opt, int64_t i, const char** name, DLTensor* view);
  /* Replaces array i with `host_values` (host memory, the view's shape and dtype) and sets the
   * step count to `steps` (>= 0). Copied before it returns; on a device, the copy is complete
   * before later work on any stream. */
  tycho_status (*set_state)(tycho_optimizer* opt, int64_t i, const DLTensor* host_values, int64_t steps);
  int64_t (*step_count)(tycho_optimizer* opt);
  /* ---- appended in ABI 1.1: the arrays of state the optimizer keeps per element of a
   * parameter (Adam 2: m and v; SGD 1: the velocity), for the parameter's table `cfg`, before
   * any optimizer exists: what the memory planner counts. Thread-safe, no side effects.
   * NULL (or a vtable of ABI 1.0): counted as 2. */
  int64_t (*state_arrays)(const tycho_config* cfg);
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): TYCHO_OPTIMIZER_* bits. */
  uint32_t flags;
} tycho_optimizer_vtable;

/* ---------------------------------------------------------------- reducer */

typedef struct tycho_reducer tycho_reducer;

/* A host-memory channel among the ranks that exists before any reducer does: how a reducer
 * that needs to exchange a few bytes to start (NCCL's unique id) gets them. The host backs it
 * with MPI, a TCP rendezvous on MASTER_ADDR:MASTER_PORT, a file on a shared path, or shared
 * memory between the threads of one process. `broadcast` blocks until every rank has called it
 * with the same `bytes`; on return every rank's `data` holds the root's bytes. It fails (never
 * hangs) after the run's timeout. */
/* Frozen at its ABI 1.0 layout (embedded by value in tycho_reducer_setup, so it can never
 * grow); what a later minor adds goes into tycho_bootstrap_ref. `broadcast` is called by one
 * thread per rank at a time; it is safe to call from any thread. */
typedef struct tycho_bootstrap {
  void* context;
  tycho_status (*broadcast)(void* context, void* data, size_t bytes, int32_t root);
} tycho_bootstrap;

/* ---- added in ABI 1.1: the same channel with a size, reached through a pointer
 * (tycho_reducer_setup::bootstrap_ref) so it can grow: append-only, read struct_size first. */
typedef struct tycho_bootstrap_ref {
  uint32_t struct_size;
  void* context;
  tycho_status (*broadcast)(void* context, void* data, size_t bytes, int32_t root);
} tycho_bootstrap_ref;

/* What the host hands a reducer's create. Append-only. */
typedef struct tycho_reducer_setup {
  uint32_t struct_size;
  const tycho_config* config;   /* the [parallel] table */
  int32_t rank;                 /* 0 <= rank < world_size, as the launcher (or the host) says; */
  int32_t world_size;           /*   -1 when unknown: a reducer that finds them itself (MPI) */
  int32_t local_rank;           /* rank among the ranks on this node, -1 when unknown */
  DLDevice device;              /* where the tensors to reduce live: the engine's device */
  tycho_bootstrap bootstrap;    /* broadcast NULL when there is none; frozen 1.0 layout */
  /* Bring your own communicator: an MPI_Comm* for "mpi", an ncclComm_t* for "nccl", made by the
   * caller, who keeps it (destroy does not free it). NULL: the reducer makes and frees its own. */
  void* communicator;
  /* ---- appended in ABI 1.1 */
  const tycho_bootstrap_ref* bootstrap_ref; /* `bootstrap` with a size (the same context and
                                             * function); valid during create */
} tycho_reducer_setup;

/* Collectives across the ranks of a data-parallel run (one rank per engine). Every rank calls
 * every collective in the same order. Tensors are C-contiguous float32, float64, complex64 or
 * complex128 (complex as pairs of reals) on setup->device; since ABI 1.3 allreduce_sum also takes
 * int64 (an engine's deterministic sums: exact two's-complement sums, the same in any order), and
 * a reducer that cannot refuses it (TYCHO_ERR_UNSUPPORTED). */
typedef struct tycho_reducer_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  tycho_status (*create)(const tycho_reducer_setup* setup, tycho_reducer** out);
  int32_t (*rank)(const tycho_reducer* red);
  int32_t (*world_size)(const tycho_reducer* red);
  /* In-place sum across ranks; every rank receives bitwise the same values, so replicated
   * parameters stay identical. Host tensors: synchronous, `stream` NULL. Device tensors:
   * queued on `stream` (a cudaStream_t) without synchronising the host. */
  tycho_status (*allreduce_sum)(tycho_reducer* red, DLTensor* inout, void* stream);
  /* In-place: every rank's `inout` receives root's values. Same rules as allreduce_sum. */
  tycho_status (*broadcast)(tycho_reducer* red, DLTensor* inout, int32_t root, void* stream);
  /* Returns when every rank has called it (host-side; pending stream work is not awaited). */
  tycho_status (*barrier)(tycho_reducer* red);
  /* After an unrecoverable error on this rank: makes every rank's pending and later
   * collectives fail or end the job (MPI_Abort, ncclCommAbort), so no peer waits forever.
   * Callable from any thread, also while a collective is in flight. It may not return (MPI
   * ends the job with `exit_code`). */
  void (*abort)(tycho_reducer* red, int32_t exit_code);
  void (*destroy)(tycho_reducer* red);
  /* Releases a runtime the component started itself (MPI_Finalize when its create called
   * MPI_Init), after every reducer it made is destroyed; no reducer of this component may be
   * made afterwards. NULL when there is nothing to release. The host calls it from
   * tycho_shutdown(); without that call the runtime is released at process exit. */
  void (*shutdown)(void);
} tycho_reducer_vtable;

/* ---------------------------------------------------------------- constraint */
/* ---- appended in ABI 1.3: constraints as components. After each mini-batch's optimizer steps
 * (and after each position step) the driver hands the engine's tensors to the constraints of
 * [[reconstruct.constraints]], in the order listed, and each changes them in place: a
 * projection (|O| ≤ 1, a pure phase, orthonormal probe modes), a normalisation or a
 * regulariser. The built-in ones (plugins/constraints) are components like any other; a third
 * party adds one the same way. */

typedef struct tycho_constraint tycho_constraint;

/* Bits of what a constraint changes (tycho_constraint_vtable::acts_on). */
#define TYCHO_CONSTRAINT_OBJECT 1u    /* applied after each mini-batch's optimizer steps */
#define TYCHO_CONSTRAINT_PROBE 2u     /* applied after each mini-batch's optimizer steps */
#define TYCHO_CONSTRAINT_POSITIONS 4u /* applied after each position step (once per iteration,
                                       * [reconstruct.positions] correct = true) */

/* What the host hands a constraint's create. Append-only: read struct_size before a field a
 * later minor adds. Pointers are valid during create only: copy what you keep. */
typedef struct tycho_constraint_setup {
  uint32_t struct_size;
  const tycho_config* config;     /* the constraint's own entry of [[reconstruct.constraints]] */
  DLDevice device;                /* where the engine keeps its tensors (apply's tensors lie there) */
  double pixel_A[2];              /* object and probe-window pixel along axes 0 and 1, Å */
  double wavelength_A;            /* electron wavelength, Å */
  double semiangle_mrad;          /* probe-forming aperture semiangle, mrad */
  double slice_thickness_A;       /* Δz between slices, Å (0 for one slice) */
  /* Σ over a pattern's valid pixels of the measured intensity, averaged over the patterns, in
   * the model's units (the power Σ_m Σ|P_m|² that explains the data when |O| ≈ 1). */
  double measured_power;
  /* (P, 2) float64 host, the probe centres in object pixels as the data gave them (before any
   * position correction; the same rows as the engine's TYCHO_TENSOR_POSITIONS). */
  const DLTensor* nominal_positions;
  int64_t iterations;             /* iterations the run's schedules span ([reconstruct] schedule_iterations:
                                   * by default iterations, or 100 with iterations = "auto") */
} tycho_constraint_setup;

/* The tensors one application changes: views on the engine's memory (its get_tensor views),
 * valid during the call. Fields the constraint does not act on (acts_on) may be NULL. */
typedef struct tycho_constraint_state {
  uint32_t struct_size;
  DLTensor* object;               /* (S, H, W) complex64 or complex128 (the run's precision) */
  DLTensor* probe;                /* (M, N0, N1), the object's dtype */
  DLTensor* positions;            /* (P, 2) float64, probe centres in object pixels; NULL when the
                                   * call is not after a position step */
  int64_t iteration;              /* 1-based iteration of this application */
  int64_t batch;                  /* 0-based mini-batch of the iteration; -1 after the position step */
  int64_t batches;                /* mini-batches per iteration (batch == batches − 1: the last) */
  void* stream;                   /* the engine's stream (a cudaStream_t), NULL for host engines */
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): where the object changed since the
   * previous application. n_object_boxes > 0: only inside these boxes, n_object_boxes rows of
   * four int64 [row0, row1, col0, col1) of the object's last two axes (every slice; the
   * optimizer's boxes, tycho_step_info): a pointwise constraint may apply itself there only and
   * leave the same object. 0: anywhere (apply to all of it). Read struct_size first. */
  int64_t n_object_boxes;
  const int64_t* object_boxes;
  /* ---- appended in ABI 1.5: the object's and the probe's learning rates at this application
   * as a share of their settings ([reconstruct.object|probe] learning_rate): the schedule's
   * factor times the stopping rule's halvings (1 with constant rates before any halving; 0
   * while the parameter is not stepped: before its first_iteration, the probe while it waits
   * for the scan map). A regulariser that stands for a penalty term of the loss pulls by this
   * share each iteration, as the penalty's own gradient step would: at a fixed pull, halved
   * rates let it outweigh the data. Read struct_size first: an older host leaves them out (take
   * 1: the rates as set). */
  double object_rate_factor;
  double probe_rate_factor;
} tycho_constraint_state;

/* Host engines (kDLCPU): the tensors are host memory; apply runs synchronously on the driver's
 * thread (it may use threads of its own). Device engines (e.g. kDLCUDA): the tensors are device
 * memory of setup->device and apply queues its work on state->stream without synchronising,
 * as an optimizer's step does; a constraint that cannot work on that device refuses it in
 * create (TYCHO_ERR_UNSUPPORTED naming the device), so the run stops before its first
 * iteration. Several ranks: every rank applies every constraint to its replica of object and
 * probe, so a constraint must be deterministic (the replicas stay bitwise identical). */
typedef struct tycho_constraint_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  tycho_status (*create)(const tycho_constraint_setup* setup, tycho_constraint** out);
  /* TYCHO_CONSTRAINT_* bits: which tensors apply changes, and so when the driver calls it. */
  uint32_t (*acts_on)(const tycho_constraint* c);
  tycho_status (*apply)(tycho_constraint* c, const tycho_constraint_state* state);
  void (*destroy)(tycho_constraint* c);
} tycho_constraint_vtable;

/* ---------------------------------------------------------------- format */

/* A named set of arrays plus a JSON manifest: what a result or a prepared file holds. */
typedef struct tycho_named_array {
  const char* name;   /* member name without extension, e.g. "object" */
  DLTensor tensor;    /* host, C-contiguous */
} tycho_named_array;

/* ---- added in ABI 1.3 (before tycho 0.1.0's release): the bytes of an array produced while
 * the file is written (tycho_record::producers), so that the writer of a file larger than
 * memory never holds it (`tycho preprocess` streams a scan from its source into the file). */
typedef struct tycho_array_producer {
  /* Writes the array's next `bytes` bytes (its tensor's dtype, C order) at `dst`: called in
   * order from byte 0 to the array's end, each byte once, by the thread that called save,
   * never two calls at once. TYCHO_OK, or an error with the thread's last error set, which
   * fails the save (the file at the path is left as it was). */
  tycho_status (*produce)(void* context, void* dst, size_t bytes);
  void* context;
} tycho_array_producer;

typedef struct tycho_record {
  uint32_t struct_size;
  int64_t n_arrays;
  tycho_named_array* arrays;
  const char* manifest_json; /* UTF-8 JSON object; NULL when a loaded file has none */
  /* Frees the record and everything it points to; NULL when the caller owns the memory. */
  void (*release)(struct tycho_record* self);
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release), handed only to a format whose
   * vtable says TYCHO_FORMAT_PRODUCED_ARRAYS. `producers`: NULL, or n_arrays entries; where
   * producers[i].produce is not NULL, arrays[i].tensor gives the shape and dtype only (data
   * NULL) and its bytes come from produce. `manifest`: when not NULL (and manifest_json NULL),
   * called once after every produced array is complete, returns the manifest (valid until save
   * returns; NULL: failed, with the thread's last error set), so it can say what the arrays
   * turned out to hold. */
  const tycho_array_producer* producers;
  const char* (*manifest)(void* context);
  void* manifest_context;
} tycho_record;

typedef enum tycho_save_mode {
  TYCHO_SAVE_NEW = 0,       /* fail if the file exists ("w") */
  TYCHO_SAVE_OVERWRITE = 1  /* replace it ("o") */
} tycho_save_mode;

typedef struct tycho_format_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* extension;    /* e.g. ".zip" */
  /* Writes atomically: to a temporary file beside `path`, then renamed over it. */
  tycho_status (*save)(const tycho_record* rec, const char* path, tycho_save_mode mode);
  /* Reads every array member and the manifest; the caller frees with (*out)->release. */
  tycho_status (*load)(const char* path, tycho_record** out);
  /* ---- appended in ABI 1.3 (before tycho 0.1.0's release): TYCHO_FORMAT_* bits. */
  uint32_t flags;
} tycho_format_vtable;

/* Bits of tycho_format_vtable::flags (ABI 1.3). */
#define TYCHO_FORMAT_PRODUCED_ARRAYS 1u /* save takes tycho_record::producers and ::manifest */

#ifdef __cplusplus
}
#endif
#endif
