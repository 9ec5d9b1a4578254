// A reducer component from a C++ class: the tycho_reducer_vtable, its one exception barrier and
// the checks every reducer makes of its arguments, written once.
//
//   struct my_reducer {
//     explicit my_reducer(const tycho_reducer_setup& setup);  // create(): the setup is checked
//     int32_t rank() const;
//     int32_t world_size() const;
//     // In place across the ranks, on the reducer's device (setup.device); `stream` as the
//     // vtable says. `values` says where they are: complex tensors are pairs of reals.
//     void allreduce_sum(const tycho::sdk::collective_buffer& values, void* stream);
//     void broadcast(const tycho::sdk::collective_buffer& values, int32_t root, void* stream);
//     // Optional: broadcast takes a tensor of any dtype as its bytes (value_bytes 1), as a host
//     // reducer must (the runtime broadcasts uint8 through it).
//     static constexpr bool broadcasts_bytes = true;
//     // Optional (ABI 1.3): allreduce_sum takes int64 tensors (integer = true, value_bytes 8), an
//     // engine's deterministic sums: two's-complement sums, exact in any order. Without it they
//     // are refused, so no reducer adds integers as if they were doubles.
//     static constexpr bool sums_int64 = true;
//     void barrier();
//     void abort(int32_t exit_code) noexcept;   // any thread, any time; may not return
//     static void shutdown();                   // optional: releases a runtime it started
//   };
//   component(TYCHO_COMPONENT_REDUCER, "mine", "1.0.0", "...", devices, keys,
//             tycho::sdk::reducer_vtable<my_reducer>("mine", devices))
//
// What the adapter checks before the class sees a call (errors name "<name> reducer"): create:
// a setup of at least ABI 1.0's size whose device is of a type the component lists in
// `devices` (TYCHO_ERR_UNSUPPORTED); collectives: a tensor, C-contiguous, float32, float64,
// complex64 or complex128 (TYCHO_ERR_UNSUPPORTED otherwise; any dtype for the broadcast of a
// reducer that broadcasts_bytes), on the setup's device; a root in
// [0, world_size); int64 for allreduce_sum only from a class that sums_int64. A collective of no
// elements returns at once on every rank (every rank calls with the same sizes), without reaching
// the class.
#pragma once

#include <tycho/sdk/adapter.hpp>

#include <cstddef>
#include <string>

namespace tycho::sdk {

// The values of one tensor handed to a collective.
struct collective_buffer {
  void* data;       // the first value (byte_offset applied)
  int64_t count;    // values: elements, or 2 × elements of a complex tensor (pairs of reals); > 0
  int value_bytes;  // 4: float reals (float32, complex64), 8: double reals (float64, complex128),
                    // 1: the bytes of a tensor of another dtype (broadcasts_bytes reducers' broadcast)
  bool integer = false;  // int64 values (value_bytes 8): allreduce_sum of a sums_int64 reducer
  std::size_t bytes() const { return std::size_t(count) * std::size_t(value_bytes); }
};

namespace detail {
TYCHO_SDK_DETECT(reducer_has_shutdown, T::shutdown());
TYCHO_SDK_DETECT(reducer_broadcasts_bytes, std::enable_if_t<T::broadcasts_bytes>());
TYCHO_SDK_DETECT(reducer_sums_int64, std::enable_if_t<T::sums_int64>());

// `any_dtype`: a tensor of another dtype goes as its bytes (whole bytes per element only).
// `int64`: an int64 tensor goes as integers.
inline collective_buffer values_of(const component_identity& id, DLDevice device, DLTensor* t, const char* op,
                                   bool any_dtype, bool int64 = false) {
  if (t == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": ", op, ": no tensor");
  collective_buffer b{nullptr, element_count(*t), 4};
  if (same_dtype(t->dtype, dtype_float64) || same_dtype(t->dtype, dtype_complex128)) b.value_bytes = 8;
  if (int64 && same_dtype(t->dtype, dtype_int64)) {
    b.value_bytes = 8;
    b.integer = true;
  } else if (same_dtype(t->dtype, dtype_complex64) || same_dtype(t->dtype, dtype_complex128)) {
    b.count *= 2;
  } else if (!same_dtype(t->dtype, dtype_float32) && !same_dtype(t->dtype, dtype_float64)) {
    if (same_dtype(t->dtype, dtype_int64) && std::string(op) == "allreduce_sum")
      fail(TYCHO_ERR_UNSUPPORTED, id.who(), ": cannot sum int64 tensors (an engine's deterministic sums, ",
           "[reconstruct] deterministic = true): use a reducer that does (the built-in mpi, nccl), or set ",
           "[reconstruct] deterministic = false");
    if (!any_dtype || t->dtype.bits % 8 != 0 || t->dtype.bits == 0)
      fail(TYCHO_ERR_UNSUPPORTED, id.who(), ": ", op, " of a ", dtype_name(t->dtype),
           t->dtype.lanes != 1 ? cat(" x ", t->dtype.lanes, " lanes") : std::string(),
           " tensor; expected float32, float64, complex64 or complex128");
    b.value_bytes = 1;
    b.count *= int64_t(t->dtype.bits / 8) * int64_t(t->dtype.lanes);
  }
  if (t->device.device_type != device.device_type || t->device.device_id != device.device_id)
    fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": ", op, " of a tensor ", shape_string(*t), " on device type ",
         int(t->device.device_type), " id ", t->device.device_id, "; this reducer works on the engine's device, type ",
         int(device.device_type), " id ", device.device_id);
  if (!is_contiguous(*t))
    fail(TYCHO_ERR_BAD_DATA, id.who(), ": ", op, ": the ", dtype_name(t->dtype), " tensor ", shape_string(*t),
         " is not C-contiguous");
  if (b.count < 0) fail(TYCHO_ERR_BAD_DATA, id.who(), ": ", op, ": negative shape ", shape_string(*t));
  b.data = data_of<char>(*t);
  if (b.count > 0 && t->data == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": ", op, ": the tensor has no data");
  return b;
}
}  // namespace detail

// The trampolines of reducer class R: each vtable function inside guarded().
template <class R>
struct reducer_adapter {
  static inline component_identity id{"?", "reducer", 0};

  // What the handle points to: the reducer and the device its tensors lie on.
  struct instance {
    DLDevice device;
    R reducer;
    explicit instance(const tycho_reducer_setup& s) : device(s.device), reducer(s) {}
  };
  static instance& self(tycho_reducer* red, const char* call) { return detail::instance_of<instance>(red, id, call); }

  static tycho_status create(const tycho_reducer_setup* setup, tycho_reducer** out) {
    if (out != nullptr) *out = nullptr;
    return guarded([&] {
      if (setup == nullptr || out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": no setup or output pointer");
      if (setup->struct_size < offsetof(tycho_reducer_setup, bootstrap_ref))
        fail(TYCHO_ERR_ABI_MISMATCH, id.who(), ": reducer setup struct is too small");
      if (!id.supports(setup->device))
        fail(TYCHO_ERR_UNSUPPORTED, id.who(), ": the engine's tensors live on device type ",
             int(setup->device.device_type), setup->device.device_type == kDLCPU ? " (the CPU)" : "",
             "; this reducer sums tensors on ", device_names(id.devices),
             " only (reducer = \"auto\" picks one that sums them where the engine keeps them)");
      *out = reinterpret_cast<tycho_reducer*>(new instance(*setup));
    });
  }
  static int32_t rank(const tycho_reducer* red) {
    return red != nullptr ? reinterpret_cast<const instance*>(red)->reducer.rank() : -1;
  }
  static int32_t world_size(const tycho_reducer* red) {
    return red != nullptr ? reinterpret_cast<const instance*>(red)->reducer.world_size() : -1;
  }
  static tycho_status allreduce_sum(tycho_reducer* red, DLTensor* inout, void* stream) {
    return guarded([&] {
      instance& in = self(red, "allreduce_sum");
      const collective_buffer b =
          detail::values_of(id, in.device, inout, "allreduce_sum", false, detail::reducer_sums_int64<R>::value);
      if (b.count > 0) in.reducer.allreduce_sum(b, stream);
    });
  }
  static tycho_status broadcast(tycho_reducer* red, DLTensor* inout, int32_t root, void* stream) {
    return guarded([&] {
      instance& in = self(red, "broadcast");
      const int32_t world = in.reducer.world_size();
      if (root < 0 || root >= world)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": broadcast root ", root, " outside [0, ", world, ")");
      const collective_buffer b =
          detail::values_of(id, in.device, inout, "broadcast", detail::reducer_broadcasts_bytes<R>::value);
      if (b.count > 0) in.reducer.broadcast(b, root, stream);
    });
  }
  static tycho_status barrier(tycho_reducer* red) {
    return guarded([&] { self(red, "barrier").reducer.barrier(); });
  }
  static void abort(tycho_reducer* red, int32_t exit_code) {
    if (red != nullptr) reinterpret_cast<instance*>(red)->reducer.abort(exit_code);
  }
  static void destroy(tycho_reducer* red) {
    (void)guarded([&] { delete reinterpret_cast<instance*>(red); });
  }
  static void shutdown() {
    (void)guarded([] { R::shutdown(); });
  }

  static tycho_reducer_vtable make_vtable() {
    auto vt = detail::vtable_head<tycho_reducer_vtable>();
    vt.create = &create;
    vt.rank = &rank;
    vt.world_size = &world_size;
    vt.allreduce_sum = &allreduce_sum;
    vt.broadcast = &broadcast;
    vt.barrier = &barrier;
    vt.abort = &abort;
    vt.destroy = &destroy;
    if constexpr (detail::reducer_has_shutdown<R>::value) vt.shutdown = &shutdown;
    return vt;
  }
  static inline const tycho_reducer_vtable vtable = make_vtable();
};

// The vtable of reducer class R, named `name` in messages, for tensors on `devices`
// (TYCHO_DEVICE_BIT(...): the component's own `devices`). One per class R.
template <class R>
const tycho_reducer_vtable* reducer_vtable(const char* name, uint32_t devices) {
  reducer_adapter<R>::id = component_identity{name, "reducer", devices};
  return &reducer_adapter<R>::vtable;
}

}  // namespace tycho::sdk
