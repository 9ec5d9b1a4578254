#include "cpu_engine.hpp"

#include "pointwise.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

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
  double group_delta0 = 0;
  std::vector<Real> intensity, dloss;
  std::vector<float> measured;  // one pattern of integer counts, widened (exactly) for the loss
  std::vector<complex> ramp0, ramp1;
  std::vector<complex> object_grad, probe_spectrum_grad;  // (S, H, W), (M, N0, N1)
  int64_t row_min = 0, row_max = -1;  // rows of object_grad touched in this batch
  int64_t col_min = 0, col_max = -1;  // and its columns (the windows' bounding box)
  double loss = 0;
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
  shift_groups_ = options.shift_groups && slices_ == 1 && !position_gradient_;
  // Which path runs, and why not the grouped one where it was asked for: the two differ in speed.
  const char* path = shift_groups_            ? "grouped sub-pixel shifts"
                     : !options.shift_groups ? "per-position shifts (shift_groups = false)"
                                             : "per-position shifts (the grouped ones need one slice and no "
                                               "position correction)";
  log(TYCHO_LOG_INFO, "cpu", cat(sizeof(Real) == 8 ? "float64" : "float32", ", ", threads_, " threads, ",
                                 kernels_->instruction_set, " pointwise loops, ", path));
  fft_ = std::make_unique<fft_plan_2d<Real>>(n0_, n1_, options.measure_fft);
  if (shift_groups_) {
    rows_ = std::make_unique<fft_plan_axis<Real>>(n0_, n1_, 1, options.measure_fft);
    columns_ = std::make_unique<fft_plan_axis<Real>>(n0_, n1_, 0, options.measure_fft);
  }
  const int64_t m = n0_ * n1_;
  for (int t = 0; t < threads_; ++t) {
    auto s = std::make_unique<thread_scratch>();
    s->shifted_probe = make_fft_buffer<Real>(m);
    s->wave = make_fft_buffer<Real>(m);
    s->work = make_fft_buffer<Real>(m);
    s->input = make_fft_buffer<Real>(m);
    if (shift_groups_) {
      for (int64_t k = 0; k < modes_; ++k) {
        s->group_probe.push_back(make_fft_buffer<Real>(m));
        s->group_grad.push_back(make_fft_buffer<Real>(m));
      }
    }
    s->fused_loss = loss_has_far_field;
    s->intensity.resize(std::size_t(m));
    s->dloss.resize(std::size_t(m));
    if (slices_ > 1 || modes_ > 1) {
      for (int64_t k = 0; k < slices_ * modes_; ++k) s->slice_waves.push_back(make_fft_buffer<Real>(m));
      for (int64_t k = 0; k < modes_; ++k) s->far_fields.push_back(make_fft_buffer<Real>(m));
    }
    s->object_grad.assign(object_.size(), complex(0));
    s->probe_spectrum_grad.assign(std::size_t(modes_ * m), complex(0));
    scratch_.push_back(std::move(s));
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
typename cpu_engine<Real>::batch_item cpu_engine<Real>::item(int64_t j) const {
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
  if (shift_groups_ && sizeof(Real) == 4) {
    // float32: offsets on a 2⁻²⁸ px grid, so that rows repeating an offset up to the float64
    // rounding of the positions share one group (cpu_engine.hpp); exact offsets in float64.
    constexpr double q = 268435456.0;  // 2^28
    it.delta0 = std::nearbyint(it.delta0 * q) / q;
    it.delta1 = std::nearbyint(it.delta1 * q) / q;
  }
  return it;
}

// The loss of pattern j from s.intensity: adds to s.loss, dL/dI into s.dloss.
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
                                           &s.loss, nullptr);
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
// adds to s.loss and writes into `g_spectrum` dL/dI · wave / M, the input of the inverse
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
                                                           grad.get(), &s.loss, nullptr);
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
  complex* og = s.object_grad.data() + it.i0 * w_ + it.j0;
  kernels_->gradient_products(pj, obj, w_, wave, og, in, n0_, n1_);
  s.row_min = std::min(s.row_min, it.i0);
  s.row_max = std::max(s.row_max, it.i0 + n0_ - 1);
  s.col_min = std::min(s.col_min, it.j0);
  s.col_max = std::max(s.col_max, it.j0 + n1_ - 1);
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
  if (slices_ == 1 && modes_ == 1) {
    complex* pj = s.shifted_probe.get();
    shifted_probe(0, pj);
    model_and_object_gradient(it, s, pj);
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
  // Backward, mode by mode: g through the slices in reverse.
  complex* g = s.wave.get();
  for (int64_t k = 0; k < modes_; ++k) {
    if (!fused) kernels_->scale_by(s.far_fields[std::size_t(k)].get(), s.dloss.data(), inv_m, in, m);
    fft_->backward(in, g);
    for (int64_t sl = slices_ - 1; sl >= 0; --sl) {
      const complex* psi = s.slice_waves[std::size_t(k * slices_ + sl)].get();
      const complex* obj = object_.data() + sl * h_ * w_ + it.i0 * w_ + it.j0;
      complex* og = s.object_grad.data() + sl * h_ * w_ + it.i0 * w_ + it.j0;
      kernels_->gradient_products(psi, obj, w_, g, og, in, n0_, n1_);
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
    kernels_->add_times_conj_ramp(work, s.ramp0.data(), s.ramp1.data(), s.probe_spectrum_grad.data() + k * m, n0_,
                                  n1_);
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
  fill_ramp(s.ramp0, n0_, delta0, -1.0);
  complex* in = s.input.get();
  for (int64_t k = 0; k < modes_; ++k) {
    kernels_->multiply_rows(probe_spectrum + k * n0_ * n1_, s.ramp0.data(), in, n0_, n1_);
    columns_->backward(in, s.group_probe[std::size_t(k)].get());
    std::fill(s.group_grad[std::size_t(k)].get(), s.group_grad[std::size_t(k)].get() + n0_ * n1_, complex(0));
  }
  s.group_delta0 = delta0;
}

// Each mode's group probe gradient B_k (axis 1 already in Fourier space): conj(r0) · F0[B_k] into
// the thread's spectrum accumulator of mode k.
template <class Real>
void cpu_engine<Real>::end_group(thread_scratch& s) {
  complex* work = s.work.get();
  for (int64_t k = 0; k < modes_; ++k) {
    columns_->forward(s.group_grad[std::size_t(k)].get(), work);  // destroys B_k: begin_group zeroes it
    kernels_->add_times_conj_rows(work, s.ramp0.data(), s.probe_spectrum_grad.data() + k * n0_ * n1_, n0_, n1_);
  }
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
    // B_k += conj(r1) · F1[conj(O_patch)·g_k].
    auto probe_gradient = [&](int64_t k) {
      rows_->forward(in, work);
      kernels_->add_times_conj_columns(work, r1, s.group_grad[std::size_t(k)].get(), n0_, n1_);
    };
    model_and_gradients(it, s, shifted_probe, probe_gradient);
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
  const int64_t m = n0_ * n1_;  // the adapter has checked the indices
  if (reader_ != nullptr) read_batch_targets(indices, count);

  // F[P_k] / M for every mode k, shared read-only by all threads.
  auto probe_spectrum = make_fft_buffer<Real>(modes_ * m), batch_input = make_fft_buffer<Real>(m);
  // Several modes: each mode's transform into an aligned buffer of its own (mode k's part of
  // probe_spectrum is aligned only when M·(complex size) is a multiple of FFTW's alignment).
  fft_buffer<Real> mode_output = modes_ > 1 ? make_fft_buffer<Real>(m) : fft_buffer<Real>();
  const Real inv_m = Real(1) / Real(m);
  for (int64_t k = 0; k < modes_; ++k) {
    std::copy(probe_.begin() + k * m, probe_.begin() + (k + 1) * m, batch_input.get());
    complex* out = modes_ > 1 ? mode_output.get() : probe_spectrum.get();
    fft_->forward(batch_input.get(), out);
    for (int64_t q = 0; q < m; ++q) probe_spectrum[k * m + q] = out[q] * inv_m;
  }

  std::vector<batch_item> items(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) items[std::size_t(i)] = item(indices[i]);
  if (shift_groups_)  // stable: the same order, so the same sums, on every run
    std::stable_sort(items.begin(), items.end(),
                     [](const batch_item& a, const batch_item& b) { return a.delta0 < b.delta0; });

  for (auto& s : scratch_) {
    s->loss = 0;
    s->row_min = h_;
    s->row_max = -1;
    s->col_min = w_;
    s->col_max = -1;
    s->status = TYCHO_OK;
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
      guarded_call(s, [&] { process_run(items.data() + first, last - first, s, probe_spectrum.get()); });
    }
  } else {
    // A static schedule gives every thread the same patterns in the same order on every run.
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      thread_scratch& s = *scratch_[std::size_t(omp_get_thread_num())];
      if (s.status != TYCHO_OK) continue;
      guarded_call(s, [&] { process_pattern(items[std::size_t(i)], s, probe_spectrum.get()); });
    }
  }

  // Sum the per-thread gradients (only the part touched) and reset them.
  double loss = 0;
  for (auto& s : scratch_) {
    if (s->status != TYCHO_OK) throw error(s->status, s->error);
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
  return loss;
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
