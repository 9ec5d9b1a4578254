#include "tycho/core/memory_plan.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/fft_size.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <limits>

namespace tycho {

namespace {

constexpr uint64_t k_max = std::numeric_limits<uint64_t>::max();

// Saturating arithmetic: an absurd configuration gives "more than any device", not a wrap.
uint64_t mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > k_max / a) return k_max;
  return a * b;
}
uint64_t mul(std::initializer_list<uint64_t> xs) {
  uint64_t r = 1;
  for (uint64_t x : xs) r = mul(r, x);
  return r;
}
uint64_t add(uint64_t a, uint64_t b) { return b > k_max - a ? k_max : a + b; }
uint64_t u(int64_t v) { return v > 0 ? uint64_t(v) : 0; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check(const memory_problem& p) {
  auto positive = [](int64_t v, const char* what) {
    if (v < 1) fail(TYCHO_ERR_INVALID_ARGUMENT, "memory plan: ", what, " must be >= 1, got ", v);
  };
  positive(p.patterns, "patterns");
  positive(p.window[0], "window N0");
  positive(p.window[1], "window N1");
  positive(p.target_bytes, "target bytes");
  positive(p.object_shape[0], "object H");
  positive(p.object_shape[1], "object W");
  positive(p.slices, "slices");
  positive(p.probe_modes, "probe modes");
  positive(p.batch_size, "batch size");
  positive(p.devices, "devices");
  positive(p.threads, "threads");
  positive(p.complex_bytes, "complex bytes");
  positive(p.fft_plans, "FFT plans");
  if (p.object_optimizer_arrays < 0 || p.probe_optimizer_arrays < 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "memory plan: optimizer state arrays must be >= 0");
}

// The same problem with the detector binned by b: the window shrinks to ⌊N/b⌋, the real-space
// pixel stays (dx = 1/(N·dk)), so the object loses only the window's share of its extent.
memory_problem binned(const memory_problem& p, int64_t b) {
  memory_problem q = p;
  if (b > 1 && p.binned_target_bytes > 0) q.target_bytes = p.binned_target_bytes;
  for (int a = 0; a < 2; ++a) {
    q.window[a] = std::max<int64_t>(1, p.window[a] / b);
    q.object_shape[a] = std::max<int64_t>(1, p.object_shape[a] - p.window[a] + q.window[a]);
  }
  return q;
}

// Largest x in [1, hi] with fits(x) (fits monotone: true up to some x), 0 if none.
template <class F>
int64_t largest_fitting(int64_t hi, F fits) {
  if (hi < 1 || !fits(1)) return 0;
  int64_t lo = 1;  // fits(lo)
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Smallest x in [lo, hi] with fits(x) (monotone: false then true), 0 if none.
template <class F>
int64_t smallest_fitting(int64_t lo, int64_t hi, F fits) {
  if (lo > hi || !fits(hi)) return 0;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

}  // namespace

const char* memory_model_name(memory_model m) {
  switch (m) {
    case memory_model::cpu: return "cpu";
    case memory_model::cuda: return "cuda";
    case memory_model::host_staging: return "host";
    case memory_model::reported: return "reported";
  }
  return "?";
}

bool memory_on_device(const memory_problem& p) {
  return p.model == memory_model::cuda || (p.model == memory_model::reported && p.reporter && p.reporter->on_device);
}
bool memory_scales_with_batch(const memory_problem& p) {
  return p.model == memory_model::cuda ||
         (p.model == memory_model::reported && p.reporter && p.reporter->batch_scales);
}
bool memory_scales_with_threads(const memory_problem& p) {
  return p.model == memory_model::cpu ||
         (p.model == memory_model::reported && p.reporter && p.reporter->threads_scale);
}
std::string memory_plan_name(const memory_problem& p) {
  if (p.model == memory_model::reported && p.reporter) return p.reporter->name;
  return memory_model_name(p.model);
}

const memory_term& memory_plan::term(const std::string& name) const {
  for (const auto& t : terms)
    if (t.name == name) return t;
  fail(TYCHO_ERR_NOT_FOUND, "memory plan: no term '", name, "'");
}

// Streamed targets on a host engine: the host's next batch, read ahead in the same process.
memory_term read_ahead_term(const memory_problem& p) {
  const uint64_t b = u(std::min(ceil_div(p.batch_size, p.devices), ceil_div(p.patterns, p.devices)));
  const uint64_t m = mul(u(p.window[0]), u(p.window[1]));
  return {"read-ahead", mul({b, m, 4}), cat(b, " patterns (the next batch) · ", p.window[0], "·", p.window[1], " px · 4 B")};
}

std::vector<memory_term> memory_terms(const memory_problem& p) {
  check(p);
  if (p.model == memory_model::reported) {
    if (!p.reporter || !p.reporter->terms)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "memory plan: the reported model has no engine to report");
    std::vector<memory_term> t = p.reporter->terms(p);
    if (t.empty()) fail(TYCHO_ERR_BAD_DATA, "memory plan: engine '", p.reporter->name, "' reported no terms");
    if (p.targets_streamed && !p.reporter->on_device) t.push_back(read_ahead_term(p));
    uint64_t total = 0;
    for (const auto& x : t) total = add(total, x.bytes);
    t.push_back({"total", total, ""});
    return t;
  }
  const uint64_t c = u(p.complex_bytes), real = c / 2;
  const uint64_t n0 = u(p.window[0]), n1 = u(p.window[1]), m = mul(n0, n1);
  const uint64_t k = u(p.probe_modes), s = u(p.slices);
  const uint64_t obj = mul({s, u(p.object_shape[0]), u(p.object_shape[1])});  // O
  const uint64_t probe = mul(k, m);                                          // K·M
  const int64_t w = p.devices;
  const std::string M = cat(n0, "·", n1);
  const std::string O = s > 1 ? cat(s, "·", p.object_shape[0], "·", p.object_shape[1])
                              : cat(p.object_shape[0], "·", p.object_shape[1]);
  const std::string KM = k > 1 ? cat(k, "·", M) : M;

  std::vector<memory_term> t;
  // Targets: a shard of ⌈P/W⌉ patterns per device (all of them on the host for a device engine).
  // Streamed targets (target_residency = "disk"): the engine holds one mini-batch's share,
  // b = min(⌈B/W⌉, ⌈P/W⌉) patterns, and the host its read-ahead (host_staging: 2 batches).
  const uint64_t shard = p.model == memory_model::host_staging ? u(p.patterns) : u(ceil_div(p.patterns, w));
  // The cuda engine's dtype; the cpu engine reads the host's float32 targets, or its uint16 counts
  // read as such (the host then says target_bytes 2); a device engine's host staging: float32.
  const uint64_t tb = p.model == memory_model::cuda || (p.model == memory_model::cpu && p.target_bytes == 2)
                          ? u(p.target_bytes)
                          : 4;
  if (p.targets_streamed) {
    const uint64_t b = std::min(u(ceil_div(p.batch_size, w)), u(ceil_div(p.patterns, w)));
    const uint64_t held = p.model == memory_model::host_staging ? 2 * b : b;
    t.push_back({"targets", mul({held, m, tb}),
                 cat(held, " patterns (streamed per batch) · ", M, " px · ", tb, " B")});
    if (p.model == memory_model::cpu) t.push_back(read_ahead_term(p));  // the host's, in the same process
  } else {
    t.push_back({"targets", mul({shard, m, tb}),
                 cat(shard, " patterns · ", M, " px · ", tb, " B",
                                 p.model == memory_model::cuda ? "" : tb == 2 ? " (uint16 counts)" : " (float32)")});
  }
  t.push_back({"object", mul(obj, c), cat(O, " px · ", c, " B")});
  t.push_back({"probe", mul(probe, c), cat(KM, " px · ", c, " B")});
  t.push_back({"positions", mul(u(p.patterns), 16), cat(p.patterns, " · 2 · 8 B (float64)")});
  if (p.model != memory_model::host_staging) {
    t.push_back({"gradients", mul(add(obj, probe), c), cat("(", O, " + ", KM, ") · ", c, " B")});
    t.push_back({"optimizer state",
                 mul(add(mul(u(p.object_optimizer_arrays), obj), mul(u(p.probe_optimizer_arrays), probe)), c),
                 cat("(", p.object_optimizer_arrays, "·", O, " + ", p.probe_optimizer_arrays, "·", KM, ") · ", c,
                     " B")});
  }
  if (p.model != memory_model::cuda) {
    // The session's copy of the state after the last iteration whose values were all finite,
    // on the host (host/src/runtime/session_state.hpp, kept_state): what a run stopped by a NaN
    // or a signal saves. One copy: each iteration is checked in place and copied into it.
    const uint64_t arrays = add(add(obj, probe), add(mul(u(p.object_optimizer_arrays), obj),
                                                     mul(u(p.probe_optimizer_arrays), probe)));
    t.push_back({"kept state", mul(arrays, c),
                 cat("(", 1 + p.object_optimizer_arrays, "·", O, " + ", 1 + p.probe_optimizer_arrays, "·", KM, ") · ", c,
                     " B (the last finite iteration's object, probe, optimizer state)")});
  }
  if (p.model == memory_model::cpu) {
    // Per thread (cpu_engine.cpp, thread_scratch): 4 FFT buffers, with one slice the shift
    // groups' three per mode (A, B and the position gradient's A': 3K, counted whether or not the
    // grouped path runs or moves positions; several slices never take it), with several slices
    // or modes also the wave entering each slice of each mode and each mode's far field
    // (K·(S+1)), intensity and dL/dI, a whole object-gradient copy (all slices), the
    // probe-spectrum accumulator (all modes), the two phase ramps.
    // Deterministic sums: the accumulators are int64 (re, im) pairs, and the groups keep only A
    // (their iterations that move positions go per position).
    const uint64_t acc = p.deterministic ? 16 : c;
    const uint64_t group_buffers = s == 1 ? mul(p.deterministic ? 1 : 3, k) : 0;
    const uint64_t buffers = add(add(4, group_buffers), s > 1 || k > 1 ? mul(k, s + 1) : 0);
    const uint64_t per_thread = add(add(mul(mul(buffers, c), m), mul(2 * real, m)),
                                    add(add(mul(obj, acc), mul(probe, acc)), mul(add(n0, n1), c)));
    t.push_back({"transients", mul(u(p.threads), per_thread),
                 cat(p.threads, " threads · (", buffers, "·", M, "·", c, " + 2·", M, "·", real, " + ", O, "·", acc,
                     " + ", KM, "·", acc, " + (", n0, "+", n1, ")·", c, ") B")});
    if (p.deterministic) {
      // The rank's int64 sums (cpu_engine.cpp, sums_): object, probe (per row-offset class with
      // one slice: at most min(B, P)/4 classes and 256 MiB, the bound counted), the header
      // (tycho/sdk/fixed_point.hpp: 4478 words for two tensors).
      uint64_t classes = 1;
      if (s == 1) {
        const uint64_t most = std::max<uint64_t>(1, u(std::min(p.batch_size, p.patterns)) / 4);
        const uint64_t fit = (uint64_t(256) << 20) / std::max<uint64_t>(1, mul(probe, 16));
        if (most <= fit) classes = most;
      }
      constexpr uint64_t header = 4478 * 8;
      t.push_back({"deterministic sums", add(add(mul(obj, 16), mul({probe, classes, 16})), header),
                   cat(O, "·16 + ", classes > 1 ? cat(classes, " classes · ") : std::string(), KM, "·16 + ", header,
                       " B (int64)")});
    }
    const uint64_t workspace = k > 1 ? k + 2 : 2;  // the probe spectra, the transform's input (and output)
    t.push_back({"FFT workspace", mul(workspace, mul(m, c)),
                 cat(workspace, " · ", M, " · ", c,
                     k > 1 ? " B (the batch's probe spectra and transforms)" : " B (the batch's probe transform)")});
  } else if (p.model == memory_model::cuda) {
    // Per pattern of the batch (plugins/engines/cuda/cuda_engine.cu): K·(S+1) complex buffers (the
    // shifted probes; one wave per slice, transformed and back-propagated in place), 3 float32
    // ones (intensity, the batch's measured patterns, dL/dI), the two phase ramps, 16 B of
    // indices; once: the probe spectrum and the probe-gradient partial sums, K·(1+G)·M·C.
    const uint64_t b = u(std::min(ceil_div(p.batch_size, w), ceil_div(p.patterns, w)));
    const uint64_t complex_buffers = mul(k, s + 1);
    const uint64_t per_pattern = add(add(mul(m, add(mul(complex_buffers, c), 3 * real)), mul(add(n0, n1), c)), 16);
    const uint64_t once = mul({k, 1 + u(p.probe_gradient_slices), m, c});
    t.push_back({"transients", add(mul(b, per_pattern), once),
                 cat(b, " patterns · (", M, " · (", complex_buffers, "·", c, " + 3·", real, ") + (", n0, "+", n1, ")·",
                     c, " + 16) + ", k * (1 + u(p.probe_gradient_slices)), " · ", M, " · ", c, " B")});
    const bool fast = is_fast_fft_size(p.window[0]) && is_fast_fft_size(p.window[1]);
    t.push_back({"FFT workspace", mul({u(p.fft_plans), b, m, c, fast ? 1u : 4u}),
                 cat(p.fft_plans, " plan · ", b, " · ", M, " · ", c, " B",
                     fast ? "" : " · 4 (not 2^a·3^b·5^c·7^d: Bluestein)")});
    if (p.deterministic)  // cuda_engine.cu: the batch's integers, object and probe spectrum, and the header
      t.push_back({"deterministic sums", add(mul(add(obj, probe), 16), 4478 * 8),
                   cat("(", O, " + ", KM, ")·16 + ", 4478 * 8, " B (int64)")});
    if (p.reserve_bytes > 0) t.push_back({"runtime reserve", p.reserve_bytes, "CUDA context and allocator"});
  }
  uint64_t total = 0;
  for (const auto& x : t) total = add(total, x.bytes);
  t.push_back({"total", total, ""});
  return t;
}

uint64_t memory_total(const memory_problem& p) { return memory_terms(p).back().bytes; }

memory_plan plan_memory(const memory_problem& p, uint64_t capacity) {
  memory_plan plan;
  plan.problem = p;
  plan.capacity = capacity;
  plan.requested_batch = p.batch_size;
  auto all = memory_terms(p);
  plan.requested_total = all.back().bytes;
  all.pop_back();
  plan.terms = all;
  plan.total = plan.requested_total;
  const memory_term* largest = &all.front();
  for (const auto& t : all)
    if (t.bytes > largest->bytes) largest = &t;
  plan.largest_term = largest->name;
  if (capacity == 0) return plan;
  auto fits = [&](const memory_problem& q) { return memory_total(q) <= capacity; };
  if (plan.total <= capacity) {
    plan.fits = true;
    return plan;
  }

  const bool cuda = memory_scales_with_batch(p), cpu = memory_scales_with_threads(p);
  const bool on_device = memory_on_device(p);
  // The batch (cuda): transients and FFT workspace grow with the per-device batch.
  if (cuda) {
    const int64_t per_device = largest_fitting(ceil_div(p.batch_size, p.devices), [&](int64_t b) {
      memory_problem q = p;
      q.batch_size = b * p.devices;
      return fits(q);
    });
    if (per_device > 0) plan.batch_to_fit = std::min(p.batch_size, per_device * p.devices);
  }
  if (cpu)
    plan.threads_to_fit = largest_fitting(p.threads, [&](int64_t t) {
      memory_problem q = p;
      q.threads = t;
      return fits(q);
    });
  // More devices: the shards (targets; the cuda batch) shrink, the rest is replicated.
  const int64_t most = std::max<int64_t>({p.patterns, p.batch_size, p.devices + 1});
  if (p.model != memory_model::host_staging) {
    plan.devices_to_fit = smallest_fitting(p.devices + 1, most, [&](int64_t w) {
      memory_problem q = p;
      q.devices = w;
      return fits(q);
    });
  }
  if (cuda && plan.batch_to_fit > 0) {
    // Fitting needs only a smaller batch: take the largest that fits, and say so.
    plan.problem.batch_size = plan.batch_to_fit;
    plan.batch_shrunk = true;
    plan.fits = true;
    auto shrunk = memory_terms(plan.problem);
    plan.total = shrunk.back().bytes;
    shrunk.pop_back();
    plan.terms = shrunk;
    return plan;
  }

  // Detector binning by b: only a factor that divides both window sides, which is what
  // [preprocess] binning accepts (96 x 96 can bin by 8 or 12, never by 9).
  const int64_t max_bin = std::min(p.window[0], p.window[1]);
  for (int64_t b = 2; b <= max_bin && plan.binning_to_fit == 0; ++b)
    if (p.window[0] % b == 0 && p.window[1] % b == 0 && fits(binned(p, b))) plan.binning_to_fit = b;

  if (plan.devices_to_fit > 0) {
    memory_problem q = p;
    q.devices = plan.devices_to_fit;
    plan.remedies.push_back(cat("more devices: ", plan.devices_to_fit, " would fit (",
                                human_bytes(memory_total(q)), " per device)",
                                on_device ? "" : ", as processes with their own memory (MPI ranks on other nodes)"));
  } else if (p.model == memory_model::host_staging) {
    plan.remedies.push_back("more devices would not help: the host reads every pattern");
  } else {
    memory_problem q = p;
    q.devices = most;  // one pattern each: what is left is held in full by every device
    plan.remedies.push_back(cat("more devices would not help: even ", most, " need ", human_bytes(memory_total(q)),
                                " each (every device holds the object, probe, gradients, optimizer state",
                                cpu ? " and the threads' buffers" : "", " in full)"));
  }
  if (on_device) {
    const uint64_t without = plan.total - plan.term("targets").bytes;
    plan.remedies.push_back(cat("host-resident targets (target_residency = \"host\", streamed per batch) would "
                                "free the targets' ", human_bytes(plan.term("targets").bytes), " per device",
                                without <= capacity ? " and then fit" : " (not enough alone)",
                                ", but this version keeps targets on the device only: not yet available"));
  }
  if (plan.binning_to_fit > 0) {
    memory_problem q = binned(p, plan.binning_to_fit);
    plan.remedies.push_back(cat("binning the detector by ", plan.binning_to_fit, " (window ", q.window[0], " x ",
                                q.window[1], ") would fit (", human_bytes(memory_total(q)), " per device)"));
  } else {
    plan.remedies.push_back("binning the detector would not fit at any factor");
  }
  if (cuda) {
    memory_problem q = p;
    q.batch_size = p.devices;
    plan.remedies.push_back(cat("a smaller batch would not fit: even one pattern per device needs ",
                                human_bytes(memory_total(q))));
  } else if (cpu) {
    if (plan.threads_to_fit > 0) {
      memory_problem q = p;
      q.threads = plan.threads_to_fit;
      plan.remedies.push_back(cat("fewer engine threads: [reconstruct] threads = ", plan.threads_to_fit,
                                  " would fit (", human_bytes(memory_total(q)),
                                  "; the batch size does not change the ", memory_plan_name(p),
                                  " engine's memory)"));
    } else {
      memory_problem q = p;
      q.threads = 1;
      plan.remedies.push_back(cat("fewer engine threads would not fit: even 1 thread needs ",
                                  human_bytes(memory_total(q))));
    }
  }
  if (!on_device && !p.targets_streamed && p.model != memory_model::host_staging) {
    memory_problem q = p;
    q.targets_streamed = true;
    const uint64_t streamed = memory_total(q);
    plan.remedies.push_back(cat("targets read per batch from a prepared file (target_residency = \"disk\"; "
                                "tycho preprocess --save-raw-data, then reconstruct --from it) need ",
                                human_bytes(streamed), streamed <= capacity ? ": fits" : ": not enough alone"));
  }
  return plan;
}

tycho_memory_problem to_abi(const memory_problem& p) {
  tycho_memory_problem a{};
  a.struct_size = sizeof a;
  a.patterns = p.patterns;
  a.window[0] = p.window[0];
  a.window[1] = p.window[1];
  a.target_bytes = p.target_bytes;
  a.object_shape[0] = p.object_shape[0];
  a.object_shape[1] = p.object_shape[1];
  a.slices = p.slices;
  a.probe_modes = p.probe_modes;
  a.batch_size = p.batch_size;
  a.devices = p.devices;
  a.threads = p.threads;
  a.complex_bytes = p.complex_bytes;
  a.object_optimizer_arrays = p.object_optimizer_arrays;
  a.probe_optimizer_arrays = p.probe_optimizer_arrays;
  a.targets_streamed = p.targets_streamed ? 1 : 0;
  return a;
}

memory_problem from_abi(const tycho_memory_problem& a, memory_model model) {
  // A 1.1/1.2 host's problem ends before targets_streamed (appended in ABI 1.3): not streamed.
  constexpr std::size_t k_before_1_3 = offsetof(tycho_memory_problem, targets_streamed);
  if (a.struct_size < k_before_1_3)
    fail(TYCHO_ERR_ABI_MISMATCH, "memory plan: the problem struct is ", a.struct_size, " bytes, expected at least ",
         k_before_1_3);
  memory_problem p;
  p.model = model;
  p.patterns = a.patterns;
  p.window[0] = a.window[0];
  p.window[1] = a.window[1];
  p.target_bytes = a.target_bytes;
  p.object_shape[0] = a.object_shape[0];
  p.object_shape[1] = a.object_shape[1];
  p.slices = a.slices;
  p.probe_modes = a.probe_modes;
  p.batch_size = a.batch_size;
  p.devices = a.devices;
  p.threads = a.threads;
  p.complex_bytes = a.complex_bytes;
  p.object_optimizer_arrays = a.object_optimizer_arrays;
  p.probe_optimizer_arrays = a.probe_optimizer_arrays;
  p.targets_streamed = a.struct_size >= offsetof(tycho_memory_problem, targets_streamed) + sizeof(int32_t) &&
                       a.targets_streamed != 0;
  return p;
}

void to_abi(const std::vector<memory_term>& terms, uint32_t flags, tycho_memory_report* out) {
  if (out == nullptr || out->struct_size < sizeof(tycho_memory_report))
    fail(TYCHO_ERR_ABI_MISMATCH, "memory plan: the report struct is too small");
  if (terms.size() > TYCHO_MEMORY_TERMS_MAX)
    fail(TYCHO_ERR_INTERNAL, "memory plan: ", terms.size(), " terms, the ABI carries ", TYCHO_MEMORY_TERMS_MAX);
  out->flags = flags;
  out->n_terms = int64_t(terms.size());
  for (std::size_t i = 0; i < terms.size(); ++i) {
    tycho_memory_term& t = out->terms[i];
    std::snprintf(t.name, sizeof t.name, "%s", terms[i].name.c_str());
    std::snprintf(t.formula, sizeof t.formula, "%s", terms[i].formula.c_str());
    t.bytes = terms[i].bytes;
  }
}

std::vector<memory_term> from_abi(const tycho_memory_report& r, const std::string& engine) {
  if (r.n_terms < 1 || r.n_terms > TYCHO_MEMORY_TERMS_MAX)
    fail(TYCHO_ERR_BAD_DATA, "memory plan: engine '", engine, "' reported ", r.n_terms, " terms, expected 1 to ",
         TYCHO_MEMORY_TERMS_MAX);
  std::vector<memory_term> terms;
  for (int64_t i = 0; i < r.n_terms; ++i) {
    const tycho_memory_term& t = r.terms[i];
    // Bounded reads: a plugin that forgot the terminator gets its text cut, not a crash.
    terms.push_back({std::string(t.name, strnlen(t.name, sizeof t.name)), t.bytes,
                     std::string(t.formula, strnlen(t.formula, sizeof t.formula))});
    if (terms.back().name.empty()) fail(TYCHO_ERR_BAD_DATA, "memory plan: engine '", engine, "' reported a term without a name");
  }
  return terms;
}

uint32_t memory_flags(const memory_problem& p) {
  return (memory_on_device(p) ? TYCHO_MEMORY_ON_DEVICE : 0u) | (memory_scales_with_batch(p) ? TYCHO_MEMORY_BATCH_SCALES : 0u) |
         (memory_scales_with_threads(p) ? TYCHO_MEMORY_THREADS_SCALE : 0u);
}

std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = double(bytes);
  int i = 0;
  while (v >= 1024.0 && i < 6) {
    v /= 1024.0;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[i]);
  return buf;
}

std::string memory_plan_summary(const memory_plan& plan) {
  std::string where = memory_on_device(plan.problem) ? "per device" : "";
  std::string s = cat("the ", memory_plan_name(plan.problem), " plan needs ", human_bytes(plan.total),
                      where.empty() ? "" : " ", where);
  if (plan.capacity == 0) return s + " (memory not known: not compared)";
  s += cat(", ", human_bytes(plan.capacity), " available: ");
  if (plan.fits && !plan.batch_shrunk) return s + "fits";
  if (plan.fits)
    return s + cat("fits with batch_size = ", plan.problem.batch_size, " (shrunk from ", plan.requested_batch,
                   ", which needs ", human_bytes(plan.requested_total), ")",
                   plan.devices_to_fit > 0 ? cat("; ", plan.devices_to_fit, " devices would keep the batch") : "");
  s += cat("does not fit (largest term: ", plan.largest_term, ", ", human_bytes(plan.term(plan.largest_term).bytes),
           "); remedies, in order: ");
  for (std::size_t i = 0; i < plan.remedies.size(); ++i) s += cat(i ? "; " : "", i + 1, ") ", plan.remedies[i]);
  return s;
}

std::string memory_plan_table(const memory_plan& plan) {
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line, "%-16s %18s %12s  %s\n", "term", "bytes per device", "", "counted as");
  out += line;
  for (const auto& t : plan.terms) {
    std::snprintf(line, sizeof line, "%-16s %18llu %12s  %s\n", t.name.c_str(), (unsigned long long)t.bytes,
                  human_bytes(t.bytes).c_str(), t.formula.c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "%-16s %18llu %12s\n", "total", (unsigned long long)plan.total,
                human_bytes(plan.total).c_str());
  out += line;
  if (plan.capacity > 0) {
    std::snprintf(line, sizeof line, "%-16s %18llu %12s  (%.1f %% used)\n",
                  memory_on_device(plan.problem) ? "device memory" : "host memory", (unsigned long long)plan.capacity,
                  human_bytes(plan.capacity).c_str(), 100.0 * double(plan.total) / double(plan.capacity));
    out += line;
  }
  return out;
}

}  // namespace tycho
