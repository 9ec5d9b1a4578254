#include "tycho/core/multislice.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tycho/core/error.hpp"

namespace tycho {

namespace {
constexpr double k_pi = 3.14159265358979323846;
double frequency(int64_t i, int64_t n) { return double(i < (n + 1) / 2 ? i : i - n); }
using cd = std::complex<double>;

// Eigen-decomposition of a Hermitian m×m matrix `a` (row-major) by cyclic Jacobi rotations:
// on return the diagonal of `a` holds the eigenvalues and the columns of `v` the eigenvectors.
// m is the number of probe modes (a handful), so O(m³) sweeps cost nothing.
void hermitian_eigen(std::vector<cd>& a, std::vector<cd>& v, int64_t m) {
  v.assign(std::size_t(m * m), cd(0));
  for (int64_t i = 0; i < m; ++i) v[std::size_t(i * m + i)] = 1;
  auto at = [&](std::vector<cd>& x, int64_t r, int64_t c) -> cd& { return x[std::size_t(r * m + c)]; };
  for (int sweep = 0; sweep < 64; ++sweep) {
    double off = 0, diag = 0;
    for (int64_t p = 0; p < m; ++p)
      for (int64_t q = 0; q < m; ++q) (p == q ? diag : off) += std::norm(at(a, p, q));
    if (off <= 1e-30 * diag || off == 0) break;
    for (int64_t p = 0; p < m; ++p)
      for (int64_t q = p + 1; q < m; ++q) {
        const cd apq = at(a, p, q);
        const double mag = std::abs(apq);
        if (mag == 0) continue;
        // Rotate in the (p, q) plane so that a_pq becomes 0: with apq = |apq| e^{iφ}, the real
        // symmetric 2×2 problem [[app, |apq|], [|apq|, aqq]] after a phase on q.
        const double app = at(a, p, p).real(), aqq = at(a, q, q).real();
        const cd phase = apq / mag;
        const double theta = 0.5 * std::atan2(2 * mag, aqq - app);
        const double c = std::cos(theta), s = std::sin(theta);
        // Columns p, q of the unitary J: J_pp = c, J_qp = −s·conj(phase)... applied as A ← J^H A J.
        for (int64_t k = 0; k < m; ++k) {  // A ← A J
          const cd akp = at(a, k, p), akq = at(a, k, q);
          at(a, k, p) = c * akp - s * std::conj(phase) * akq;
          at(a, k, q) = s * phase * akp + c * akq;
          const cd vkp = at(v, k, p), vkq = at(v, k, q);
          at(v, k, p) = c * vkp - s * std::conj(phase) * vkq;
          at(v, k, q) = s * phase * vkp + c * vkq;
        }
        for (int64_t k = 0; k < m; ++k) {  // A ← J^H A
          const cd apk = at(a, p, k), aqk = at(a, q, k);
          at(a, p, k) = c * apk - s * phase * aqk;
          at(a, q, k) = s * std::conj(phase) * apk + c * aqk;
        }
        at(a, p, q) = at(a, q, p) = 0;
      }
  }
}
}  // namespace

std::vector<cd> fresnel_propagator(int64_t n0, int64_t n1, double dk0, double dk1, double wavelength_A,
                                   double thickness_A) {
  if (n0 <= 0 || n1 <= 0 || !(dk0 > 0) || !(dk1 > 0) || !std::isfinite(dk0) || !std::isfinite(dk1))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "Fresnel propagator: window ", n0, " x ", n1, " at ", dk0, ", ", dk1,
         " Å⁻¹ per pixel: sizes and sampling must be > 0");
  if (!(wavelength_A > 0) || !std::isfinite(wavelength_A) || !std::isfinite(thickness_A))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "Fresnel propagator: wavelength ", wavelength_A, " Å and thickness ",
         thickness_A, " Å must be finite (wavelength > 0)");
  std::vector<cd> h(std::size_t(n0 * n1));
  for (int64_t a = 0; a < n0; ++a) {
    const double k0 = frequency(a, n0) * dk0;
    for (int64_t b = 0; b < n1; ++b) {
      const double k1 = frequency(b, n1) * dk1;
      const double phase = -k_pi * wavelength_A * thickness_A * (k0 * k0 + k1 * k1);
      h[std::size_t(a * n1 + b)] = cd(std::cos(phase), std::sin(phase));
    }
  }
  return h;
}

std::vector<cd> initial_probe_modes(const std::vector<cd>& probe, int64_t n0, int64_t n1, int64_t modes,
                                    double share) {
  const int64_t n = n0 * n1;
  if (modes < 1 || modes > n)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] probe_modes = ", modes, ": must be in [1, ", n,
         "] (the window's pixels)");
  if (!(share >= 0 && share < 1))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "probe mode power share ", share, " must be in [0, 1)");
  if (int64_t(probe.size()) != n) fail(TYCHO_ERR_INVALID_ARGUMENT, "initial_probe_modes: probe size mismatch");
  double power = 0, c0 = 0, c1 = 0;
  for (int64_t a = 0; a < n0; ++a)
    for (int64_t b = 0; b < n1; ++b) {
      const double w = std::norm(probe[std::size_t(a * n1 + b)]);
      power += w;
      c0 += w * double(a);
      c1 += w * double(b);
    }
  if (!(power > 0)) fail(TYCHO_ERR_INVALID_ARGUMENT, "initial_probe_modes: the probe has no power");
  c0 /= power;
  c1 /= power;
  double var = 0;
  for (int64_t a = 0; a < n0; ++a)
    for (int64_t b = 0; b < n1; ++b)
      var += std::norm(probe[std::size_t(a * n1 + b)]) * ((a - c0) * (a - c0) + (b - c1) * (b - c1));
  const double width = std::sqrt(std::max(var / power, 1.0));
  std::vector<cd> out(std::size_t(modes * n));
  std::copy(probe.begin(), probe.end(), out.begin());
  // Polynomials of increasing order: x, y, xy, x² − y², x², y², x²y, ...: p = x^i y^j.
  std::vector<std::pair<int, int>> orders;
  for (int total = 1; int64_t(orders.size()) < modes - 1 && total < 64; ++total)
    for (int i = total; i >= 0 && int64_t(orders.size()) < modes - 1; --i) orders.emplace_back(i, total - i);
  for (int64_t m = 1; m < modes; ++m) {
    cd* pm = out.data() + m * n;
    const auto [ix, iy] = orders[std::size_t(m - 1)];
    for (int64_t a = 0; a < n0; ++a)
      for (int64_t b = 0; b < n1; ++b) {
        const double x = (a - c0) / width, y = (b - c1) / width;
        pm[a * n1 + b] = probe[std::size_t(a * n1 + b)] * (std::pow(x, ix) * std::pow(y, iy));
      }
    // Gram–Schmidt against the modes before it, then its power.
    for (int64_t q = 0; q < m; ++q) {
      const cd* pq = out.data() + q * n;
      cd dot = 0;
      double nq = 0;
      for (int64_t k = 0; k < n; ++k) {
        dot += std::conj(pq[k]) * pm[k];
        nq += std::norm(pq[k]);
      }
      for (int64_t k = 0; k < n; ++k) pm[k] -= dot / nq * pq[k];
    }
    double pw = 0;
    for (int64_t k = 0; k < n; ++k) pw += std::norm(pm[k]);
    if (!(pw > 0)) fail(TYCHO_ERR_INVALID_ARGUMENT, "initial_probe_modes: mode ", m, " vanished (window too small)");
    const double scale = std::sqrt(power * share / double(modes - 1) / pw);
    for (int64_t k = 0; k < n; ++k) pm[k] *= scale;
  }
  if (modes > 1) {
    const double scale0 = std::sqrt(1 - share);
    for (int64_t k = 0; k < n; ++k) out[std::size_t(k)] *= scale0;
  }
  return out;
}

template <class T>
void orthogonalize_probe_modes(std::complex<T>* probe, int64_t modes, int64_t n) {
  if (modes <= 1) return;
  if (modes > 64) fail(TYCHO_ERR_INVALID_ARGUMENT, "orthogonalize_probe_modes: ", modes, " modes (at most 64)");
  std::vector<cd> gram(std::size_t(modes * modes), cd(0)), v;
  for (int64_t a = 0; a < modes; ++a)
    for (int64_t b = a; b < modes; ++b) {
      cd s = 0;
      const std::complex<T>* pa = probe + a * n;
      const std::complex<T>* pb = probe + b * n;
      for (int64_t k = 0; k < n; ++k) s += std::conj(cd(pa[k])) * cd(pb[k]);
      gram[std::size_t(a * modes + b)] = s;
      gram[std::size_t(b * modes + a)] = std::conj(s);
    }
  hermitian_eigen(gram, v, modes);
  std::vector<int64_t> order(static_cast<std::size_t>(modes));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return gram[std::size_t(x * modes + x)].real() > gram[std::size_t(y * modes + y)].real();
  });
  // Each eigenvector's phase is arbitrary: the Jacobi rotations leave it at the phase of
  // whichever off-diagonal entry they last cancelled, so a probe already orthonormal came back
  // with every mode turned by a random global phase. The model intensities do not see it, but
  // an optimizer does: Adam's moments of mode i belong to mode i as it was, and a probe turned
  // at every step made a 3-mode run diverge (loss 0.02 -> 0.29 in 5 iterations on a 96² scan).
  // So new mode i takes the phase that makes its coefficient on old mode i real and >= 0: a
  // probe already orthonormal in decreasing power is left as it is, a nearly orthonormal one
  // moves by its small mixing alone.
  std::vector<cd> gauge(static_cast<std::size_t>(modes), cd(1));
  for (int64_t i = 0; i < modes; ++i) {
    const cd on_own = v[std::size_t(i * modes + order[std::size_t(i)])];
    if (std::abs(on_own) > 0) gauge[std::size_t(i)] = std::conj(on_own) / std::abs(on_own);
  }
  // New mode i = Σ_b v_{b, order[i]} P_b: a unitary mixture, so Σ_m |P_m⟩⟨P_m| is unchanged.
  std::vector<cd> mixed(std::size_t(modes * n));
  for (int64_t i = 0; i < modes; ++i) {
    const int64_t col = order[std::size_t(i)];
    cd* out = mixed.data() + i * n;
    for (int64_t b = 0; b < modes; ++b) {
      const cd c = gauge[std::size_t(i)] * v[std::size_t(b * modes + col)];
      const std::complex<T>* pb = probe + b * n;
      for (int64_t k = 0; k < n; ++k) out[k] += c * cd(pb[k]);
    }
  }
  for (int64_t k = 0; k < modes * n; ++k) probe[k] = std::complex<T>(mixed[std::size_t(k)]);
}

template void orthogonalize_probe_modes<float>(std::complex<float>*, int64_t, int64_t);
template void orthogonalize_probe_modes<double>(std::complex<double>*, int64_t, int64_t);

double interaction_constant_rad_per_VA(double wavelength_A) {
  if (!(wavelength_A > 0) || !std::isfinite(wavelength_A))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "interaction constant: the wavelength ", wavelength_A, " Å is not a number > 0");
  constexpr double h = 6.62607015e-34, e = 1.602176634e-19;  // J s, C (exact, SI 2019)
  constexpr double m0 = 9.1093837015e-31;                     // kg (CODATA 2018)
  constexpr double compton_A = 0.0242631023867;               // h / (m0 c), Å (CODATA 2018)
  const double gamma = std::sqrt(1.0 + (compton_A / wavelength_A) * (compton_A / wavelength_A));
  // 2π γ m0 e λ / h² in 1/(V·m) with λ in m; × 1e-10 for 1/(V·Å).
  return 2.0 * k_pi * gamma * m0 * e * (wavelength_A * 1e-10) / (h * h) * 1e-10;
}

}  // namespace tycho
