// The CPU engine: the gradient model of one mini-batch (FFTW, OpenMP): S object slices
// (multislice), M probe modes (mixed state), and optionally the gradient by each probe position.
//
// For pattern j with probe centre c_j (object pixels), window top-left t_j = c_j − N/2,
// integer part i_j and fractional part δ_j (CONVENTIONS.md, "The math of one gradient step"):
//   P_mj = F⁻¹[ F[P_m] · exp(−2πi k·δ_j / N) ]     (sub-pixel shift of each probe mode)
//   ψ_mj,0 = P_mj;  φ_s = ψ_s · O_s[i_j : i_j + N];  ψ_s+1 = F⁻¹[H · F φ_s]   (s < S − 1)
//   Ψ_mj = F φ_S−1,  I_j = Σ_m |Ψ_mj|²        (F unitary; H the slice propagator, setup)
//   ∂L/∂Ψ_mj* = (dL/dI)(I_j, D_j) · Ψ_mj       (the loss component gives dL/dI)
//   g_S−1 = F⁻¹ ∂L/∂Ψ*;  ∂L/∂O_s* += conj(ψ_s) g_s;  ∂L/∂ψ_s* = conj(O_s) g_s;
//   g_s−1 = F⁻¹[conj(H) · F ∂L/∂ψ_s*]  (the adjoint of the propagation)
//   ∂L/∂P_m* += F⁻¹[ exp(+2πi k·δ_j / N) · F[∂L/∂ψ_0*] ]
//   dL/dc_j,a = 2 Re Σ_k conj(F[∂L/∂ψ_0*](k)) · F[P_mj](k) · (−2πi f_a(k) / N_a)   (summed over m)
// (Thibault & Guizar-Sicairos 2012; Odstrčil et al. 2018; Tsai et al. 2016 for the multislice
// gradient; the position gradient is the derivative of the shifted probe, by Parseval in
// Fourier space, so it costs no transform.) Gradients are sums over the batch.
//
// The single-slice case without position gradient takes a faster path (options.shift_groups, the
// default): two 2-D transforms per position and mode, not four. The shift ramp is separable,
// exp(−2πi k·δ / N) = r0(δ0)[k0] · r1(δ1)[k1], so F⁻¹[F[P] · r0 ⊗ r1] = F1⁻¹[ r1 · F0⁻¹[r0 · F[P]] ]
// (F0, F1: 1-D transforms along axis 0, 1). Positions sharing δ0 (a scan row; a raster with a rational step
// repeats few) form a group: A = F0⁻¹[r0 · F[P]] once per group, then per position one 1-D row
// transform P_j = F1⁻¹[r1 · A] (half a 2-D transform). The probe gradient runs the same road
// back: per position B += conj(r1) · F1[conj(O) g] (half), per group conj(r0) · F0[B] (half)
// into the spectrum accumulator, one 2-D F⁻¹ per batch. Per position: 1/2 + 1 + 1 + 1/2 = 3
// transform-equivalents; per group one more. With M probe modes each mode has its own A and B
// (M times the transforms, as in the per-position path). A group pays off where positions repeat
// an axis-0 offset (a raster); with irregular positions (corrected ones) every group holds one
// position and both paths cost about the same. Exactly the same function as the per-position path
// (engine_options::shift_groups = false, kept as the reference) up to rounding: in float32 the
// offsets are rounded to 2⁻²⁸ px first (the ramp's phase moves < 6e-9 rad, under float32's
// resolution), so rows that repeat an offset up to the positions' float64 rounding group together.
// Each thread takes a contiguous run of the batch sorted by δ0 (stable), so the result is the
// same on every run for a given thread count.
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
#include "pointwise.hpp"

namespace tycho::cpu {

struct engine_options {
  int threads = 0;          // 0: all OpenMP threads
  bool measure_fft = false; // FFTW_MEASURE instead of FFTW_ESTIMATE
  bool double_precision = false;  // [reconstruct] precision = "float64"
  bool shift_groups = true;       // true (default): shift groups (one slice, any modes, no position gradient;
                                  // else per position); false: four 2-D transforms per position
};

// What the vtable calls, whatever the engine's real type; the adapter has checked batch indices
// and tensor ids before.
class engine_base {
 public:
  virtual ~engine_base() = default;
  // Returns Σ L over the batch; gradients (sums) land in the OBJECT_GRAD / PROBE_GRAD tensors.
  virtual double compute_batch(const int64_t* indices, int64_t count) = 0;
  virtual DLTensor* tensor(tycho_tensor_id id) = 0;
  // The object gradient is read only inside `boxes` (n rows [row0, row1, col0, col1), checked
  // by the adapter) from the next batch on; n = 0: everywhere.
  virtual void set_gradient_region(const int64_t* boxes, int64_t n) = 0;
};

// The engine for `options.double_precision`, from a setup that has passed the SDK engine
// adapter's checks (tycho/sdk/engine.hpp: tensors, shapes, loss, windows; cpu_plugin.cpp).
std::unique_ptr<engine_base> make_engine(const tycho_engine_setup& setup, const engine_options& options);

template <class Real>
class cpu_engine final : public engine_base {
 public:
  using complex = std::complex<Real>;
  cpu_engine(const tycho_engine_setup& setup, const engine_options& options);
  ~cpu_engine() override;

  double compute_batch(const int64_t* indices, int64_t count) override;
  DLTensor* tensor(tycho_tensor_id id) override;
  void set_gradient_region(const int64_t* boxes, int64_t n) override { region_.assign(boxes, boxes + 4 * n); }

 private:
  struct thread_scratch;
  struct batch_item {      // one position of the batch, as the transforms need it
    int64_t pattern;       // index into the targets
    int64_t i0, j0;        // the window's integer top-left (object pixels)
    double delta0, delta1; // its sub-pixel offset, in [0, 1] (px)
  };
  batch_item item(int64_t j) const;
  // The reference path: the shifted probe and the probe gradient's back-shift as 2-D transforms.
  // Any number of slices and modes; the position gradient when asked for.
  void process_pattern(const batch_item& it, thread_scratch& s, const complex* probe_spectrum);
  // The grouped path: a run of items sorted by delta0.
  void process_run(const batch_item* items, int64_t count, thread_scratch& s, const complex* probe_spectrum);
  void begin_group(double delta0, thread_scratch& s, const complex* probe_spectrum);
  void end_group(thread_scratch& s);
  void read_batch_targets(const int64_t* indices, int64_t count);
  // The threads' object gradients summed into object_grad_ (and reset): the whole object, or
  // only region_ (the host reads no more), each thread's part being its windows' bounding box.
  void sum_object_gradients();
  // The loss component on s.intensity (pattern j's model): s.loss, s.dloss.
  void evaluate_loss(int64_t j, thread_scratch& s);
  // The loss's fused path on one far field (cpu_engine.cpp); false where the loss has none.
  bool loss_far_field(int64_t j, thread_scratch& s, const complex* wave, complex* g_spectrum);
  sdk::error loss_error(tycho_status st, int64_t j) const;
  // Exit wave, loss, g = ∂L/∂ψ*, the object gradient; leaves conj(O_patch)·g in s.input.
  void model_and_object_gradient(const batch_item& it, thread_scratch& s, const complex* pj);
  // One pattern through every slice and mode and back; the shift and the probe gradient's
  // back-shift are the caller's (process_pattern: 2-D; process_run: the group's halves).
  template <class ShiftedProbe, class ProbeGradient>
  void model_and_gradients(const batch_item& it, thread_scratch& s, ShiftedProbe&& shifted_probe,
                           ProbeGradient&& probe_gradient);

  int64_t n0_, n1_, h_, w_, patterns_;
  int64_t slices_ = 1, modes_ = 1;
  int threads_;
  bool shift_groups_;
  bool position_gradient_ = false;
  std::vector<complex> propagator_;  // H / (N0·N1): the slice propagator with the round trip's scale
  const float* targets_ = nullptr;            // float32 targets, or
  const uint16_t* counts_ = nullptr;          // integer counts, widened per pattern before the loss
  // Streamed targets (setup.target_reader, ABI 1.3): targets_/counts_ point at the host's copy
  // of the current batch (float32 or uint16 as the reader gives); pattern j's row in it.
  const tycho_target_reader* reader_ = nullptr;
  std::vector<int64_t> batch_row_;  // (P): row of pattern j in the current batch
  const uint8_t* mask_;
  double target_scale_;
  tycho_loss_binding loss_;
  std::vector<double> positions_;  // (P, 2) probe centres
  std::vector<double> position_grad_;  // (P, 2) dL/dc, written for the patterns of each batch
  std::vector<double> frequency1_;     // (N1) f1(b) / N1: the position gradient's axis-1 factor
  std::vector<complex> object_, probe_, object_grad_, probe_grad_;
  // set_gradient_region: boxes [row0, row1, col0, col1) where object_grad_ is read; empty: all.
  std::vector<int64_t> region_;
  const pointwise_kernels<Real>* kernels_;  // this CPU's build of the pointwise loops
  std::unique_ptr<fft_plan_2d<Real>> fft_;
  std::unique_ptr<fft_plan_axis<Real>> rows_, columns_;  // along axis 1, axis 0
  std::vector<std::unique_ptr<thread_scratch>> scratch_;
  sdk::tensor_view views_[6];
};

}  // namespace tycho::cpu
