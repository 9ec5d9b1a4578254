// The CUDA engine: the cpu engine's single-slice, single-mode gradient model (plugins/engines/cpu/
// cpu_engine.hpp has the formulas) on one GPU, a whole mini-batch per kernel launch.
//
// Per batch of n positions, all queued on one non-blocking stream, nothing synchronised:
//   F[P]/M (one FFT)  →  K1  P̂_j = F[P]/M · ramp_j                 (n × N0 × N1)
//                      →  batched F⁻¹                →  P_j (kept for the gradients)
//   K2  ψ_j = P_j · O[patch_j]  →  batched F  →  Ψ_j
//   K3  I_j = |Ψ_j|²/M, and D_j gathered from the targets  →  loss component (device tensors,
//       the engine's stream, Σ L added to a device double)  →  dL/dI
//   K4  Ψ_j · dL/dI / M  →  batched F⁻¹  →  g_j
//   K5  ∂L/∂O* += conj(P_j) g_j on the patch (float atomics, or rounded to integers), and
//       conj(O_patch) g_j  →  batched F  →  K6 Σ_j · conj(ramp_j) / M (fixed order, or in
//       integers)  →  F⁻¹  →  ∂L/∂P*
// Transforms are cuFFT's unnormalised C2C (forward e^−, inverse e^+), scaled exactly as the cpu
// engine's FFTW ones, so the model intensity and both gradients match it.
//
// Batches: the cuFFT plans are made once, for the configured batch size B and for the
// remainder P mod B (the last batch of every epoch), sharing one work area. A batch of any
// other size n < B runs the B plan over all B slots (the slots past n hold stale, finite data
// and are ignored); a batch larger than B runs in passes of B that accumulate.
//
// Deterministic sums (`deterministic = true`; the scheme: tycho/sdk/fixed_point.hpp): every
// position's conj(P_j) g_j and its probe-spectrum term are rounded to int64 on the batch's grid
// and added with integer atomics (object) or in integers per pixel (probe), which are the same in
// any order; the host sums those integers over the devices (ncclInt64) and finish_batch converts
// them once. So object, probe and positions are the same bits on 1 or several devices, as on
// every run. Each batch waits once for its largest values and once for the summed header (a few
// bytes each) to decide whether its grid held. The loss value comes from the loss component's
// device sum (double atomics): it may differ in its last bits between runs and device counts (the
// cpu engine's loss history does not). Float sums (`false`): atomic object gradient, fixed-order
// probe gradient.
#pragma once

#include <tycho/sdk.hpp>

#include <memory>

namespace tycho::cuda {

class cuda_engine {
 public:
  // host_finishes: the host sums fixed_point_sums() over the devices and calls finish_batch.
  cuda_engine(const tycho_engine_setup& setup, bool host_finishes);
  ~cuda_engine();
  cuda_engine(const cuda_engine&) = delete;
  cuda_engine& operator=(const cuda_engine&) = delete;

  // Queues one mini-batch; the loss stays on the device until collect_loss.
  void compute_batch(const int64_t* indices, int64_t count);
  // A view on device memory (kDLCUDA), valid until the engine is destroyed.
  DLTensor* tensor(tycho_tensor_id id);
  // Copies a tensor to host memory of exactly its size, after the queued work.
  void read_tensor(tycho_tensor_id id, void* host_dst, size_t bytes);
  void* stream() const;
  // Waits for the queued work; returns Σ L since the last call and resets it.
  double collect_loss();
  // Deterministic sums (nullptr without them), and the step after the host's sum over the devices:
  // true when the batch must be computed again.
  DLTensor* fixed_point_sums();
  bool finish_batch(bool ends_iteration);

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace tycho::cuda
