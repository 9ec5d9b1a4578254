// The cpu engine's pointwise steps: every loop over the pixels of a window that is not a
// transform, as a table of functions chosen once per engine for the CPU it runs on.
//
// The loops (pointwise_loops.inc) are compiled twice, for baseline x86-64 (SSE2) and with AVX2
// (pointwise.cpp), and the AVX2 table is taken where tycho::sdk::use_avx2_loops() says so
// (tycho/sdk/simd.hpp). AVX2 without FMA (and -ffp-contract=off, so no flag can bring it in): no
// product is fused into a sum, so both builds do the same IEEE operations in the same order and
// give the same bits (only the vector width differs, and no loop reduces across the vector's lanes), so
// these loops do not make a run differ between machines with and without AVX2 (FFTW's own
// codelets, chosen per CPU, still may: conventions.md, "Reproducibility"). Measured on the MoS2
// example: the engine's ratio to the FFT floor 2.9–3.0 with the SSE2 table, 2.3–2.55 with AVX2
// (bench/RESULTS.md).
//
// Each loop is the plain complex formula on the interleaved (re, im) arrays that
// std::complex<Real>[] is ([complex.numbers]), evaluated in the order std::complex computes it
// with -fcx-limited-range: a·b = (ar·br − ai·bi, ar·bi + ai·br), left to right in a product of
// three. Shapes: a window is n0 rows of n1 values, C order; an object patch is n0 rows of n1
// values at a row stride (the object's width). Arrays may not overlap unless stated.
// Thread-safety: the functions keep no state; the table is read-only after its first use.
#pragma once

#include <complex>
#include <cstdint>

namespace tycho::cpu {

// What a fixed-point loop (below) saw of the values it quantised, for the grid's check
// (tycho/sdk/fixed_point.hpp): the largest |v · scale| and the count of NaN and infinite values.
struct fixed_tally {
  double largest = 0;
  int64_t non_finite = 0;
};

template <class Real>
struct pointwise_kernels {
  using complex = std::complex<Real>;
  const char* instruction_set;  // "AVX2" or "SSE2" (for the log)
  // out = a · b (n values)
  void (*multiply)(const complex* a, const complex* b, complex* out, int64_t n);
  // out = a · conj(b) (n values)
  void (*multiply_conj)(const complex* a, const complex* b, complex* out, int64_t n);
  // out = p · o_patch: the exit wave of a window (p: n0 × n1; o: rows at stride o_stride)
  void (*multiply_patch)(const complex* p, const complex* o, int64_t o_stride, complex* out, int64_t n0, int64_t n1);
  // out[a, b] = x[a, b] · r[b]: a factor per column (the axis-1 shift ramp)
  void (*multiply_columns)(const complex* x, const complex* r, complex* out, int64_t n0, int64_t n1);
  // acc[a, b] += x[a, b] · conj(r[b])
  void (*add_times_conj_columns)(const complex* x, const complex* r, complex* acc, int64_t n0, int64_t n1);
  // out[a, b] = x[a, b] · r[a]: a factor per row (the axis-0 shift ramp)
  void (*multiply_rows)(const complex* x, const complex* r, complex* out, int64_t n0, int64_t n1);
  // acc[a, b] += x[a, b] · conj(r[a])
  void (*add_times_conj_rows)(const complex* x, const complex* r, complex* acc, int64_t n0, int64_t n1);
  // out[a, b] = x[a, b] · r0[a] · r1[b]: the 2-D shift ramp, (x · r0) · r1
  void (*multiply_ramp)(const complex* x, const complex* r0, const complex* r1, complex* out, int64_t n0,
                        int64_t n1);
  // acc[a, b] += x[a, b] · conj(r0[a] · r1[b])
  void (*add_times_conj_ramp)(const complex* x, const complex* r0, const complex* r1, complex* acc, int64_t n0,
                              int64_t n1);
  // cx[b] += Σ_a conj(w[a, b]) · x[a, b] and cy[b] += Σ_a conj(w[a, b]) · y[a, b], a in order: the
  // column sums of the grouped path's position gradient (cpu_engine.cpp group_position_gradient).
  // The one loop here that sums over pixels, down each column in row order: the same order in
  // both builds (they differ only in how many columns a vector holds).
  void (*add_conj_products_by_column)(const complex* w, const complex* x, const complex* y, complex* cx, complex* cy,
                                      int64_t n0, int64_t n1);
  // out = |w|² · scale (n values)
  void (*intensity)(const complex* w, Real scale, Real* out, int64_t n);
  // out += |w|² · scale
  void (*add_intensity)(const complex* w, Real scale, Real* out, int64_t n);
  // out = w · (d · scale), d real
  void (*scale_by)(const complex* w, const Real* d, Real scale, complex* out, int64_t n);
  // The two gradient products of a window, one pass over g (n0 × n1):
  //   o_acc_patch += conj(p) · g (rows at stride o_stride),  probe_term = conj(o_patch) · g
  void (*gradient_products)(const complex* p, const complex* o, int64_t o_stride, const complex* g, complex* o_acc,
                            complex* probe_term, int64_t n0, int64_t n1);
  // out = counts, widened exactly to float32
  void (*widen)(const uint16_t* counts, float* out, int64_t n);

  // Deterministic sums (cpu_engine.hpp): the same products as gradient_products,
  // add_times_conj_columns and add_times_conj_ramp, each real part v then added to an int64
  // accumulator ((re, im) pairs: 2 per complex value, the object's at a stride of 2·o_stride) as
  // round(v · scale) (tycho::sdk::fixed_point::quantise), with *tally updated. Integers, so the
  // two builds agree here too.
  void (*gradient_products_fixed)(const complex* p, const complex* o, int64_t o_stride, const complex* g,
                                  int64_t* o_acc, complex* probe_term, int64_t n0, int64_t n1, double scale,
                                  fixed_tally* tally);
  // first: acc = (the values) instead of +=, for an accumulator's first position (no zeroing pass)
  void (*add_times_conj_columns_fixed)(const complex* x, const complex* r, int64_t* acc, int64_t n0, int64_t n1,
                                       double scale, fixed_tally* tally, bool first);
  void (*add_times_conj_ramp_fixed)(const complex* x, const complex* r0, const complex* r1, int64_t* acc,
                                    int64_t n0, int64_t n1, double scale, fixed_tally* tally);
  // out = double(n) · 2^g as Real (n values): a grid's integers back to floating point
  void (*from_fixed)(const int64_t* n, int g, Real* out, int64_t count);
};

// The table for this CPU: AVX2 where the CPU (and the OS) has it, else SSE2; the environment
// variable TYCHO_CPU_SIMD=sse2 asks for the SSE2 table on any CPU (to check that both agree).
template <class Real>
const pointwise_kernels<Real>& pointwise_for_this_cpu();

// Interleaved (re, im) access to a complex array.
template <class Real>
inline const Real* re(const std::complex<Real>* z) {
  return reinterpret_cast<const Real*>(z);
}
template <class Real>
inline Real* re(std::complex<Real>* z) {
  return reinterpret_cast<Real*>(z);
}

}  // namespace tycho::cpu
