// The memory planner (DESIGN.md, "Scale"): the bytes each device needs for every term of a run
// (targets, object, probe, gradients, optimizer state, kept state, transients, FFT workspace), computed
// before anything is allocated from the shapes alone, compared with the device's memory; when
// the run does not fit, the largest term and the remedies, in order, with the numbers that
// would fit: more devices, host-resident targets, detector binning, a smaller batch.
//
// One model per engine, each counting what that engine allocates (C = complex bytes, 8 for
// complex64; M = N0·N1; S slices; K probe modes; O = S·H·W object pixels; W devices; B the
// global batch, b = min(⌈B/W⌉, ⌈P/W⌉) per device):
//
//   term             cpu (plugins/engines/cpu/cpu_engine.cpp)       cuda (plugins/engines/cuda/cuda_engine.cu)
//   targets          ⌈P/W⌉·M·4 (float32, read in place)     ⌈P/W⌉·M·t (t: target_bytes; the cuda
//                                                           engine keeps float32, t = 4)
//   object           O·C                                    O·C
//   probe            K·M·C                                  K·M·C
//   positions        P·2·8                                  P·2·8
//   gradients        (O + K·M)·C                            (O + K·M)·C
//   optimizer state  (a_o·O + a_p·K·M)·C (a: arrays per parameter: Adam 2, SGD 1)
//   kept state       ((1+a_o)·O + (1+a_p)·K·M)·C            — (on the host: the `host` model)
//                    the session's copy of the last finite iteration (host/src/runtime/session_state.hpp)
//   transients       T threads × ((4 + g + w) FFT           b × (M·(K·(S+1)·C + 3·C/2) + (N0+N1)·C
//                    buffers M·C (g = 3K shift-group        + 16): per pattern K shifted probes,
//                    buffers with one slice, else 0;        K·S waves (exit wave, far field and
//                    w = K·(S+1) slice waves and far        back-propagated wave in place),
//                    fields with S > 1 or K > 1, else 0),   intensity, measured, dL/dI, the two
//                    intensity + dL/dI 2·M·C/2, a whole     ramps, indices; plus K·(1+G)·M·C once
//                    object-gradient copy S·O·C, a probe-   (probe spectrum, G = 8 partial sums
//                    spectrum accumulator K·M·C, the two    of the probe gradient)
//                    phase ramps (N0+N1)·C)
//   FFT workspace    2·M·C (the batch's probe transform     plans × b·M·C (cuFFT's work area ≈ one
//                    and its input buffer)                  batch buffer), × 4 when N0 or N1 is
//                                                           not 2^a·3^b·5^c·7^d (Bluestein)
//   runtime reserve  —                                      a fixed allowance (the CUDA context)
//
// Deterministic sums (deterministic; the cpu engine's [reconstruct] deterministic, off by default):
// the cpu engine's per-thread object and probe accumulators are int64 pairs (16 B per element:
// S·O·16 + K·M·16 instead of S·O·C + K·M·C), its shift groups keep only A (g = K), and
// once per rank a "deterministic sums" term holds the int64 sums it hands the reducer:
// 16·O + 16·K·M·c + 35824 B, c the grouped path's row-offset classes (one slice: at most
// min(B, P)/4 and 256 MiB of them, counted at that bound since the plan does not see the
// positions; else 1). The cuda engine's (its `deterministic`, off by default): (O + K·M)·16 + 35824 B.
//
// Streamed targets (target_residency = "disk", targets_streamed): the targets term is one
// batch, b·M·4 (host_staging: two), and a host engine's plan adds the host's next batch read
// ahead in the same process, "read-ahead" b·M·4 (docs/streaming.md).
//
// The host_staging model is what the host process itself holds for a device engine: the
// targets as float32 (every pattern is read before the upload), the initial object and probe,
// the positions.
//
// The host does not choose among these by the engine's name: every engine describes its own
// memory through tycho_engine_vtable::plan_memory (ABI 1.1), and the host plans the `reported`
// model, whose terms come from that call. The built-in cpu and cuda engines report the cpu and
// cuda models above (they link this file); a third-party engine reports its own terms.
#pragma once

#include <tycho/tycho_components.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tycho {

enum class memory_model { cpu, cuda, host_staging, reported };

// "cpu", "cuda", "host" (host_staging), "reported".
const char* memory_model_name(memory_model m);

struct memory_reporter;  // below: what an engine reports (the reported model)

struct memory_problem {
  memory_model model = memory_model::cpu;
  int64_t patterns = 0;                // P, all devices together
  int64_t window[2] = {0, 0};          // (N0, N1), the engine's window (after any padding)
  int64_t target_bytes = 4;            // bytes per target pixel where the engine keeps them
  int64_t binned_target_bytes = 0;     // the same once binned (uint16 counts may sum past 65535); 0: target_bytes
  int64_t object_shape[2] = {0, 0};    // (H, W) object pixels
  int64_t slices = 1;                  // S
  int64_t probe_modes = 1;             // K
  int64_t batch_size = 128;            // B, global (split over the devices)
  int64_t devices = 1;                 // W: devices (or processes) sharing the patterns
  int64_t threads = 1;                 // T: cpu engine threads, each with its own scratch
  int64_t complex_bytes = 8;           // C: complex64
  int64_t object_optimizer_arrays = 2; // optimizer state arrays per object element (Adam: 2)
  int64_t probe_optimizer_arrays = 2;  // the same for the probe
  int64_t fft_plans = 1;               // cuda: work areas alive at once (the plans share one)
  int64_t probe_gradient_slices = 8;   // cuda: partial sums of the probe gradient (G)
  uint64_t reserve_bytes = 0;          // cuda: fixed per-device allowance (context, allocator)
  bool targets_streamed = false;       // target_residency "disk": one batch held, not the shard
  bool deterministic = false;          // fixed-point sums (the engine's [reconstruct] deterministic)
  std::shared_ptr<const memory_reporter> reporter;  // reported: the engine's description
};

// What the planner may do with a problem, whatever its model: the terms are per device
// (cuda, or a reporter on_device), shrink with the batch (cuda) or with the threads (cpu).
bool memory_on_device(const memory_problem& p);
bool memory_scales_with_batch(const memory_problem& p);
bool memory_scales_with_threads(const memory_problem& p);
// "cpu", "cuda", "host", or the reporting engine's name.
std::string memory_plan_name(const memory_problem& p);

struct memory_term {
  std::string name;     // "targets", "object", ...
  uint64_t bytes = 0;   // per device
  std::string formula;  // how it was counted, with the numbers
};

// The reported model: what an engine says about its memory (tycho_engine_vtable::plan_memory)
// and how the planner may search for a run that fits.
struct memory_reporter {
  std::string name;            // the engine's name, for "the <name> plan needs ..."
  bool on_device = false;      // terms live in device memory (per device; the host stages targets)
  bool batch_scales = false;   // a smaller per-device batch needs less
  bool threads_scale = false;  // fewer threads need less
  // The terms (without a total) of a problem; throws tycho::error when the engine fails.
  std::function<std::vector<memory_term>(const memory_problem&)> terms;
};

struct memory_plan {
  memory_problem problem;          // as planned: batch_size may have been shrunk to fit
  std::vector<memory_term> terms;  // every term, in the order of the table
  uint64_t total = 0;              // Σ terms, per device
  uint64_t capacity = 0;           // the device's memory (0: unknown, nothing is compared)
  bool fits = false;               // total ≤ capacity (false when the capacity is unknown)
  int64_t requested_batch = 0;     // the batch asked for
  bool batch_shrunk = false;       // fits only because batch_size was lowered
  std::string largest_term;        // the biggest term (of the plan as requested)
  uint64_t requested_total = 0;    // total with the requested batch

  // The remedies' numbers (0: that remedy alone does not make it fit or does not apply).
  int64_t devices_to_fit = 0;      // the fewest devices that fit
  int64_t binning_to_fit = 0;      // the smallest detector binning factor that fits and divides both window sides
  int64_t batch_to_fit = 0;        // the largest global batch that fits (cuda)
  int64_t threads_to_fit = 0;      // the most cpu engine threads that fit (cpu)
  std::vector<std::string> remedies;  // in order; empty when it fits as requested

  const memory_term& term(const std::string& name) const;  // throws if absent
};

// The terms of `p` (no fitting, no search).
std::vector<memory_term> memory_terms(const memory_problem& p);
uint64_t memory_total(const memory_problem& p);

// Plans `p` against `capacity` bytes per device (0: unknown). When the requested batch does
// not fit but a smaller one does (cuda: transients and FFT workspace scale with the batch),
// the plan's batch is shrunk to the largest that fits and reported (batch_shrunk). When
// nothing fits, lists the remedies in order.
memory_plan plan_memory(const memory_problem& p, uint64_t capacity);

// One line: "needs X per device, Y available: fits" or "... does not fit (largest term: ...)",
// then the remedies ("; " separated) when it does not fit; for error messages.
std::string memory_plan_summary(const memory_plan& plan);

// The table: one row per term (name, bytes, human units, formula), the total, the capacity.
std::string memory_plan_table(const memory_plan& plan);

// The ABI's form of a problem and of a report (tycho_engine_vtable::plan_memory), both ways:
// the host hands a problem to an engine and reads its report; a built-in engine reads the
// problem and reports one of the models above. to_abi of terms throws when there are more than
// TYCHO_MEMORY_TERMS_MAX; names and formulas are cut to the ABI's fixed lengths.
tycho_memory_problem to_abi(const memory_problem& p);
memory_problem from_abi(const tycho_memory_problem& p, memory_model model);
void to_abi(const std::vector<memory_term>& terms, uint32_t flags, tycho_memory_report* out);
std::vector<memory_term> from_abi(const tycho_memory_report& report, const std::string& engine);
// TYCHO_MEMORY_* flags of a problem's model (memory_on_device, ..._scales_with_...).
uint32_t memory_flags(const memory_problem& p);

// "1.50 GiB", "96.00 KiB", "512 B" (binary units).
std::string human_bytes(uint64_t bytes);

}  // namespace tycho
