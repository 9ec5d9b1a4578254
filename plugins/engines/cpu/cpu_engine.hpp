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
// A scan turned by any angle repeats no offset exactly: the scan map's refinement turns an exact
// raster by hundredths of a degree, and the groups then held one position each (the MoS2 example:
// +26 % CPU against the raster held). So the grouped path places each position's axis-0 offset on
// a grid, shift_group_grid_px (1/16 px by default): a model at most 1/32 px (0.005 Å at the
// MoS2 example's 0.17 Å pixels; 0.018 px rms, 0.003 Å) from the position, an eighth of the
// precision the data give a position there (0.024 Å rms, the run's Cramér-Rao bound; in quadrature
// +1 %); the positions themselves stay where they are. The grouped path then computes exactly what
// the per-position path computes at the rounded positions (tests/test_precision.cpp). (1/64 px
// left the turned MoS2 raster's rows in 4 to 5 groups a batch: +8 % against the raster; 1/32 px:
// +2 %. Positions corrected one by one spread their offsets over the whole pixel: 32 groups a
// batch at 1/32 px, each a column pass more; at 1/16 px the MoS2 example's iterations with the
// positions' own steps cost 7 % less.)
//
// The position gradient on the grouped path: the per-position formula sums over the 2-D spectrum;
// by Parseval along axis 0 alone it sums over (x0, k1) with A'_k = F0⁻¹[f0 · r0 · F[P_k]/M], one
// more column pass per group and mode (group_position_gradient). A batch whose positions fall into
// G groups takes the grouped path when 1.5 G < its count (else per position): with float sums only,
// since the choice follows each rank's part of the batch.
// Each thread takes a contiguous run of the batch sorted by δ0 (stable), so the result is the
// same on every run for a given thread count.
//
// Deterministic sums (engine_options::deterministic, [reconstruct] deterministic; the scheme and
// its bounds: tycho/sdk/fixed_point.hpp): every position's contribution to the object gradient
// (per mode and slice) and to the probe gradient's spectrum (per mode) is added to per-thread
// int64 accumulators, rounded to a grid the same on every rank; the threads' integers are added
// into one int64 tensor (TYCHO_TENSOR_FIXED_POINT_SUMS) that the host sums over the ranks, and
// finish_batch converts it to the float gradients once. The loss is summed exactly per pattern.
// The position gradient is one pattern's alone (a sum over its pixels and modes in a fixed order),
// so it needs nothing. Nothing a thread or rank computes then depends on which others share the
// batch, so the result is the same bits for any number of threads and ranks. The per-position
// path quantises F[∂L/∂P_kj*]·conj(ramp_j) per position. The grouped path cannot quantise a
// group's B (its positions depend on how the batch is cut): it quantises each position's
// conj(r1) · F1[conj(O)·g] into the sums of its row-offset class (the distinct δ0 of every rank's
// positions, setup.scan_positions_px, found once: this path never moves positions), and after the
// ranks' sum every rank takes each class through conj(r0) · F0[·] once (in class order) into the
// spectrum: a column pass per class and batch instead of per group and thread. The thread whose
// run holds a class's first position writes that class's sums in place; a run that starts inside
// a class keeps its part aside (thread_scratch::carry) until the threads are done. With more
// classes than a quarter of a batch (irregular positions: each group a position or two anyway),
// or over 256 MiB of class sums, each position's share goes the whole way (a 2-D transform) into
// the spectrum instead.
//
// One engine per real type ([reconstruct] precision): cpu_engine<float> computes in single
// precision (FFTW's fftwf_ interface) and exposes complex64 tensors; cpu_engine<double> computes
// in double precision (fftw_) and exposes complex128 ones. Either takes object_init and
// probe_init as complex64 or complex128 and converts them; the targets (float32, or uint16 integer
// counts widened exactly to float32 per pattern) stay as given, the
// positions float64.
#pragma once

#include <tycho/sdk.hpp>
#include <tycho/sdk/fixed_point.hpp>

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
  // The grouped path rounds each position's axis-0 sub-pixel offset to this grid (px; 0: exact,
  // float32 to 2⁻²⁸): positions whose offsets differ by less share a group (above).
  double shift_group_grid_px = 1.0 / 16;
  bool deterministic = false;     // true: fixed-point sums (above); false: float sums in each thread's order
  int64_t batch_size = 128;       // [reconstruct] batch_size: the most positions in a batch (the grids' bound)
  bool host_finishes = false;     // the host sums TYCHO_TENSOR_FIXED_POINT_SUMS and calls finish_batch
  // Every rank's probe centres ((scan_patterns, 2), during construction; nullptr: the setup's
  // own): the grouped path's row-offset classes are the whole scan's, the same on every rank.
  const double* scan_positions = nullptr;
  int64_t scan_patterns = 0;
};

// What the vtable calls, whatever the engine's real type; the adapter has checked batch indices
// and tensor ids before.
class engine_base {
 public:
  virtual ~engine_base() = default;
  // Returns Σ L over the batch; gradients (sums) land in the OBJECT_GRAD / PROBE_GRAD tensors.
  // With deterministic sums and host_finishes: returns 0 and leaves the sums for finish_batch.
  virtual double compute_batch(const int64_t* indices, int64_t count) = 0;
  virtual DLTensor* tensor(tycho_tensor_id id) = 0;
  // Only for an engine created with a position gradient (the adapter checks).
  virtual void set_position_gradient(bool on) = 0;
  // The object gradient is read only inside `boxes` (n rows [row0, row1, col0, col1), checked
  // by the adapter) from the next batch on; n = 0: everywhere.
  virtual void set_gradient_region(const int64_t* boxes, int64_t n) = 0;
  // Deterministic sums: the int64 tensor the host reduces (nullptr without them), and the step
  // after the reduction: true when the batch must be computed again, else the gradients are set
  // and `loss` has the batch's Σ L (over every rank) added.
  virtual DLTensor* fixed_point_sums() = 0;
  virtual bool finish_batch(bool ends_iteration, double& loss) = 0;
  // The Fisher information of each pattern's probe centre (tycho_engine_vtable::
  // position_information): (count, 3) J_00, J_01, J_11 into out; arguments checked by the adapter.
  virtual void position_information(const int64_t* indices, int64_t count, double counts_per_target_unit,
                                    double* out) = 0;
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
  // Off: the batches skip dL/dr and take the grouped shifts when those were allowed.
  void set_position_gradient(bool on) override {
    position_gradient_ = on;
    shift_groups_ = shift_groups_allowed_ && (!on || gradient_groups_);
  }
  void set_gradient_region(const int64_t* boxes, int64_t n) override { region_.assign(boxes, boxes + 4 * n); }
  DLTensor* fixed_point_sums() override;
  bool finish_batch(bool ends_iteration, double& loss) override;
  // Per pattern the shifted probe and its two derivatives by the centre, F⁻¹[F[P]·r·(−2πi f_a/N_a)],
  // through the slices alongside the wave (the object does not depend on the centre), then
  // J_ab = (c / target_scale) Σ_k ∂_a I_k ∂_b I_k / I_k with ∂_a I = 2 Re Σ_modes conj(Ψ) ∂_a Ψ / (N0 N1).
  // Six 2-D transforms per pattern, mode and slice: a pass the host makes once, not per iteration.
  void position_information(const int64_t* indices, int64_t count, double counts_per_target_unit,
                            double* out) override;

 private:
  struct thread_scratch;
  struct batch_item {      // one position of the batch, as the transforms need it
    int64_t pattern;       // index into the targets
    int64_t i0, j0;        // the window's integer top-left (object pixels)
    double delta0, delta1; // its sub-pixel offset, in [0, 1] (px)
    int64_t klass = 0;     // deterministic, grouped path by class: its row-offset class
  };
  // One batch's model and gradients into the threads' sums, then summed over the threads: float
  // sums into object_grad_ and the probe spectrum (returns Σ L), or fixed-point ones into sums_.
  double compute_float(const batch_item* items, int64_t count);
  void compute_fixed(const batch_item* items, int64_t count);
  void run_threads(const batch_item* items, int64_t count, const complex* probe_spectrum);
  // probe_grad_ holds Σ_j conj(ramp_j) F[...] per mode: ∂L/∂P* = F⁻¹[it / M], in place.
  void probe_gradient_from_spectrum();
  // The object gradient's term conj(psi) · g on pattern `it`'s patch of slice `slice`, and
  // conj(O_patch) · g into `probe_term` (float or fixed-point sums, as the engine runs).
  void object_products(const complex* psi, int64_t slice, const batch_item& it, const complex* g,
                       complex* probe_term, thread_scratch& s);
  // Adds pattern `it`'s spectrum `spectrum` of mode k to the probe sums: conj(ramp0 ⊗ ramp1)
  // · spectrum (the per-position path), or by class conj(ramp1) · (a row spectrum).
  void add_probe_share(const complex* spectrum, int64_t k, thread_scratch& s, bool by_row);
  // The grouped path's row-offset classes, when the deterministic sums keep them (cpu_engine.hpp).
  void find_classes(const engine_options& options);
  // Pattern j's window corner and sub-pixel offset from its centre, exactly; refused where the
  // window has left the object. item() puts the offsets on the grouped path's grid where it runs.
  batch_item exact_item(int64_t j) const;
  batch_item item(int64_t j) const;
  // The sub-pixel offset along axis 0 of a window centred at `centre0` (object pixels), as item()
  // takes it (rounded to 2⁻²⁸ px for the float32 grouped path).
  double row_offset(double centre0) const;
  double grouped_offset(double delta0) const;
  void group_position_gradient(const complex* w1, int64_t k, thread_scratch& s, double& grad0, double& grad1) const;
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
  bool shift_groups_;                  // this batch takes the grouped shifts
  double group_grid_ = 0;              // options.shift_group_grid_px (0: exact)
  bool shift_groups_allowed_ = false;  // one slice and asked for: the groups' plans and buffers exist
  bool gradient_groups_ = false;       // and they compute the position gradient too (float sums)
  bool position_gradient_ = false;     // this batch computes dL/dr (set_position_gradient)
  std::vector<complex> propagator_;  // H / (N0·N1): the slice propagator with the round trip's scale
  const float* targets_ = nullptr;            // float32 targets, or
  const uint16_t* counts_ = nullptr;          // integer counts, widened per pattern before the loss
  // Streamed targets (setup.target_reader, ABI 1.3): targets_/counts_ point at the host's copy
  // of the current batch (float32 or uint16 as the reader gives); pattern j's row in it.
  const tycho_target_reader* reader_ = nullptr;
  std::vector<int64_t> batch_row_;  // (P): row of pattern j in the current batch
  std::vector<int64_t> last_batch_;  // the indices the reader last read
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

  // Deterministic sums (options.deterministic; tycho/sdk/fixed_point.hpp). Tensors of the grids:
  // 0 the object gradient, 1 the probe gradient's spectrum (or row spectra by class).
  bool deterministic_ = false, host_finishes_ = false;
  int64_t batch_size_ = 128, scan_patterns_ = 0;  // the grids' bound; every rank's patterns
  sdk::fixed_point::grid_schedule grids_;
  int used_grid_[2] = {0, 0};        // the grids the sums in sums_ were quantised on
  // probe (2·M·N0·N1, or 2·C·M·N0·N1) | header | object (2·S·H·W, or only sums_region_'s boxes
  // packed: the tensor the host sums then ends there)
  std::vector<int64_t> sums_;
  int64_t probe_at_ = 0, header_at_ = 0, object_at_ = 0;
  std::vector<int64_t> sums_region_;  // the gradient region the object's sums in sums_ were packed for
  sdk::tensor_view sums_view_;
  bool by_class_ = false;            // grouped path: probe shares per row-offset class
  std::vector<double> class_delta0_; // (C) the classes' δ0, ascending
  std::vector<int64_t> class_of_;    // (P) each pattern's class
  int64_t recomputed_logged_ = 0;
};

}  // namespace tycho::cpu
