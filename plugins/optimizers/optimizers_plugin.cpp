// The built-in optimizer components ("adam", "sgd") behind the ABI's optimizer vtable.
#include <tycho/sdk.hpp>

#include <memory>

#include "optimizers.hpp"
#ifdef TYCHO_HAVE_CUDA
#include "optimizers_cuda.hpp"
#endif

namespace {
using namespace tycho::sdk;
using tycho::optimizers::adam_state;
using tycho::optimizers::sgd_state;

// Built with CUDA: parameters on a CUDA device are updated by the kernels of optimizers.cu.
#ifdef TYCHO_HAVE_CUDA
constexpr bool k_cuda = true;
#else
constexpr bool k_cuda = false;
#endif

// An optimizer instance: the host state (hyperparameters, step count, host moments) and, with
// CUDA, the moments on the device.
template <class State>
struct instance {
  State state;
#ifdef TYCHO_HAVE_CUDA
  tycho::optimizers::device_state device;
#endif
};

// Reals per element of a float32 or complex64 parameter (host, or CUDA in a CUDA build).
int64_t real_count(const DLTensor* t, const char* name) {
  if (t == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: '", name, "' is missing");
  if (t->device.device_type != kDLCPU && !(k_cuda && t->device.device_type == kDLCUDA))
    fail(TYCHO_ERR_UNSUPPORTED, "optimizer: '", name, "' is on device type ",
         int(t->device.device_type), "; the built-in optimizers run on ",
         k_cuda ? "the CPU and CUDA devices" : "the CPU only", " in this build");
  if (!is_contiguous(*t)) fail(TYCHO_ERR_BAD_DATA, "optimizer: '", name, "' is not contiguous");
  if (same_dtype(t->dtype, dtype_complex64)) return 2 * element_count(*t);
  if (same_dtype(t->dtype, dtype_float32)) return element_count(*t);
  fail(TYCHO_ERR_UNSUPPORTED, "optimizer: '", name, "' has dtype ", dtype_name(t->dtype),
       ", expected float32 or complex64");
}

double positive(const config_view& cfg, const char* key, double fallback) {
  double v = cfg.get_double(key).value_or(fallback);
  if (!(v >= 0)) fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' must be >= 0, got ", v);
  return v;
}

#ifdef TYCHO_HAVE_CUDA
void device_step(instance<adam_state>& in, float* p, const float* g, int64_t n, float grad_scale,
                 double lr_scale, void* stream, int device) {
  in.device.adam_step(p, g, n, in.state.begin_step(grad_scale, lr_scale), stream, device);
}
void device_step(instance<sgd_state>& in, float* p, const float* g, int64_t n, float grad_scale,
                 double lr_scale, void* stream, int device) {
  in.device.sgd_step(p, g, n, in.state.coefficients(grad_scale, lr_scale), stream, device);
}
#endif

template <class State>
tycho_status step_impl(tycho_optimizer* opt, DLTensor* param, const DLTensor* grad,
                       const tycho_step_info* info, [[maybe_unused]] void* stream) {
  return guarded([&] {
    int64_t n = real_count(param, "param");
    if (real_count(grad, "grad") != n || !same_dtype(param->dtype, grad->dtype))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: gradient ", shape_string(*grad),
           " does not match parameter ", shape_string(*param));
    if (param->device.device_type != grad->device.device_type || param->device.device_id != grad->device.device_id)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: the gradient and the parameter lie on different devices");
    if (info == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: step info is missing");
    auto& in = *reinterpret_cast<instance<State>*>(opt);
#ifdef TYCHO_HAVE_CUDA
    if (param->device.device_type == kDLCUDA) {
      device_step(in, data_of<float>(*param), data_of<const float>(*grad), n,
                  static_cast<float>(info->grad_scale), info->learning_rate_scale, stream,
                  param->device.device_id);
      return;
    }
#endif
    in.state.step(data_of<float>(*param), data_of<const float>(*grad), n,
                  static_cast<float>(info->grad_scale), info->learning_rate_scale);
  });
}

tycho_status adam_create(const tycho_config* cfg, const DLTensor* param, tycho_optimizer** out) {
  return guarded([&] {
    real_count(param, "param");
    config_view c(cfg);
    auto in = std::make_unique<instance<adam_state>>();
    adam_state* s = &in->state;
    s->learning_rate = positive(c, "learning_rate", s->learning_rate);
    s->beta1 = positive(c, "beta1", s->beta1);
    s->beta2 = positive(c, "beta2", s->beta2);
    s->epsilon = positive(c, "epsilon", s->epsilon);
    if (s->beta1 >= 1 || s->beta2 >= 1)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "adam: beta1 and beta2 must be < 1");
    *out = reinterpret_cast<tycho_optimizer*>(in.release());
  });
}
tycho_status adam_step(tycho_optimizer* o, DLTensor* p, const DLTensor* g,
                       const tycho_step_info* s, void* stream) {
  return step_impl<adam_state>(o, p, g, s, stream);
}
void adam_destroy(tycho_optimizer* o) { delete reinterpret_cast<instance<adam_state>*>(o); }

tycho_status sgd_create(const tycho_config* cfg, const DLTensor* param, tycho_optimizer** out) {
  return guarded([&] {
    real_count(param, "param");
    config_view c(cfg);
    auto in = std::make_unique<instance<sgd_state>>();
    sgd_state* s = &in->state;
    s->learning_rate = positive(c, "learning_rate", s->learning_rate);
    s->momentum = positive(c, "momentum", s->momentum);
    *out = reinterpret_cast<tycho_optimizer*>(in.release());
  });
}
tycho_status sgd_step(tycho_optimizer* o, DLTensor* p, const DLTensor* g,
                      const tycho_step_info* s, void* stream) {
  return step_impl<sgd_state>(o, p, g, s, stream);
}
void sgd_destroy(tycho_optimizer* o) { delete reinterpret_cast<instance<sgd_state>*>(o); }

const tycho_optimizer_vtable k_adam = {sizeof(tycho_optimizer_vtable), TYCHO_ABI_VERSION,
                                       &adam_create, &adam_step, &adam_destroy};
const tycho_optimizer_vtable k_sgd = {sizeof(tycho_optimizer_vtable), TYCHO_ABI_VERSION,
                                      &sgd_create, &sgd_step, &sgd_destroy};
const char* const k_adam_keys[] = {"learning_rate", "beta1", "beta2", "epsilon", nullptr};
const char* const k_sgd_keys[] = {"learning_rate", "momentum", nullptr};

constexpr uint32_t k_devices = TYCHO_DEVICE_BIT(kDLCPU) | (k_cuda ? TYCHO_DEVICE_BIT(kDLCUDA) : 0u);
const tycho_component k_components[] = {
    component(TYCHO_COMPONENT_OPTIMIZER, "adam", "1.0.0", "Adam with bias correction",
              k_devices, k_adam_keys, &k_adam),
    component(TYCHO_COMPONENT_OPTIMIZER, "sgd", "1.0.0", "gradient descent with momentum",
              k_devices, k_sgd_keys, &k_sgd),
};
}  // namespace

TYCHO_PLUGIN("optimizers", "1.0.0", k_components)
