// A reducer component from a C++ class: the tycho_reducer_vtable, its one exception barrier and
// the checks every reducer makes of its arguments, written once.
//
//   struct my_reducer {
//     explicit my_reducer(const tycho_reducer_setup& setup);  // create(): the setup is checked
//     int32_t rank() const;
//     int32_t world_size() const;
//     // In place across the ranks, on the reducer's device (setup.device); `stream` as the
//     // vtable says. `reals` says where the values are: complex tensors are pairs of reals.
//     void allreduce_sum(const tycho::sdk::real_buffer& reals, void* stream);
//     void broadcast(const tycho::sdk::real_buffer& reals, int32_t root, void* stream);
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
// complex64 or complex128 (TYCHO_ERR_UNSUPPORTED otherwise), on the setup's device; a root in
// [0, world_size). A collective of no elements returns at once on every rank (every rank calls
// with the same sizes), without reaching the class.
#pragma once

#include <tycho/sdk/adapter.hpp>

#include <cstddef>

namespace tycho::sdk {

// The values of one tensor handed to a collective, as reals.
struct real_buffer {
  void* data;      // the first value (byte_offset applied)
  int64_t count;   // reals: elements, or 2 × elements of a complex tensor; > 0
  bool float64;    // double (float64, complex128) or float (float32, complex64) reals
  std::size_t bytes() const { return std::size_t(count) * (float64 ? 8u : 4u); }
};

namespace detail {
TYCHO_SDK_DETECT(reducer_has_shutdown, T::shutdown());

inline real_buffer reals_of(const component_identity& id, DLDevice device, DLTensor* t, const char* op) {
  if (t == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": ", op, ": no tensor");
  real_buffer b{nullptr, element_count(*t), false};
  if (same_dtype(t->dtype, dtype_float64) || same_dtype(t->dtype, dtype_complex128)) b.float64 = true;
  if (same_dtype(t->dtype, dtype_complex64) || same_dtype(t->dtype, dtype_complex128)) b.count *= 2;
  else if (!same_dtype(t->dtype, dtype_float32) && !same_dtype(t->dtype, dtype_float64))
    fail(TYCHO_ERR_UNSUPPORTED, id.who(), ": ", op, " of a ", dtype_name(t->dtype),
         t->dtype.lanes != 1 ? cat(" x ", t->dtype.lanes, " lanes") : std::string(),
         " tensor; expected float32, float64, complex64 or complex128");
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
      const real_buffer b = detail::reals_of(id, in.device, inout, "allreduce_sum");
      if (b.count > 0) in.reducer.allreduce_sum(b, stream);
    });
  }
  static tycho_status broadcast(tycho_reducer* red, DLTensor* inout, int32_t root, void* stream) {
    return guarded([&] {
      instance& in = self(red, "broadcast");
      const int32_t world = in.reducer.world_size();
      if (root < 0 || root >= world)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": broadcast root ", root, " outside [0, ", world, ")");
      const real_buffer b = detail::reals_of(id, in.device, inout, "broadcast");
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
