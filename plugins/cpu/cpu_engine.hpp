// The CPU engine: single-slice, single-mode gradient model of one mini-batch (FFTW, OpenMP).
//
// For pattern j with probe centre c_j (object pixels), window top-left t_j = c_j − N/2,
// integer part i_j and fractional part δ_j (CONVENTIONS.md, "The math of one gradient step"):
//   P_j = F⁻¹[ F[P] · exp(−2πi k·δ_j / N) ]     (sub-pixel shift of the probe)
//   ψ_j = P_j · O[i_j : i_j + N],  Ψ_j = F ψ_j,  I_j = |Ψ_j|²        (F unitary)
//   ∂L/∂Ψ_j* = (dL/dI)(I_j, D_j) · Ψ_j        (the loss component gives dL/dI)
//   g_j = F⁻¹ ∂L/∂Ψ_j*;   ∂L/∂O* += conj(P_j) g_j on the patch;
//   ∂L/∂P* += F⁻¹[ exp(+2πi k·δ_j / N) · F[conj(O_patch) g_j] ]
// (Thibault & Guizar-Sicairos 2012; Odstrčil et al. 2018). Gradients are sums over the batch.
//
// One engine per real type ([reconstruct] precision): cpu_engine<float> computes in single
// precision (FFTW's fftwf_ interface) and exposes complex64 tensors; cpu_engine<double> computes
// in double precision (fftw_) and exposes complex128 ones. Either takes object_init and
// probe_init as complex64 or complex128 and converts them; the targets (float32, or uint16 integer
// counts widened exactly to float32 per pattern) stay as given, the
// positions float64.
#pragma once

#include <tycho/sdk.hpp>

#include <complex>
#include <cstdint>
#include <memory>
#include <vector>

#include "fft_plan.hpp"

namespace tycho::cpu {

struct engine_options {
  int threads = 0;          // 0: all OpenMP threads
  bool measure_fft = false; // FFTW_MEASURE instead of FFTW_ESTIMATE
  bool double_precision = false;  // [reconstruct] precision = "float64"
};

// What the vtable calls, whatever the engine's real type.
class engine_base {
 public:
  virtual ~engine_base() = default;
  // Returns Σ L over the batch; gradients (sums) land in the OBJECT_GRAD / PROBE_GRAD tensors.
  virtual double compute_batch(const int64_t* indices, int64_t count) = 0;
  virtual DLTensor* tensor(tycho_tensor_id id) = 0;
};

// The engine for `options.double_precision`.
std::unique_ptr<engine_base> make_engine(const tycho_engine_setup& setup, const engine_options& options);

template <class Real>
class cpu_engine final : public engine_base {
 public:
  using complex = std::complex<Real>;
  cpu_engine(const tycho_engine_setup& setup, const engine_options& options);
  ~cpu_engine() override;

  double compute_batch(const int64_t* indices, int64_t count) override;
  DLTensor* tensor(tycho_tensor_id id) override;

 private:
  struct thread_scratch;
  void process_pattern(int64_t j, thread_scratch& s, const complex* probe_spectrum);

  int64_t n0_, n1_, h_, w_, patterns_;
  int threads_;
  const float* targets_ = nullptr;            // float32 targets, or
  const uint16_t* counts_ = nullptr;          // integer counts, widened per pattern before the loss
  const uint8_t* mask_;
  double target_scale_;
  tycho_loss_binding loss_;
  std::vector<double> positions_;  // (P, 2) probe centres
  std::vector<complex> object_, probe_, object_grad_, probe_grad_;
  std::unique_ptr<fft_plan_2d<Real>> fft_;
  std::vector<std::unique_ptr<thread_scratch>> scratch_;
  sdk::tensor_view views_[5];
};

}  // namespace tycho::cpu
