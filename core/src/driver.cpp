#include "tycho/core/driver.hpp"

#include <algorithm>
#include <cmath>
#include <complex>

#include "tycho/core/error.hpp"
#include "tycho/core/geometry.hpp"
#include "tycho/core/last_error.hpp"

namespace tycho {

namespace {
// |z| ≤ cap, in the object's own precision.
template <class Real>
void clamp_amplitude(std::complex<Real>* z, int64_t n, double amplitude_max) {
  const Real cap = Real(amplitude_max);
  for (int64_t k = 0; k < n; ++k) {
    Real a = std::abs(z[k]);
    if (a > cap) z[k] *= cap / a;
  }
}
}  // namespace

void check_status(tycho_status s, const std::string& context) {
  if (s == TYCHO_OK) return;
  std::string msg = last_error();
  throw error(s, msg.empty() ? cat(context, " failed with status ", int(s)) : msg);
}

double learning_rate_schedule::factor(int64_t iteration) const {
  if (kind == shape::constant || total_iterations <= 1) return 1.0;
  double t = std::clamp(double(iteration - 1) / double(total_iterations - 1), 0.0, 1.0);
  if (kind == shape::cosine) return final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + std::cos(M_PI * t));
  return std::pow(final_fraction, t);
}

learning_rate_schedule::shape learning_rate_schedule::parse(const std::string& name,
                                                            const std::string& key) {
  if (name == "constant") return shape::constant;
  if (name == "cosine") return shape::cosine;
  if (name == "exponential") return shape::exponential;
  fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' must be \"constant\", \"cosine\" or \"exponential\", got \"", name, "\"");
}

driver::driver(engine_binding engine, std::vector<optimizer_binding> optimizers,
               int64_t n_patterns, driver_options options, shard share,
               rank_collectives* collectives)
    : engine_(engine), optimizers_(std::move(optimizers)), n_patterns_(n_patterns),
      options_(options), share_(share), collectives_(collectives) {
  if (share_.world_size == 1 && share_.count == 0) share_ = shard::of(n_patterns, 0, 1, shard::mode::patterns);
  if (share_.world_size > 1 && collectives_ == nullptr)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "driver: a run of ", share_.world_size, " ranks needs collectives");
  if (options_.batch_size <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] batch_size must be > 0, got ",
         options_.batch_size);
}

double driver::run_iteration() {
  const int64_t epoch = iterations_done_ + 1;
  const auto order = epoch_permutation(n_patterns_, options_.seed, epoch);
  double loss = 0;
  void* stream = engine_.vtable->stream ? engine_.vtable->stream(engine_.instance) : nullptr;
  for (int64_t start = 0; start < n_patterns_; start += options_.batch_size) {
    if (start > 0 && stop_ && stop_())
      fail(TYCHO_ERR_CANCELLED, "stopped on request during iteration ", epoch, " (", start, " of ", n_patterns_,
           " patterns done)");
    const int64_t count = std::min(options_.batch_size, n_patterns_ - start);
    const int64_t* indices = order.data() + start;
    int64_t n = count;
    if (share_.world_size > 1) {
      share_.select(indices, count, local_indices_);
      indices = local_indices_.data();
      n = int64_t(local_indices_.size());
    }
    check_status(engine_.vtable->compute_batch(engine_.instance, indices, n, &loss),
                 "engine compute_batch");
    for (const auto& opt : optimizers_) {
      if (epoch < opt.first_iteration) continue;
      DLTensor param{}, grad{};
      check_status(engine_.vtable->get_tensor(engine_.instance, opt.parameter, &param), "engine get_tensor");
      check_status(engine_.vtable->get_tensor(engine_.instance, opt.gradient, &grad), "engine get_tensor");
      if (collectives_ != nullptr) collectives_->sum_in_place(grad, stream);
      tycho_step_info info{sizeof(tycho_step_info), 1.0 / double(count),
                           opt.schedule.factor(epoch), epoch};
      check_status(opt.vtable->step(opt.instance, &param, &grad, &info, stream), "optimizer step");
    }
    apply_object_constraints();
  }
  if (engine_.vtable->collect_loss != nullptr)
    check_status(engine_.vtable->collect_loss(engine_.instance, &loss), "engine collect_loss");
  if (collectives_ != nullptr) loss = collectives_->sum(loss);
  ++iterations_done_;
  return loss / double(n_patterns_);
}

void driver::apply_object_constraints() {
  if (!(options_.object.amplitude_max > 0)) return;
  DLTensor obj{};
  check_status(engine_.vtable->get_tensor(engine_.instance, TYCHO_TENSOR_OBJECT, &obj), "engine get_tensor");
  if (obj.device.device_type != kDLCPU)
    fail(TYCHO_ERR_UNSUPPORTED, "object amplitude_max: the object lives on a device this version cannot constrain");
  int64_t n = 1;
  for (int i = 0; i < obj.ndim; ++i) n *= obj.shape[i];
  char* data = static_cast<char*>(obj.data) + obj.byte_offset;
  if (obj.dtype.code == kDLComplex && obj.dtype.bits == 128)  // a float64 engine
    clamp_amplitude(reinterpret_cast<std::complex<double>*>(data), n, options_.object.amplitude_max);
  else if (obj.dtype.code == kDLComplex && obj.dtype.bits == 64)
    clamp_amplitude(reinterpret_cast<std::complex<float>*>(data), n, options_.object.amplitude_max);
  else
    fail(TYCHO_ERR_UNSUPPORTED, "object amplitude_max: the object must be complex64 or complex128");
}

}  // namespace tycho
