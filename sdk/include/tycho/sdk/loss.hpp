// A loss component from a C++ class: the tycho_loss_vtable, its one exception barrier and the
// checks every loss makes of its arguments, written once.
//
//   struct my_loss {
//     explicit my_loss(const tycho::sdk::config_view& cfg);       // create(): cfg is [reconstruct]
//     void evaluate(const tycho::sdk::loss_arguments& a) const;   // add Σ L to *a.loss_sum, write dL/dI
//   };
//   component(TYCHO_COMPONENT_LOSS, "mine", "1.0.0", "...", TYCHO_DEVICE_BIT(kDLCPU), keys,
//             tycho::sdk::loss_vtable<my_loss>("mine", TYCHO_DEVICE_BIT(kDLCPU)))
//
// create, evaluate and destroy each run inside guarded(): an exception becomes the status and
// message of the call (tycho::sdk::error keeps its status; std::bad_alloc is out of memory;
// anything else is internal). Before the class's evaluate runs, the arguments are checked:
// model_intensity, measured and dloss_dintensity 3-D, C-contiguous, of one shape; measured
// float32; model_intensity and dloss_dintensity both float32 or both float64; the mask (optional)
// 2-D uint8 of one pattern's shape; every tensor on one device of a type the component lists in
// `devices` (else TYCHO_ERR_UNSUPPORTED naming the device type). evaluate is called from several
// threads at once on one instance (the engines' contract), hence `const`.
#pragma once

#include <tycho/sdk.hpp>

#include <cstdint>

namespace tycho::sdk {

// The arguments of one evaluate call, checked.
struct loss_arguments {
  const DLTensor* model_intensity;  // (n, N0, N1) float32 or float64, the engine's precision
  const DLTensor* measured;         // (n, N0, N1) float32, data units
  const uint8_t* mask;              // (N0, N1), 1 = use the pixel; nullptr: every pixel
  double measured_scale;            // measured · measured_scale is in the units of I
  DLTensor* dloss_dintensity;       // like model_intensity: write dL/dI here
  double* loss_sum;                 // add Σ L here (device memory for device tensors)
  void* stream;                     // the engine's stream; nullptr on the host
  DLDevice device;                  // where every tensor lies
  bool float64;                     // model_intensity and dloss_dintensity are float64
  int64_t count;                    // elements of model_intensity: n · N0 · N1
  int64_t pattern_pixels;           // N0 · N1: the mask repeats with this period
};

namespace detail {

inline loss_arguments check_loss_arguments(const char* name, uint32_t devices, const DLTensor* model,
                                           const DLTensor* measured, const DLTensor* mask, double measured_scale,
                                           DLTensor* grad, double* loss_sum, void* stream) {
  const DLDevice dev = model != nullptr ? model->device : DLDevice{kDLCPU, 0};
  for (const DLTensor* t : {model, measured, static_cast<const DLTensor*>(grad), mask}) {
    if (t == nullptr) continue;
    if (t->device.device_type != dev.device_type || t->device.device_id != dev.device_id)
      fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: the tensors lie on different devices");
    if (int(t->device.device_type) >= 32 || (devices & TYCHO_DEVICE_BIT(t->device.device_type)) == 0)
      fail(TYCHO_ERR_UNSUPPORTED, name, " loss: tensors on device type ", int(t->device.device_type),
           " are not supported by this build");
  }
  const bool f64 = model != nullptr && same_dtype(model->dtype, dtype_float64);
  expect_tensor(model, "model_intensity", f64 ? dtype_float64 : dtype_float32, 3);
  expect_tensor(measured, "measured", dtype_float32, 3);
  expect_tensor(grad, "dloss_dintensity", f64 ? dtype_float64 : dtype_float32, 3);
  const int64_t n = element_count(*model);
  if (element_count(*measured) != n || element_count(*grad) != n)
    fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: model ", shape_string(*model), ", measured ",
         shape_string(*measured), " and gradient ", shape_string(*grad), " must have the same shape");
  if (loss_sum == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: no loss accumulator");
  const int64_t period = model->shape[1] * model->shape[2];
  const uint8_t* mask_data = nullptr;
  if (mask != nullptr) {
    expect_tensor(mask, "mask", dtype_uint8, 2);
    if (element_count(*mask) != period)
      fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: mask ", shape_string(*mask), " does not match the patterns ",
           shape_string(*model));
    mask_data = data_of<const uint8_t>(*mask);
  }
  return loss_arguments{model, measured, mask_data, measured_scale, grad, loss_sum, stream, dev, f64, n, period};
}

}  // namespace detail

// The trampolines of loss class L: the vtable's three functions, each inside guarded().
template <class L>
struct loss_adapter {
  static inline const char* name = "a";
  static inline uint32_t devices = 0;
  static tycho_status create(const tycho_config* cfg, tycho_loss** out) {
    return guarded([&] {
      if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: create without an output handle");
      *out = reinterpret_cast<tycho_loss*>(new L(config_view(cfg)));
    });
  }
  static tycho_status evaluate(tycho_loss* self, const DLTensor* model, const DLTensor* measured,
                               const DLTensor* mask, double measured_scale, DLTensor* grad, double* loss_sum,
                               void* stream) {
    return guarded([&] {
      if (self == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: evaluate without an instance");
      const loss_arguments a =
          detail::check_loss_arguments(name, devices, model, measured, mask, measured_scale, grad, loss_sum, stream);
      static_cast<const L&>(*reinterpret_cast<L*>(self)).evaluate(a);
    });
  }
  static void destroy(tycho_loss* self) { delete reinterpret_cast<L*>(self); }
  static inline const tycho_loss_vtable vtable = {sizeof(tycho_loss_vtable), TYCHO_ABI_VERSION, &create,
                                                  &evaluate, &destroy};
};

// The vtable of loss class L, named `name` in messages, for tensors on `devices`
// (TYCHO_DEVICE_BIT(kDLCPU) | ...: the component's own `devices`). One per class L; the pointer
// is to a static that lives as long as the plugin.
template <class L>
const tycho_loss_vtable* loss_vtable(const char* name, uint32_t devices) {
  loss_adapter<L>::name = name;
  loss_adapter<L>::devices = devices;
  return &loss_adapter<L>::vtable;
}

}  // namespace tycho::sdk
