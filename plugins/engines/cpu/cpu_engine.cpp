#include "cpu_engine.hpp"

#include "pointwise.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

namespace tycho::cpu {

using namespace tycho::sdk;

// Per-thread buffers: nothing is shared while a batch runs but the read-only inputs; the
// object and probe gradients are accumulated per thread and summed once per batch.
template <class Real>
struct cpu_engine<Real>::thread_scratch {
  fft_buffer<Real> shifted_probe, wave, work, input;  // input: what each transform reads (and destroys)
  // Multislice / mixed state: the wave entering each slice, per mode ((m, s) at m·S + s; only
  // with S > 1 or M > 1), and each mode's far field.
  std::vector<fft_buffer<Real>> slice_waves, far_fields;
  // The current group's A and B (cpu_engine.hpp), one of each per probe mode.
  std::vector<fft_buffer<Real>> group_probe, group_grad;
  // With a position gradient: A'_k = F0⁻¹[f0 · r0 · F[P_k]/M], the group's probe differentiated
  // along axis 0 (still in Fourier space along axis 1), and the ramp f0 · r0 it is made with.
  std::vector<fft_buffer<Real>> group_probe_d0;
  std::vector<complex> ramp0_d0;
  std::vector<complex> column_sums;  // group_position_gradient's (2, N1)
  double group_delta0 = 0;
  std::vector<Real> intensity, dloss;
  std::vector<float> measured;  // one pattern of integer counts, widened (exactly) for the loss
  std::vector<complex> ramp0, ramp1;
  std::vector<complex> object_grad, probe_spectrum_grad;  // (S, H, W), (M, N0, N1)
  int64_t row_min = 0, row_max = -1;  // rows of object_grad touched in this batch
  int64_t col_min = 0, col_max = -1;  // and its columns (the windows' bounding box)
  double loss = 0;
  double pattern_loss = 0;  // the loss of the pattern under way (what the loss component adds)
  // Deterministic sums: the object's and the probe's (re, im) integers, what the loops saw, and
  // the loss summed exactly. By class, probe_fixed is one class's (M, N0, N1): the class this
  // thread's run starts in when an earlier run holds that class's first positions (`carry`);
  // the thread owns the classes that start in its run and adds their shares straight into the
  // rank's sums (`class_sums`: the group under way's).
  std::vector<int64_t> object_fixed, probe_fixed;
  int64_t carry = -1;
  int64_t* class_sums = nullptr;
  bool class_first = false;
  fixed_tally object_tally, probe_tally;
  sdk::fixed_point::exact_sum loss_exact;
  bool fused_loss = false;  // the loss's evaluate_far_field serves this thread (cleared if it refuses)
  tycho_status status = TYCHO_OK;
  std::string error;
};

namespace {
int64_t frequency(int64_t i, int64_t n) { return i < (n + 1) / 2 ? i : i - n; }

// e[k] = exp(sign · 2πi f(k) δ / n) for the n DFT frequencies f(k) of natural order.
template <class Real>
void fill_ramp(std::vector<std::complex<Real>>& e, int64_t n, double delta, double sign) {
  e.resize(std::size_t(n));
  for (int64_t k = 0; k < n; ++k) {
    double phase = sign * 2.0 * M_PI * double(frequency(k, n)) * delta / double(n);
    e[std::size_t(k)] = std::complex<Real>(Real(std::cos(phase)), Real(std::sin(phase)));
  }
}

// The n values of a complex64 or complex128 tensor, in the engine's precision.
template <class Real>
void assign_complex(std::vector<std::complex<Real>>& dst, const DLTensor& t, int64_t n) {
  if (same_dtype(t.dtype, dtype_complex128)) {
    const auto* z = data_of<const std::complex<double>>(t);
    dst.assign(z, z + n);
  } else {
    const auto* z = data_of<const std::complex<float>>(t);
    dst.assign(z, z + n);
  }
}

template <class Real>
constexpr DLDataType real_dtype() {
  return sizeof(Real) == 8 ? dtype_float64 : dtype_float32;
}
template <class Real>
constexpr DLDataType complex_dtype() {
  return sizeof(Real) == 8 ? dtype_complex128 : dtype_complex64;
}
}  // namespace

std::unique_ptr<engine_base> make_engine(const tycho_engine_setup& setup, const engine_options& options) {
  if (options.double_precision) return std::make_unique<cpu_engine<double>>(setup, options);
  return std::make_unique<cpu_engine<float>>(setup, options);
}

template <class Real>
cpu_engine<Real>::cpu_engine(const tycho_engine_setup& setup, const engine_options& options) {
  // The setup's tensors, shapes, loss and windows were checked by the SDK's engine adapter
  // (tycho/sdk/engine.hpp) before this runs; the targets come as a tensor or, streamed
  // (ABI 1.3), through the host's reader (checked there too).
  const bool has_1_3 = setup.struct_size >= offsetof(tycho_engine_setup, target_reader) + sizeof(void*);
  reader_ = has_1_3 && setup.targets == nullptr ? setup.target_reader : nullptr;
  if (reader_ != nullptr) {
    patterns_ = reader_->shape[0];
    n0_ = reader_->shape[1];
    n1_ = reader_->shape[2];
    batch_row_.assign(std::size_t(patterns_), 0);
  } else {
    patterns_ = setup.targets->shape[0];
    n0_ = setup.targets->shape[1];
    n1_ = setup.targets->shape[2];
  }
  h_ = setup.object_init->shape[1];
  w_ = setup.object_init->shape[2];
  slices_ = setup.object_init->shape[0];
  modes_ = setup.probe_init->shape[0];
  // Fields appended in ABI 1.2 (a 1.1 host's setup ends before them: one slice, no gradient).
  const bool has_1_2 = setup.struct_size >= offsetof(tycho_engine_setup, position_gradient) + sizeof(int32_t);
  position_gradient_ = has_1_2 && setup.position_gradient != 0;
  if (slices_ > 1) {
    const auto* hk = data_of<const std::complex<double>>(*setup.slice_propagator);
    propagator_.resize(std::size_t(n0_ * n1_));
    const double inv_m = 1.0 / double(n0_ * n1_);
    for (int64_t k = 0; k < n0_ * n1_; ++k) {
      if (!std::isfinite(hk[k].real()) || !std::isfinite(hk[k].imag()))
        fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: slice_propagator holds a non-finite value at ", k);
      propagator_[std::size_t(k)] = complex(hk[k] * inv_m);
    }
  }
  mask_ = setup.mask != nullptr ? data_of<const uint8_t>(*setup.mask) : nullptr;
  if (reader_ == nullptr) {
    if (setup.targets->dtype.code == kDLUInt)
      counts_ = data_of<const uint16_t>(*setup.targets);
    else
      targets_ = data_of<const float>(*setup.targets);
  }
  target_scale_ = setup.target_scale;
  loss_ = setup.loss;
  // The loss's fused path (appended to tycho_loss_vtable in ABI 1.3), where the loss has it.
  const bool loss_has_far_field =
      loss_.vtable->struct_size >= offsetof(tycho_loss_vtable, evaluate_far_field) + sizeof(void*) &&
      loss_.vtable->evaluate_far_field != nullptr;

  const double* pos = data_of<const double>(*setup.positions_px);
  positions_.assign(pos, pos + 2 * patterns_);
  assign_complex(object_, *setup.object_init, slices_ * h_ * w_);
  assign_complex(probe_, *setup.probe_init, modes_ * n0_ * n1_);
  position_grad_.assign(positions_.size(), 0.0);
  frequency1_.resize(std::size_t(n1_));
  for (int64_t b = 0; b < n1_; ++b) frequency1_[std::size_t(b)] = double(frequency(b, n1_)) / double(n1_);
  object_grad_.assign(object_.size(), complex(0));
  probe_grad_.assign(probe_.size(), complex(0));

  threads_ = options.threads > 0 ? options.threads : omp_get_max_threads();
  kernels_ = &pointwise_for_this_cpu<Real>();
  // The grouped shifts are written for one slice (any number of modes) and no position gradient.
  // With a position gradient the groups are allowed too: the host turns the gradient off on the
  // iterations that do not move positions (set_position_gradient), and those take them.
  shift_groups_allowed_ = options.shift_groups && slices_ == 1;
  // The grouped path computes the position gradient too (float sums: the deterministic ones keep
  // the per-position path on the iterations that move positions, whose choice would otherwise
  // depend on how the ranks cut the batch).
  gradient_groups_ = shift_groups_allowed_ && position_gradient_ && !options.deterministic;
  shift_groups_ = shift_groups_allowed_ && (!position_gradient_ || gradient_groups_);
  // Which path runs, and why not the grouped one where it was asked for: the two differ in speed.
  const char* path = gradient_groups_
                         ? "grouped sub-pixel shifts, with the position gradient where a batch's positions share "
                           "row offsets (else per position)"
                     : shift_groups_allowed_ && position_gradient_
                         ? "grouped sub-pixel shifts, per-position ones on the iterations that move positions"
                     : shift_groups_allowed_ ? "grouped sub-pixel shifts"
                     : !options.shift_groups ? "per-position shifts (shift_groups = false)"
                                             : "per-position shifts (the grouped ones need one slice)";
  log(TYCHO_LOG_INFO, "cpu", cat(sizeof(Real) == 8 ? "float64" : "float32", ", ", threads_, " threads, ",
                                 kernels_->instruction_set, " pointwise loops, ", path,
                                 options.deterministic ? ", deterministic sums" : ", float sums (deterministic = false)"));
  fft_ = std::make_unique<fft_plan_2d<Real>>(n0_, n1_, options.measure_fft);
  if (shift_groups_allowed_) {
    rows_ = std::make_unique<fft_plan_axis<Real>>(n0_, n1_, 1, options.measure_fft);
    columns_ = std::make_unique<fft_plan_axis<Real>>(n0_, n1_, 0, options.measure_fft);
  }
  const int64_t m = n0_ * n1_;
  deterministic_ = options.deterministic;
  group_grid_ = options.shift_group_grid_px;
  host_finishes_ = options.host_finishes;
  batch_size_ = std::max<int64_t>(1, options.batch_size);
  scan_patterns_ = options.scan_positions != nullptr ? options.scan_patterns : patterns_;
  if (deterministic_) find_classes(options);
  for (int t = 0; t < threads_; ++t) {
    auto s = std::make_unique<thread_scratch>();
    s->shifted_probe = make_fft_buffer<Real>(m);
    s->wave = make_fft_buffer<Real>(m);
    s->work = make_fft_buffer<Real>(m);
    s->input = make_fft_buffer<Real>(m);
    if (shift_groups_allowed_) {
      for (int64_t k = 0; k < modes_; ++k) {
        s->group_probe.push_back(make_fft_buffer<Real>(m));
        if (!deterministic_) s->group_grad.push_back(make_fft_buffer<Real>(m));
        if (gradient_groups_) s->group_probe_d0.push_back(make_fft_buffer<Real>(m));
      }
    }
    s->fused_loss = loss_has_far_field;
    s->intensity.resize(std::size_t(m));
    s->dloss.resize(std::size_t(m));
    if (slices_ > 1 || modes_ > 1) {
      for (int64_t k = 0; k < slices_ * modes_; ++k) s->slice_waves.push_back(make_fft_buffer<Real>(m));
      for (int64_t k = 0; k < modes_; ++k) s->far_fields.push_back(make_fft_buffer<Real>(m));
    }
    if (deterministic_) {
      s->object_fixed.assign(2 * object_.size(), 0);
      s->probe_fixed.assign(std::size_t(2 * modes_ * m), 0);
    } else {
      s->object_grad.assign(object_.size(), complex(0));
      s->probe_spectrum_grad.assign(std::size_t(modes_ * m), complex(0));
    }
    scratch_.push_back(std::move(s));
  }
  if (deterministic_) {
    const int64_t classes = by_class_ ? int64_t(class_delta0_.size()) : 1;
    // The object's sums last: with a gradient region (compact batches) only its boxes, packed, so
    // the host's sum over the ranks and the conversion cost the batch's part, not the object.
    probe_at_ = 0;
    header_at_ = 2 * classes * modes_ * m;
    object_at_ = header_at_ + sdk::fixed_point::header::words(2);
    sums_.assign(std::size_t(object_at_) + 2 * object_.size(), 0);
    sums_view_ = tensor_view(sums_.data(), dtype_int64, {int64_t(sums_.size())});
    // At most batch_size positions a batch (of every rank's: the same grids on every rank), each
    // adding one value per mode to an element.
    grids_ = sdk::fixed_point::grid_schedule(2, std::min(batch_size_, scan_patterns_) * modes_);
  }
  constexpr DLDataType c = complex_dtype<Real>();
  views_[TYCHO_TENSOR_OBJECT] = tensor_view(object_.data(), c, {slices_, h_, w_});
  views_[TYCHO_TENSOR_PROBE] = tensor_view(probe_.data(), c, {modes_, n0_, n1_});
  views_[TYCHO_TENSOR_OBJECT_GRAD] = tensor_view(object_grad_.data(), c, {slices_, h_, w_});
  views_[TYCHO_TENSOR_PROBE_GRAD] = tensor_view(probe_grad_.data(), c, {modes_, n0_, n1_});
  views_[TYCHO_TENSOR_POSITIONS] = tensor_view(positions_.data(), dtype_float64, {patterns_, 2});
  views_[TYCHO_TENSOR_POSITIONS_GRAD] = tensor_view(position_grad_.data(), dtype_float64, {patterns_, 2});
}

template <class Real>
cpu_engine<Real>::~cpu_engine() = default;

template <class Real>
DLTensor* cpu_engine<Real>::tensor(tycho_tensor_id id) {
  return views_[id].get();  // the adapter has checked the id
}

template <class Real>
DLTensor* cpu_engine<Real>::fixed_point_sums() {
  return deterministic_ ? sums_view_.get() : nullptr;
}

// The scan's distinct row offsets δ0 (as item() rounds them), when the grouped path's
// deterministic sums keep the probe's by class (cpu_engine.hpp): at most half a batch of classes
// (else a class gathers too few positions per batch to pay for its column pass and its share of
// the ranks' sum: at most a quarter of a batch of them, on average 4 positions a class and batch;
// the memory plan counts that bound), at most 256 MiB of class sums. Decided from every rank's
// positions alone, so alike on every rank.
template <class Real>
void cpu_engine<Real>::find_classes(const engine_options& options) {
  if (!shift_groups_) return;
  // The classes of every rank's positions, so that the sums' layout is the same on every rank.
  const double* scan = options.scan_positions != nullptr ? options.scan_positions : positions_.data();
  const int64_t scan_patterns = options.scan_positions != nullptr ? options.scan_patterns : patterns_;
  class_delta0_.resize(std::size_t(scan_patterns));
  for (int64_t j = 0; j < scan_patterns; ++j) class_delta0_[std::size_t(j)] = row_offset(scan[2 * j]);
  std::sort(class_delta0_.begin(), class_delta0_.end());
  class_delta0_.erase(std::unique(class_delta0_.begin(), class_delta0_.end()), class_delta0_.end());
  const double classes = double(class_delta0_.size());
  const double bytes = classes * double(modes_) * double(n0_ * n1_) * 16.0;
  by_class_ = 4 * int64_t(classes) <= std::max<int64_t>(4, std::min(options.batch_size, scan_patterns)) &&
              bytes <= 256.0 * 1048576.0;
  if (!by_class_) {
    log(TYCHO_LOG_INFO, "cpu", cat("deterministic sums: ", class_delta0_.size(),
                                   " row offsets, too many to sum by class: each position's probe share whole"));
    class_delta0_.clear();
    return;
  }
  class_of_.resize(std::size_t(patterns_));
  for (int64_t j = 0; j < patterns_; ++j)
    class_of_[std::size_t(j)] =
        std::lower_bound(class_delta0_.begin(), class_delta0_.end(), row_offset(positions_[2 * j])) -
        class_delta0_.begin();
  by_class_ = true;
  log(TYCHO_LOG_INFO, "cpu", cat("deterministic sums: the probe's by ", class_delta0_.size(), " row-offset classes"));
}

template <class Real>
double cpu_engine<Real>::row_offset(double centre0) const {
  const double t0 = centre0 - double(n0_ / 2);
  const double delta0 = grouped_offset(t0 - std::floor(t0));
  return delta0 >= 1 ? 0.0 : delta0;  // item() carries a whole pixel into the window's corner
}

// The axis-0 offset δ0 ∈ [0, 1) the grouped path shifts by: on the grid shift_group_grid_px, else
// (float32) on 2⁻²⁸ px, else exact. May round up to 1 (a whole pixel: the caller carries it).
template <class Real>
double cpu_engine<Real>::grouped_offset(double delta0) const {
  if (!shift_groups_) return delta0;
  if (group_grid_ > 0) return std::nearbyint(delta0 / group_grid_) * group_grid_;
  if (sizeof(Real) == 4) return std::nearbyint(delta0 * 268435456.0) / 268435456.0;
  return delta0;
}

template <class Real>
typename cpu_engine<Real>::batch_item cpu_engine<Real>::exact_item(int64_t j) const {
  batch_item it;
  it.pattern = j;
  const double t0 = positions_[2 * j] - double(n0_ / 2);
  const double t1 = positions_[2 * j + 1] - double(n1_ / 2);
  // The host moves positions between batches (position correction): a window outside the
  // object would read and write past it.
  if (!(t0 >= 0 && t1 >= 0 && t0 + double(n0_) <= double(h_) && t1 + double(n1_) <= double(w_)))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: the window of position ", j, " (centre ", positions_[2 * j], ", ",
         positions_[2 * j + 1], " px) has left the object (", h_, " x ", w_, " px)");
  it.i0 = int64_t(std::floor(t0));
  it.j0 = int64_t(std::floor(t1));
  it.delta0 = t0 - double(it.i0);
  it.delta1 = t1 - double(it.j0);
  return it;
}

template <class Real>
typename cpu_engine<Real>::batch_item cpu_engine<Real>::item(int64_t j) const {
  batch_item it = exact_item(j);
  if (shift_groups_) {
    // Offsets on the grouped path's grid (cpu_engine.hpp), so that positions whose axis-0 offsets
    // differ by less share one group; float32 without a grid: on 2⁻²⁸ px, so that rows repeating an
    // offset up to the float64 rounding of the positions do. An offset rounded up to a whole pixel
    // moves the window's corner instead (it stays inside the object: t0 + n0 ≤ h with δ0 > 0 means
    // i0 + 1 + n0 ≤ h).
    it.delta0 = grouped_offset(it.delta0);
    if (it.delta0 >= 1) {
      it.i0 += 1;
      it.delta0 = 0;
    }
    if (sizeof(Real) == 4) it.delta1 = std::nearbyint(it.delta1 * 268435456.0) / 268435456.0;
  }
  if (by_class_) {
    it.klass = class_of_[std::size_t(j)];
    // The grouped path never moves positions; a host that did would break the classes' sums.
    if (class_delta0_[std::size_t(it.klass)] != it.delta0)
      fail(TYCHO_ERR_INTERNAL, "cpu engine: position ", j, " moved under the grouped shifts' row-offset classes");
  }
  return it;
}

// The loss of pattern j from s.intensity: adds to s.pattern_loss, dL/dI into s.dloss.
template <class Real>
void cpu_engine<Real>::evaluate_loss(int64_t j, thread_scratch& s) {
  const int64_t m = n0_ * n1_;
  // Model intensity and dL/dI in the engine's precision, the measured data float32.
  tensor_view model(s.intensity.data(), real_dtype<Real>(), {1, n0_, n1_});
  const int64_t row = reader_ != nullptr ? batch_row_[std::size_t(j)] : j;  // streamed: the batch's row
  const float* measured_data = counts_ != nullptr ? nullptr : targets_ + row * m;
  if (counts_ != nullptr) {
    s.measured.resize(std::size_t(m));
    kernels_->widen(counts_ + row * m, s.measured.data(), m);
    measured_data = s.measured.data();
  }
  tensor_view measured(const_cast<float*>(measured_data), dtype_float32, {1, n0_, n1_});
  tensor_view grad(s.dloss.data(), real_dtype<Real>(), {1, n0_, n1_});
  tensor_view mask(const_cast<uint8_t*>(mask_), dtype_uint8, {n0_, n1_});
  tycho_status st = loss_.vtable->evaluate(loss_.instance, model.get(), measured.get(),
                                           mask_ ? mask.get() : nullptr, target_scale_, grad.get(),
                                           &s.pattern_loss, nullptr);
  if (st != TYCHO_OK) throw loss_error(st, j);
}

// The loss component's failure on pattern j: it set its message on this (worker) thread; pass it
// on, it says what went wrong.
template <class Real>
error cpu_engine<Real>::loss_error(tycho_status st, int64_t j) const {
  const char* why = host() != nullptr ? host()->last_error() : nullptr;
  return error(st, cat("loss component failed on pattern ", j, ": ", why != nullptr && *why ? why : "(no message)"));
}

// The loss's fused path for pattern j's single far field `wave` (unnormalised, Ψ = wave/√M):
// adds to s.pattern_loss and writes into `g_spectrum` dL/dI · wave / M, the input of the inverse
// transform that gives ∂L/∂ψ* (what intensity + evaluate_loss + scale_by compute, in one pass
// and bit for bit; tycho_components.h). False when the loss does not take these tensors
// (TYCHO_ERR_UNSUPPORTED): this thread then uses the three steps from now on.
template <class Real>
bool cpu_engine<Real>::loss_far_field(int64_t j, thread_scratch& s, const complex* wave, complex* g_spectrum) {
  if (!s.fused_loss) return false;
  const int64_t m = n0_ * n1_;
  const int64_t row = reader_ != nullptr ? batch_row_[std::size_t(j)] : j;
  constexpr DLDataType c = complex_dtype<Real>();
  tensor_view far(const_cast<complex*>(wave), c, {1, 1, n0_, n1_});
  tensor_view grad(g_spectrum, c, {1, 1, n0_, n1_});
  tensor_view measured = counts_ != nullptr
                             ? tensor_view(const_cast<uint16_t*>(counts_ + row * m), dtype_uint16, {1, n0_, n1_})
                             : tensor_view(const_cast<float*>(targets_ + row * m), dtype_float32, {1, n0_, n1_});
  tensor_view mask(const_cast<uint8_t*>(mask_), dtype_uint8, {n0_, n1_});
  const double inv_m = 1.0 / double(m);
  const tycho_status st = loss_.vtable->evaluate_far_field(loss_.instance, far.get(), inv_m, measured.get(),
                                                           mask_ ? mask.get() : nullptr, target_scale_, inv_m,
                                                           grad.get(), &s.pattern_loss, nullptr);
  if (st == TYCHO_ERR_UNSUPPORTED) {
    s.fused_loss = false;
    return false;
  }
  if (st != TYCHO_OK) throw loss_error(st, j);
  return true;
}

template <class Real>
void cpu_engine<Real>::model_and_object_gradient(const batch_item& it, thread_scratch& s, const complex* pj) {
  const int64_t m = n0_ * n1_;
  const int64_t j = it.pattern;
  complex* in = s.input.get();
  // Exit wave and far field.
  complex* wave = s.wave.get();
  const complex* obj = object_.data() + it.i0 * w_ + it.j0;
  kernels_->multiply_patch(pj, obj, w_, in, n0_, n1_);
  fft_->forward(in, wave);  // unnormalised: Ψ = wave / √M
  // g = F⁻¹[dL/dI · Ψ]: with unnormalised transforms that is backward(dL/dI · wave) / M.
  if (!loss_far_field(j, s, wave, in)) {
    const Real inv_m = Real(1) / Real(m);
    kernels_->intensity(wave, inv_m, s.intensity.data(), m);
    evaluate_loss(j, s);
    kernels_->scale_by(wave, s.dloss.data(), inv_m, in, m);
  }
  fft_->backward(in, wave);

  // Object gradient on the patch, and conj(O_patch)·g for the probe gradient, in one pass.
  object_products(pj, 0, it, wave, in, s);
  s.row_min = std::min(s.row_min, it.i0);
  s.row_max = std::max(s.row_max, it.i0 + n0_ - 1);
  s.col_min = std::min(s.col_min, it.j0);
  s.col_max = std::max(s.col_max, it.j0 + n1_ - 1);
}

template <class Real>
void cpu_engine<Real>::object_products(const complex* psi, int64_t slice, const batch_item& it, const complex* g,
                                       complex* probe_term, thread_scratch& s) {
  const int64_t at = slice * h_ * w_ + it.i0 * w_ + it.j0;
  const complex* obj = object_.data() + at;
  if (deterministic_)
    kernels_->gradient_products_fixed(psi, obj, w_, g, s.object_fixed.data() + 2 * at, probe_term, n0_, n1_,
                                      sdk::fixed_point::scale_of(grids_.grid(0)), &s.object_tally);
  else
    kernels_->gradient_products(psi, obj, w_, g, s.object_grad.data() + at, probe_term, n0_, n1_);
}

template <class Real>
void cpu_engine<Real>::add_probe_share(const complex* spectrum, int64_t k, thread_scratch& s,
                                       bool by_row) {
  const int64_t m = n0_ * n1_;
  if (!deterministic_) {
    kernels_->add_times_conj_ramp(spectrum, s.ramp0.data(), s.ramp1.data(), s.probe_spectrum_grad.data() + k * m,
                                  n0_, n1_);
    return;
  }
  const double scale = sdk::fixed_point::scale_of(grids_.grid(1));
  if (by_row) {  // a row spectrum into its class's sums (begin_group chose them)
    kernels_->add_times_conj_columns_fixed(spectrum, s.ramp1.data(), s.class_sums + 2 * k * m, n0_, n1_, scale,
                                           &s.probe_tally, s.class_first);
    if (k == modes_ - 1) s.class_first = false;  // the group's first position wrote every mode's values
  } else {
    kernels_->add_times_conj_ramp_fixed(spectrum, s.ramp0.data(), s.ramp1.data(), s.probe_fixed.data() + 2 * k * m,
                                        n0_, n1_, scale, &s.probe_tally);
  }
}

// Pattern `it` through the model and back, for any number of slices and modes: the exit waves,
// the loss, the object gradient (into s.object_grad), and per mode k the probe gradient's input
// conj(O_patch)·g in s.input, handed to probe_gradient(k). How the sub-pixel shift is made is
// the caller's: shifted_probe(k, out) writes mode k's shifted probe P_kj into `out` (the
// per-position 2-D shift, or a group's axis-0 half and a row pass), probe_gradient(k) takes it
// back into mode k's spectrum accumulator.
template <class Real>
template <class ShiftedProbe, class ProbeGradient>
void cpu_engine<Real>::model_and_gradients(const batch_item& it, thread_scratch& s, ShiftedProbe&& shifted_probe,
                                           ProbeGradient&& probe_gradient) {
  complex* in = s.input.get();
  complex* work = s.work.get();
  const int64_t m = n0_ * n1_;
  // The pattern's loss on its own, then into the thread's sum: exactly with deterministic sums.
  s.pattern_loss = 0;
  auto add_pattern_loss = [&] {
    if (deterministic_)
      s.loss_exact.add(s.pattern_loss);
    else
      s.loss += s.pattern_loss;
  };
  if (slices_ == 1 && modes_ == 1) {
    complex* pj = s.shifted_probe.get();
    shifted_probe(0, pj);
    model_and_object_gradient(it, s, pj);
    add_pattern_loss();
    probe_gradient(0);
    return;
  }
  // Forward: every mode through every slice, keeping the wave entering each slice.
  const Real inv_m = Real(1) / Real(m);
  for (int64_t k = 0; k < modes_; ++k) {
    shifted_probe(k, s.slice_waves[std::size_t(k * slices_)].get());
    for (int64_t sl = 0; sl < slices_; ++sl) {
      const complex* psi = s.slice_waves[std::size_t(k * slices_ + sl)].get();
      const complex* obj = object_.data() + sl * h_ * w_ + it.i0 * w_ + it.j0;
      kernels_->multiply_patch(psi, obj, w_, in, n0_, n1_);
      if (sl + 1 < slices_) {
        fft_->forward(in, work);
        kernels_->multiply(work, propagator_.data(), in, m);
        fft_->backward(in, s.slice_waves[std::size_t(k * slices_ + sl + 1)].get());
      } else {
        fft_->forward(in, s.far_fields[std::size_t(k)].get());
      }
    }
  }
  // One mode: ∂L/∂Ψ* (scaled) straight into `in` where the loss can; else I = Σ_k |Ψ_k|² (modes in
  // order) and dL/dI from evaluate.
  const bool fused = modes_ == 1 && loss_far_field(it.pattern, s, s.far_fields[0].get(), in);
  if (!fused) {
    kernels_->intensity(s.far_fields[0].get(), inv_m, s.intensity.data(), m);
    for (int64_t k = 1; k < modes_; ++k)
      kernels_->add_intensity(s.far_fields[std::size_t(k)].get(), inv_m, s.intensity.data(), m);
    evaluate_loss(it.pattern, s);
  }
  add_pattern_loss();
  // Backward, mode by mode: g through the slices in reverse.
  complex* g = s.wave.get();
  for (int64_t k = 0; k < modes_; ++k) {
    if (!fused) kernels_->scale_by(s.far_fields[std::size_t(k)].get(), s.dloss.data(), inv_m, in, m);
    fft_->backward(in, g);
    for (int64_t sl = slices_ - 1; sl >= 0; --sl) {
      const complex* psi = s.slice_waves[std::size_t(k * slices_ + sl)].get();
      object_products(psi, sl, it, g, in, s);
      if (sl > 0) {  // ∂L/∂ψ_s* (in `in`) back through the propagation: F⁻¹[conj(H)·F[·]]
        fft_->forward(in, work);
        kernels_->multiply_conj(work, propagator_.data(), in, m);
        fft_->backward(in, g);
      }
    }
    probe_gradient(k);
  }
  s.row_min = std::min(s.row_min, it.i0);
  s.row_max = std::max(s.row_max, it.i0 + n0_ - 1);
  s.col_min = std::min(s.col_min, it.j0);
  s.col_max = std::max(s.col_max, it.j0 + n1_ - 1);
}

template <class Real>
void cpu_engine<Real>::process_pattern(const batch_item& it, thread_scratch& s, const complex* probe_spectrum) {
  fill_ramp(s.ramp0, n0_, it.delta0, -1.0);
  fill_ramp(s.ramp1, n1_, it.delta1, -1.0);
  complex* in = s.input.get();
  complex* work = s.work.get();
  const int64_t m = n0_ * n1_;

  // The shifted probe of mode k into `out` (probe_spectrum already carries the 1/M of the
  // round trip).
  auto shifted_probe = [&](int64_t k, complex* out) {
    kernels_->multiply_ramp(probe_spectrum + k * m, s.ramp0.data(), s.ramp1.data(), in, n0_, n1_);
    fft_->backward(in, out);
  };
  // ∂L/∂P_kj* is in `in`: its spectrum, back-shifted, into mode k's accumulator, and the
  // position gradient's share of mode k.
  double grad0 = 0, grad1 = 0;
  auto probe_gradient = [&](int64_t k) {
    fft_->forward(in, work);
    add_probe_share(work, k, s, false);
    if (!position_gradient_) return;
    // dL/dc_a = 2 Re Σ_k conj(W) · S · (−2πi f_a / N_a), S = F[P_kj] (unnormalised: the
    // spectrum with its 1/M times the ramp), W = F[∂L/∂P*] unnormalised.
    // Per row a: Σ_b Im t and Σ_b f1 · Im t in double, then grad0 += 4π f0 Σ Im t,
    // grad1 += 4π Σ f1 Im t. One vectorised pass over interleaved (re, im) values: S = (P̂ · r0) · r1
    // as std::complex computes it (-fcx-limited-range), Im t = Re W · Im S − Im W · Re S in double.
    const complex* ps = probe_spectrum + k * m;
    const Real* r1 = re(s.ramp1.data());
    const double* f1 = frequency1_.data();
    for (int64_t a = 0; a < n0_; ++a) {
      const Real* p = re(ps + a * n1_);
      const Real* w = re(work + a * n1_);
      const Real r0r = s.ramp0[std::size_t(a)].real(), r0i = s.ramp0[std::size_t(a)].imag();
      double row = 0, row_f1 = 0;
#pragma omp simd reduction(+ : row, row_f1)
      for (int64_t b = 0; b < n1_; ++b) {
        const Real xr = p[2 * b] * r0r - p[2 * b + 1] * r0i, xi = p[2 * b] * r0i + p[2 * b + 1] * r0r;
        const Real sr = xr * r1[2 * b] - xi * r1[2 * b + 1], si = xr * r1[2 * b + 1] + xi * r1[2 * b];
        const double im = double(w[2 * b]) * double(si) - double(w[2 * b + 1]) * double(sr);
        row += im;
        row_f1 += f1[b] * im;
      }
      // 2 Re[t · (−2πi f)] = 4π f · Im t
      grad0 += 4.0 * M_PI * (double(frequency(a, n0_)) / double(n0_)) * row;
      grad1 += 4.0 * M_PI * row_f1;
    }
  };

  model_and_gradients(it, s, shifted_probe, probe_gradient);
  if (position_gradient_) {
    position_grad_[std::size_t(2 * it.pattern)] = grad0;
    position_grad_[std::size_t(2 * it.pattern + 1)] = grad1;
  }
}

// A_k = F0⁻¹[r0 · F[P_k]/M] for every mode k: the probe shifted along axis 0, still in Fourier
// space along axis 1.
template <class Real>
void cpu_engine<Real>::begin_group(double delta0, thread_scratch& s, const complex* probe_spectrum) {
  if (by_class_) {  // this class's sums: the rank's when the class starts in this run, else the carry
    const int64_t klass = std::lower_bound(class_delta0_.begin(), class_delta0_.end(), delta0) - class_delta0_.begin();
    const int64_t words = 2 * modes_ * n0_ * n1_;
    s.class_sums = klass == s.carry ? s.probe_fixed.data() : sums_.data() + probe_at_ + klass * words;
    s.class_first = true;  // its first position writes them (no zeroing pass)
  }
  fill_ramp(s.ramp0, n0_, delta0, -1.0);
  complex* in = s.input.get();
  if (position_gradient_) {
    s.ramp0_d0.resize(std::size_t(n0_));
    for (int64_t a = 0; a < n0_; ++a)
      s.ramp0_d0[std::size_t(a)] = s.ramp0[std::size_t(a)] * Real(double(frequency(a, n0_)) / double(n0_));
  }
  for (int64_t k = 0; k < modes_; ++k) {
    if (position_gradient_) {
      kernels_->multiply_rows(probe_spectrum + k * n0_ * n1_, s.ramp0_d0.data(), in, n0_, n1_);
      columns_->backward(in, s.group_probe_d0[std::size_t(k)].get());
    }
    kernels_->multiply_rows(probe_spectrum + k * n0_ * n1_, s.ramp0.data(), in, n0_, n1_);
    columns_->backward(in, s.group_probe[std::size_t(k)].get());
    if (!deterministic_)
      std::fill(s.group_grad[std::size_t(k)].get(), s.group_grad[std::size_t(k)].get() + n0_ * n1_, complex(0));
  }
  s.group_delta0 = delta0;
}

// Each mode's group probe gradient B_k (axis 1 already in Fourier space): conj(r0) · F0[B_k] into
// the thread's spectrum accumulator of mode k.
template <class Real>
void cpu_engine<Real>::end_group(thread_scratch& s) {
  if (deterministic_) return;  // each position's share went to the sums on its own
  complex* work = s.work.get();
  for (int64_t k = 0; k < modes_; ++k) {
    columns_->forward(s.group_grad[std::size_t(k)].get(), work);  // destroys B_k: begin_group zeroes it
    kernels_->add_times_conj_rows(work, s.ramp0.data(), s.probe_spectrum_grad.data() + k * n0_ * n1_, n0_, n1_);
  }
}

// The position gradient's share of mode k on the grouped path, from W1 = F1[∂L/∂P_kj*] (rows
// transformed only). The per-position formula (process_pattern) sums over the 2-D spectrum; by
// Parseval along axis 0 alone the same sums run over (x0, k1): with S1 = r1 · A_k (F1 of the
// shifted probe) and A'_k = F0⁻¹[f0 · r0 · F[P_k]/M] (begin_group),
//   Σ conj(W) S f1 = Σ_{x0,k1} f1 · conj(W1) · r1 · A_k,   Σ conj(W) S f0 = Σ_{x0,k1} conj(W1) · r1 · A'_k,
// so dL/dc_1 = 4π Σ f1 Im[conj(W1) r1 A_k], dL/dc_0 = 4π Σ Im[conj(W1) r1 A'_k]: no transform of
// its own, one more column pass per group and mode.
template <class Real>
void cpu_engine<Real>::group_position_gradient(const complex* w1, int64_t k, thread_scratch& s, double& grad0,
                                               double& grad1) const {
  // r1 and f1 depend on k1 alone: first the columns' sums c[k1] = Σ_x0 conj(W1) A_k and
  // d[k1] = Σ_x0 conj(W1) A'_k (one vectorised pass), then Σ_k1 f1 Im[r1 c] and Σ_k1 Im[r1 d].
  s.column_sums.assign(std::size_t(2 * n1_), complex(0));
  complex* c = s.column_sums.data();
  complex* d = c + n1_;
  kernels_->add_conj_products_by_column(w1, s.group_probe[std::size_t(k)].get(), s.group_probe_d0[std::size_t(k)].get(),
                                        c, d, n0_, n1_);
  const double* f1 = frequency1_.data();
  double sum0 = 0, sum1 = 0;
  for (int64_t b = 0; b < n1_; ++b) {  // Im[r1 · z] = Re r1 · Im z + Im r1 · Re z
    const double rr = s.ramp1[std::size_t(b)].real(), ri = s.ramp1[std::size_t(b)].imag();
    sum1 += f1[b] * (rr * double(c[b].imag()) + ri * double(c[b].real()));
    sum0 += rr * double(d[b].imag()) + ri * double(d[b].real());
  }
  grad0 += 4.0 * M_PI * sum0;
  grad1 += 4.0 * M_PI * sum1;
}

template <class Real>
void cpu_engine<Real>::process_run(const batch_item* items, int64_t count, thread_scratch& s,
                                   const complex* probe_spectrum) {
  complex* in = s.input.get();
  complex* work = s.work.get();
  for (int64_t i = 0; i < count; ++i) {
    const batch_item& it = items[i];
    if (i == 0 || it.delta0 != s.group_delta0) {
      if (i > 0) end_group(s);
      begin_group(it.delta0, s, probe_spectrum);
    }
    fill_ramp(s.ramp1, n1_, it.delta1, -1.0);
    const complex* r1 = s.ramp1.data();
    // P_kj = F1⁻¹[r1 · A_k]: one pass of row transforms.
    auto shifted_probe = [&](int64_t k, complex* out) {
      kernels_->multiply_columns(s.group_probe[std::size_t(k)].get(), r1, in, n0_, n1_);
      rows_->backward(in, out);
    };
    // B_k += conj(r1) · F1[conj(O_patch)·g_k]. Deterministic: each position's conj(r1) · F1[·]
    // into its class's integers, or (no classes) its whole share, F[·] · conj(r0 r1).
    double grad0 = 0, grad1 = 0;
    auto probe_gradient = [&](int64_t k) {
      if (!deterministic_) {
        rows_->forward(in, work);
        kernels_->add_times_conj_columns(work, r1, s.group_grad[std::size_t(k)].get(), n0_, n1_);
        if (position_gradient_) group_position_gradient(work, k, s, grad0, grad1);
      } else if (by_class_) {
        rows_->forward(in, work);
        add_probe_share(work, k, s, true);
      } else {
        fft_->forward(in, work);
        add_probe_share(work, k, s, false);
      }
    };
    model_and_gradients(it, s, shifted_probe, probe_gradient);
    if (position_gradient_) {
      position_grad_[std::size_t(2 * it.pattern)] = grad0;
      position_grad_[std::size_t(2 * it.pattern + 1)] = grad1;
    }
  }
  if (count > 0) end_group(s);
}

// Streamed targets: the batch's rows from the host's reader, in the order of `indices`, read in
// place (the host's memory, valid until the next batch's read).
template <class Real>
void cpu_engine<Real>::read_batch_targets(const int64_t* indices, int64_t count) {
  const bool u16 = reader_->dtype.code == kDLUInt;
  const void* batch = nullptr;
  if (const tycho_status st = reader_->read(reader_->context, indices, count, &batch); st != TYCHO_OK) {
    const char* why = host() != nullptr ? host()->last_error() : nullptr;
    throw error(st, cat("cpu engine: reading the batch's targets failed: ", why != nullptr && *why ? why : "(no message)"));
  }
  if (batch == nullptr && count > 0) fail(TYCHO_ERR_INTERNAL, "cpu engine: the target reader gave no batch");
  for (int64_t i = 0; i < count; ++i) batch_row_[std::size_t(indices[i])] = i;
  targets_ = u16 ? nullptr : static_cast<const float*>(batch);
  counts_ = u16 ? static_cast<const uint16_t*>(batch) : nullptr;
}

template <class Real>
double cpu_engine<Real>::compute_batch(const int64_t* indices, int64_t count) {
  // Streamed targets: read once per batch (the deterministic sums' host may ask for a batch again;
  // the reader's buffer stays valid until its next read).
  if (reader_ != nullptr && !(count == int64_t(last_batch_.size()) && std::equal(indices, indices + count, last_batch_.begin()))) {
    read_batch_targets(indices, count);  // the adapter has checked the indices
    last_batch_.assign(indices, indices + count);
  }
  // With the position gradient the grouped path pays per group one more column pass per mode (1.5
  // transform-equivalents a group against 1 saved a position): it serves a batch whose positions
  // share row offsets (G groups, 1.5 G < count), the per-position path the others. Either path
  // models each position at the grouped path's offsets (item()): which one a batch takes depends on
  // how many positions it holds, and so on how the ranks cut the global batch; at exact offsets
  // the model moved with the rank count (3 ranks against 1, positions corrected from iteration 1:
  // the object 9e-4 apart after 8 iterations, against 5e-6 without shift groups).
  struct restore_groups {
    bool& flag;
    bool value;
    ~restore_groups() { flag = value; }
  } restore{shift_groups_, shift_groups_};
  std::vector<batch_item> items(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) items[std::size_t(i)] = item(indices[i]);
  if (shift_groups_) {  // stable: the same order, so the same sums, on every run
    std::stable_sort(items.begin(), items.end(),
                     [](const batch_item& a, const batch_item& b) { return a.delta0 < b.delta0; });
    if (position_gradient_) {
      int64_t groups = 0;
      for (int64_t i = 0; i < count; ++i)
        groups += i == 0 || items[std::size_t(i)].delta0 != items[std::size_t(i - 1)].delta0;
      if (3 * groups >= 2 * count) shift_groups_ = false;  // this batch per position, at the same offsets
    }
  }
  if (!deterministic_) return compute_float(items.data(), count);
  if (host_finishes_) {
    // The grids hold for batch_size positions (tycho/sdk/fixed_point.hpp); the host's batches,
    // cut over its ranks, never hold more.
    if (count > batch_size_)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: a batch of ", count, " positions, more than [reconstruct] ",
           "batch_size = ", batch_size_, ", for which the deterministic sums' grids are sized");
    compute_fixed(items.data(), count);
    return 0;  // the loss comes with finish_batch, over every rank
  }
  // No host sums these (one rank, an engine driven directly): settle each batch here.
  if (count > std::min(batch_size_, scan_patterns_))
    grids_ = sdk::fixed_point::grid_schedule(2, count * modes_);
  for (int attempt = 0;; ++attempt) {
    compute_fixed(items.data(), count);
    double loss = 0;
    if (!finish_batch(false, loss)) return loss;
    if (attempt >= 3) fail(TYCHO_ERR_INTERNAL, "cpu engine: the deterministic sums' grids did not settle");
  }
}

// F[P_k] / M for every mode k, shared read-only by all threads, then the batch over the threads.
template <class Real>
void cpu_engine<Real>::run_threads(const batch_item* items, int64_t count, const complex* probe_spectrum) {
  for (auto& s : scratch_) {
    s->loss = 0;
    s->row_min = h_;
    s->row_max = -1;
    s->col_min = w_;
    s->col_max = -1;
    s->status = TYCHO_OK;
    s->object_tally = {};
    s->probe_tally = {};
    s->loss_exact.clear();
  }
  auto guarded_call = [&](thread_scratch& s, auto&& call) {
    try {
      call();
    } catch (const error& e) {
      s.status = e.status;
      s.error = e.what();
    } catch (const std::exception& e) {
      s.status = TYCHO_ERR_INTERNAL;
      s.error = e.what();
    }
  };
  if (shift_groups_) {
    // Each thread a contiguous run of the sorted batch (fixed by the thread count alone), so the
    // per-thread sums, and the result, are bit for bit reproducible.
#pragma omp parallel num_threads(threads_)
    {
      const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
      const int64_t first = count * t / T, last = count * (t + 1) / T;
      thread_scratch& s = *scratch_[std::size_t(t)];
      // By class: the class this run starts in belongs to an earlier run when it started there.
      s.carry = by_class_ && first > 0 && first < last && items[first - 1].klass == items[first].klass
                    ? items[first].klass
                    : -1;
      guarded_call(s, [&] { process_run(items + first, last - first, s, probe_spectrum); });
    }
  } else {
    // A static schedule gives every thread the same patterns in the same order on every run.
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      thread_scratch& s = *scratch_[std::size_t(omp_get_thread_num())];
      if (s.status != TYCHO_OK) continue;
      guarded_call(s, [&] { process_pattern(items[i], s, probe_spectrum); });
    }
  }
  for (auto& s : scratch_)
    if (s->status != TYCHO_OK) throw error(s->status, s->error);
}

namespace {
// F[P_k] / M of every mode k into `spectrum` (M·N0·N1), through `input` and, with several modes,
// `mode_output` (FFTW's alignment for each mode's transform).
template <class Real>
void probe_spectra(const fft_plan_2d<Real>& fft, const std::vector<std::complex<Real>>& probe, int64_t modes, int64_t m,
                   std::complex<Real>* spectrum, std::complex<Real>* input, std::complex<Real>* mode_output) {
  const Real inv_m = Real(1) / Real(m);
  for (int64_t k = 0; k < modes; ++k) {
    std::copy(probe.begin() + k * m, probe.begin() + (k + 1) * m, input);
    std::complex<Real>* out = modes > 1 ? mode_output : spectrum;
    fft.forward(input, out);
    for (int64_t q = 0; q < m; ++q) spectrum[k * m + q] = out[q] * inv_m;
  }
}
}  // namespace

template <class Real>
void cpu_engine<Real>::position_information(const int64_t* indices, int64_t count, double counts_per_target_unit,
                                            double* out) {
  const int64_t m = n0_ * n1_;
  auto probe_spectrum = make_fft_buffer<Real>(modes_ * m), input = make_fft_buffer<Real>(m);
  fft_buffer<Real> mode_output = modes_ > 1 ? make_fft_buffer<Real>(m) : fft_buffer<Real>();
  probe_spectra(*fft_, probe_, modes_, m, probe_spectrum.get(), input.get(), mode_output.get());
  const double counts = counts_per_target_unit / target_scale_;  // counts per unit of model intensity
  const double inv_m = 1.0 / double(m);
  // −2π f_a / N_a: the derivative of the shift ramp exp(−2πi f·δ/N) by δ_a, over i.
  std::vector<double> k0(static_cast<std::size_t>(n0_)), k1(static_cast<std::size_t>(n1_));
  for (int64_t a = 0; a < n0_; ++a) k0[std::size_t(a)] = -2.0 * M_PI * double(frequency(a, n0_)) / double(n0_);
  for (int64_t b = 0; b < n1_; ++b) k1[std::size_t(b)] = -2.0 * M_PI * double(frequency(b, n1_)) / double(n1_);
  std::vector<tycho_status> status(static_cast<std::size_t>(threads_), TYCHO_OK);
  std::vector<std::string> why(static_cast<std::size_t>(threads_));
#pragma omp parallel num_threads(threads_)
  {
    const int t = omp_get_thread_num();
    // wave, ∂_0 wave, ∂_1 wave; the transforms' input and output.
    fft_buffer<Real> wave[3] = {make_fft_buffer<Real>(m), make_fft_buffer<Real>(m), make_fft_buffer<Real>(m)};
    fft_buffer<Real> in = make_fft_buffer<Real>(m), work = make_fft_buffer<Real>(m);
    std::vector<complex> r0, r1;
    std::vector<double> I(static_cast<std::size_t>(m)), d0(static_cast<std::size_t>(m)), d1(static_cast<std::size_t>(m));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      if (status[std::size_t(t)] != TYCHO_OK) continue;
      try {
        const batch_item it = exact_item(indices[i]);  // exact offsets: no group's grid here
        const int64_t i0 = it.i0, j0 = it.j0;
        fill_ramp(r0, n0_, it.delta0, -1.0);
        fill_ramp(r1, n1_, it.delta1, -1.0);
        std::fill(I.begin(), I.end(), 0.0);
        std::fill(d0.begin(), d0.end(), 0.0);
        std::fill(d1.begin(), d1.end(), 0.0);
        for (int64_t k = 0; k < modes_; ++k) {
          const complex* ps = probe_spectrum.get() + k * m;
          for (int v = 0; v < 3; ++v) {
            for (int64_t a = 0; a < n0_; ++a)
              for (int64_t b = 0; b < n1_; ++b) {
                const std::size_t q = std::size_t(a * n1_ + b);
                complex z = ps[q] * r0[std::size_t(a)] * r1[std::size_t(b)];
                if (v == 1) z *= complex(0, Real(k0[std::size_t(a)]));
                if (v == 2) z *= complex(0, Real(k1[std::size_t(b)]));
                in[q] = z;
              }
            fft_->backward(in.get(), wave[v].get());
          }
          for (int64_t sl = 0; sl < slices_; ++sl) {
            const complex* obj = object_.data() + sl * h_ * w_ + i0 * w_ + j0;
            for (int v = 0; v < 3; ++v) {
              kernels_->multiply_patch(wave[v].get(), obj, w_, in.get(), n0_, n1_);
              if (sl + 1 < slices_) {
                fft_->forward(in.get(), work.get());
                kernels_->multiply(work.get(), propagator_.data(), in.get(), m);
                fft_->backward(in.get(), wave[v].get());
              } else {
                fft_->forward(in.get(), wave[v].get());  // the far field and its derivatives
              }
            }
          }
          for (int64_t q = 0; q < m; ++q) {
            const std::complex<double> psi(wave[0][q]), p0(wave[1][q]), p1(wave[2][q]);
            I[std::size_t(q)] += std::norm(psi) * inv_m;
            d0[std::size_t(q)] += 2.0 * std::real(std::conj(psi) * p0) * inv_m;
            d1[std::size_t(q)] += 2.0 * std::real(std::conj(psi) * p1) * inv_m;
          }
        }
        double J00 = 0, J01 = 0, J11 = 0;
        for (int64_t q = 0; q < m; ++q) {
          const double v = I[std::size_t(q)];
          if (!(v > 0) || (mask_ != nullptr && mask_[q] == 0)) continue;
          J00 += d0[std::size_t(q)] * d0[std::size_t(q)] / v;
          J01 += d0[std::size_t(q)] * d1[std::size_t(q)] / v;
          J11 += d1[std::size_t(q)] * d1[std::size_t(q)] / v;
        }
        out[3 * i] = counts * J00;
        out[3 * i + 1] = counts * J01;
        out[3 * i + 2] = counts * J11;
      } catch (const error& e) {
        status[std::size_t(t)] = e.status;
        why[std::size_t(t)] = e.what();
      } catch (const std::exception& e) {
        status[std::size_t(t)] = TYCHO_ERR_INTERNAL;
        why[std::size_t(t)] = e.what();
      }
    }
  }
  for (std::size_t t = 0; t < status.size(); ++t)
    if (status[t] != TYCHO_OK) throw error(status[t], why[t]);
}

template <class Real>
double cpu_engine<Real>::compute_float(const batch_item* items, int64_t count) {
  const int64_t m = n0_ * n1_;
  // Several modes: each mode's transform into an aligned buffer of its own (mode k's part of
  // probe_spectrum is aligned only when M·(complex size) is a multiple of FFTW's alignment).
  auto probe_spectrum = make_fft_buffer<Real>(modes_ * m), batch_input = make_fft_buffer<Real>(m);
  fft_buffer<Real> mode_output = modes_ > 1 ? make_fft_buffer<Real>(m) : fft_buffer<Real>();
  probe_spectra(*fft_, probe_, modes_, m, probe_spectrum.get(), batch_input.get(), mode_output.get());
  run_threads(items, count, probe_spectrum.get());

  // Sum the per-thread gradients (only the part touched) and reset them.
  double loss = 0;
  for (auto& s : scratch_) {
    loss += s->loss;
  }
  sum_object_gradients();
  std::fill(probe_grad_.begin(), probe_grad_.end(), complex(0));
  for (auto& s : scratch_) {
    for (int64_t k = 0; k < modes_ * m; ++k) {
      probe_grad_[std::size_t(k)] += s->probe_spectrum_grad[std::size_t(k)];
      s->probe_spectrum_grad[std::size_t(k)] = complex(0);
    }
  }
  probe_gradient_from_spectrum();
  return loss;
}

template <class Real>
void cpu_engine<Real>::probe_gradient_from_spectrum() {
  const int64_t m = n0_ * n1_;
  const Real inv_m = Real(1) / Real(m);
  auto batch_input = make_fft_buffer<Real>(m);
  fft_buffer<Real> mode_output = modes_ > 1 ? make_fft_buffer<Real>(m) : fft_buffer<Real>();
  // ∂L/∂P_k* = F⁻¹[Σ_j conj(ramp_j) F[...]]: one inverse transform per mode and batch.
  for (int64_t k = 0; k < modes_; ++k) {
    for (int64_t q = 0; q < m; ++q) batch_input[q] = probe_grad_[std::size_t(k * m + q)] * inv_m;
    if (modes_ == 1) {
      fft_->backward(batch_input.get(), probe_grad_.data());
    } else {
      fft_->backward(batch_input.get(), mode_output.get());
      std::copy(mode_output.get(), mode_output.get() + m, probe_grad_.begin() + k * m);
    }
  }
}

// The batch into the threads' integers, then their sum into sums_ with the header (what one rank
// hands the reducer; tycho/sdk/fixed_point.hpp). Integers add in any order, so how the threads
// share the work (and the merge) does not change them.
template <class Real>
void cpu_engine<Real>::compute_fixed(const batch_item* items, int64_t count) {
  namespace fp = sdk::fixed_point;
  const int64_t m = n0_ * n1_;
  auto probe_spectrum = make_fft_buffer<Real>(modes_ * m), batch_input = make_fft_buffer<Real>(m);
  fft_buffer<Real> mode_output = modes_ > 1 ? make_fft_buffer<Real>(m) : fft_buffer<Real>();
  probe_spectra(*fft_, probe_, modes_, m, probe_spectrum.get(), batch_input.get(), mode_output.get());
  for (int t = 0; t < 2; ++t) used_grid_[t] = grids_.grid(t);
  run_threads(items, count, probe_spectrum.get());

  // The object: each row the sum of the threads that touched it (their rows then zeroed). Serial,
  // as every step after the threads' work: a parallel loop's barriers cost more than these passes
  // whenever the machine runs more threads than it has cores.
  // With a gradient region, only its boxes' rows, packed in order (slice, box, row): the threads'
  // windows lie inside them (set_gradient_region), and each thread's bounding box is zeroed after.
  int64_t* const object_sums = sums_.data() + object_at_;
  int64_t* out = object_sums;
  auto merge_row = [&](int64_t i, int64_t at, int64_t words) {  // row i of the object at word `at`
    bool first = true;
    for (auto& s : scratch_) {
      if (i < s->row_min || i > s->row_max) continue;
      int64_t* in = s->object_fixed.data() + at;
      if (first)
        std::copy(in, in + words, out);
      else
        for (int64_t k = 0; k < words; ++k) out[k] = fp::wrapping_add(out[k], in[k]);
      std::fill(in, in + words, 0);
      first = false;
    }
    if (first) std::fill(out, out + words, 0);
    out += words;
  };
  sums_region_ = region_;
  if (sums_region_.empty()) {
    for (int64_t row = 0; row < slices_ * h_; ++row) merge_row(row % h_, row * 2 * w_, 2 * w_);
  } else {
    for (int64_t sl = 0; sl < slices_; ++sl)
      for (std::size_t b = 0; b < sums_region_.size(); b += 4) {
        const int64_t* box = sums_region_.data() + b;
        for (int64_t r = box[0]; r < box[1]; ++r) merge_row(r, 2 * ((sl * h_ + r) * w_ + box[2]), 2 * (box[3] - box[2]));
      }
    for (auto& s : scratch_)  // zeros already, unless a window reached past the region
      if (s->row_max >= s->row_min)
        for (int64_t sl = 0; sl < slices_; ++sl)
          for (int64_t r = s->row_min; r <= s->row_max; ++r) {
            int64_t* row = s->object_fixed.data() + 2 * ((sl * h_ + r) * w_);
            std::fill(row + 2 * s->col_min, row + 2 * (s->col_max + 1), 0);
          }
  }
  sums_view_.shape[0] = int64_t(out - sums_.data());  // what the host sums over the ranks
  // The probe: the threads' spectra; by class, the classes their owners wrote, the carried parts
  // added, and zeros for the classes this batch does not hold.
  int64_t* probe = sums_.data() + probe_at_;
  const int64_t class_words = 2 * modes_ * m;
  if (!by_class_) {
    std::fill(probe, probe + class_words, 0);
    for (auto& s : scratch_)
      for (int64_t k = 0; k < class_words; ++k) probe[k] = fp::wrapping_add(probe[k], s->probe_fixed[std::size_t(k)]);
    for (auto& s : scratch_) std::fill(s->probe_fixed.begin(), s->probe_fixed.end(), 0);
  } else {
    std::vector<uint8_t> present(class_delta0_.size(), 0);
    for (int64_t i = 0; i < count; ++i) present[std::size_t(items[i].klass)] = 1;
    for (std::size_t c = 0; c < present.size(); ++c)
      if (!present[c]) std::fill(probe + int64_t(c) * class_words, probe + int64_t(c + 1) * class_words, 0);
    for (auto& s : scratch_) {
      if (s->carry < 0) continue;
      int64_t* out = probe + s->carry * class_words;
      for (int64_t k = 0; k < class_words; ++k) out[k] = fp::wrapping_add(out[k], s->probe_fixed[std::size_t(k)]);
      s->carry = -1;
    }
  }
  double largest[2] = {0, 0};
  int64_t non_finite[2] = {0, 0};
  fp::exact_sum loss;
  for (auto& s : scratch_) {
    largest[0] = std::max(largest[0], s->object_tally.largest);
    largest[1] = std::max(largest[1], s->probe_tally.largest);
    non_finite[0] += s->object_tally.non_finite;
    non_finite[1] += s->probe_tally.non_finite;
    loss.add(s->loss_exact);
  }
  int64_t* header = sums_.data() + header_at_;
  std::fill(header, header + fp::header::words(2), 0);
  fp::header::write(header, grids_, largest, non_finite, loss);
}

template <class Real>
bool cpu_engine<Real>::finish_batch(bool ends_iteration, double& loss) {
  namespace fp = sdk::fixed_point;
  if (!deterministic_) fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: finish_batch without deterministic sums");
  const int64_t m = n0_ * n1_;
  const int64_t* h = sums_.data() + header_at_;
  bool same_grids = false;
  const std::vector<fp::tensor_report> reports = fp::header::read(h, grids_, same_grids);
  if (!same_grids)
    fail(TYCHO_ERR_INTERNAL, "cpu engine: the ranks' deterministic sums were quantised on different grids ",
         "(their engines went through different batches)");
  if (!grids_.settle(reports, ends_iteration)) {
    if (grids_.recomputed() >= 2 * recomputed_logged_ + 1) {  // 1, 3, 7, ...: a record, not a flood
      recomputed_logged_ = grids_.recomputed();
      log(TYCHO_LOG_INFO, "cpu", cat("deterministic sums: a batch computed again on a new grid (",
                                     grids_.recomputed(), " so far)"));
    }
    return true;
  }
  const double batch_loss = fp::header::loss(h, 2).value();
  if (reports[0].non_finite > 0 || reports[1].non_finite > 0 || !std::isfinite(batch_loss)) {
    // What float sums would have carried: NaN; the run stops on its loss.
    std::fill(object_grad_.begin(), object_grad_.end(), complex(NAN, NAN));
    std::fill(probe_grad_.begin(), probe_grad_.end(), complex(NAN, NAN));
    loss += std::numeric_limits<double>::quiet_NaN();
    return false;
  }
  // Integers to floating point, once: element by element, so in any number of pieces.
  const int64_t* object_sums = sums_.data() + object_at_;
  if (sums_region_.empty()) {
    kernels_->from_fixed(object_sums, used_grid_[0], re(object_grad_.data()), 2 * int64_t(object_.size()));
  } else {  // the region's boxes, as compute_fixed packed them (the host reads no more)
    for (int64_t sl = 0; sl < slices_; ++sl)
      for (std::size_t b = 0; b < sums_region_.size(); b += 4) {
        const int64_t* box = sums_region_.data() + b;
        const int64_t words = 2 * (box[3] - box[2]);
        for (int64_t r = box[0]; r < box[1]; ++r, object_sums += words)
          kernels_->from_fixed(object_sums, used_grid_[0], re(object_grad_.data() + (sl * h_ + r) * w_ + box[2]), words);
      }
  }
  const int64_t* probe = sums_.data() + probe_at_;
  if (!by_class_) {
    kernels_->from_fixed(probe, used_grid_[1], re(probe_grad_.data()), 2 * modes_ * m);
  } else {
    // Each class's row spectra through conj(r0) · F0[·] (the grouped path's end_group, once for
    // the batch of every rank), then their sum in class order, element by element.
    const int64_t classes = int64_t(class_delta0_.size()), class_words = 2 * modes_ * m;
    std::fill(probe_grad_.begin(), probe_grad_.end(), complex(0));
    thread_scratch& s = *scratch_[0];
    std::vector<complex> ramp0;
    for (int64_t c = 0; c < classes; ++c) {
      const int64_t* first = probe + c * class_words;
      if (std::all_of(first, first + class_words, [](int64_t v) { return v == 0; })) continue;
      fill_ramp(ramp0, n0_, class_delta0_[std::size_t(c)], -1.0);
      for (int64_t k = 0; k < modes_; ++k) {
        kernels_->from_fixed(first + 2 * k * m, used_grid_[1], re(s.input.get()), 2 * m);
        columns_->forward(s.input.get(), s.work.get());
        kernels_->add_times_conj_rows(s.work.get(), ramp0.data(), probe_grad_.data() + k * m, n0_, n1_);
      }
    }
  }
  probe_gradient_from_spectrum();
  loss += batch_loss;
  return false;
}

template <class Real>
void cpu_engine<Real>::sum_object_gradients() {
  if (region_.empty()) {
    // The whole object, the threads' rows touched added in thread order.
    std::fill(object_grad_.begin(), object_grad_.end(), complex(0));
    for (auto& s : scratch_)
      if (s->row_max >= s->row_min)
        for (int64_t sl = 0; sl < slices_; ++sl) {
          const int64_t first = sl * h_ * w_ + s->row_min * w_, last = sl * h_ * w_ + (s->row_max + 1) * w_;
          for (int64_t k = first; k < last; ++k) {
            object_grad_[std::size_t(k)] += s->object_grad[std::size_t(k)];
            s->object_grad[std::size_t(k)] = complex(0);
          }
        }
    return;
  }
  // The region only (it covers every window of the batch): zeroed, then each thread's bounding
  // box added in thread order, so every value there is the whole-object path's.
  const int64_t boxes = int64_t(region_.size() / 4);
  for (int64_t sl = 0; sl < slices_; ++sl)
    for (int64_t b = 0; b < boxes; ++b) {
      const int64_t* box = region_.data() + 4 * b;
      for (int64_t r = box[0]; r < box[1]; ++r) {
        complex* row = object_grad_.data() + (sl * h_ + r) * w_;
        std::fill(row + box[2], row + box[3], complex(0));
      }
    }
  for (auto& s : scratch_) {
    if (s->row_max < s->row_min) continue;
    for (int64_t sl = 0; sl < slices_; ++sl)
      for (int64_t r = s->row_min; r <= s->row_max; ++r) {
        const int64_t first = (sl * h_ + r) * w_;
        for (int64_t k = first + s->col_min; k <= first + s->col_max; ++k) {
          object_grad_[std::size_t(k)] += s->object_grad[std::size_t(k)];
          s->object_grad[std::size_t(k)] = complex(0);
        }
      }
  }
}

template class cpu_engine<float>;
template class cpu_engine<double>;

}  // namespace tycho::cpu
