// A constraint component (ABI 1.3) from a C++ class: the tycho_constraint_vtable, its one
// exception barrier and the checks every constraint makes of its tensors, written once.
//
//   struct my_constraint {
//     my_constraint(const tycho::sdk::config_view& cfg, const tycho_constraint_setup& setup);  // create()
//     uint32_t acts_on() const;                                  // TYCHO_CONSTRAINT_* bits
//     void apply(const tycho::sdk::constraint_arguments& a);      // change the tensors in place
//   };
//   tycho::sdk::constraint_component<my_constraint>("mine", "1.0.0", "...", TYCHO_DEVICE_BIT(kDLCPU), keys)
//   (= component(TYCHO_COMPONENT_CONSTRAINT, "mine", ..., constraint_vtable<my_constraint>("mine", devices)))
//
// `cfg` is the constraint's own entry of [[reconstruct.constraints]]. create refuses an engine
// device the component does not list in `devices` (TYCHO_ERR_UNSUPPORTED naming the device), so
// a host-only constraint stops a GPU run before its first iteration. Before the class's apply
// runs, the tensors it acts on are checked: object 3-D and probe 3-D, C-contiguous, both
// complex64 or both complex128, on the setup's device; positions (P, 2) float64.
#pragma once

#include <tycho/sdk.hpp>
#include <tycho/sdk/adapter.hpp>

#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>

namespace tycho::sdk {

struct constraint_arguments {
  DLTensor* object;     // (S, H, W); nullptr unless the constraint acts on the object or probe
  DLTensor* probe;      // (M, N0, N1), the object's dtype
  DLTensor* positions;  // (P, 2) float64 px; nullptr unless after a position step
  bool float64;         // complex128 object and probe (precision = "float64")
  int64_t iteration;    // 1-based
  int64_t batch;        // 0-based mini-batch of the iteration; -1 after the position step
  int64_t batches;      // mini-batches per iteration
  void* stream;         // the engine's stream; nullptr on the host
  // Where the object changed since the last application (ABI 1.3): n_object_boxes boxes
  // [row0, row1, col0, col1) of its last two axes, every slice (checked); 0: anywhere.
  const int64_t* object_boxes = nullptr;
  int64_t n_object_boxes = 0;
  // The object's and the probe's learning rates now as a share of their settings (ABI 1.5:
  // schedule × the stopping rule's halvings; 0 while not stepped; 1 from an older host). A
  // regulariser standing for a penalty term scales its pull by it.
  double object_rate_factor = 1;
  double probe_rate_factor = 1;
  bool last_batch() const { return batch == batches - 1; }
  // f(offset, count): the runs of object elements (flat indices into the (S, H, W) object) a
  // pointwise constraint needs to visit: the boxes' rows, or the whole object as one run.
  template <class F>
  void for_each_object_run(F&& f) const {
    const int64_t slices = object->shape[0], h = object->shape[1], w = object->shape[2];
    if (n_object_boxes == 0) return f(int64_t(0), slices * h * w);
    for (int64_t k = 0; k < n_object_boxes; ++k) {
      const int64_t* b = object_boxes + 4 * k;
      for (int64_t s = 0; s < slices; ++s)
        for (int64_t r = b[0]; r < b[1]; ++r) f((s * h + r) * w + b[2], b[3] - b[2]);
    }
  }
};

// Calls f with the tensor's values as std::complex<float>* or std::complex<double>*.
template <class F>
void with_complex_values(DLTensor& t, F&& f) {
  if (same_dtype(t.dtype, dtype_complex128))
    f(data_of<std::complex<double>>(t));
  else
    f(data_of<std::complex<float>>(t));
}

inline const char* device_type_name(int type) {
  switch (type) {
    case kDLCPU: return "the CPU";
    case kDLCUDA: return "a CUDA device";
    default: return "another device";
  }
}

template <class C>
struct constraint_adapter {
  static inline const char* name = "a";
  static inline uint32_t devices = 0;
  struct instance {
    C impl;
    DLDevice device;
  };
  static tycho_status create(const tycho_constraint_setup* setup, tycho_constraint** out) {
    return guarded([&] {
      if (setup == nullptr || out == nullptr)
        fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint '", name, "': create without a setup or an output handle");
      if (setup->struct_size < sizeof(tycho_constraint_setup))
        fail(TYCHO_ERR_ABI_MISMATCH, "constraint '", name, "': the host's setup is older than ABI 1.3");
      const int type = int(setup->device.device_type);
      if (type >= 32 || (devices & TYCHO_DEVICE_BIT(type)) == 0)
        fail(TYCHO_ERR_UNSUPPORTED, "constraint '", name, "' changes tensors on the CPU only; the engine keeps its ",
             "tensors on ", device_type_name(type), " (device type ", type, "): leave it out of [[reconstruct.constraints]]",
             " or use a host engine");
      *out = reinterpret_cast<tycho_constraint*>(new instance{C(config_view(setup->config), *setup), setup->device});
    });
  }
  static uint32_t acts_on(const tycho_constraint* self) {
    return self == nullptr ? 0u : reinterpret_cast<const instance*>(self)->impl.acts_on();
  }
  static void check(const DLTensor* t, const char* what, DLDevice dev) {
    if (t->device.device_type != dev.device_type || t->device.device_id != dev.device_id)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint '", name, "': the ", what, " is not on the engine's device");
    if (!is_contiguous(*t)) fail(TYCHO_ERR_BAD_DATA, "constraint '", name, "': the ", what, " is not C-contiguous");
  }
  static tycho_status apply(tycho_constraint* self, const tycho_constraint_state* state) {
    return guarded([&] {
      if (self == nullptr || state == nullptr)
        fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint '", name, "': apply without an instance or a state");
      auto& in = *reinterpret_cast<instance*>(self);
      constraint_arguments a{state->object, state->probe, state->positions, false, state->iteration,
                             state->batch,  state->batches, state->stream};
      if (a.object != nullptr && a.probe != nullptr) {
        a.float64 = same_dtype(a.object->dtype, dtype_complex128);
        expect_tensor(a.object, "object", a.float64 ? dtype_complex128 : dtype_complex64, 3);
        expect_tensor(a.probe, "probe", a.float64 ? dtype_complex128 : dtype_complex64, 3);
        check(a.object, "object", in.device);
        check(a.probe, "probe", in.device);
        if (state->struct_size >= offsetof(tycho_constraint_state, object_boxes) + sizeof(state->object_boxes) &&
            state->n_object_boxes > 0) {
          detail::check_boxes(cat("constraint '", name, "'"), state->object_boxes, state->n_object_boxes,
                              a.object->shape[1], a.object->shape[2]);
          a.object_boxes = state->object_boxes;
          a.n_object_boxes = state->n_object_boxes;
        }
      }
      if (state->struct_size >= offsetof(tycho_constraint_state, probe_rate_factor) + sizeof(double)) {
        if (!std::isfinite(state->object_rate_factor) || state->object_rate_factor < 0 ||
            !std::isfinite(state->probe_rate_factor) || state->probe_rate_factor < 0)
          fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint '", name, "': the host's rate factors (object ",
               state->object_rate_factor, ", probe ", state->probe_rate_factor, ") must be finite and >= 0");
        a.object_rate_factor = state->object_rate_factor;
        a.probe_rate_factor = state->probe_rate_factor;
      }
      if (a.positions != nullptr) {
        expect_tensor(a.positions, "positions", dtype_float64, 2);
        if (a.positions->shape[1] != 2)
          fail(TYCHO_ERR_BAD_DATA, "constraint '", name, "': positions ", shape_string(*a.positions), ", expected (P, 2)");
      }
      in.impl.apply(a);
    });
  }
  static void destroy(tycho_constraint* self) { delete reinterpret_cast<instance*>(self); }
  static inline const tycho_constraint_vtable vtable = {sizeof(tycho_constraint_vtable), TYCHO_ABI_VERSION, &create,
                                                        &acts_on, &apply, &destroy};
};

// The vtable of constraint class C, named `name` in messages, for engines on `devices`
// (TYCHO_DEVICE_BIT(kDLCPU) | ...: the component's own `devices`). One per class C.
template <class C>
const tycho_constraint_vtable* constraint_vtable(const char* name, uint32_t devices) {
  constraint_adapter<C>::name = name;
  constraint_adapter<C>::devices = devices;
  return &constraint_adapter<C>::vtable;
}

// The component record of constraint class C: its name and devices said once, for the record and
// for the vtable (constraint_vtable above).
template <class C>
tycho_component constraint_component(const char* name, const char* version, const char* description,
                                     uint32_t devices, const char* const* config_keys) {
  return component(TYCHO_COMPONENT_CONSTRAINT, name, version, description, devices, config_keys,
                   constraint_vtable<C>(name, devices));
}

}  // namespace tycho::sdk
