#include "cpu_engine.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tycho::cpu {

using namespace tycho::sdk;

// Per-thread buffers: nothing is shared while a batch runs but the read-only inputs; the
// object and probe gradients are accumulated per thread and summed once per batch.
template <class Real>
struct cpu_engine<Real>::thread_scratch {
  fft_buffer<Real> shifted_probe, wave, work, input;  // input: what each transform reads (and destroys)
  std::vector<Real> intensity, dloss;
  std::vector<float> measured;  // one pattern of integer counts, widened (exactly) for the loss
  std::vector<complex> ramp0, ramp1;
  std::vector<complex> object_grad, probe_spectrum_grad;
  int64_t row_min = 0, row_max = -1;  // rows of object_grad touched in this batch
  double loss = 0;
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

// object_init / probe_init: complex64 or complex128, whatever the engine's precision.
void expect_complex(const DLTensor* t, const char* name) {
  if (t != nullptr && same_dtype(t->dtype, dtype_complex128))
    expect_tensor(t, name, dtype_complex128, 3);
  else
    expect_tensor(t, name, dtype_complex64, 3);
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
  if (setup.targets == nullptr || !same_dtype(setup.targets->dtype, DLDataType{kDLUInt, 16, 1}))
    expect_tensor(setup.targets, "targets", dtype_float32, 3);
  else
    expect_tensor(setup.targets, "targets", DLDataType{kDLUInt, 16, 1}, 3);
  expect_tensor(setup.positions_px, "positions_px", dtype_float64, 2);
  expect_complex(setup.object_init, "object_init");
  expect_complex(setup.probe_init, "probe_init");
  patterns_ = setup.targets->shape[0];
  n0_ = setup.targets->shape[1];
  n1_ = setup.targets->shape[2];
  h_ = setup.object_init->shape[1];
  w_ = setup.object_init->shape[2];
  if (setup.object_init->shape[0] != 1)
    fail(TYCHO_ERR_UNSUPPORTED, "cpu engine: ", setup.object_init->shape[0],
         " object slices requested; this engine is single-slice (slices = 1)");
  if (setup.probe_init->shape[0] != 1)
    fail(TYCHO_ERR_UNSUPPORTED, "cpu engine: ", setup.probe_init->shape[0],
         " probe modes requested; this engine supports probe_modes = 1");
  if (setup.probe_init->shape[1] != n0_ || setup.probe_init->shape[2] != n1_)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: probe ", shape_string(*setup.probe_init),
         " does not match the patterns ", shape_string(*setup.targets));
  if (setup.positions_px->shape[0] != patterns_ || setup.positions_px->shape[1] != 2)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: positions ", shape_string(*setup.positions_px),
         " expected (", patterns_, ", 2)");
  if (setup.mask != nullptr) {
    expect_tensor(setup.mask, "mask", dtype_uint8, 2);
    if (setup.mask->shape[0] != n0_ || setup.mask->shape[1] != n1_)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: mask ", shape_string(*setup.mask),
           " does not match the patterns");
    mask_ = data_of<const uint8_t>(*setup.mask);
  } else {
    mask_ = nullptr;
  }
  if (setup.loss.vtable == nullptr || setup.loss.instance == nullptr)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: no loss component given");
  if (setup.targets->dtype.code == kDLUInt)
    counts_ = data_of<const uint16_t>(*setup.targets);
  else
    targets_ = data_of<const float>(*setup.targets);
  target_scale_ = setup.target_scale;
  loss_ = setup.loss;

  const double* pos = data_of<const double>(*setup.positions_px);
  positions_.assign(pos, pos + 2 * patterns_);
  for (int64_t j = 0; j < patterns_; ++j) {
    double t0 = std::floor(positions_[2 * j] - double(n0_ / 2));
    double t1 = std::floor(positions_[2 * j + 1] - double(n1_ / 2));
    if (!(t0 >= 0 && t1 >= 0 && t0 + double(n0_) <= double(h_) && t1 + double(n1_) <= double(w_)))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: the window of position ", j, " (centre ",
           positions_[2 * j], ", ", positions_[2 * j + 1], " px) does not lie inside the object (",
           h_, " x ", w_, " px)");
  }
  assign_complex(object_, *setup.object_init, h_ * w_);
  assign_complex(probe_, *setup.probe_init, n0_ * n1_);
  object_grad_.assign(object_.size(), complex(0));
  probe_grad_.assign(probe_.size(), complex(0));

  threads_ = options.threads > 0 ? options.threads : omp_get_max_threads();
  fft_ = std::make_unique<fft_plan_2d<Real>>(n0_, n1_, options.measure_fft);
  const int64_t m = n0_ * n1_;
  for (int t = 0; t < threads_; ++t) {
    auto s = std::make_unique<thread_scratch>();
    s->shifted_probe = make_fft_buffer<Real>(m);
    s->wave = make_fft_buffer<Real>(m);
    s->work = make_fft_buffer<Real>(m);
    s->input = make_fft_buffer<Real>(m);
    s->intensity.resize(std::size_t(m));
    s->dloss.resize(std::size_t(m));
    s->object_grad.assign(object_.size(), complex(0));
    s->probe_spectrum_grad.assign(std::size_t(m), complex(0));
    scratch_.push_back(std::move(s));
  }
  constexpr DLDataType c = complex_dtype<Real>();
  views_[TYCHO_TENSOR_OBJECT] = tensor_view(object_.data(), c, {1, h_, w_});
  views_[TYCHO_TENSOR_PROBE] = tensor_view(probe_.data(), c, {1, n0_, n1_});
  views_[TYCHO_TENSOR_OBJECT_GRAD] = tensor_view(object_grad_.data(), c, {1, h_, w_});
  views_[TYCHO_TENSOR_PROBE_GRAD] = tensor_view(probe_grad_.data(), c, {1, n0_, n1_});
  views_[TYCHO_TENSOR_POSITIONS] = tensor_view(positions_.data(), dtype_float64, {patterns_, 2});
}

template <class Real>
cpu_engine<Real>::~cpu_engine() = default;

template <class Real>
DLTensor* cpu_engine<Real>::tensor(tycho_tensor_id id) {
  if (int(id) < 0 || int(id) > TYCHO_TENSOR_POSITIONS)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: unknown tensor id ", int(id));
  return views_[id].get();
}

template <class Real>
void cpu_engine<Real>::process_pattern(int64_t j, thread_scratch& s, const complex* probe_spectrum) {
  const int64_t m = n0_ * n1_;
  const double t0 = positions_[2 * j] - double(n0_ / 2);
  const double t1 = positions_[2 * j + 1] - double(n1_ / 2);
  const int64_t i0 = int64_t(std::floor(t0)), j0 = int64_t(std::floor(t1));
  fill_ramp(s.ramp0, n0_, t0 - double(i0), -1.0);
  fill_ramp(s.ramp1, n1_, t1 - double(j0), -1.0);

  // Shifted probe P_j (probe_spectrum already carries the 1/M of the round trip).
  complex* pj = s.shifted_probe.get();
  complex* in = s.input.get();
  for (int64_t a = 0; a < n0_; ++a)
    for (int64_t b = 0; b < n1_; ++b)
      in[a * n1_ + b] = probe_spectrum[a * n1_ + b] * s.ramp0[std::size_t(a)] * s.ramp1[std::size_t(b)];
  fft_->backward(in, pj);

  // Exit wave and far field.
  complex* wave = s.wave.get();
  const complex* obj = object_.data() + i0 * w_ + j0;
  for (int64_t a = 0; a < n0_; ++a)
    for (int64_t b = 0; b < n1_; ++b) in[a * n1_ + b] = pj[a * n1_ + b] * obj[a * w_ + b];
  fft_->forward(in, wave);  // unnormalised: Ψ = wave / √M
  const Real inv_m = Real(1) / Real(m);
  for (int64_t k = 0; k < m; ++k) s.intensity[std::size_t(k)] = std::norm(wave[k]) * inv_m;

  // Loss and dL/dI through the loss component.
  // Model intensity and dL/dI in the engine's precision, the measured data float32.
  tensor_view model(s.intensity.data(), real_dtype<Real>(), {1, n0_, n1_});
  const float* measured_data = counts_ != nullptr ? nullptr : targets_ + j * m;
  if (counts_ != nullptr) {
    s.measured.resize(std::size_t(m));
    const uint16_t* c = counts_ + j * m;
    for (int64_t k = 0; k < m; ++k) s.measured[std::size_t(k)] = float(c[k]);
    measured_data = s.measured.data();
  }
  tensor_view measured(const_cast<float*>(measured_data), dtype_float32, {1, n0_, n1_});
  tensor_view grad(s.dloss.data(), real_dtype<Real>(), {1, n0_, n1_});
  tensor_view mask(const_cast<uint8_t*>(mask_), dtype_uint8, {n0_, n1_});
  tycho_status st = loss_.vtable->evaluate(loss_.instance, model.get(), measured.get(),
                                           mask_ ? mask.get() : nullptr, target_scale_, grad.get(),
                                           &s.loss, nullptr);
  if (st != TYCHO_OK) {
    // The loss set its message on this (worker) thread: pass it on, it says what went wrong.
    const char* why = host() != nullptr ? host()->last_error() : nullptr;
    throw error(st, cat("loss component failed on pattern ", j, ": ", why != nullptr && *why ? why : "(no message)"));
  }

  // g = F⁻¹[dL/dI · Ψ]: with unnormalised transforms that is backward(dL/dI · wave) / M.
  for (int64_t k = 0; k < m; ++k) in[k] = wave[k] * (s.dloss[std::size_t(k)] * inv_m);
  fft_->backward(in, wave);

  // Object gradient on the patch, and the probe gradient before the shift is undone.
  complex* og = s.object_grad.data() + i0 * w_ + j0;
  complex* work = s.work.get();
  for (int64_t a = 0; a < n0_; ++a)
    for (int64_t b = 0; b < n1_; ++b) {
      const complex g = wave[a * n1_ + b];
      og[a * w_ + b] += std::conj(pj[a * n1_ + b]) * g;
      in[a * n1_ + b] = std::conj(obj[a * w_ + b]) * g;
    }
  s.row_min = std::min(s.row_min, i0);
  s.row_max = std::max(s.row_max, i0 + n0_ - 1);
  fft_->forward(in, work);
  complex* acc = s.probe_spectrum_grad.data();
  for (int64_t a = 0; a < n0_; ++a)
    for (int64_t b = 0; b < n1_; ++b)
      acc[a * n1_ + b] += work[a * n1_ + b] * std::conj(s.ramp0[std::size_t(a)] * s.ramp1[std::size_t(b)]);
}

template <class Real>
double cpu_engine<Real>::compute_batch(const int64_t* indices, int64_t count) {
  const int64_t m = n0_ * n1_;
  for (int64_t i = 0; i < count; ++i)
    if (indices[i] < 0 || indices[i] >= patterns_)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: pattern index ", indices[i], " outside [0, ",
           patterns_, ")");

  // F[P] / M, shared read-only by all threads.
  auto probe_spectrum = make_fft_buffer<Real>(m), batch_input = make_fft_buffer<Real>(m);
  std::copy(probe_.begin(), probe_.end(), batch_input.get());
  fft_->forward(batch_input.get(), probe_spectrum.get());
  const Real inv_m = Real(1) / Real(m);
  for (int64_t k = 0; k < m; ++k) probe_spectrum[k] *= inv_m;

  for (auto& s : scratch_) {
    s->loss = 0;
    s->row_min = h_;
    s->row_max = -1;
    s->status = TYCHO_OK;
  }
  // A static schedule gives every thread the same patterns in the same order on every run, so
  // the per-thread sums, and the result, are bit for bit reproducible.
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    thread_scratch& s = *scratch_[std::size_t(omp_get_thread_num())];
    if (s.status != TYCHO_OK) continue;
    try {
      process_pattern(indices[i], s, probe_spectrum.get());
    } catch (const error& e) {
      s.status = e.status;
      s.error = e.what();
    } catch (const std::exception& e) {
      s.status = TYCHO_ERR_INTERNAL;
      s.error = e.what();
    }
  }

  // Sum the per-thread gradients (only the object rows touched) and reset them.
  std::fill(object_grad_.begin(), object_grad_.end(), complex(0));
  std::fill(probe_grad_.begin(), probe_grad_.end(), complex(0));
  double loss = 0;
  for (auto& s : scratch_) {
    if (s->status != TYCHO_OK) throw error(s->status, s->error);
    loss += s->loss;
    if (s->row_max >= s->row_min) {
      const int64_t first = s->row_min * w_, last = (s->row_max + 1) * w_;
      for (int64_t k = first; k < last; ++k) {
        object_grad_[std::size_t(k)] += s->object_grad[std::size_t(k)];
        s->object_grad[std::size_t(k)] = complex(0);
      }
    }
    for (int64_t k = 0; k < m; ++k) {
      probe_grad_[std::size_t(k)] += s->probe_spectrum_grad[std::size_t(k)];
      s->probe_spectrum_grad[std::size_t(k)] = complex(0);
    }
  }
  // ∂L/∂P* = F⁻¹[Σ_j conj(ramp_j) F[...]]: one inverse transform per batch.
  for (int64_t k = 0; k < m; ++k) batch_input[k] = probe_grad_[std::size_t(k)] * inv_m;
  fft_->backward(batch_input.get(), probe_grad_.data());
  return loss;
}

template class cpu_engine<float>;
template class cpu_engine<double>;

}  // namespace tycho::cpu
