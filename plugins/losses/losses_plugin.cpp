// The built-in loss components, behind the ABI's loss vtable.
#include <tycho/sdk.hpp>

#include "amplitude_loss.hpp"
#ifdef TYCHO_HAVE_CUDA
#include "amplitude_loss_cuda.hpp"
#endif

namespace {
using namespace tycho::sdk;

// Built with CUDA: device tensors run the kernel of amplitude_loss.cu.
#ifdef TYCHO_HAVE_CUDA
constexpr bool k_cuda = true;
#else
constexpr bool k_cuda = false;
#endif

struct amplitude_instance {};

tycho_status amplitude_create(const tycho_config*, tycho_loss** out) {
  return guarded([&] { *out = reinterpret_cast<tycho_loss*>(new amplitude_instance()); });
}

tycho_status amplitude_evaluate(tycho_loss*, const DLTensor* model, const DLTensor* measured,
                                const DLTensor* mask, double measured_scale, DLTensor* grad,
                                double* loss_sum, [[maybe_unused]] void* stream) {
  return guarded([&] {
    // Host tensors run here; CUDA tensors (all of them on one device) go to the kernel.
    const DLDevice dev = model != nullptr ? model->device : DLDevice{kDLCPU, 0};
    for (const DLTensor* t : {model, measured, static_cast<const DLTensor*>(grad), mask}) {
      if (t == nullptr) continue;
      if (t->device.device_type != dev.device_type || t->device.device_id != dev.device_id)
        fail(TYCHO_ERR_INVALID_ARGUMENT, "amplitude loss: the tensors lie on different devices");
      if (t->device.device_type != kDLCPU && !(k_cuda && t->device.device_type == kDLCUDA))
        fail(TYCHO_ERR_UNSUPPORTED, "amplitude loss: tensors on device type ", int(t->device.device_type),
             " are not supported by this build (", k_cuda ? "host and CUDA" : "host", " tensors only)");
    }
    // The model intensity and dL/dI in the engine's precision (float32 or float64), the
    // measured data float32.
    const bool f64 = model != nullptr && same_dtype(model->dtype, dtype_float64);
    expect_tensor(model, "model_intensity", f64 ? dtype_float64 : dtype_float32, 3);
    expect_tensor(measured, "measured", dtype_float32, 3);
    expect_tensor(grad, "dloss_dintensity", f64 ? dtype_float64 : dtype_float32, 3);
    const int64_t n = element_count(*model);
    if (element_count(*measured) != n || element_count(*grad) != n)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "amplitude loss: model ", shape_string(*model),
           ", measured ", shape_string(*measured), " and gradient ", shape_string(*grad),
           " must have the same shape");
    const uint8_t* mask_data = nullptr;
    int64_t period = model->shape[1] * model->shape[2];
    if (mask != nullptr) {
      expect_tensor(mask, "mask", dtype_uint8, 2);
      period = element_count(*mask);
      if (period != model->shape[1] * model->shape[2])
        fail(TYCHO_ERR_INVALID_ARGUMENT, "amplitude loss: mask ", shape_string(*mask),
             " does not match the patterns ", shape_string(*model));
      mask_data = data_of<const uint8_t>(*mask);
    }
#ifdef TYCHO_HAVE_CUDA
    if (dev.device_type == kDLCUDA) {
      if (f64)
        fail(TYCHO_ERR_UNSUPPORTED, "amplitude loss: the CUDA path computes in float32 only; model_intensity "
             "and dloss_dintensity are float64");
      if (loss_sum == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "amplitude loss: no device loss accumulator");
      tycho::losses::amplitude_loss_cuda(data_of<const float>(*model), data_of<const float>(*measured), mask_data,
                                         period, n, static_cast<float>(measured_scale), data_of<float>(*grad),
                                         loss_sum, stream, dev.device_id);
      return;
    }
#endif
    if (f64)
      *loss_sum += tycho::losses::amplitude_loss(data_of<const double>(*model), data_of<const float>(*measured),
                                                 mask_data, period, n, measured_scale, data_of<double>(*grad));
    else
      *loss_sum += tycho::losses::amplitude_loss(
          data_of<const float>(*model), data_of<const float>(*measured), mask_data, period, n,
          static_cast<float>(measured_scale), data_of<float>(*grad));
  });
}

void amplitude_destroy(tycho_loss* loss) { delete reinterpret_cast<amplitude_instance*>(loss); }

const tycho_loss_vtable k_amplitude = {sizeof(tycho_loss_vtable), TYCHO_ABI_VERSION,
                                       &amplitude_create, &amplitude_evaluate, &amplitude_destroy};
const char* const k_no_keys[] = {nullptr};
constexpr uint32_t k_devices = TYCHO_DEVICE_BIT(kDLCPU) | (k_cuda ? TYCHO_DEVICE_BIT(kDLCUDA) : 0u);

const tycho_component k_components[] = {
    component(TYCHO_COMPONENT_LOSS, "amplitude", "1.0.0",
              "amplitude loss Σ(√I − √D)², normalised to the mean measured intensity",
              k_devices, k_no_keys, &k_amplitude),
};
}  // namespace

TYCHO_PLUGIN("losses", "1.0.0", k_components)
