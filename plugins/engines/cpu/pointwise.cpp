// The two builds of the pointwise loops (pointwise.hpp) and the choice between them.
#include "pointwise.hpp"

#include <tycho/sdk/fixed_point.hpp>
#include <tycho/sdk/simd.hpp>

#include <bit>
#include <cmath>
#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace tycho::cpu {

namespace pointwise_sse2 {
#define TYCHO_POINTWISE_TARGET
#include "pointwise_loops.inc"
#undef TYCHO_POINTWISE_TARGET
}  // namespace pointwise_sse2

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TYCHO_POINTWISE_HAS_AVX2 1
// AVX2 without FMA (pointwise.hpp: the same bits as the SSE2 build).
namespace pointwise_avx2 {
#define TYCHO_POINTWISE_TARGET __attribute__((target("avx2")))
#define TYCHO_POINTWISE_AVX2 1
#include "pointwise_loops.inc"
#undef TYCHO_POINTWISE_AVX2
#undef TYCHO_POINTWISE_TARGET
}  // namespace pointwise_avx2
#endif

template <class Real>
const pointwise_kernels<Real>& pointwise_for_this_cpu() {
  // Chosen per engine (a run may set TYCHO_CPU_SIMD between sessions, as the tests do).
  static const pointwise_kernels<Real> sse2 = pointwise_sse2::table<Real>("SSE2");
#if defined(TYCHO_POINTWISE_HAS_AVX2)
  static const pointwise_kernels<Real> avx2 = pointwise_avx2::table<Real>("AVX2");
  if (sdk::use_avx2_loops()) return avx2;
#endif
  return sse2;
}

template const pointwise_kernels<float>& pointwise_for_this_cpu<float>();
template const pointwise_kernels<double>& pointwise_for_this_cpu<double>();

}  // namespace tycho::cpu
