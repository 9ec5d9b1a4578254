// A loss component from a C++ class: the tycho_loss_vtable, its one exception barrier and the
// checks every loss makes of its arguments, written once.
//
//   struct my_loss {
//     explicit my_loss(const tycho::sdk::config_view& cfg);       // create(): cfg is [reconstruct]
//     void evaluate(const tycho::sdk::loss_arguments& a) const;   // add Σ L to *a.loss_sum, write dL/dI
//     // optional (ABI 1.3's evaluate_far_field, the engines' fused path; without it the vtable's
//     // entry is NULL and engines call evaluate):
//     void evaluate_far_field(const tycho::sdk::far_field_arguments& a) const;
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
// threads at once on one instance (the engines' contract), hence `const`. evaluate_far_field's
// arguments are checked the same way: far_field and gradient 4-D (n, M, N0, N1), C-contiguous,
// both complex64 or both complex128; measured (n, N0, N1) float32 or uint16; the scales finite.
#pragma once

#include <tycho/sdk.hpp>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

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

// The arguments of one evaluate_far_field call, checked (tycho_components.h says what to compute).
struct far_field_arguments {
  const DLTensor* far_field;  // (n, M, N0, N1) complex64 or complex128, the engine's precision: Ψ
  double intensity_scale;     // I = intensity_scale · Σ_m |Ψ_m|²
  const DLTensor* measured;   // (n, N0, N1) float32 or uint16 counts, data units
  const uint8_t* mask;        // (N0, N1), 1 = use the pixel; nullptr: every pixel
  double measured_scale;      // measured · measured_scale is in the units of I
  double gradient_scale;      // G_m = gradient_scale · dL/dI · Ψ_m
  DLTensor* gradient;         // like far_field: write G here
  double* loss_sum;           // add Σ L here (device memory for device tensors)
  void* stream;               // the engine's stream; nullptr on the host
  DLDevice device;            // where every tensor lies
  bool float64;               // complex128 (Real = double), else complex64
  bool measured_counts;       // measured is uint16
  int64_t patterns;           // n
  int64_t modes;              // M
  int64_t pattern_pixels;     // N0 · N1
};

namespace detail {

inline void check_devices(const char* name, uint32_t devices, DLDevice dev,
                          std::initializer_list<const DLTensor*> tensors) {
  for (const DLTensor* t : tensors) {
    if (t == nullptr) continue;
    if (t->device.device_type != dev.device_type || t->device.device_id != dev.device_id)
      fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: the tensors lie on different devices");
    if (int(t->device.device_type) >= 32 || (devices & TYCHO_DEVICE_BIT(t->device.device_type)) == 0)
      fail(TYCHO_ERR_UNSUPPORTED, name, " loss: tensors on device type ", int(t->device.device_type),
           " are not supported by this build");
  }
}

inline const uint8_t* checked_mask(const char* name, const DLTensor* mask, int64_t period, const DLTensor& patterns) {
  if (mask == nullptr) return nullptr;
  expect_tensor(mask, "mask", dtype_uint8, 2);
  if (element_count(*mask) != period)
    fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: mask ", shape_string(*mask), " does not match the patterns ",
         shape_string(patterns));
  return data_of<const uint8_t>(*mask);
}

inline far_field_arguments check_far_field_arguments(const char* name, uint32_t devices, const DLTensor* psi,
                                                     double intensity_scale, const DLTensor* measured,
                                                     const DLTensor* mask, double measured_scale,
                                                     double gradient_scale, DLTensor* grad, double* loss_sum,
                                                     void* stream) {
  const DLDevice dev = psi != nullptr ? psi->device : DLDevice{kDLCPU, 0};
  check_devices(name, devices, dev, {psi, measured, static_cast<const DLTensor*>(grad), mask});
  const bool f64 = psi != nullptr && same_dtype(psi->dtype, dtype_complex128);
  expect_tensor(psi, "far_field", f64 ? dtype_complex128 : dtype_complex64, 4);
  expect_tensor(grad, "gradient", f64 ? dtype_complex128 : dtype_complex64, 4);
  const bool counts = measured != nullptr && same_dtype(measured->dtype, dtype_uint16);
  expect_tensor(measured, "measured", counts ? dtype_uint16 : dtype_float32, 3);
  for (int d = 0; d < 4; ++d)
    if (grad->shape[d] != psi->shape[d])
      fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: far_field ", shape_string(*psi), " and gradient ",
           shape_string(*grad), " must have the same shape");
  if (measured->shape[0] != psi->shape[0] || measured->shape[1] != psi->shape[2] || measured->shape[2] != psi->shape[3])
    fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: measured ", shape_string(*measured), " does not match far_field ",
         shape_string(*psi), " (n, M, N0, N1)");
  if (loss_sum == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: no loss accumulator");
  if (psi->shape[0] < 0 || psi->shape[1] < 1 || psi->shape[2] < 1 || psi->shape[3] < 1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: far_field ", shape_string(*psi),
         " must have n >= 0 patterns of M >= 1 modes of N0 x N1 >= 1 x 1 pixels");
  if (psi->data == grad->data && psi->byte_offset == grad->byte_offset)
    fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: far_field and gradient must be distinct arrays");
  if (!std::isfinite(intensity_scale) || !std::isfinite(gradient_scale) || !std::isfinite(measured_scale))
    fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: intensity_scale, gradient_scale and measured_scale must be finite");
  const int64_t period = psi->shape[2] * psi->shape[3];
  return far_field_arguments{psi,       intensity_scale, measured, checked_mask(name, mask, period, *psi),
                             measured_scale, gradient_scale, grad,  loss_sum, stream, dev, f64, counts,
                             psi->shape[0], psi->shape[1], period};
}

// Whether loss class L has evaluate_far_field(const far_field_arguments&) const.
template <class L, class = void>
struct has_far_field : std::false_type {};
template <class L>
struct has_far_field<L, std::void_t<decltype(std::declval<const L&>().evaluate_far_field(
                            std::declval<const far_field_arguments&>()))>> : std::true_type {};


inline loss_arguments check_loss_arguments(const char* name, uint32_t devices, const DLTensor* model,
                                           const DLTensor* measured, const DLTensor* mask, double measured_scale,
                                           DLTensor* grad, double* loss_sum, void* stream) {
  const DLDevice dev = model != nullptr ? model->device : DLDevice{kDLCPU, 0};
  check_devices(name, devices, dev, {model, measured, static_cast<const DLTensor*>(grad), mask});
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
  const uint8_t* mask_data = checked_mask(name, mask, period, *model);
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
  static tycho_status evaluate_far_field(tycho_loss* self, const DLTensor* psi, double intensity_scale,
                                         const DLTensor* measured, const DLTensor* mask, double measured_scale,
                                         double gradient_scale, DLTensor* grad, double* loss_sum, void* stream) {
    return guarded([&] {
      if (self == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, name, " loss: evaluate_far_field without an instance");
      const far_field_arguments a = detail::check_far_field_arguments(
          name, devices, psi, intensity_scale, measured, mask, measured_scale, gradient_scale, grad, loss_sum, stream);
      if constexpr (detail::has_far_field<L>::value)
        static_cast<const L&>(*reinterpret_cast<L*>(self)).evaluate_far_field(a);
    });
  }
  static void destroy(tycho_loss* self) { delete reinterpret_cast<L*>(self); }
  static inline const tycho_loss_vtable vtable = {
      sizeof(tycho_loss_vtable), TYCHO_ABI_VERSION, &create, &evaluate, &destroy,
      detail::has_far_field<L>::value ? &evaluate_far_field : nullptr};
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
