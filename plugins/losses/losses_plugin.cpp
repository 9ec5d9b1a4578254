// The built-in loss components, each a class behind the SDK's loss adapter (tycho/sdk/loss.hpp:
// the vtable, its exception barrier and the argument checks).
#include <tycho/sdk.hpp>
#include <tycho/sdk/loss.hpp>

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
constexpr uint32_t k_devices = TYCHO_DEVICE_BIT(kDLCPU) | (k_cuda ? TYCHO_DEVICE_BIT(kDLCUDA) : 0u);

// The amplitude loss Σ(√I − √(sD))² (amplitude_loss.hpp); no settings.
struct amplitude {
  explicit amplitude(const config_view&) {}

  void evaluate(const loss_arguments& a) const {
#ifdef TYCHO_HAVE_CUDA
    if (a.device.device_type == kDLCUDA) {
      if (a.float64)
        fail(TYCHO_ERR_UNSUPPORTED, "amplitude loss: the CUDA path computes in float32 only; model_intensity "
             "and dloss_dintensity are float64");
      tycho::losses::amplitude_loss_cuda(data_of<const float>(*a.model_intensity), data_of<const float>(*a.measured),
                                         a.mask, a.pattern_pixels, a.count, static_cast<float>(a.measured_scale),
                                         data_of<float>(*a.dloss_dintensity), a.loss_sum, a.stream,
                                         a.device.device_id);
      return;
    }
#endif
    if (a.float64)
      *a.loss_sum += tycho::losses::amplitude_loss(
          data_of<const double>(*a.model_intensity), data_of<const float>(*a.measured), a.mask, a.pattern_pixels,
          a.count, a.measured_scale, data_of<double>(*a.dloss_dintensity));
    else
      *a.loss_sum += tycho::losses::amplitude_loss(
          data_of<const float>(*a.model_intensity), data_of<const float>(*a.measured), a.mask, a.pattern_pixels,
          a.count, static_cast<float>(a.measured_scale), data_of<float>(*a.dloss_dintensity));
  }
};

const char* const k_no_keys[] = {nullptr};

const tycho_component k_components[] = {
    component(TYCHO_COMPONENT_LOSS, "amplitude", "1.0.0",
              "amplitude loss Σ(√I − √D)², normalised to the mean measured intensity",
              k_devices, k_no_keys, loss_vtable<amplitude>("amplitude", k_devices)),
};
}  // namespace

TYCHO_PLUGIN("losses", "1.0.0", k_components)
