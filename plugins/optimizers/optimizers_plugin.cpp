// The built-in optimizer components ("adam", "sgd"): one optimizer class per update rule behind
// the ABI's optimizer vtable (tycho/sdk/optimizer.hpp checks the arguments and catches every
// exception at the boundary).
#include <tycho/sdk.hpp>
#include <tycho/sdk/optimizer.hpp>

#include <cmath>
#include <vector>

#include "optimizers.hpp"
#ifdef TYCHO_HAVE_CUDA
#include "optimizers_cuda.hpp"
#endif

namespace {
using namespace tycho::sdk;
using tycho::optimizers::adam_state;
using tycho::optimizers::sgd_state;
using tycho::sdk::detail::has_boxes;

// Built with CUDA: parameters on a CUDA device are updated by the kernels of optimizers.cu.
#ifdef TYCHO_HAVE_CUDA
constexpr bool k_cuda = true;
#else
constexpr bool k_cuda = false;
#endif

// The state arrays of each optimizer, by index: names and the host vectors holding them.
template <class State>
struct state_layout;
template <>
struct state_layout<adam_state> {
  static constexpr const char* component = "adam";
  static constexpr int count = 2;
  static constexpr const char* names[count] = {"m", "v"};
  // v holds the mean squared gradient: a negative value (a damaged or crafted saved state) has
  // no square root, and the run would go NaN.
  static constexpr bool non_negative[count] = {false, true};
  static std::vector<float>& host(adam_state& s, int64_t i) { return i == 0 ? s.m : s.v; }
  static std::vector<double>& host64(adam_state& s, int64_t i) { return i == 0 ? s.m64 : s.v64; }
};
template <>
struct state_layout<sgd_state> {
  static constexpr const char* component = "sgd";
  static constexpr int count = 1;
  static constexpr const char* names[count] = {"velocity"};
  static constexpr bool non_negative[count] = {false};
  static std::vector<float>& host(sgd_state& s, int64_t) { return s.velocity; }
  static std::vector<double>& host64(sgd_state& s, int64_t) { return s.velocity64; }
};

bool is_double(const DLTensor& t) {
  return same_dtype(t.dtype, dtype_complex128) || same_dtype(t.dtype, dtype_float64);
}
bool is_complex(const DLTensor& t) {
  return same_dtype(t.dtype, dtype_complex64) || same_dtype(t.dtype, dtype_complex128);
}

// Reals of a float32, complex64, float64 or complex128 parameter (host; CUDA in a CUDA build,
// float32 and complex64 only). The adapter has checked the device type and contiguity.
int64_t real_count(const DLTensor& t, const char* component, const char* name) {
  if (t.device.device_type == kDLCUDA && is_double(t))
    fail(TYCHO_ERR_UNSUPPORTED, component, " optimizer: '", name, "' has dtype ", dtype_name(t.dtype),
         " on a CUDA device; the CUDA path updates float32 and complex64 parameters only");
  if (same_dtype(t.dtype, dtype_complex64) || same_dtype(t.dtype, dtype_complex128)) return 2 * element_count(t);
  if (same_dtype(t.dtype, dtype_float32) || same_dtype(t.dtype, dtype_float64)) return element_count(t);
  fail(TYCHO_ERR_UNSUPPORTED, component, " optimizer: '", name, "' has dtype ", dtype_name(t.dtype),
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

// The hyperparameters of each rule from the parameter's table.
void configure(adam_state& s, const config_view& c) {
  s.learning_rate = in_range(c, "learning_rate", s.learning_rate, k_learning_rate, "the step size");
  s.beta1 = in_range(c, "beta1", s.beta1, k_decay, "the decay of the mean gradient");
  s.beta2 = in_range(c, "beta2", s.beta2, k_decay, "the decay of the mean squared gradient");
  // epsilon = 0 divides 0 by 0 wherever a gradient element stays 0 (padding, masked pixels).
  s.epsilon = in_range(c, "epsilon", s.epsilon, range{0, 1, true, false}, "added to the root mean square");
}
void configure(sgd_state& s, const config_view& c) {
  s.learning_rate = in_range(c, "learning_rate", s.learning_rate, k_learning_rate, "the step size");
  s.momentum = in_range(c, "momentum", s.momentum, k_decay, "the decay of the velocity");
}

// One optimizer of rule State on one parameter: the host state (hyperparameters, step count,
// host moments) and, with CUDA, the moments on the device.
template <class State>
class builtin_optimizer {
  using layout = state_layout<State>;

 public:
  static constexpr int64_t state_count = layout::count;
  static const char* state_name(int64_t i) { return layout::names[i]; }
  // State arrays per parameter element, for the memory planner: Adam m and v, SGD the velocity.
  static int64_t state_arrays(const config_view&) { return state_count; }
  // A step on boxes of a host parameter (tycho_step_info, ABI 1.3): each box with its own count.
  static constexpr bool takes_boxes = true;

  builtin_optimizer(const config_view& cfg, const DLTensor& param)
      : reals_(real_count(param, layout::component, "param")), f64_(is_double(param)), device_(param.device) {
    configure(state_, cfg);
  }

  void step(DLTensor& param, const DLTensor& grad, const tycho_step_info& info, [[maybe_unused]] void* stream) {
    const int64_t n = real_count(param, layout::component, "param");
#ifdef TYCHO_HAVE_CUDA
    if (param.device.device_type == kDLCUDA) {
      device_step(data_of<float>(param), data_of<const float>(grad), n, static_cast<float>(info.grad_scale),
                  info.learning_rate_scale, stream, param.device.device_id);
      return;
    }
#endif
    if (has_boxes(info)) {  // the adapter checked them (host parameter, inside its last two axes)
      const int64_t h = param.shape[param.ndim - 2], w = param.shape[param.ndim - 1];
      const int64_t reals = is_complex(param) ? 2 : 1;
      const tycho::optimizers::box_step boxes{n / (h * w * reals), h, w, reals, info.boxes, info.box_steps,
                                              info.n_boxes};
      if (f64_)
        state_.step(data_of<double>(param), data_of<const double>(grad), boxes, info.grad_scale,
                    info.learning_rate_scale);
      else
        state_.step(data_of<float>(param), data_of<const float>(grad), boxes, static_cast<float>(info.grad_scale),
                    info.learning_rate_scale);
      return;
    }
    if (f64_)
      state_.step(data_of<double>(param), data_of<const double>(grad), n, info.grad_scale, info.learning_rate_scale);
    else
      state_.step(data_of<float>(param), data_of<const float>(grad), n, static_cast<float>(info.grad_scale),
                  info.learning_rate_scale);
  }

  const void* state_values(int64_t i) {
#ifdef TYCHO_HAVE_CUDA
    if (device_.device_type == kDLCUDA) {
      staging_.resize(std::size_t(reals_));
      device_state_.read(int(i), staging_.data(), reals_, device_.device_id);
      return staging_.data();
    }
#endif
    if (f64_) {
      std::vector<double>& h = layout::host64(state_, i);
      if (h.size() != std::size_t(reals_)) h.assign(std::size_t(reals_), 0.0);
      return h.data();
    }
    std::vector<float>& h = layout::host(state_, i);
    if (h.size() != std::size_t(reals_)) h.assign(std::size_t(reals_), 0.f);
    return h.data();
  }

  void set_state(int64_t i, const void* values, int64_t steps) {
    // A restored state (a result file's) is untrusted: finite values, and >= 0 where the rule
    // squares (Adam's v), refused before any is kept.
    if (f64_)
      check_state_values(i, static_cast<const double*>(values));
    else
      check_state_values(i, static_cast<const float*>(values));
    if (f64_) {
      const auto* src = static_cast<const double*>(values);
      layout::host64(state_, i).assign(src, src + reals_);
    } else {
      const auto* src = static_cast<const float*>(values);
#ifdef TYCHO_HAVE_CUDA
      if (device_.device_type == kDLCUDA)
        device_state_.write(int(i), src, reals_, layout::count, device_.device_id);
      else
#endif
        layout::host(state_, i).assign(src, src + reals_);
    }
    state_.steps = steps;
  }

  int64_t step_count() const { return state_.steps; }

 private:
  template <class T>
  void check_state_values(int64_t i, const T* v) const {
    for (int64_t k = 0; k < reals_; ++k)
      if (!std::isfinite(v[k]) || (layout::non_negative[i] && v[k] < T(0)))
        fail(TYCHO_ERR_BAD_DATA, layout::component, " optimizer: state '", layout::names[i], "' holds ", v[k],
             " at real value ", k, "; expected finite values", layout::non_negative[i] ? " >= 0 (a mean square)" : "");
  }
#ifdef TYCHO_HAVE_CUDA
  void device_step(float* p, const float* g, int64_t n, float grad_scale, double lr_scale, void* stream, int device) {
    if constexpr (std::is_same_v<State, adam_state>) {
      device_state_.adam_step(p, g, n, state_.begin_step(grad_scale, lr_scale), stream, device);
    } else {
      ++state_.steps;
      device_state_.sgd_step(p, g, n, state_.coefficients(grad_scale, lr_scale), stream, device);
    }
  }
  tycho::optimizers::device_state device_state_;
  std::vector<float> staging_;  // host copy of device state (state_values)
#endif
  State state_;
  int64_t reals_;
  bool f64_;  // float64 / complex128 parameter: double state (host only)
  DLDevice device_;
};

constexpr uint32_t k_devices = TYCHO_DEVICE_BIT(kDLCPU) | (k_cuda ? TYCHO_DEVICE_BIT(kDLCUDA) : 0u);

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
    setting("momentum", TYCHO_SETTING_NUMBER, "0", "heavy-ball momentum").at_least(0).below(1),
    end_of_settings()};

const tycho_component k_components[] = {
    with_settings(component(TYCHO_COMPONENT_OPTIMIZER, "adam", "1.0.0", "Adam with bias correction", k_devices,
                            k_adam_keys, optimizer_vtable<builtin_optimizer<adam_state>>("adam", k_devices)),
                  k_adam_settings),
    with_settings(component(TYCHO_COMPONENT_OPTIMIZER, "sgd", "1.0.0", "gradient descent with momentum", k_devices,
                            k_sgd_keys, optimizer_vtable<builtin_optimizer<sgd_state>>("sgd", k_devices)),
                  k_sgd_settings),
};
}  // namespace

TYCHO_PLUGIN("optimizers", "1.0.0", k_components)
