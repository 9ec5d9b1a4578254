// An engine component from a C++ class: the tycho_engine_vtable, its one exception barrier and
// the checks of the setup every engine needs, written once.
//
//   struct my_engine {
//     explicit my_engine(const tycho::sdk::engine_setup& s);  // create(): s is checked (below)
//     // Host engines: computes the batch and returns Σ L over it.
//     double compute_batch(const int64_t* indices, int64_t count);
//     DLTensor* tensor(tycho_tensor_id id);                    // a view on the engine's memory
//     // Optional:
//     void read_tensor(tycho_tensor_id id, void* host_dst, size_t bytes);  // device engines
//     void* stream();                  // the engine's stream (device engines)
//     double collect_loss();           // device engines: Σ L since the last call; their
//                                      // compute_batch then returns void
//     static void plan_memory(const tycho::sdk::config_view& cfg, const tycho_memory_problem& p,
//                             tycho_memory_report* out);   // tycho plan (pure, thread-safe)
//     void set_position_gradient(bool on);  // ABI 1.3: dL/dr on or off from the next batch
//     // Deterministic sums (tycho/sdk/fixed_point.hpp): the int64 sums the host reduces, nullptr
//     // when this instance keeps none; and the step after their reduction: true to be computed
//     // again, else the gradients are set and the batch's Σ L (every rank's) added to `loss`
//     // (host engines; a device engine keeps it for collect_loss and may leave `loss` alone).
//     DLTensor* fixed_point_sums();
//     bool finish_batch(bool ends_iteration, double& loss);
//     // The object gradient is read only inside these boxes from the next batch on (n = 0: all
//     // of it); tycho_engine_vtable::set_gradient_region. Boxes checked (below), to be copied.
//     void set_gradient_region(const int64_t* boxes, int64_t n);
//     // ABI 1.4: the Fisher information (J_00, J_01, J_11) of each pattern's probe centre under
//     // Poisson counting (tycho_engine_vtable::position_information; indices and the count
//     // scale checked, below), into out ((count, 3)).
//     void position_information(const int64_t* indices, int64_t count, double counts_per_target_unit,
//                               double* out);
//   };
//   engine_capabilities caps{"mine", TYCHO_DEVICE_BIT(kDLCPU)};
//   component(TYCHO_COMPONENT_ENGINE, "mine", "1.0.0", "...", caps.devices, keys,
//             tycho::sdk::engine_vtable<my_engine>(caps))
//
// What the adapter does before the class sees a call (errors name "<name> engine"):
// - create: the setup is at least ABI 1.1's (TYCHO_ERR_ABI_MISMATCH otherwise); [reconstruct]
//   precision is "float32" or "float64", and "float64" only with caps.float64
//   (TYCHO_ERR_UNSUPPORTED); the device's type is one of caps.devices (TYCHO_ERR_UNSUPPORTED);
//   targets (P, N0, N1) float32 or uint16 counts, positions_px (P, 2) float64, object_init
//   (S, H, W) and probe_init (M, N0, N1) complex64 (or complex128 with caps.float64), all
//   C-contiguous host tensors; the mask (N0, N1) uint8 when given; a loss binding; S >= 1,
//   1 <= M <= N0·N1; S > 1 only with caps.multislice and then a (N0, N1) complex128
//   slice_propagator; M > 1 only with caps.probe_modes; a position gradient only with
//   caps.position_gradient; every pattern's window inside the object. The setup fields appended
//   in ABI 1.2 are read only when the setup's struct_size covers them.
// - compute_batch: count >= 0, indices given when count > 0, each in [0, P); loss_sum given
//   (host engines).
// - get_tensor / read_tensor: a known id (the positions' gradient only when the setup asked for
//   it; the fixed-point sums only from an instance that keeps them); read_tensor's `bytes` equal
//   to the tensor's size (host tensors are copied here unless the class has its own read_tensor).
// - finish_batch (classes with fixed_point_sums): an `again` given, and sums kept.
// - plan_memory: a problem and a report given.
// - set_position_gradient: only for an engine whose setup asked for a position gradient
//   (TYCHO_ERR_INVALID_ARGUMENT otherwise); while it is off, get_tensor of the positions'
//   gradient still answers (the values are those of the last batch that computed them).
// - set_gradient_region: n >= 0 boxes, each non-empty and inside the object's last two axes.
#pragma once

#include <tycho/sdk/adapter.hpp>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>

namespace tycho::sdk {

// What an engine can do; what it cannot is refused at create with a message that names it.
struct engine_capabilities {
  const char* name = "?";
  uint32_t devices = 0;            // TYCHO_DEVICE_BIT(...): the device types setup->device may have
  bool float64 = false;            // [reconstruct] precision = "float64"; complex128 initial values
  bool multislice = false;         // object slices S > 1
  bool probe_modes = false;        // probe modes M > 1
  bool position_gradient = false;  // setup->position_gradient = 1
  // An engine to suggest in refusals ("engine = \"cpu\""); NULL: none.
  const char* alternative = nullptr;
  bool streamed_targets = false;  // targets per batch through setup->target_reader (ABI 1.3)
};

// The setup, checked, and the sizes read from it.
struct engine_setup {
  const tycho_engine_setup* raw = nullptr;  // as the host handed it (valid during create)
  config_view config{nullptr};              // the [reconstruct] table
  bool float64 = false;                     // [reconstruct] precision = "float64"
  int64_t patterns = 0, n0 = 0, n1 = 0;     // targets (P, N0, N1)
  int64_t slices = 1, height = 0, width = 0;  // object (S, H, W)
  int64_t modes = 1;                        // probe (M, N0, N1)
  bool integer_counts = false;              // targets uint16 counts (else float32)
  const uint8_t* mask = nullptr;            // (N0, N1), 1 = valid; NULL: all valid
  const double* positions_px = nullptr;     // (P, 2) probe centres, object pixels
  const DLTensor* slice_propagator = nullptr;  // (N0, N1) complex128 when S > 1, else NULL
  double slice_thickness_A = 0;
  bool position_gradient = false;           // compute_batch also writes dL/dr
  // ABI 1.3: no targets tensor; the batch's targets come from this reader (checked: complete,
  // float32 or uint16, a non-empty shape). NULL when the setup holds the targets.
  const tycho_target_reader* target_reader = nullptr;
  // ABI 1.3: the host sums an engine's fixed-point sums over the ranks and calls finish_batch
  // after every compute_batch (false from an older host: the engine finishes batches itself).
  bool host_finishes_batches = false;
  // ABI 1.3: every rank's positions ((scan_patterns, 2), checked: positions_px is rows
  // [scan_first, scan_first + patterns) of them); the setup's own positions when it has none.
  const double* scan_positions_px = nullptr;
  int64_t scan_patterns = 0, scan_first = 0;
};

namespace detail {

inline std::string use_instead(const engine_capabilities& caps, const char* what) {
  return caps.alternative != nullptr ? cat(": use ", caps.alternative, what) : std::string();
}

// Throws unless the window of a probe centred at (c0, c1) (object pixels) lies inside an
// (h, w) object: top-left corner floor(c − N/2), N the window. A NaN or infinite centre fails.
inline void check_window_inside(const char* who, int64_t j, double c0, double c1, int64_t n0, int64_t n1,
                                int64_t h, int64_t w) {
  const double t0 = std::floor(c0 - double(n0 / 2)), t1 = std::floor(c1 - double(n1 / 2));
  if (!(t0 >= 0 && t1 >= 0 && t0 + double(n0) <= double(h) && t1 + double(n1) <= double(w)))
    fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": the window of position ", j, " (centre ", c0, ", ", c1,
         " px) does not lie inside the object (", h, " x ", w, " px)");
}

inline engine_setup check_engine_setup(const engine_capabilities& caps, const tycho_engine_setup* raw) {
  const std::string who = cat(caps.name, " engine");
  // A 1.1 host's setup ends at loss_ref: one slice, no position gradient.
  if (raw == nullptr || raw->struct_size < offsetof(tycho_engine_setup, slice_propagator))
    fail(TYCHO_ERR_ABI_MISMATCH, who, ": engine setup struct is too small");
  const tycho_engine_setup& s = *raw;
  engine_setup out;
  out.raw = raw;
  out.config = config_view(s.config);
  // The host has checked the value; a third-party host might not have.
  const std::string precision = out.config.get_string("precision").value_or("float32");
  if (precision != "float32" && precision != "float64")
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] precision must be \"float32\" or \"float64\", got \"", precision,
         "\"");
  out.float64 = precision == "float64";
  if (out.float64 && !caps.float64)
    fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] precision = \"float64\": the ", who, " computes in float32 only",
         caps.alternative != nullptr ? cat("; use ", caps.alternative) : std::string());
  const component_identity id{caps.name, "engine", caps.devices};
  if (!id.supports(s.device))
    fail(TYCHO_ERR_UNSUPPORTED, who, ": runs on ", device_names(caps.devices), " only, device type ",
         int(s.device.device_type), " was requested");

  // ABI 1.3: targets per batch through a reader instead of a tensor.
  const bool has_1_3 = s.struct_size >= offsetof(tycho_engine_setup, target_reader) + sizeof(void*);
  out.target_reader = has_1_3 && s.targets == nullptr ? s.target_reader : nullptr;
  out.host_finishes_batches =
      s.struct_size >= offsetof(tycho_engine_setup, host_finishes_batches) + sizeof(int32_t) &&
      s.host_finishes_batches != 0;
  if (out.target_reader != nullptr) {
    const tycho_target_reader& r = *out.target_reader;
    if (!caps.streamed_targets)
      fail(TYCHO_ERR_UNSUPPORTED, who, ": streamed targets (target_residency = \"disk\") are not supported by this ",
           "engine yet; use target_residency = \"device\"", use_instead(caps, ""));
    if (r.struct_size < offsetof(tycho_target_reader, context) + sizeof(void*) || r.read == nullptr)
      fail(TYCHO_ERR_ABI_MISMATCH, who, ": the target reader is incomplete (struct_size ", r.struct_size, ")");
    if (!same_dtype(r.dtype, dtype_float32) && !same_dtype(r.dtype, dtype_uint16))
      fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": the target reader gives ", int(r.dtype.code), ":", int(r.dtype.bits),
           " elements; expected float32 or uint16");
    if (r.shape[0] < 1 || r.shape[1] < 1 || r.shape[2] < 1)
      fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": the target reader's shape (", r.shape[0], ", ", r.shape[1], ", ",
           r.shape[2], ") is empty");
    out.integer_counts = same_dtype(r.dtype, dtype_uint16);
    out.patterns = r.shape[0];
    out.n0 = r.shape[1];
    out.n1 = r.shape[2];
  } else {
    out.integer_counts = s.targets != nullptr && same_dtype(s.targets->dtype, dtype_uint16);
    expect_tensor(s.targets, "targets", out.integer_counts ? dtype_uint16 : dtype_float32, 3);
    out.patterns = s.targets->shape[0];
    out.n0 = s.targets->shape[1];
    out.n1 = s.targets->shape[2];
  }
  const std::string targets_shape = cat("(", out.patterns, ", ", out.n0, ", ", out.n1, ")");
  expect_tensor(s.positions_px, "positions_px", dtype_float64, 2);
  for (const auto& [t, name] : {std::pair{s.object_init, "object_init"}, std::pair{s.probe_init, "probe_init"}}) {
    const bool c128 = caps.float64 && t != nullptr && same_dtype(t->dtype, dtype_complex128);
    expect_tensor(t, name, c128 ? dtype_complex128 : dtype_complex64, 3);
  }
  for (const DLTensor* t : {s.targets, s.positions_px, s.object_init, s.probe_init, s.mask})
    if (t != nullptr && !on_host(*t)) fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": the setup's tensors must be host tensors");
  out.slices = s.object_init->shape[0];
  out.height = s.object_init->shape[1];
  out.width = s.object_init->shape[2];
  out.modes = s.probe_init->shape[0];
  if (out.slices < 1 || out.modes < 1 || out.modes > out.n0 * out.n1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": object ", shape_string(*s.object_init), " and probe ",
         shape_string(*s.probe_init), ": at least one slice and one mode, at most N0·N1 modes");
  if (out.slices > 1 && !caps.multislice)
    fail(TYCHO_ERR_UNSUPPORTED, who, ": ", out.slices,
         " object slices requested; this engine is single-slice (slices = 1)", use_instead(caps, " for multislice"));
  if (out.modes > 1 && !caps.probe_modes)
    fail(TYCHO_ERR_UNSUPPORTED, who, ": ", out.modes, " probe modes requested; this engine supports probe_modes = 1",
         use_instead(caps, " for mixed states"));
  // Fields appended in ABI 1.2 (a 1.1 host's setup ends before them: one slice, no gradient).
  const bool has_1_2 = s.struct_size >= offsetof(tycho_engine_setup, position_gradient) + sizeof(int32_t);
  out.position_gradient = has_1_2 && s.position_gradient != 0;
  if (out.position_gradient && !caps.position_gradient)
    fail(TYCHO_ERR_UNSUPPORTED, who, ": position correction ([reconstruct.positions] correct = true) ",
         "is not in this engine yet", use_instead(caps, ""));
  if (out.slices > 1) {
    const DLTensor* propagator = has_1_2 ? s.slice_propagator : nullptr;
    if (propagator == nullptr)
      fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": ", out.slices, " slices but no slice_propagator in the setup");
    expect_tensor(propagator, "slice_propagator", dtype_complex128, 2);
    if (propagator->shape[0] != out.n0 || propagator->shape[1] != out.n1)
      fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": slice_propagator ", shape_string(*propagator),
           " does not match the patterns ", targets_shape);
    out.slice_propagator = propagator;
    out.slice_thickness_A = s.slice_thickness_A;
  }
  if (s.probe_init->shape[1] != out.n0 || s.probe_init->shape[2] != out.n1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": probe ", shape_string(*s.probe_init), " does not match the patterns ",
         targets_shape);
  if (s.positions_px->shape[0] != out.patterns || s.positions_px->shape[1] != 2)
    fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": positions ", shape_string(*s.positions_px), " expected (",
         out.patterns, ", 2)");
  if (s.mask != nullptr) {
    expect_tensor(s.mask, "mask", dtype_uint8, 2);
    if (s.mask->shape[0] != out.n0 || s.mask->shape[1] != out.n1)
      fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": mask ", shape_string(*s.mask), " does not match the patterns");
    out.mask = data_of<const uint8_t>(*s.mask);
  }
  if (s.loss.vtable == nullptr || s.loss.instance == nullptr)
    fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": no loss component given");
  out.positions_px = data_of<const double>(*s.positions_px);
  out.scan_positions_px = out.positions_px;
  out.scan_patterns = out.patterns;
  if (s.struct_size >= offsetof(tycho_engine_setup, scan_first) + sizeof(int64_t) && s.scan_positions_px != nullptr) {
    expect_tensor(s.scan_positions_px, "scan_positions_px", dtype_float64, 2);
    if (!on_host(*s.scan_positions_px)) fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": scan_positions_px must be a host tensor");
    const int64_t all = s.scan_positions_px->shape[0];
    if (s.scan_positions_px->shape[1] != 2 || s.scan_first < 0 || s.scan_first > all || out.patterns > all - s.scan_first)
      fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": scan_positions_px ", shape_string(*s.scan_positions_px),
           " does not hold the setup's ", out.patterns, " positions from row scan_first = ", s.scan_first);
    const double* scan = data_of<const double>(*s.scan_positions_px);
    if (std::memcmp(scan + 2 * s.scan_first, out.positions_px, sizeof(double) * 2 * std::size_t(out.patterns)) != 0)
      fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": positions_px differs from rows ", s.scan_first, " to ",
           s.scan_first + out.patterns - 1, " of scan_positions_px");
    out.scan_positions_px = scan;
    out.scan_patterns = all;
    out.scan_first = s.scan_first;
  }
  for (int64_t j = 0; j < out.patterns; ++j)
    check_window_inside(who.c_str(), j, out.positions_px[2 * j], out.positions_px[2 * j + 1], out.n0, out.n1,
                        out.height, out.width);
  return out;
}

TYCHO_SDK_DETECT(engine_has_read_tensor,
                 std::declval<T&>().read_tensor(TYCHO_TENSOR_OBJECT, std::declval<void*>(), size_t(0)));
TYCHO_SDK_DETECT(engine_has_stream, std::declval<T&>().stream());
TYCHO_SDK_DETECT(engine_has_collect_loss, std::declval<T&>().collect_loss());
TYCHO_SDK_DETECT(engine_has_set_position_gradient, std::declval<T&>().set_position_gradient(true));
TYCHO_SDK_DETECT(engine_has_fixed_point, std::declval<T&>().fixed_point_sums());
TYCHO_SDK_DETECT(engine_has_gradient_region,
                 std::declval<T&>().set_gradient_region(std::declval<const int64_t*>(), int64_t(0)));
TYCHO_SDK_DETECT(engine_has_position_information,
                 std::declval<T&>().position_information(std::declval<const int64_t*>(), int64_t(0), 1.0,
                                                         std::declval<double*>()));
TYCHO_SDK_DETECT(engine_has_plan_memory,
                 T::plan_memory(std::declval<const config_view&>(), std::declval<const tycho_memory_problem&>(),
                                std::declval<tycho_memory_report*>()));

}  // namespace detail

// The trampolines of engine class E: each vtable function inside guarded().
template <class E>
struct engine_adapter {
  static inline engine_capabilities caps{};

  // What the handle points to: the engine and what the adapter checks its calls against.
  struct instance {
    int64_t patterns;
    bool position_gradient;
    int64_t height, width;  // the object's plane (its last two axes)
    E engine;
    explicit instance(const engine_setup& s)
        : patterns(s.patterns), position_gradient(s.position_gradient), height(s.height), width(s.width), engine(s) {}
  };
  static component_identity id() { return component_identity{caps.name, "engine", caps.devices}; }
  static instance& self(tycho_engine* eng, const char* call) { return detail::instance_of<instance>(eng, id(), call); }

  static const DLTensor& checked_tensor(instance& in, tycho_tensor_id tid) {
    if (int(tid) < 0 || int(tid) > TYCHO_TENSOR_FIXED_POINT_SUMS)
      fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": unknown tensor id ", int(tid));
    if (tid == TYCHO_TENSOR_POSITIONS_GRAD && !in.position_gradient)
      fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": no position gradient: the setup did not ask for one");
    if (tid == TYCHO_TENSOR_FIXED_POINT_SUMS) {
      const DLTensor* sums = fixed_point_sums(in);
      if (sums == nullptr)
        fail(TYCHO_ERR_UNSUPPORTED, id().who(), ": keeps no fixed-point sums (its [reconstruct] deterministic = false, ",
             "or it has no deterministic mode)");
      return *sums;
    }
    const DLTensor* t = in.engine.tensor(tid);
    if (t == nullptr) fail(TYCHO_ERR_INTERNAL, id().who(), ": tensor ", int(tid), " is missing");
    return *t;
  }

  static const DLTensor* fixed_point_sums(instance& in) {
    if constexpr (detail::engine_has_fixed_point<E>::value) {
      return in.engine.fixed_point_sums();
    } else {
      (void)in;
      return nullptr;
    }
  }

  // Every index of a call's patterns in [0, patterns).
  static void check_indices(const instance& in, const int64_t* indices, int64_t count) {
    for (int64_t i = 0; i < count; ++i)
      if (indices[i] < 0 || indices[i] >= in.patterns)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": pattern index ", indices[i], " outside [0, ", in.patterns,
             ")");
  }

  static tycho_status create(const tycho_engine_setup* setup, tycho_engine** out) {
    if (out != nullptr) *out = nullptr;
    return guarded([&] {
      if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": no output handle");
      const engine_setup checked = detail::check_engine_setup(caps, setup);
      *out = reinterpret_cast<tycho_engine*>(new instance(checked));
    });
  }
  static tycho_status compute_batch(tycho_engine* eng, const int64_t* indices, int64_t count, double* loss_sum) {
    return guarded([&] {
      instance& in = self(eng, "compute_batch");
      if (count < 0) fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": negative batch size ", count);
      if (count > 0 && indices == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": no batch indices");
      check_indices(in, indices, count);
      if constexpr (detail::engine_has_collect_loss<E>::value) {
        in.engine.compute_batch(indices, count);  // the loss stays with the engine until collect_loss
      } else {
        if (loss_sum == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": no loss accumulator");
        *loss_sum += in.engine.compute_batch(indices, count);
      }
    });
  }
  static tycho_status get_tensor(tycho_engine* eng, tycho_tensor_id tid, DLTensor* out) {
    return guarded([&] {
      instance& in = self(eng, "get_tensor");
      if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": get_tensor() without an output");
      *out = checked_tensor(in, tid);
    });
  }
  static tycho_status read_tensor(tycho_engine* eng, tycho_tensor_id tid, void* dst, size_t bytes) {
    return guarded([&] {
      instance& in = self(eng, "read_tensor");
      const DLTensor& t = checked_tensor(in, tid);
      const size_t size = size_t(element_count(t)) * (t.dtype.bits * t.dtype.lanes / 8u);
      if (bytes != size)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": read_tensor of ", shape_string(t), " needs ", size,
             " bytes, got ", bytes);
      if (size > 0 && dst == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": read_tensor() without a destination");
      if constexpr (detail::engine_has_read_tensor<E>::value) {
        in.engine.read_tensor(tid, dst, bytes);
      } else {
        if (!detail::on_host(t))
          fail(TYCHO_ERR_INTERNAL, id().who(), ": tensor ", int(tid), " is not in host memory and the engine has no read_tensor");
        if (size > 0) std::memcpy(dst, data_of<const char>(t), size);
      }
    });
  }
  static void destroy(tycho_engine* eng) {
    (void)guarded([&] { delete reinterpret_cast<instance*>(eng); });
  }
  static void* stream(tycho_engine* eng) {
    if constexpr (detail::engine_has_stream<E>::value) {
      return eng != nullptr ? reinterpret_cast<instance*>(eng)->engine.stream() : nullptr;
    } else {
      (void)eng;
      return nullptr;
    }
  }
  static tycho_status collect_loss(tycho_engine* eng, double* loss_sum) {
    return guarded([&] {
      instance& in = self(eng, "collect_loss");
      const double loss = in.engine.collect_loss();
      if (loss_sum != nullptr) *loss_sum += loss;
    });
  }
  static tycho_status finish_batch(tycho_engine* eng, uint32_t flags, int32_t* again, double* loss_sum, void*) {
    if (again != nullptr) *again = 0;
    return guarded([&] {
      instance& in = self(eng, "finish_batch");
      if (again == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": finish_batch() without `again`");
      if (fixed_point_sums(in) == nullptr)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": finish_batch() on an engine that keeps no fixed-point sums");
      if constexpr (detail::engine_has_fixed_point<E>::value) {
        double loss = 0;
        *again = in.engine.finish_batch((flags & TYCHO_FINISH_ENDS_ITERATION) != 0, loss) ? 1 : 0;
        if constexpr (!detail::engine_has_collect_loss<E>::value) {
          if (*again == 0) {
            if (loss_sum == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": no loss accumulator");
            *loss_sum += loss;
          }
        }
      }
    });
  }
  static tycho_status set_gradient_region(tycho_engine* eng, const int64_t* boxes, int64_t n) {
    return guarded([&] {
      instance& in = self(eng, "set_gradient_region");
      detail::check_boxes(id().who(), boxes, n, in.height, in.width);
      in.engine.set_gradient_region(boxes, n);
    });
  }
  static tycho_status plan_memory(const tycho_config* cfg, const tycho_memory_problem* problem,
                                  tycho_memory_report* out) {
    return guarded([&] {
      if (problem == nullptr || out == nullptr)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": plan_memory() needs a memory problem and a report");
      E::plan_memory(config_view(cfg), *problem, out);
    });
  }

  static tycho_status set_position_gradient(tycho_engine* eng, int32_t on) {
    return guarded([&] {
      instance& in = self(eng, "set_position_gradient");
      if (!in.position_gradient)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": set_position_gradient() on an engine whose setup asked for ",
             "no position gradient");
      in.engine.set_position_gradient(on != 0);
    });
  }

  static tycho_status position_information(tycho_engine* eng, const int64_t* indices, int64_t count,
                                           double counts_per_target_unit, double* information) {
    return guarded([&] {
      instance& in = self(eng, "position_information");
      if (count < 0) fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": position_information() of ", count, " patterns");
      if (count > 0 && (indices == nullptr || information == nullptr))
        fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": position_information() without indices or an output");
      if (!(counts_per_target_unit > 0) || !std::isfinite(counts_per_target_unit))
        fail(TYCHO_ERR_INVALID_ARGUMENT, id().who(), ": position_information() with counts_per_target_unit ",
             counts_per_target_unit, ", not a finite number > 0");
      check_indices(in, indices, count);
      in.engine.position_information(indices, count, counts_per_target_unit, information);
    });
  }

  static tycho_engine_vtable make_vtable() {
    auto vt = detail::vtable_head<tycho_engine_vtable>();
    vt.create = &create;
    vt.compute_batch = &compute_batch;
    vt.get_tensor = &get_tensor;
    vt.destroy = &destroy;
    vt.read_tensor = &read_tensor;
    vt.stream = &stream;
    if constexpr (detail::engine_has_collect_loss<E>::value) vt.collect_loss = &collect_loss;
    if constexpr (detail::engine_has_plan_memory<E>::value) vt.plan_memory = &plan_memory;
    if constexpr (detail::engine_has_set_position_gradient<E>::value) vt.set_position_gradient = &set_position_gradient;
    if constexpr (detail::engine_has_fixed_point<E>::value) vt.finish_batch = &finish_batch;
    if constexpr (detail::engine_has_gradient_region<E>::value) vt.set_gradient_region = &set_gradient_region;
    if constexpr (detail::engine_has_position_information<E>::value) vt.position_information = &position_information;
    return vt;
  }
  static inline const tycho_engine_vtable vtable = make_vtable();
};

// The vtable of engine class E with capabilities `caps` (caps.devices: the component's own
// `devices`). One per class E; the pointer is to a static that lives as long as the plugin.
template <class E>
const tycho_engine_vtable* engine_vtable(const engine_capabilities& caps) {
  engine_adapter<E>::caps = caps;
  return &engine_adapter<E>::vtable;
}

// A plan-only engine (TYCHO_COMPONENT_PLAN_ONLY): model M has only the static plan_memory of an
// engine class; create refuses with "<name> engine: <why>" (e.g. "this tycho was built without
// CUDA (plan only)").
template <class M>
struct plan_only_engine_adapter {
  static inline engine_capabilities caps{};
  static inline const char* why = "it can only be planned here";
  static tycho_status create(const tycho_engine_setup*, tycho_engine** out) {
    if (out != nullptr) *out = nullptr;
    return report(TYCHO_ERR_UNSUPPORTED, cat(caps.name, " engine: ", why));
  }
  static tycho_engine_vtable make_vtable() {
    auto vt = detail::vtable_head<tycho_engine_vtable>();
    vt.create = &create;
    vt.plan_memory = &engine_adapter<M>::plan_memory;
    return vt;
  }
  static inline const tycho_engine_vtable vtable = make_vtable();
};

template <class M>
const tycho_engine_vtable* plan_only_engine_vtable(const engine_capabilities& caps, const char* why) {
  plan_only_engine_adapter<M>::caps = caps;
  engine_adapter<M>::caps = caps;
  plan_only_engine_adapter<M>::why = why;
  return &plan_only_engine_adapter<M>::vtable;
}

}  // namespace tycho::sdk
