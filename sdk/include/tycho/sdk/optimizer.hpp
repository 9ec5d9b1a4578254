// An optimizer component from a C++ class: the tycho_optimizer_vtable, its one exception
// barrier and the checks every optimizer makes of its arguments, written once.
//
//   struct my_optimizer {
//     // create(): cfg is the parameter's table ([reconstruct.object], ...); param is checked.
//     my_optimizer(const tycho::sdk::config_view& cfg, const DLTensor& param);
//     // param ← update(param, grad · info.grad_scale), learning rate × info.learning_rate_scale.
//     void step(DLTensor& param, const DLTensor& grad, const tycho_step_info& info, void* stream);
//     // Optional, all or none: the state, for saving and resuming (each array has the
//     // parameter's shape and dtype; tycho_optimizer_vtable says more).
//     static constexpr int64_t state_count = 2;            // the arrays' number
//     static const char* state_name(int64_t i);            // "m", "v", ...
//     const void* state_values(int64_t i);                 // host values of array i (zeros before any step)
//     void set_state(int64_t i, const void* host_values, int64_t steps);
//     int64_t step_count() const;
//     // Optional: state arrays per parameter element for the memory planner (default: state_count).
//     static int64_t state_arrays(const tycho::sdk::config_view& cfg);
//     // Optional: step honours info.boxes (TYCHO_OPTIMIZER_TAKES_BOXES; host parameters).
//     static constexpr bool takes_boxes = true;
//   };
//   component(TYCHO_COMPONENT_OPTIMIZER, "mine", "1.0.0", "...", devices, keys,
//             tycho::sdk::optimizer_vtable<my_optimizer>("mine", devices))
//
// What the adapter checks before the class sees a call (errors name "<name> optimizer"):
// tensors given, C-contiguous, on a device type the component lists in `devices`
// (TYCHO_ERR_UNSUPPORTED); the gradient of the parameter's shape, dtype and device; the step
// info given; a state index in [0, state_count); state values in host memory with the
// parameter's shape and dtype, and a step count from 0 to 2^53. Boxes in a step's info (ABI 1.3)
// only for a class with takes_boxes, a parameter of two axes or more in host memory, each box
// non-empty inside its last two axes with a step count from 1 to 2^53; an info whose struct_size
// ends before the boxes has none.
#pragma once

#include <tycho/sdk/adapter.hpp>

#include <cstddef>
#include <vector>

namespace tycho::sdk {

// The largest step count a restored state may carry (set_state): 2^53, far beyond any run and
// far below int64's end, so that steps counted on from it stay exact and cannot overflow.
inline constexpr int64_t k_most_optimizer_steps = int64_t(1) << 53;

namespace detail {
TYCHO_SDK_DETECT(optimizer_has_state, T::state_count);
TYCHO_SDK_DETECT(optimizer_has_state_arrays, T::state_arrays(std::declval<const config_view&>()));
TYCHO_SDK_DETECT(optimizer_has_takes_boxes, T::takes_boxes);

// Whether `info` carries boxes (a struct of ABI 1.3 that covers them, and n_boxes > 0).
inline bool has_boxes(const tycho_step_info& info) {
  return info.struct_size >= offsetof(tycho_step_info, box_steps) + sizeof(info.box_steps) && info.n_boxes > 0;
}

inline void check_optimizer_tensor(const component_identity& id, const DLTensor* t, const char* name) {
  if (t == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": '", name, "' is missing");
  if (!id.supports(t->device))
    fail(TYCHO_ERR_UNSUPPORTED, id.who(), ": '", name, "' is on device type ", int(t->device.device_type),
         "; this build of it runs on ", device_names(id.devices), " only");
  if (!is_contiguous(*t)) fail(TYCHO_ERR_BAD_DATA, id.who(), ": '", name, "' is not contiguous");
}

inline bool same_shape(const DLTensor& a, const std::vector<int64_t>& shape) {
  return std::vector<int64_t>(a.shape, a.shape + a.ndim) == shape;
}
}  // namespace detail

// The trampolines of optimizer class O: each vtable function inside guarded().
template <class O>
struct optimizer_adapter {
  static inline component_identity id{"?", "optimizer", 0};

  // What the handle points to: the optimizer and the parameter it was made for.
  struct instance {
    std::vector<int64_t> shape;
    DLDataType dtype;
    O optimizer;
    instance(const config_view& cfg, const DLTensor& param)
        : shape(param.shape, param.shape + param.ndim), dtype(param.dtype), optimizer(cfg, param) {}
  };
  static instance& self(tycho_optimizer* opt, const char* call) { return detail::instance_of<instance>(opt, id, call); }
  static instance& self_at(tycho_optimizer* opt, int64_t i, const char* call) {
    instance& in = self(opt, call);
    if (i < 0 || i >= O::state_count)
      fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": state array ", i, " does not exist (there are ", O::state_count,
           ")");
    return in;
  }

  static tycho_status create(const tycho_config* cfg, const DLTensor* param, tycho_optimizer** out) {
    if (out != nullptr) *out = nullptr;
    return guarded([&] {
      if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": create without an output handle");
      detail::check_optimizer_tensor(id, param, "param");
      *out = reinterpret_cast<tycho_optimizer*>(new instance(config_view(cfg), *param));
    });
  }
  static tycho_status step(tycho_optimizer* opt, DLTensor* param, const DLTensor* grad, const tycho_step_info* info,
                           void* stream) {
    return guarded([&] {
      instance& in = self(opt, "step");
      detail::check_optimizer_tensor(id, param, "param");
      detail::check_optimizer_tensor(id, grad, "grad");
      if (!detail::same_shape(*param, in.shape) || !same_dtype(param->dtype, in.dtype))
        fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": parameter ", shape_string(*param), " ", dtype_name(param->dtype),
             " is not the one it was created for");
      if (element_count(*grad) != element_count(*param) || !same_dtype(param->dtype, grad->dtype))
        fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": gradient ", shape_string(*grad), " does not match parameter ",
             shape_string(*param));
      if (param->device.device_type != grad->device.device_type || param->device.device_id != grad->device.device_id)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": the gradient and the parameter lie on different devices");
      if (info == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": step info is missing");
      if (detail::has_boxes(*info)) {
        if constexpr (!takes_boxes())
          fail(TYCHO_ERR_UNSUPPORTED, id.who(), ": a step on boxes of the parameter, which this optimizer does not take");
        if (param->ndim < 2 || !detail::on_host(*param))
          fail(TYCHO_ERR_UNSUPPORTED, id.who(), ": a step on boxes needs a parameter of two axes or more in host memory");
        detail::check_boxes(id.who(), info->boxes, info->n_boxes, param->shape[param->ndim - 2],
                            param->shape[param->ndim - 1]);
        if (info->box_steps == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": boxes without their step counts");
        for (int64_t k = 0; k < info->n_boxes; ++k)
          if (info->box_steps[k] < 1 || info->box_steps[k] > k_most_optimizer_steps)
            fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": box ", k, " has step count ", info->box_steps[k],
                 " (outside [1, 2^53])");
      }
      in.optimizer.step(*param, *grad, *info, stream);
    });
  }
  static void destroy(tycho_optimizer* opt) {
    (void)guarded([&] { delete reinterpret_cast<instance*>(opt); });
  }
  static int64_t state_count(tycho_optimizer*) { return O::state_count; }
  static tycho_status state_array(tycho_optimizer* opt, int64_t i, const char** name, DLTensor* view) {
    return guarded([&] {
      instance& in = self_at(opt, i, "state_array");
      if (name != nullptr) *name = O::state_name(i);
      if (view == nullptr) return;
      const void* data = in.optimizer.state_values(i);
      *view = DLTensor{const_cast<void*>(data), {kDLCPU, 0}, int32_t(in.shape.size()), in.dtype, in.shape.data(),
                       nullptr, 0};
    });
  }
  static tycho_status set_state(tycho_optimizer* opt, int64_t i, const DLTensor* values, int64_t steps) {
    return guarded([&] {
      instance& in = self_at(opt, i, "set_state");
      if (values == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": state values are missing");
      if (values->device.device_type != kDLCPU)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": state values must be in host memory");
      // Bounded so that counting on from it cannot overflow (a saved count of 2^63 - 1 did).
      if (steps < 0 || steps > k_most_optimizer_steps)
        fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": step count ", steps, " is outside [0, 2^53]");
      if (!detail::same_shape(*values, in.shape) || !same_dtype(values->dtype, in.dtype) || !is_contiguous(*values))
        fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": state '", O::state_name(i), "' ", shape_string(*values), " ",
             dtype_name(values->dtype), " does not match the parameter's shape and dtype");
      in.optimizer.set_state(i, data_of<const char>(*values), steps);
    });
  }
  static int64_t step_count(tycho_optimizer* opt) {
    return opt == nullptr ? 0 : reinterpret_cast<instance*>(opt)->optimizer.step_count();
  }
  static int64_t state_arrays(const tycho_config* cfg) {
    if constexpr (detail::optimizer_has_state_arrays<O>::value) {
      int64_t n = 2;  // what a host assumes without the answer
      (void)guarded([&] { n = O::state_arrays(config_view(cfg)); });
      return n;
    } else {
      (void)cfg;
      return O::state_count;
    }
  }

  static constexpr bool takes_boxes() {
    if constexpr (detail::optimizer_has_takes_boxes<O>::value)
      return O::takes_boxes;
    else
      return false;
  }

  static tycho_optimizer_vtable make_vtable() {
    auto vt = detail::vtable_head<tycho_optimizer_vtable>();
    if constexpr (takes_boxes()) vt.flags |= TYCHO_OPTIMIZER_TAKES_BOXES;
    vt.create = &create;
    vt.step = &step;
    vt.destroy = &destroy;
    if constexpr (detail::optimizer_has_state<O>::value) {
      vt.state_count = &state_count;
      vt.state_array = &state_array;
      vt.set_state = &set_state;
      vt.step_count = &step_count;
    }
    if constexpr (detail::optimizer_has_state<O>::value || detail::optimizer_has_state_arrays<O>::value)
      vt.state_arrays = &state_arrays;
    return vt;
  }
  static inline const tycho_optimizer_vtable vtable = make_vtable();
};

// The vtable of optimizer class O, named `name` in messages, for parameters on `devices`
// (TYCHO_DEVICE_BIT(kDLCPU) | ...: the component's own `devices`). One per class O.
template <class O>
const tycho_optimizer_vtable* optimizer_vtable(const char* name, uint32_t devices) {
  optimizer_adapter<O>::id = component_identity{name, "optimizer", devices};
  return &optimizer_adapter<O>::vtable;
}

}  // namespace tycho::sdk
