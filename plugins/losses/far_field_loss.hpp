// tycho_loss_vtable::evaluate_far_field on the host (called by losses_plugin.cpp), for n patterns
// of `modes` far fields psi (n, modes, m) and measured (n, m) float32 or uint16 counts:
//   I = Σ_k intensity_scale·|Ψ_k|² (k in order),  r = pixel(I, D),  G_k = Ψ_k · (r.dloss_dI · gradient_scale),
// returning Σ L (each pattern summed in Real, the patterns in double). One pass per pattern for one
// mode; for several, chunks of pixels: their I first, then every mode's G. Thread-safe.
//
// Compiled for SSE2 and for AVX2 without FMA (far_field_loss_loop.inc) and run in AVX2 where the
// CPU has it (tycho/sdk/simd.hpp: the same choice, and the same TYCHO_CPU_SIMD=sse2 override, as
// the cpu engine's pointwise loops): the same operations in the same order, and Σ L summed in eight
// fixed lanes, so both give the same bits. Only for pixel functions with Pixel::same_bits_at_any_width:
// the Poisson loss's log comes from libmvec, whose SSE and AVX2 variants are separate code, so it
// stays on SSE2.
#pragma once

#include <algorithm>
#include <complex>
#include <cstdint>
#include <type_traits>

#include <tycho/sdk/simd.hpp>

#include "pixel_loss.hpp"

namespace tycho::losses {

namespace far_field_sse2 {
#define TYCHO_LOSS_TARGET
#include "far_field_loss_loop.inc"
#undef TYCHO_LOSS_TARGET
}  // namespace far_field_sse2

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TYCHO_LOSS_HAS_AVX2 1
namespace far_field_avx2 {
#define TYCHO_LOSS_TARGET __attribute__((target("avx2")))
#include "far_field_loss_loop.inc"
#undef TYCHO_LOSS_TARGET
}  // namespace far_field_avx2
#endif

// avx2: sdk::use_avx2_loops(), asked once per loss instance (it reads the environment).
template <class Real, class Pixel, class Measured>
double far_field_loss_sum(bool avx2, const Pixel& pixel, const std::complex<Real>* psi, int64_t n, int64_t modes,
                          int64_t m, Real intensity_scale, const Measured* measured, const uint8_t* mask,
                          Real gradient_scale, std::complex<Real>* gradient) {
#if defined(TYCHO_LOSS_HAS_AVX2)
  if constexpr (Pixel::same_bits_at_any_width)
    if (avx2)
      return far_field_avx2::far_field_loss_sum(pixel, psi, n, modes, m, intensity_scale, measured, mask,
                                                gradient_scale, gradient);
#else
  (void)avx2;
#endif
  return far_field_sse2::far_field_loss_sum(pixel, psi, n, modes, m, intensity_scale, measured, mask, gradient_scale,
                                            gradient);
}

}  // namespace tycho::losses
