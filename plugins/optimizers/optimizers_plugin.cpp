// The built-in optimizer components ("adam", "sgd") behind the ABI's optimizer vtable.
#include <tycho/sdk.hpp>

#include <memory>
#include <vector>

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
  // The parameter given to create: the state arrays have its shape and dtype.
  std::vector<int64_t> shape;
  DLDataType dtype{};
  DLDevice param_device{kDLCPU, 0};
  int64_t reals = 0;
  bool f64 = false;  // float64 / complex128 parameter: double state (host only)
  std::vector<float> staging;  // host copy of device state (state_array)
};

// The state arrays of each optimizer, by index: names and the host vectors holding them.
template <class State>
struct state_layout;
template <>
struct state_layout<adam_state> {
  static constexpr int count = 2;
  static constexpr const char* names[count] = {"m", "v"};
  static std::vector<float>& host(adam_state& s, int64_t i) { return i == 0 ? s.m : s.v; }
  static std::vector<double>& host64(adam_state& s, int64_t i) { return i == 0 ? s.m64 : s.v64; }
};
template <>
struct state_layout<sgd_state> {
  static constexpr int count = 1;
  static constexpr const char* names[count] = {"velocity"};
  static std::vector<float>& host(sgd_state& s, int64_t) { return s.velocity; }
  static std::vector<double>& host64(sgd_state& s, int64_t) { return s.velocity64; }
};

bool is_double(const DLTensor* t) {
  return same_dtype(t->dtype, dtype_complex128) || same_dtype(t->dtype, dtype_float64);
}

// Reals of a float32, complex64, float64 or complex128 parameter (host; CUDA in a CUDA build,
// float32 and complex64 only).
int64_t real_count(const DLTensor* t, const char* name) {
  if (t == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: '", name, "' is missing");
  if (t->device.device_type != kDLCPU && !(k_cuda && t->device.device_type == kDLCUDA))
    fail(TYCHO_ERR_UNSUPPORTED, "optimizer: '", name, "' is on device type ",
         int(t->device.device_type), "; the built-in optimizers run on ",
         k_cuda ? "the CPU and CUDA devices" : "the CPU only", " in this build");
  if (!is_contiguous(*t)) fail(TYCHO_ERR_BAD_DATA, "optimizer: '", name, "' is not contiguous");
  if (t->device.device_type == kDLCUDA && is_double(t))
    fail(TYCHO_ERR_UNSUPPORTED, "optimizer: '", name, "' has dtype ", dtype_name(t->dtype),
         " on a CUDA device; the CUDA path updates float32 and complex64 parameters only");
  if (same_dtype(t->dtype, dtype_complex64) || same_dtype(t->dtype, dtype_complex128))
    return 2 * element_count(*t);
  if (same_dtype(t->dtype, dtype_float32) || same_dtype(t->dtype, dtype_float64)) return element_count(*t);
  fail(TYCHO_ERR_UNSUPPORTED, "optimizer: '", name, "' has dtype ", dtype_name(t->dtype),
       ", expected float32, complex64, float64 or complex128");
}

// A setting in [lo, hi] (or (lo, hi] when lo is excluded, [lo, hi) when hi is): a value outside
// makes the steps overflow or divide by zero, and the run would save NaN (issue 12).
struct range {
  double lo, hi;
  bool lo_open, hi_open;
  bool holds(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
};
double in_range(const config_view& cfg, const char* key, double fallback, range r, const char* why) {
  double v = cfg.get_double(key).value_or(fallback);
  if (!r.holds(v))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in ", cfg.table_name(), " must be in ",
         r.lo_open ? "(" : "[", r.lo, ", ", r.hi, r.hi_open ? ")" : "]", ", got ", v, " (", why, ")");
  return v;
}
// The largest learning rate taken: the object's values are of order 1, so a step of 1000 already
// destroys it; larger values overflow float32.
constexpr double k_max_learning_rate = 1e3;
constexpr range k_learning_rate{0, k_max_learning_rate, false, false};  // 0 holds the parameter
constexpr range k_decay{0, 1, false, true};

#ifdef TYCHO_HAVE_CUDA
void device_step(instance<adam_state>& in, float* p, const float* g, int64_t n, float grad_scale,
                 double lr_scale, void* stream, int device) {
  in.device.adam_step(p, g, n, in.state.begin_step(grad_scale, lr_scale), stream, device);
}
void device_step(instance<sgd_state>& in, float* p, const float* g, int64_t n, float grad_scale,
                 double lr_scale, void* stream, int device) {
  ++in.state.steps;
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
    if (is_double(param))
      in.state.step(data_of<double>(*param), data_of<const double>(*grad), n, info->grad_scale,
                    info->learning_rate_scale);
    else
      in.state.step(data_of<float>(*param), data_of<const float>(*grad), n,
                    static_cast<float>(info->grad_scale), info->learning_rate_scale);
  });
}

template <class State>
void remember_param(instance<State>& in, const DLTensor* param) {
  in.reals = real_count(param, "param");
  in.shape.assign(param->shape, param->shape + param->ndim);
  in.dtype = param->dtype;
  in.f64 = is_double(param);
  in.param_device = param->device;
}

template <class State>
int64_t state_count_impl(tycho_optimizer*) {
  return state_layout<State>::count;
}

template <class State>
instance<State>& checked_instance(tycho_optimizer* opt, int64_t i) {
  if (opt == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: the instance is NULL");
  if (i < 0 || i >= state_layout<State>::count)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: state array ", i, " does not exist (there are ",
         state_layout<State>::count, ")");
  return *reinterpret_cast<instance<State>*>(opt);
}

template <class State>
tycho_status state_array_impl(tycho_optimizer* opt, int64_t i, const char** name, DLTensor* view) {
  return guarded([&] {
    auto& in = checked_instance<State>(opt, i);
    if (name != nullptr) *name = state_layout<State>::names[i];
    if (view == nullptr) return;
    void* data = nullptr;
#ifdef TYCHO_HAVE_CUDA
    if (in.param_device.device_type == kDLCUDA) {
      in.staging.resize(std::size_t(in.reals));
      in.device.read(int(i), in.staging.data(), in.reals, in.param_device.device_id);
      data = in.staging.data();
    }
#endif
    if (data == nullptr && in.f64) {
      std::vector<double>& h = state_layout<State>::host64(in.state, i);
      if (h.size() != std::size_t(in.reals)) h.assign(std::size_t(in.reals), 0.0);
      data = h.data();
    } else if (data == nullptr) {
      std::vector<float>& h = state_layout<State>::host(in.state, i);
      if (h.size() != std::size_t(in.reals)) h.assign(std::size_t(in.reals), 0.f);
      data = h.data();
    }
    *view = DLTensor{data, {kDLCPU, 0}, int32_t(in.shape.size()), in.dtype, in.shape.data(), nullptr, 0};
  });
}

template <class State>
tycho_status set_state_impl(tycho_optimizer* opt, int64_t i, const DLTensor* values, int64_t steps) {
  return guarded([&] {
    auto& in = checked_instance<State>(opt, i);
    if (values == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: state values are missing");
    if (values->device.device_type != kDLCPU)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: state values must be in host memory");
    if (steps < 0) fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: step count ", steps, " is negative");
    const std::vector<int64_t> shape(values->shape, values->shape + values->ndim);
    if (shape != in.shape || !same_dtype(values->dtype, in.dtype) || !is_contiguous(*values))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "optimizer: state '", state_layout<State>::names[i], "' ",
           shape_string(*values), " ", dtype_name(values->dtype),
           " does not match the parameter's shape and dtype");
    if (in.f64) {
      const double* src = data_of<const double>(*values);
      state_layout<State>::host64(in.state, i).assign(src, src + in.reals);
      in.state.steps = steps;
      return;
    }
    const float* src = data_of<const float>(*values);
#ifdef TYCHO_HAVE_CUDA
    if (in.param_device.device_type == kDLCUDA) {
      in.device.write(int(i), src, in.reals, state_layout<State>::count, in.param_device.device_id);
      in.state.steps = steps;
      return;
    }
#endif
    state_layout<State>::host(in.state, i).assign(src, src + in.reals);
    in.state.steps = steps;
  });
}

template <class State>
int64_t step_count_impl(tycho_optimizer* opt) {
  return opt == nullptr ? 0 : reinterpret_cast<instance<State>*>(opt)->state.steps;
}

tycho_status adam_create(const tycho_config* cfg, const DLTensor* param, tycho_optimizer** out) {
  return guarded([&] {
    real_count(param, "param");
    config_view c(cfg);
    auto in = std::make_unique<instance<adam_state>>();
    remember_param(*in, param);
    adam_state* s = &in->state;
    s->learning_rate = in_range(c, "learning_rate", s->learning_rate, k_learning_rate, "the step size");
    s->beta1 = in_range(c, "beta1", s->beta1, k_decay, "the decay of the mean gradient");
    s->beta2 = in_range(c, "beta2", s->beta2, k_decay, "the decay of the mean squared gradient");
    // epsilon = 0 divides 0 by 0 wherever a gradient element stays 0 (padding, masked pixels).
    s->epsilon = in_range(c, "epsilon", s->epsilon, range{0, 1, true, false}, "added to the root mean square");
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
    remember_param(*in, param);
    sgd_state* s = &in->state;
    s->learning_rate = in_range(c, "learning_rate", s->learning_rate, k_learning_rate, "the step size");
    s->momentum = in_range(c, "momentum", s->momentum, k_decay, "the decay of the velocity");
    *out = reinterpret_cast<tycho_optimizer*>(in.release());
  });
}
tycho_status sgd_step(tycho_optimizer* o, DLTensor* p, const DLTensor* g,
                      const tycho_step_info* s, void* stream) {
  return step_impl<sgd_state>(o, p, g, s, stream);
}
void sgd_destroy(tycho_optimizer* o) { delete reinterpret_cast<instance<sgd_state>*>(o); }

// State arrays per parameter element, for the memory planner: Adam m and v, SGD the velocity.
int64_t adam_state_arrays(const tycho_config*) { return 2; }
int64_t sgd_state_arrays(const tycho_config*) { return 1; }

const tycho_optimizer_vtable k_adam = {sizeof(tycho_optimizer_vtable), TYCHO_ABI_VERSION,
                                       &adam_create, &adam_step, &adam_destroy,
                                       &state_count_impl<adam_state>, &state_array_impl<adam_state>,
                                       &set_state_impl<adam_state>, &step_count_impl<adam_state>,
                                       &adam_state_arrays};
const tycho_optimizer_vtable k_sgd = {sizeof(tycho_optimizer_vtable), TYCHO_ABI_VERSION,
                                      &sgd_create, &sgd_step, &sgd_destroy,
                                      &state_count_impl<sgd_state>, &state_array_impl<sgd_state>,
                                      &set_state_impl<sgd_state>, &step_count_impl<sgd_state>,
                                      &sgd_state_arrays};
const char* const k_adam_keys[] = {"learning_rate", "beta1", "beta2", "epsilon", nullptr};
const char* const k_sgd_keys[] = {"learning_rate", "momentum", nullptr};

// Typed declarations (ABI 1.1): the host checks types and ranges before any data is read.
const tycho_setting k_adam_settings[] = {
    setting("learning_rate", TYCHO_SETTING_NUMBER, "5e-3", "step size").at_least(0).at_most(k_max_learning_rate),
    setting("beta1", TYCHO_SETTING_NUMBER, "0.9", "decay of the first-moment average").at_least(0).below(1),
    setting("beta2", TYCHO_SETTING_NUMBER, "0.999", "decay of the second-moment average").at_least(0).below(1),
    setting("epsilon", TYCHO_SETTING_NUMBER, "1e-8", "added to the root of the second moment").above(0).at_most(1),
    end_of_settings()};
const tycho_setting k_sgd_settings[] = {
    setting("learning_rate", TYCHO_SETTING_NUMBER, "1e-2", "step size").at_least(0).at_most(k_max_learning_rate),
    setting("momentum", TYCHO_SETTING_NUMBER, "0", "heavy-ball momentum").at_least(0),
    end_of_settings()};

constexpr uint32_t k_devices = TYCHO_DEVICE_BIT(kDLCPU) | (k_cuda ? TYCHO_DEVICE_BIT(kDLCUDA) : 0u);
const tycho_component k_components[] = {
    with_settings(component(TYCHO_COMPONENT_OPTIMIZER, "adam", "1.0.0", "Adam with bias correction",
                            k_devices, k_adam_keys, &k_adam), k_adam_settings),
    with_settings(component(TYCHO_COMPONENT_OPTIMIZER, "sgd", "1.0.0", "gradient descent with momentum",
                            k_devices, k_sgd_keys, &k_sgd), k_sgd_settings),
};
}  // namespace

TYCHO_PLUGIN("optimizers", "1.0.0", k_components)
