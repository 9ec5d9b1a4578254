#include "tycho/core/driver.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <iomanip>
#include <limits>
#include <numeric>
#include <sstream>
#include <type_traits>

#include "tycho/core/error.hpp"
#include "tycho/core/geometry.hpp"
#include "tycho/core/last_error.hpp"
#include "tycho/core/probe_fit.hpp"

namespace tycho {

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

namespace {
// The patterns 0 .. n − 1 not in `held_out` (sorted), in order.
std::vector<int64_t> kept_patterns(int64_t n, const std::vector<int64_t>& held_out) {
  std::vector<int64_t> kept;
  kept.reserve(std::size_t(n) - std::min(held_out.size(), std::size_t(n)));
  std::size_t h = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (h < held_out.size() && held_out[h] == j)
      ++h;
    else
      kept.push_back(j);
  }
  return kept;
}
}  // namespace

driver::driver(engine_binding engine, std::vector<optimizer_binding> optimizers,
               int64_t n_patterns, driver_options options, shard share,
               rank_collectives* collectives)
    : engine_(engine), optimizers_(std::move(optimizers)), n_patterns_(n_patterns),
      options_(std::move(options)), share_(share), collectives_(collectives),
      plan_(plan_of(n_patterns, options_)) {
  if (share_.world_size == 1 && share_.count == 0) share_ = shard::of(n_patterns, 0, 1, shard::mode::patterns);
  if (share_.world_size > 1 && collectives_ == nullptr)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "driver: a run of ", share_.world_size, " ranks needs collectives");
  if (options_.batch_size <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] batch_size must be > 0, got ",
         options_.batch_size);
  // Replicated ranks hold every pattern but compute a slice of each batch: their position
  // gradients are partial. Blocks of patterns (the default) give each position one owner.
  if (options_.positions.enabled && share_.world_size > 1 && share_.kind != shard::mode::patterns)
    fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct.positions] correct = true on ", share_.world_size,
         " ranks needs [parallel] sharding = \"patterns\" (each rank corrects the positions of the patterns it holds)");
  // Deterministic sums (tycho_engine_vtable::finish_batch): an engine that keeps its batch sums as
  // integers has them summed here instead of its float gradients and loss.
  fixed_point_ = engine_.vtable->struct_size >= offsetof(tycho_engine_vtable, finish_batch) + sizeof(void*) &&
                 engine_.vtable->finish_batch != nullptr && [&] {
                   DLTensor t{};
                   return engine_.vtable->get_tensor(engine_.instance, TYCHO_TENSOR_FIXED_POINT_SUMS, &t) == TYCHO_OK;
                 }();
  // A constraint on the positions fits the whole scan (an affine map, a drift): it sees one
  // rank's share only, so it would differ from rank to rank.
  if (options_.positions.enabled && share_.world_size > 1)
    for (const constraint_binding& c : options_.constraints)
      if (c.acts_on & TYCHO_CONSTRAINT_POSITIONS)
        fail(TYCHO_ERR_UNSUPPORTED, c.name, " constrains the positions, which runs on one rank in this version (this run has ",
             share_.world_size, "); leave it out, or correct positions on one rank");
  if (!options_.held_out.empty()) {
    if (share_.world_size > 1)
      fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] validation_fraction: held-out patterns run on one rank in this version (this run has ",
           share_.world_size, ")");
    if (options_.positions.enabled)
      fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] validation_fraction needs the positions held ([reconstruct.positions] correct = false): "
           "a held-out pattern has no gradient to correct its position by");
    in_batches_ = kept_patterns(n_patterns_, options_.held_out);
  }
  if (options_.batches == batching::compact) setup_tiles();
}

batch_plan driver::plan_of(int64_t n_patterns, const driver_options& o) {
  const std::vector<int64_t>& out = o.held_out;
  for (std::size_t k = 0; k < out.size(); ++k)
    if (out[k] < 0 || out[k] >= n_patterns || (k > 0 && out[k] <= out[k - 1]))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "driver: the held-out patterns must be sorted, unique indices below ", n_patterns,
           "; entry ", k, " is ", out[k]);
  if (int64_t(out.size()) >= n_patterns && n_patterns > 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "driver: all ", n_patterns, " patterns are held out; at least one must remain in the batches");
  const std::vector<double>& all = o.block_positions_px.empty() ? o.positions_px : o.block_positions_px;
  std::vector<double> kept;
  if (!out.empty() && !all.empty())
    for (int64_t j : kept_patterns(n_patterns, out))
      if (2 * std::size_t(j) + 1 < all.size()) kept.insert(kept.end(), {all[2 * std::size_t(j)], all[2 * std::size_t(j) + 1]});
  return batch_plan(n_patterns - int64_t(out.size()), std::max<int64_t>(o.batch_size, 1), o.seed, o.batches,
                    out.empty() ? all : kept);
}

double driver::held_out_loss() {
  const std::vector<int64_t>& out = options_.held_out;
  if (out.empty()) return std::numeric_limits<double>::quiet_NaN();
  want_position_gradient(false);
  return gradient_pass(out) / double(out.size());
}

// Compact batches step the object's tiles under each batch's windows where the engine keeps
// the object in host memory and its optimizer takes boxes; else the whole object, as random
// batches do (the same trajectory as a run that steps tiles would have only where every batch
// touches every tile).
void driver::setup_tiles() {
  DLTensor object{}, probe{};
  check_status(engine_.vtable->get_tensor(engine_.instance, TYCHO_TENSOR_OBJECT, &object), "engine get_tensor");
  check_status(engine_.vtable->get_tensor(engine_.instance, TYCHO_TENSOR_PROBE, &probe), "engine get_tensor");
  if (object.device.device_type != kDLCPU || object.ndim != 3 || probe.ndim != 3) return;
  for (const optimizer_binding& opt : optimizers_) {
    if (opt.parameter != TYCHO_TENSOR_OBJECT) continue;
    const tycho_optimizer_vtable* vt = opt.vtable;
    const bool takes = vt->struct_size >= offsetof(tycho_optimizer_vtable, flags) + sizeof(vt->flags) &&
                       (vt->flags & TYCHO_OPTIMIZER_TAKES_BOXES) != 0;
    if (!takes) return;
  }
  window_[0] = probe.shape[1];
  window_[1] = probe.shape[2];
  tiles_ = std::make_unique<object_tiles>(object.shape[1], object.shape[2]);
}

void driver::set_tile_steps(const std::vector<int64_t>& steps) {
  if (!tiles_) fail(TYCHO_ERR_INVALID_ARGUMENT, "driver: this run does not step the object in tiles");
  tiles_->set_steps(steps);
}

void driver::mark_region(const int64_t* indices, int64_t count, bool object_steps) {
  const std::vector<double>& p = options_.positions_px;
  for (int64_t i = 0; i < count; ++i) {
    const std::size_t j = std::size_t(indices[i]);
    tiles_->mark_window(p[2 * j], p[2 * j + 1], window_[0], window_[1]);
  }
  tiles_->take_boxes(object_steps, boxes_, box_steps_);
  const tycho_engine_vtable* vt = engine_.vtable;
  if (vt->struct_size >= offsetof(tycho_engine_vtable, set_gradient_region) + sizeof(vt->set_gradient_region) &&
      vt->set_gradient_region != nullptr)
    check_status(vt->set_gradient_region(engine_.instance, boxes_.data(), int64_t(boxes_.size() / 4)),
                 "engine set_gradient_region");
}

void driver::sum_region(DLTensor& grad, void* stream) {
  const int64_t element_bytes = (grad.dtype.bits * grad.dtype.lanes + 7) / 8;
  pack_boxes(static_cast<char*>(grad.data) + grad.byte_offset, grad.shape[0], grad.shape[1], grad.shape[2],
             element_bytes, boxes_, packed_);
  int64_t shape[1] = {int64_t(packed_.size()) / element_bytes};
  DLTensor packed{packed_.data(), grad.device, 1, grad.dtype, shape, nullptr, 0};
  collectives_->sum_in_place(packed, stream);
  unpack_boxes(static_cast<char*>(grad.data) + grad.byte_offset, grad.shape[0], grad.shape[1], grad.shape[2],
               element_bytes, boxes_, packed_);
}

void driver::refresh_positions() {
  if (!tiles_) return;
  if (share_.world_size > 1) {
    options_.positions_px = gathered_positions_;
    return;
  }
  DLTensor pos{};
  check_status(engine_.vtable->get_tensor(engine_.instance, TYCHO_TENSOR_POSITIONS, &pos), "engine get_tensor");
  const double* r = reinterpret_cast<const double*>(static_cast<const char*>(pos.data) + pos.byte_offset);
  options_.positions_px.assign(r, r + 2 * n_patterns_);
}

double driver::run_iteration() {
  const int64_t epoch = iterations_done_ + 1;
  double loss = 0;
  void* stream = engine_.vtable->stream ? engine_.vtable->stream(engine_.instance) : nullptr;
  const int64_t batches = plan_.batches();
  bool object_steps = false;
  for (const auto& opt : optimizers_) object_steps |= opt.parameter == TYCHO_TENSOR_OBJECT && epoch >= opt.first_iteration;
  // Positions move after this iteration by their own steps, or by the scan map's (every few
  // iterations): only then does the engine compute their gradient.
  const bool per_position = corrects_positions_after(epoch);
  const bool map_step = scan_enabled_ && scan_.due(epoch);
  const bool probe_waits = options_.probe_waits_for_scan_map && scan_enabled_ && scan_.options().enabled &&
                           !(scan_.converged() && epoch > scan_.converged_at());
  want_position_gradient(per_position || map_step);
  // A scan map step that moves C10 needs this iteration's probe gradient, summed.
  const bool gather_probe_gradient = map_step && scan_.moves_C10();
  probe_gradient_.clear();
  // A parameter's learning rate this iteration as a share of its setting (the schedule and the
  // stopping rule's halvings): 0 where it is not stepped. Its optimizer's step takes it, and the
  // regularisers' pull follows it (the constraints' object_rate_factor / probe_rate_factor).
  auto rate_share = [&](const auto& opt) {
    const bool steps = epoch >= opt.first_iteration && !(opt.parameter == TYCHO_TENSOR_PROBE && probe_waits);
    return steps ? opt.schedule.factor(epoch) * learning_rate_factor_ : 0.0;
  };
  double rate_factor[2] = {0, 0};
  for (const auto& opt : optimizers_) {
    if (opt.parameter == TYCHO_TENSOR_OBJECT) rate_factor[0] = rate_share(opt);
    if (opt.parameter == TYCHO_TENSOR_PROBE) rate_factor[1] = rate_share(opt);
  }
  int64_t done = 0;
  for (int64_t b = 0; b < batches; ++b) {
    if (b > 0 && stop_ && stop_())
      fail(TYCHO_ERR_CANCELLED, "stopped on request during iteration ", epoch, " (", done, " of ", patterns_in_batches(),
           " patterns done)");
    const int64_t count = compute_batch(epoch, b, batches, object_steps, loss, stream);
    for (const auto& opt : optimizers_) {
      if (epoch < opt.first_iteration) continue;
      DLTensor param{}, grad{};
      check_status(engine_.vtable->get_tensor(engine_.instance, opt.parameter, &param), "engine get_tensor");
      check_status(engine_.vtable->get_tensor(engine_.instance, opt.gradient, &grad), "engine get_tensor");
      const bool in_tiles = tiles_ && opt.parameter == TYCHO_TENSOR_OBJECT;
      // Deterministic sums: the gradients are already every rank's (finish_fixed_point_batch).
      if (collectives_ != nullptr && !fixed_point_) {
        if (in_tiles)
          sum_region(grad, stream);
        else
          collectives_->sum_in_place(grad, stream);
      }
      if (gather_probe_gradient && opt.parameter == TYCHO_TENSOR_PROBE) add_probe_gradient(grad);
      if (opt.parameter == TYCHO_TENSOR_PROBE && probe_waits) continue;  // its gradient serves the map's C10
      tycho_step_info info{sizeof(tycho_step_info), 1.0 / double(count), rate_share(opt), epoch,
                           in_tiles ? int64_t(boxes_.size() / 4) : 0, in_tiles ? boxes_.data() : nullptr,
                           in_tiles ? box_steps_.data() : nullptr};
      check_status(opt.vtable->step(opt.instance, &param, &grad, &info, stream), "optimizer step");
    }
    apply_constraints(TYCHO_CONSTRAINT_OBJECT | TYCHO_CONSTRAINT_PROBE, epoch, b, batches, rate_factor, stream);
    done += count;
  }
  // The iteration's loss, before the positions' step: measuring their curvature passes over the
  // data again (measure_position_curvature), and an engine that keeps its loss until collected
  // would count those passes.
  if (engine_.vtable->collect_loss != nullptr)
    check_status(engine_.vtable->collect_loss(engine_.instance, &loss), "engine collect_loss");
  if (collectives_ != nullptr && !fixed_point_) loss = collectives_->sum(loss);  // fixed point: already every rank's
  // A diverged iteration moves no position: the caller stops on its loss, keeping the last finite
  // state, and the positions' step would only fail on the non-finite object first.
  if (!std::isfinite(loss)) {
    ++iterations_done_;
    return loss / double(patterns_in_batches());
  }
  if (per_position) {
    correct_positions(epoch);
    apply_constraints(TYCHO_CONSTRAINT_POSITIONS, epoch, -1, batches, rate_factor, stream);
    // correct = "auto": weighed once, after position_trial_iterations of their own steps.
    if (weighing_.iteration == 0 && epoch == weighing_due()) decide_positions(epoch);
    if (share_.world_size > 1) gather_positions(stream);
    refresh_positions();
  } else if (map_step) {
    step_scan_map(epoch);
    if (share_.world_size > 1) gather_positions(stream);
    refresh_positions();
  }
  ++iterations_done_;
  return loss / double(patterns_in_batches());
}

// The engine's integer sums of the batch summed over the ranks (exact, in any order), then
// converted by the engine; it may ask for the batch again when a value overflowed the grid fixed
// before it (every rank reads the same sums, so every rank asks alike: tycho/sdk/fixed_point.hpp).
void driver::finish_fixed_point_batch(const int64_t* indices, int64_t n, bool ends_iteration, double& loss,
                                      void* stream) {
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0)
      check_status(engine_.vtable->compute_batch(engine_.instance, indices, n, &loss), "engine compute_batch");
    DLTensor sums{};
    check_status(engine_.vtable->get_tensor(engine_.instance, TYCHO_TENSOR_FIXED_POINT_SUMS, &sums), "engine get_tensor");
    if (collectives_ != nullptr) collectives_->sum_in_place(sums, stream);
    int32_t again = 0;
    check_status(engine_.vtable->finish_batch(engine_.instance, ends_iteration ? TYCHO_FINISH_ENDS_ITERATION : 0u,
                                              &again, &loss, stream),
                 "engine finish_batch");
    if (!again) return;
    // Each attempt raises a grid to fit what the last one found, so two settle every batch; more
    // means values that no grid holds (a non-finite value the engine did not flag).
    if (attempt >= 3)
      fail(TYCHO_ERR_BAD_DATA, "the deterministic sums of a batch overflowed every grid tried (", attempt + 1,
           " attempts): values beyond any fixed-point range; [reconstruct] deterministic = false sums them as floats");
  }
}

namespace {
DLTensor engine_tensor(const engine_binding& e, tycho_tensor_id id) {
  DLTensor t{};
  check_status(e.vtable->get_tensor(e.instance, id, &t), "engine get_tensor");
  return t;
}
// The constraints below change the engine's tensors in place, in host memory.
void require_host(const DLTensor& t, const char* what) {
  if (t.device.device_type != kDLCPU)
    fail(TYCHO_ERR_UNSUPPORTED, what, ": the engine keeps its tensors on a device; this version applies it to a host engine's only");
}
DLTensor host_tensor(const engine_binding& e, tycho_tensor_id id, const char* what) {
  DLTensor t = engine_tensor(e, id);
  require_host(t, what);
  return t;
}
int64_t element_count(const DLTensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}
template <class T>
T* data_of(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}
// Calls f with the tensor's values as std::complex<double>* (complex128, a float64 engine) or
// std::complex<float>* (complex64); any other dtype is refused naming `what`.
template <class F>
void with_complex_values(const DLTensor& t, const char* what, F&& f) {
  if (t.dtype.code == kDLComplex && t.dtype.bits == 128)
    f(data_of<std::complex<double>>(t));
  else if (t.dtype.code == kDLComplex && t.dtype.bits == 64)
    f(data_of<std::complex<float>>(t));
  else
    fail(TYCHO_ERR_UNSUPPORTED, what, ": the engine's tensor must be complex64 or complex128");
}
}  // namespace

void driver::correct_positions(int64_t epoch) {
  const char* what = "position correction";
  DLTensor pos = host_tensor(engine_, TYCHO_TENSOR_POSITIONS, what);
  DLTensor grad = host_tensor(engine_, TYCHO_TENSOR_POSITIONS_GRAD, what);
  DLTensor probe = host_tensor(engine_, TYCHO_TENSOR_PROBE, what);
  DLTensor obj = host_tensor(engine_, TYCHO_TENSOR_OBJECT, what);
  if (element_count(pos) != element_count(grad) || pos.ndim != 2 || pos.shape[1] != 2 || probe.ndim != 3 ||
      obj.ndim != 3)
    fail(TYCHO_ERR_INTERNAL, "position correction: the engine's positions, their gradient, probe or object have ",
         "unexpected shapes");
  // The scanned part of the object: the windows' bounding box (over every rank's positions).
  const double* r = data_of<const double>(pos);
  int64_t lo[2] = {obj.shape[1], obj.shape[2]}, hi[2] = {0, 0};
  for (int64_t j = 0; j < pos.shape[0]; ++j)
    for (int a = 0; a < 2; ++a) {
      const int64_t top = int64_t(std::floor(r[2 * j + a] - double(probe.shape[1 + a] / 2)));
      lo[a] = std::min(lo[a], top);
      hi[a] = std::max(hi[a], top + probe.shape[1 + a]);
    }
  const bool several = share_.world_size > 1;
  void* stream = engine_.vtable->stream ? engine_.vtable->stream(engine_.instance) : nullptr;
  if (several) {
    // Each rank's box in its own slot of a zeroed table, summed: every rank sees all boxes.
    std::vector<double> boxes(std::size_t(4 * share_.world_size), 0.0);
    for (int a = 0; a < 2; ++a) {
      boxes[std::size_t(4 * share_.rank + a)] = double(lo[a]);
      boxes[std::size_t(4 * share_.rank + 2 + a)] = double(hi[a]);
    }
    sum_host_doubles(boxes, stream);
    for (int32_t k = 0; k < share_.world_size; ++k)
      for (int a = 0; a < 2; ++a) {
        lo[a] = std::min(lo[a], int64_t(boxes[std::size_t(4 * k + a)]));
        hi[a] = std::max(hi[a], int64_t(boxes[std::size_t(4 * k + 2 + a)]));
      }
  }
  double h[2];
  with_complex_values(probe, what, [&](auto* p) {
    using value = std::remove_pointer_t<decltype(p)>;  // the object has the probe's dtype
    position_curvature(p, probe.shape[0], probe.shape[1], probe.shape[2], data_of<value>(obj), obj.shape[0],
                       obj.shape[1], obj.shape[2], lo, hi, h);
  });
  // correct = "auto" (the default) starts from iteration 1 with one slice: an object that has no
  // structure yet (its optimizer starts later, or has not moved it) locates no pattern, so the
  // positions' own steps wait for it (correct = true, asked for explicitly, fails below instead).
  if (options_.positions.weigh_against_noise && curvature_.first == 0 &&
      !(h[0] > 0 && h[1] > 0 && std::isfinite(h[0]) && std::isfinite(h[1]))) {
    if (!said_positions_wait_)
      scan_log_.push_back(cat("iteration ", epoch, ": the object has no structure yet to locate the patterns by (its ",
                              "roughness estimate is ", h[0], ", ", h[1], "): the positions' own steps wait for it"));
    said_positions_wait_ = true;
    if (scan_enabled_) step_scan_map(epoch);
    return;
  }
  position_step_options o = options_.positions.step;
  o.rate *= options_.positions.schedule.factor(epoch);
  // A window of N pixels centred at c spans [c − N/2, c − N/2 + N): it must stay in the object.
  for (int a = 0; a < 2; ++a) {
    o.lo[a] = double(probe.shape[1 + a] / 2);
    o.hi[a] = double(obj.shape[1 + a] - probe.shape[1 + a] + probe.shape[1 + a] / 2) - 1e-6;
  }
  if (curvature_.first == 0) curvature_.first = epoch;
  const int64_t since = epoch - curvature_.first;  // measured at 0, 1, 4, 16, 64, ... after the first
  if (since == 0 || ((since & (since - 1)) == 0 && since % 3 == 1))  // 4^k: a power of 2 that is 1 mod 3
    measure_position_curvature(epoch, h, o.hi);
  for (int a = 0; a < 2; ++a) h[a] *= curvature_.scale[std::size_t(a)];
  if (scan_enabled_) {
    // The map's global step (when due), then each position's own step without its affine part.
    const scan_refinement::rank_sum sum = [&](std::vector<double>& v) {
      if (several) sum_host_doubles(v, stream);
    };
    step_scan_map(epoch);
    std::vector<double> steps(std::size_t(2 * pos.shape[0]));
    double totals[2];
    position_steps(data_of<const double>(grad), pos.shape[0], h, o, steps.data(), totals);
    scan_.remove_affine_part(steps.data(), sum);
    const double none[2] = {0, 0};
    move_positions(data_of<double>(pos), steps.data(), pos.shape[0], none, o);
    return;
  }
  if (!several) {
    step_positions(data_of<double>(pos), data_of<const double>(grad), pos.shape[0], h, o);
    return;
  }
  // Several ranks: the same curvature everywhere (the object and probe are the same), the mean
  // step over all positions (gathered after the positions' constraints, gather_positions).
  std::vector<double> steps(std::size_t(2 * pos.shape[0]));
  std::vector<double> totals(3, 0.0);  // Σ step per axis, positions
  position_steps(data_of<const double>(grad), pos.shape[0], h, o, steps.data(), totals.data());
  totals[2] = double(pos.shape[0]);
  sum_host_doubles(totals, stream);
  const double mean[2] = {totals[0] / totals[2], totals[1] / totals[2]};
  move_positions(data_of<double>(pos), steps.data(), pos.shape[0], mean, o);
}

std::optional<driver::position_bound> driver::position_bound_px() {
  const tycho_engine_vtable* vt = engine_.vtable;
  if (!engine_informs_positions() || !(options_.positions.counts_per_target_unit > 0)) return std::nullopt;
  std::vector<int64_t> local(static_cast<std::size_t>(engine_tensor(engine_, TYCHO_TENSOR_POSITIONS).shape[0]));
  std::iota(local.begin(), local.end(), int64_t(0));  // every pattern this rank holds
  const std::vector<double> J = position_information(local);
  const int64_t count = int64_t(J.size() / 3);
  std::vector<double> sums(4, 0.0);  // Σ (J⁻¹)_00, Σ (J⁻¹)_11, informed, uninformed patterns
  for (int64_t j = 0; j < count; ++j) {
    const double* q = J.data() + 3 * j;
    const double det = q[0] * q[2] - q[1] * q[1];
    // Singular to the precision J is summed in (or no information at all): left out.
    if (!(det > 1e-9 * q[0] * q[2]) || !std::isfinite(det)) {
      sums[3] += 1;
      continue;
    }
    sums[0] += q[2] / det;
    sums[1] += q[0] / det;
    sums[2] += 1;
  }
  if (share_.world_size > 1) sum_host_doubles(sums, vt->stream ? vt->stream(engine_.instance) : nullptr);
  position_bound b;
  b.informed = int64_t(sums[2]);
  b.uninformed = int64_t(sums[3]);
  for (std::size_t a = 0; a < 2; ++a) b.rms_px[a] = sums[2] > 0 ? std::sqrt(sums[a] / sums[2]) : HUGE_VAL;
  return b;
}

int64_t driver::first_position_step() const {
  const position_correction& pc = options_.positions;
  if (!pc.enabled) return 0;
  if (!pc.after_scan_map) return pc.first_iteration;
  if (!scan_enabled_ || !scan_.converged()) return 0;
  return std::max(pc.first_iteration, scan_.converged_at() + 1);
}

std::vector<double> driver::position_information(const std::vector<int64_t>& local) {
  std::vector<double> J(3 * local.size());
  if (!local.empty())
    check_status(engine_.vtable->position_information(engine_.instance, local.data(), int64_t(local.size()),
                                                      options_.positions.counts_per_target_unit, J.data()),
                 "engine position_information");
  return J;
}

int64_t driver::weighing_due() const {
  if (!options_.positions.weigh_against_noise || !scan_enabled_) return 0;  // weighed beyond the map's
  // From the positions' first own step (one that waited for the object counts from where it began).
  const int64_t first = curvature_.first > 0 ? curvature_.first : first_position_step();
  return first > 0 ? first + position_trial_iterations - 1 : 0;
}

bool driver::engine_informs_positions() const {
  const tycho_engine_vtable* vt = engine_.vtable;
  return vt->struct_size >= offsetof(tycho_engine_vtable, position_information) + sizeof(vt->position_information) &&
         vt->position_information != nullptr;
}

bool driver::corrects_positions_after(int64_t epoch) const {
  const position_correction& pc = options_.positions;
  return pc.enabled && epoch >= pc.first_iteration &&
         (!pc.after_scan_map || (scan_enabled_ && scan_.converged() && epoch > scan_.converged_at())) &&
         (weighing_.iteration == 0 || weighing_.kept || epoch <= weighing_.iteration);
}

bool driver::positions_moved() const {
  return (scan_enabled_ && scan_.steps_taken() > 0) || corrects_positions_after(iterations_done_);
}

// The loss's curvature by each position, from its gradient at the positions and ε = 0.05 px away
// along one axis (every position at once: each pattern's loss depends on its own position only),
// the object and probe held: its median over the sampled patterns (curvature_sample, the same on
// any number of ranks) against h_a, the object-roughness estimate of position_correction.hpp,
// scales h_a from then on. h_a counts what places no position (a formed object's phase ramps,
// fitted noise): on the validation matrix's 2-D entries at the scan map's convergence the
// amplitude loss's curvature was 0.015–0.2 × h_a, steps 5–65 times too short; on the shared
// jitter recipe (Poisson loss, from iteration 1) 0.9 × (bench/RESULTS.md, session 11), and it
// falls as the object forms: measured at the first step and 1, 4, 16, ... iterations after it
// (correct_positions), three passes over the sample each time; this iteration's gradient is then
// put back, so the step is the one the run would take with the scale alone.
void driver::measure_position_curvature(int64_t epoch, const double h[2], const double hi[2]) {
  const char* what = "position correction";
  constexpr double eps = 0.05;  // px: well inside the quadratic range (the object's features span pixels)
  DLTensor pos = host_tensor(engine_, TYCHO_TENSOR_POSITIONS, what);
  const int64_t n = pos.shape[0];
  auto gradient = [&] {
    const DLTensor g = host_tensor(engine_, TYCHO_TENSOR_POSITIONS_GRAD, what);
    return std::vector<double>(data_of<const double>(g), data_of<const double>(g) + 2 * n);
  };
  const std::vector<int64_t> sample = curvature_sample();
  const std::vector<int64_t> here = curvature_sample_here();
  const int64_t m = int64_t(sample.size()), stride = curvature_stride();
  const int64_t first = first_pattern_here();
  const std::vector<double> this_iteration = gradient();
  const std::vector<double> p0(data_of<const double>(pos), data_of<const double>(pos) + 2 * n);
  gradient_pass(sample);
  const std::vector<double> g0 = gradient();
  // H per axis, one slot per sampled pattern, filled by the rank that holds it (zeros elsewhere)
  // and summed: every rank holds them all, exactly (one term per slot).
  std::vector<double> H(static_cast<std::size_t>(2 * m), 0.0);
  for (int a = 0; a < 2; ++a) {
    double* r = data_of<double>(host_tensor(engine_, TYCHO_TENSOR_POSITIONS, what));
    std::vector<double> step(static_cast<std::size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      step[std::size_t(j)] = p0[std::size_t(2 * j + a)] + eps <= hi[a] ? eps : -eps;  // inside the object
      r[2 * j + a] = p0[std::size_t(2 * j + a)] + step[std::size_t(j)];
    }
    gradient_pass(sample);
    const std::vector<double> g1 = gradient();
    std::copy(p0.begin(), p0.end(), r);
    for (const int64_t j : here)
      H[std::size_t(a * m + (first + j) / stride)] =
          (g1[std::size_t(2 * j + a)] - g0[std::size_t(2 * j + a)]) / step[std::size_t(j)];
  }
  void* stream = engine_.vtable->stream ? engine_.vtable->stream(engine_.instance) : nullptr;
  if (share_.world_size > 1) sum_host_doubles(H, stream);
  {
    const DLTensor g = host_tensor(engine_, TYCHO_TENSOR_POSITIONS_GRAD, what);
    std::copy(this_iteration.begin(), this_iteration.end(), data_of<double>(g));
  }
  curvature_.iteration = epoch;
  curvature_.patterns = m;
  std::ostringstream line;
  line << std::setprecision(3) << "iteration " << epoch << ": "
       << (epoch == curvature_.first ? "each position's own correction begins: " : "")
       << "the positions' own steps take the loss's curvature, ";
  for (int a = 0; a < 2; ++a) {
    std::vector<double> v(H.begin() + a * m, H.begin() + (a + 1) * m);
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    double median = 0;
    if (!v.empty()) {
      std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
      median = v[v.size() / 2];
    }
    const double scale = median / h[a];
    // No curvature measured (a flat object, noise): the scale this axis had stays.
    if (scale > 0 && std::isfinite(scale)) curvature_.scale[std::size_t(a)] = scale;
    line << (a ? " and " : "") << curvature_.scale[std::size_t(a)]
         << (scale > 0 && std::isfinite(scale) ? "" : " (kept: the median measured, " + std::to_string(median) + ", is none)");
  }
  line << " times the object-roughness estimate along the rows and columns (measured from the gradient " << eps
       << " px away, object and probe held; the median of " << m << " patterns"
       << (stride > 1 ? ", one in " + std::to_string(stride) + " of the scan's" : std::string()) << ")";
  scan_log_.push_back(line.str());
}

int64_t driver::compute_batch(int64_t epoch, int64_t b, int64_t batches, bool object_steps, double& loss, void* stream) {
  int64_t count = 0;
  const int64_t* global = plan_.batch(epoch, b, count);
  if (!in_batches_.empty()) {  // the plan's indices stand for the patterns in the batches
    batch_global_.resize(std::size_t(count));
    for (int64_t k = 0; k < count; ++k) batch_global_[std::size_t(k)] = in_batches_[std::size_t(global[k])];
    global = batch_global_.data();
  }
  compute_patterns(global, count, b + 1 == batches, object_steps, loss, stream);
  return count;
}

void driver::compute_patterns(const int64_t* global, int64_t count, bool ends_pass, bool object_steps, double& loss,
                              void* stream) {
  const int64_t* indices = global;
  int64_t n = count;
  if (share_.world_size > 1) {
    share_.select(global, count, local_indices_);
    indices = local_indices_.data();
    n = int64_t(local_indices_.size());
  }
  if (tiles_) mark_region(global, count, object_steps);
  check_status(engine_.vtable->compute_batch(engine_.instance, indices, n, &loss), "engine compute_batch");
  if (fixed_point_) finish_fixed_point_batch(indices, n, ends_pass, loss, stream);
}

int64_t driver::curvature_stride() const {
  return std::max<int64_t>((n_patterns_ + k_curvature_patterns - 1) / k_curvature_patterns, 1);
}

int64_t driver::curvature_patterns() const { return (n_patterns_ + curvature_stride() - 1) / curvature_stride(); }

std::vector<int64_t> driver::curvature_sample() const {
  std::vector<int64_t> sample;
  sample.reserve(std::size_t(curvature_patterns()));
  for (int64_t j = 0; j < n_patterns_; j += curvature_stride()) sample.push_back(j);
  return sample;
}

std::vector<int64_t> driver::curvature_sample_here() const {
  const int64_t n = engine_tensor(engine_, TYCHO_TENSOR_POSITIONS).shape[0], stride = curvature_stride();
  const int64_t first = first_pattern_here();
  std::vector<int64_t> local;
  for (int64_t j = (stride - first % stride) % stride; j < n; j += stride) local.push_back(j);
  return local;
}

double driver::gradient_pass(const std::vector<int64_t>& global) {
  double loss = 0;
  void* stream = engine_.vtable->stream ? engine_.vtable->stream(engine_.instance) : nullptr;
  const int64_t size = std::max<int64_t>(options_.batch_size, 1), total = int64_t(global.size());
  for (int64_t at = 0; at < total; at += size)
    compute_patterns(global.data() + at, std::min(size, total - at), at + size >= total, false, loss, stream);
  if (engine_.vtable->collect_loss != nullptr)
    check_status(engine_.vtable->collect_loss(engine_.instance, &loss), "engine collect_loss");
  return loss;
}

// Each position's correction beyond the scan map, Δ_j, is what its own steps added: the positions'
// residual from their least-squares affine map of the nominal ones (the map's positions are an
// affine map of them, and the steps keep no affine part). Weighed by each pattern's Fisher
// information J_j (the engine's, Poisson counts), Σ Δᵀ J Δ / 2P is 1 for counting noise alone;
// above 2 the displacements found outweigh the noise and stay, else the positions return to the
// map's and their own steps end.
void driver::decide_positions(int64_t epoch) {
  const char* what = "position correction";
  DLTensor pos = host_tensor(engine_, TYCHO_TENSOR_POSITIONS, what);
  const int64_t count = pos.shape[0];
  double* r = data_of<double>(pos);
  void* stream = engine_.vtable->stream ? engine_.vtable->stream(engine_.instance) : nullptr;
  const bool several = share_.world_size > 1;
  std::vector<double> delta(r, r + 2 * count);
  scan_.remove_affine_part(delta.data(), [&](std::vector<double>& v) {
    if (several) sum_host_doubles(v, stream);
  });
  weighing_.iteration = epoch;
  const bool informs = engine_informs_positions();
  const double counts = options_.positions.counts_per_target_unit;
  if (!informs || !(counts > 0)) {  // the session's log says which (host/src/runtime/session_run.cpp)
    weighing_.kept = true;
    weighing_.statistic = std::nan("");
    return;
  }
  // Over the curvature's sample (curvature_sample: this rank's share of it): a mean over 128
  // patterns, whose spread under noise alone (each term's mean 1, spread 1) is 0.09, decides
  // against 2 as well as one over all, for a sixth of the cost on the MoS2 example (the engine's
  // Fisher information takes six transforms a pattern: 2.6 iterations' CPU over all 768).
  const std::vector<int64_t> sampled = curvature_sample_here();
  const std::vector<double> J = position_information(sampled);
  std::vector<double> sums(3, 0.0);  // Σ Δᵀ J Δ, Σ tr J, patterns
  for (std::size_t i = 0; i < sampled.size(); ++i) {
    const double* q = J.data() + 3 * i;
    const std::size_t j = std::size_t(sampled[i]);
    const double d0 = delta[2 * j], d1 = delta[2 * j + 1];
    sums[0] += q[0] * d0 * d0 + 2 * q[1] * d0 * d1 + q[2] * d1 * d1;
    sums[1] += q[0] + q[2];
  }
  sums[2] = double(sampled.size());
  if (several) sum_host_doubles(sums, stream);
  // The corrections' noise is that of matching each pattern against the model so far: the
  // engine's J at it, which is the right scale where the model's structure is real (early in a run
  // it is less than the data's own measure: the object has not formed, and the estimates are as
  // noisy as it says; the MoS2 example at iteration 20: 0.93 at its exact raster). But a model
  // cannot hold more real information than the data carry: where the engine's J exceeds the
  // data's own (position_correction::data_information_px2), the excess is noise the object has
  // fitted (hBN at 1,000 electrons a pattern: 2.2 times the data's, whose corrections from the
  // true positions then weighed 2.3 and were kept, and walked 0.73 Å from them), so J is scaled
  // down to the data's: the same factor on every J_j.
  const double model = sums[2] > 0 ? sums[1] / sums[2] : 0, data = options_.positions.data_information_px2;
  const double ratio = std::isfinite(data) && model > 0 ? std::clamp(data / model, 0.0, 1.0) : 1.0;
  weighing_.information_ratio = ratio;
  weighing_.statistic = ratio * sums[0] / (2 * sums[2]);
  weighing_.noise_px = ratio > 0 && sums[1] > 0 ? std::sqrt(2 * sums[2] / (ratio * sums[1])) : HUGE_VAL;
  weighing_.kept = weighing_.statistic > 2;
  if (!weighing_.kept)
    for (int64_t k = 0; k < 2 * count; ++k) r[k] -= delta[std::size_t(k)];
}

void driver::set_scan_refinement(scan_refinement r) {
  if (share_.world_size > 1 && share_.kind != shard::mode::patterns)
    fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct.positions] refine_scan_map = true on ", share_.world_size,
         " ranks needs [parallel] sharding = \"patterns\" (each position's gradient has one owner)");
  if (!options_.held_out.empty() && r.options().enabled)
    fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] validation_fraction needs the positions held ([reconstruct.positions] "
         "refine_scan_map = false): a held-out pattern has no gradient to move its position by");
  scan_ = std::move(r);
  scan_enabled_ = true;
}

void driver::want_position_gradient(bool on) {
  if (on == position_gradient_on_ || engine_.vtable->set_position_gradient == nullptr) return;
  if (!options_.positions.enabled && !scan_enabled_) return;  // the engine has none to turn on or off
  check_status(engine_.vtable->set_position_gradient(engine_.instance, on ? 1 : 0), "engine set_position_gradient");
  position_gradient_on_ = on;
}

void driver::step_scan_map(int64_t epoch) {
  if (!scan_enabled_ || !scan_.due(epoch)) return;
  const char* what = "scan map refinement";
  DLTensor pos = host_tensor(engine_, TYCHO_TENSOR_POSITIONS, what);
  DLTensor grad = host_tensor(engine_, TYCHO_TENSOR_POSITIONS_GRAD, what);
  DLTensor probe = host_tensor(engine_, TYCHO_TENSOR_PROBE, what);
  void* stream = engine_.vtable->stream ? engine_.vtable->stream(engine_.instance) : nullptr;
  const bool several = share_.world_size > 1;
  const scan_refinement::rank_sum sum = [&](std::vector<double>& v) {
    if (several) sum_host_doubles(v, stream);
  };
  double C10_slope = 0;
  if (!probe_gradient_.empty())
    with_complex_values(probe, what, [&](auto* p) {
      C10_slope = defocus_slope(p, probe_gradient_.data(), probe.shape[0], probe.shape[1], probe.shape[2],
                                scan_.options().dk_invA.data(), scan_.options().wavelength_A);
    });
  const scan_refinement_move move = scan_.step(epoch, data_of<const double>(grad), C10_slope, data_of<double>(pos), sum);
  if (move.moved && !scan_.last_report().empty()) scan_log_.push_back(scan_.last_report());
  if (move.delta_C10_A != 0)
    with_complex_values(probe, what, [&](auto* p) {
      change_defocus(p, probe.shape[0], probe.shape[1], probe.shape[2], scan_.options().dk_invA.data(),
                     scan_.options().wavelength_A, move.delta_C10_A);
    });
}

void driver::add_probe_gradient(const DLTensor& grad) {
  require_host(grad, "scan map refinement of C10");
  const int64_t n = element_count(grad);
  if (probe_gradient_.empty()) probe_gradient_.assign(std::size_t(n), std::complex<double>(0, 0));
  with_complex_values(grad, "scan map refinement of C10", [&](auto* g) {
    for (int64_t k = 0; k < n; ++k) probe_gradient_[std::size_t(k)] += std::complex<double>(g[k]);
  });
}

void driver::gather_positions(void* stream) {
  const DLTensor pos = host_tensor(engine_, TYCHO_TENSOR_POSITIONS, "position correction");
  gathered_positions_.assign(std::size_t(2 * n_patterns_), 0.0);
  std::copy(data_of<const double>(pos), data_of<const double>(pos) + 2 * pos.shape[0],
            gathered_positions_.begin() + 2 * share_.first);
  sum_host_doubles(gathered_positions_, stream);  // each entry is one rank's value plus zeros: exact
}

void driver::sum_host_doubles(std::vector<double>& values, void* stream) {
  int64_t shape[1] = {int64_t(values.size())};
  DLTensor t{values.data(), {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, shape, nullptr, 0};
  collectives_->sum_in_place(t, stream);
}

void driver::apply_constraints(uint32_t targets, int64_t epoch, int64_t batch, int64_t batches,
                               const double (&rate_factor)[2], void* stream) {
  DLTensor object{}, probe{}, positions{};
  bool fetched = false;
  for (const constraint_binding& c : options_.constraints) {
    if ((c.acts_on & targets) == 0 || epoch < c.first_iteration || (c.last_iteration > 0 && epoch > c.last_iteration))
      continue;
    if (!fetched) {  // views on the engine's memory, valid until its next call
      object = engine_tensor(engine_, TYCHO_TENSOR_OBJECT);
      probe = engine_tensor(engine_, TYCHO_TENSOR_PROBE);
      if (targets & TYCHO_CONSTRAINT_POSITIONS) positions = engine_tensor(engine_, TYCHO_TENSOR_POSITIONS);
      fetched = true;
    }
    tycho_constraint_state st{};
    st.struct_size = sizeof(st);
    st.object = &object;
    st.probe = &probe;
    st.positions = (targets & TYCHO_CONSTRAINT_POSITIONS) ? &positions : nullptr;
    st.iteration = epoch;
    st.batch = batch;
    st.batches = batches;
    st.stream = stream;
    st.object_rate_factor = rate_factor[0];
    st.probe_rate_factor = rate_factor[1];
    // Stepping tiles, the object changes only inside the batch's boxes: a pointwise constraint
    // need not visit the rest, which it saw when it last changed (the initial object, ones or a
    // saved state, is left as it is until a batch touches it, as a whole-object step leaves
    // what it does not change).
    if (tiles_ && (targets & TYCHO_CONSTRAINT_OBJECT)) {
      st.n_object_boxes = int64_t(boxes_.size() / 4);
      st.object_boxes = boxes_.data();
    }
    check_status(c.vtable->apply(c.instance, &st), cat(c.name, " apply"));
  }
}

}  // namespace tycho
