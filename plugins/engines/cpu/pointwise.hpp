// The cpu engine's pointwise steps over n complex values, written on the interleaved (re, im)
// Real arrays that std::complex<Real>[] is ([complex.numbers]), so that the compiler vectorises
// them (`omp simd`; std::complex products compile to one value at a time). Each is the plain
// complex formula, evaluated in the same order as std::complex with -fcx-limited-range
// ((ar·br − ai·bi, ar·bi + ai·br)). Arrays may not overlap unless stated.
#pragma once

#include <complex>
#include <cstdint>

namespace tycho::cpu::pointwise {

template <class Real>
inline const Real* re(const std::complex<Real>* z) {
  return reinterpret_cast<const Real*>(z);
}
template <class Real>
inline Real* re(std::complex<Real>* z) {
  return reinterpret_cast<Real*>(z);
}

// out = a · b
template <class Real>
inline void multiply(const std::complex<Real>* a_, const std::complex<Real>* b_, std::complex<Real>* out_, int64_t n) {
  const Real* __restrict a = re(a_);
  const Real* __restrict b = re(b_);
  Real* __restrict out = re(out_);
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    const Real ar = a[2 * k], ai = a[2 * k + 1], br = b[2 * k], bi = b[2 * k + 1];
    out[2 * k] = ar * br - ai * bi;
    out[2 * k + 1] = ar * bi + ai * br;
  }
}

// acc += a · conj(b)
template <class Real>
inline void add_times_conj(const std::complex<Real>* a_, const std::complex<Real>* b_, std::complex<Real>* acc_,
                           int64_t n) {
  const Real* __restrict a = re(a_);
  const Real* __restrict b = re(b_);
  Real* __restrict acc = re(acc_);
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    const Real ar = a[2 * k], ai = a[2 * k + 1], br = b[2 * k], bi = -b[2 * k + 1];
    acc[2 * k] += ar * br - ai * bi;
    acc[2 * k + 1] += ar * bi + ai * br;
  }
}

// intensity = |w|² · scale
template <class Real>
inline void intensity(const std::complex<Real>* w_, Real scale, Real* __restrict out, int64_t n) {
  const Real* __restrict w = re(w_);
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) out[k] = (w[2 * k] * w[2 * k] + w[2 * k + 1] * w[2 * k + 1]) * scale;
}

// out = w · (d · scale)   (d real)
template <class Real>
inline void scale_by(const std::complex<Real>* w_, const Real* __restrict d, Real scale, std::complex<Real>* out_,
                     int64_t n) {
  const Real* __restrict w = re(w_);
  Real* __restrict out = re(out_);
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    const Real f = d[k] * scale;
    out[2 * k] = w[2 * k] * f;
    out[2 * k + 1] = w[2 * k + 1] * f;
  }
}

// The two gradient products of one row, in one pass over g:
//   object_acc += conj(p) · g,   probe_term = conj(o) · g
template <class Real>
inline void gradient_products(const std::complex<Real>* p_, const std::complex<Real>* o_, const std::complex<Real>* g_,
                              std::complex<Real>* object_acc_, std::complex<Real>* probe_term_, int64_t n) {
  const Real* __restrict p = re(p_);
  const Real* __restrict o = re(o_);
  const Real* __restrict g = re(g_);
  Real* __restrict acc = re(object_acc_);
  Real* __restrict x = re(probe_term_);
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    const Real gr = g[2 * k], gi = g[2 * k + 1];
    const Real pr = p[2 * k], pi = -p[2 * k + 1];
    const Real or_ = o[2 * k], oi = -o[2 * k + 1];
    acc[2 * k] += pr * gr - pi * gi;
    acc[2 * k + 1] += pr * gi + pi * gr;
    x[2 * k] = or_ * gr - oi * gi;
    x[2 * k + 1] = or_ * gi + oi * gr;
  }
}

}  // namespace tycho::cpu::pointwise
