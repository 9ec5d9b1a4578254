// The scan's linear map from a crystal's lattice (tycho/core/lattice_map.hpp).
#include "tycho/core/lattice_map.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <functional>
#include <limits>
#include <numeric>

#include "tycho/core/error.hpp"
#include "tycho/core/fftw_planner.hpp"

namespace tycho {

namespace {

constexpr double pi = 3.14159265358979323846;
using cplx = std::complex<double>;
using fn = std::function<double(const std::vector<double>&)>;

// Nelder–Mead on f from x0 with initial steps `step`: the simplex method as Lagarias et al.
// (SIAM J. Optim. 9, 112, 1998) state it; stops when the simplex's spread in f is below ftol
// relative and in x below xtol (absolute), or after max_evals.
std::vector<double> nelder_mead(const fn& f, std::vector<double> x0, const std::vector<double>& step, double xtol,
                                double ftol, int max_evals) {
  const std::size_t n = x0.size();
  std::vector<std::vector<double>> s(n + 1, x0);
  std::vector<double> v(n + 1);
  for (std::size_t i = 0; i < n; ++i) s[i + 1][i] += step[i];
  for (std::size_t i = 0; i <= n; ++i) v[i] = f(s[i]);
  int evals = int(n + 1);
  std::vector<std::size_t> order(n + 1);
  while (evals < max_evals) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
    const std::size_t best = order[0], worst = order[n], second = order[n - 1];
    double spread_x = 0;
    for (std::size_t i = 1; i <= n; ++i)
      for (std::size_t d = 0; d < n; ++d) spread_x = std::max(spread_x, std::abs(s[order[i]][d] - s[best][d]));
    if (spread_x <= xtol && std::abs(v[worst] - v[best]) <= ftol * (std::abs(v[best]) + 1e-300)) break;
    std::vector<double> centre(n, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t d = 0; d < n; ++d) centre[d] += s[order[i]][d] / double(n);
    auto along = [&](double t) {
      std::vector<double> x(n);
      for (std::size_t d = 0; d < n; ++d) x[d] = centre[d] + t * (s[worst][d] - centre[d]);
      return x;
    };
    const std::vector<double> xr = along(-1);
    const double fr = f(xr);
    ++evals;
    if (fr < v[best]) {
      const std::vector<double> xe = along(-2);
      const double fe = f(xe);
      ++evals;
      if (fe < fr) s[worst] = xe, v[worst] = fe;
      else s[worst] = xr, v[worst] = fr;
    } else if (fr < v[second]) {
      s[worst] = xr, v[worst] = fr;
    } else {
      const bool outside = fr < v[worst];
      const std::vector<double> xc = along(outside ? -0.5 : 0.5);
      const double fc = f(xc);
      ++evals;
      if (fc < (outside ? fr : v[worst])) {
        s[worst] = xc, v[worst] = fc;
      } else {
        for (std::size_t i = 1; i <= n; ++i) {
          for (std::size_t d = 0; d < n; ++d) s[order[i]][d] = s[best][d] + 0.5 * (s[order[i]][d] - s[best][d]);
          v[order[i]] = f(s[order[i]]);
          ++evals;
        }
      }
    }
  }
  const std::size_t best = std::size_t(std::min_element(v.begin(), v.end()) - v.begin());
  return s[best];
}

// Solves the symmetric positive (semi)definite system A x = b (n x n, row-major) by Gaussian
// elimination with partial pivoting; a singular pivot leaves that component 0.
template <class T>
std::vector<T> solve(std::vector<T> A, std::vector<T> b, std::size_t n) {
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::abs(A[r * n + c]) > std::abs(A[p * n + c])) p = r;
    if (p != c) {
      for (std::size_t k = 0; k < n; ++k) std::swap(A[c * n + k], A[p * n + k]);
      std::swap(b[c], b[p]);
    }
    if (std::abs(A[c * n + c]) < 1e-300) continue;
    for (std::size_t r = c + 1; r < n; ++r) {
      const T m = A[r * n + c] / A[c * n + c];
      if (m == T(0)) continue;
      for (std::size_t k = c; k < n; ++k) A[r * n + k] -= m * A[c * n + k];
      b[r] -= m * b[c];
    }
  }
  std::vector<T> x(n, T(0));
  for (std::size_t c = n; c-- > 0;) {
    if (std::abs(A[c * n + c]) < 1e-300) continue;
    T s = b[c];
    for (std::size_t k = c + 1; k < n; ++k) s -= A[c * n + k] * x[k];
    x[c] = s / A[c * n + c];
  }
  return x;
}

using residuals = std::function<std::vector<double>(const std::vector<double>&)>;

// The forward-difference Jacobian (m x n, row-major) of r at x, where r(x) = r0, steps scale·1e-3.
std::vector<double> jacobian(const residuals& r, const std::vector<double>& x, const std::vector<double>& r0,
                             const std::vector<double>& scale) {
  const std::size_t m = r0.size(), n = x.size();
  std::vector<double> J(m * n);
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<double> xp = x;
    const double h = scale[j] * 1e-3;
    xp[j] += h;
    const std::vector<double> rp = r(xp);
    for (std::size_t i = 0; i < m; ++i) J[i * n + j] = (rp[i] - r0[i]) / h;
  }
  return J;
}

// JᵀJ (n x n, row-major) of an m x n Jacobian.
std::vector<double> normal_matrix(const std::vector<double>& J, std::size_t m, std::size_t n) {
  std::vector<double> JtJ(n * n, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t a = 0; a < n; ++a) {
      const double ja = J[i * n + a];
      if (ja == 0) continue;
      for (std::size_t b = a; b < n; ++b) JtJ[a * n + b] += ja * J[i * n + b];
    }
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = 0; b < a; ++b) JtJ[a * n + b] = JtJ[b * n + a];
  return JtJ;
}

// Levenberg–Marquardt on the residuals r(x) (forward-difference Jacobian, steps `scale`·1e-3,
// the damping on JᵀJ's diagonal as Marquardt 1963). Returns x at the least Σ r².
std::vector<double> levenberg_marquardt(const residuals& r, std::vector<double> x, const std::vector<double>& scale, int iterations) {
  const std::size_t n = x.size();
  std::vector<double> res = r(x);
  auto cost_of = [](const std::vector<double>& v) { return std::inner_product(v.begin(), v.end(), v.begin(), 0.0); };
  double cost = cost_of(res), lambda = 1e-3;
  for (int it = 0; it < iterations; ++it) {
    const std::size_t m = res.size();
    const std::vector<double> J = jacobian(r, x, res, scale);
    const std::vector<double> JtJ = normal_matrix(J, m, n);
    std::vector<double> Jtr(n, 0.0);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t a = 0; a < n; ++a) Jtr[a] -= J[i * n + a] * res[i];
    bool improved = false;
    for (int tries = 0; tries < 12 && !improved; ++tries) {
      std::vector<double> A = JtJ;
      for (std::size_t a = 0; a < n; ++a) A[a * n + a] += lambda * std::max(JtJ[a * n + a], 1e-12);
      const std::vector<double> dx = solve(A, Jtr, n);
      std::vector<double> xn = x;
      for (std::size_t a = 0; a < n; ++a) xn[a] += dx[a];
      const std::vector<double> rn = r(xn);
      const double cn = cost_of(rn);
      if (std::isfinite(cn) && cn < cost) {
        const bool small = cost - cn < 1e-12 * cost;
        x = xn, res = rn, cost = cn;
        lambda = std::max(lambda / 3, 1e-9);
        improved = true;
        if (small) return x;
      } else {
        lambda *= 4;
      }
    }
    if (!improved) break;
  }
  return x;
}

double soft_disc(double k0, double k1, double c0, double c1, double radius, double edge) {
  const double t = (std::hypot(k0 - c0, k1 - c1) - radius) / edge;
  return t > 40 ? 0.0 : 1.0 / (1.0 + std::exp(t));
}

// Index u of an FFT-ordered axis of n as a signed frequency index (0, 1, …, −1).
int64_t signed_index(int64_t u, int64_t n) { return (u + n / 2) % n - n / 2; }

double hann(int64_t i, int64_t n) {  // numpy's hanning(n + 2)[1:-1]: no zero weights
  const double s = std::sin(pi * double(i + 1) / double(n + 1));
  return s * s;
}

}  // namespace

lattice_block lattice_block::make(int64_t rx, int64_t ry, int64_t n0, int64_t n1, const double radius_px[2],
                                  int64_t max_block, int64_t max_values, const uint8_t* valid) {
  lattice_block b;
  b.detector[0] = n0;
  b.detector[1] = n1;
  for (int64_t u = 0; u < n0; ++u)
    for (int64_t v = 0; v < n1; ++v) {
      const double f0 = double(signed_index(u, n0)) / radius_px[0];
      const double f1 = double(signed_index(v, n1)) / radius_px[1];
      if (f0 * f0 + f1 * f1 <= 1 && (valid == nullptr || valid[u * n1 + v] != 0)) b.pixels.push_back(u * n1 + v);
    }
  const int64_t kept = std::max<int64_t>(int64_t(b.pixels.size()), 1);
  int64_t side = max_block;
  while (side > 8 && side * side * kept > max_values) --side;
  b.block[0] = std::min(rx, side);
  b.block[1] = std::min(ry, side);
  b.first[0] = (rx - b.block[0]) / 2;
  b.first[1] = (ry - b.block[1]) / 2;
  b.patterns.assign(std::size_t(b.block[0] * b.block[1]) * b.pixels.size(), 0.0);
  b.seen.assign(std::size_t(b.block[0] * b.block[1]), 0.0);
  return b;
}

void lattice_block::add(int64_t i, int64_t k, const float* pattern) {
  const std::size_t p = std::size_t((i - first[0]) * block[1] + (k - first[1]));
  double* out = patterns.data() + p * pixels.size();
  for (std::size_t j = 0; j < pixels.size(); ++j) out[j] = pattern[pixels[j]];
  seen[p] = 1.0;
}

lattice_map_result estimate_lattice_map(const lattice_block& blk, const lattice_map_inputs& in) {
  lattice_map_result out;
  const int64_t b0 = blk.block[0], b1 = blk.block[1], B = b0 * b1;
  const int64_t n0 = blk.detector[0], n1 = blk.detector[1], N = int64_t(blk.pixels.size());
  if (b0 < 8 || b1 < 8) {
    out.why_not = cat("the scan block is ", b0, " x ", b1, " positions, fewer than 8 x 8");
    return out;
  }
  if (!(in.wavelength_A > 0 && in.semiangle_mrad > 0 && in.dk_invA[0] > 0 && in.dk_invA[1] > 0 && in.step_A[0] > 0 &&
        in.step_A[1] > 0)) {
    out.why_not = "the optics or the calibrations are not known";
    return out;
  }
  for (double s : blk.seen)
    if (s <= 0) {
      out.why_not = "the scan block is incomplete";
      return out;
    }
  // Detector coordinates (Å⁻¹ from the zero frequency) of every pixel, FFT order.
  std::vector<double> kx(static_cast<std::size_t>(N)), ky(static_cast<std::size_t>(N));
  for (int64_t j = 0; j < N; ++j) {
    const int64_t u = blk.pixels[std::size_t(j)] / n1, v = blk.pixels[std::size_t(j)] % n1;
    kx[std::size_t(j)] = double(signed_index(u, n0)) * in.dk_invA[0];
    ky[std::size_t(j)] = double(signed_index(v, n1)) * in.dk_invA[1];
  }
  // 1. The Hann-weighted mean pattern (its interference terms between lattice frequencies
  // suppressed over a non-integer number of periods).
  std::vector<double> w(static_cast<std::size_t>(B));
  double wsum = 0;
  for (int64_t i = 0; i < b0; ++i)
    for (int64_t k = 0; k < b1; ++k) wsum += (w[std::size_t(i * b1 + k)] = hann(i, b0) * hann(k, b1));
  std::vector<double> mean(static_cast<std::size_t>(N), 0.0);
  for (int64_t p = 0; p < B; ++p)
    for (int64_t j = 0; j < N; ++j) mean[std::size_t(j)] += w[std::size_t(p)] / wsum * blk.patterns[std::size_t(p * N + j)];
  // 2. The bright-field disc of the mean pattern: centre, radius and edge width (a logistic
  // edge), its height and the background solved linearly.
  const double dk = std::max(in.dk_invA[0], in.dk_invA[1]);
  const double R_stated = in.semiangle_mrad * 1e-3 / in.wavelength_A;
  // The discs' logistic edge width, at least 0.15 px: a pixel integrates even a sharp aperture's
  // edge over its width, and a sharper model edge leaves the fit's slopes along g zero between
  // pixels (measured: a hard-edged simulation then stopped 1–3 % from the true g).
  auto edge_of = [&](double x) { return std::hypot(x, 0.15 * dk); };
  double cen[2] = {0, 0}, total = 0;
  for (int64_t j = 0; j < N; ++j) {
    total += mean[std::size_t(j)];
    cen[0] += mean[std::size_t(j)] * kx[std::size_t(j)];
    cen[1] += mean[std::size_t(j)] * ky[std::size_t(j)];
  }
  if (!(total > 0)) {
    out.why_not = "the patterns hold no intensity";
    return out;
  }
  cen[0] /= total, cen[1] /= total;
  std::vector<std::size_t> near;
  for (int64_t j = 0; j < N; ++j)
    if (std::hypot(kx[std::size_t(j)] - cen[0], ky[std::size_t(j)] - cen[1]) < 1.6 * R_stated) near.push_back(std::size_t(j));
  auto disc_residual = [&](const std::vector<double>& x) {
    const double edge = edge_of(x[3]);
    double s11 = 0, s1 = 0, sm = 0, s1m = 0;
    const double n = double(near.size());
    std::vector<double> d(near.size());
    for (std::size_t i = 0; i < near.size(); ++i) {
      d[i] = soft_disc(kx[near[i]], ky[near[i]], x[0], x[1], x[2], edge);
      s11 += d[i] * d[i], s1 += d[i], sm += mean[near[i]], s1m += d[i] * mean[near[i]];
    }
    const double det = s11 * n - s1 * s1;
    const double a = det != 0 ? (s1m * n - s1 * sm) / det : 0, c = det != 0 ? (s11 * sm - s1 * s1m) / det : 0;
    for (std::size_t i = 0; i < near.size(); ++i) d[i] = a * d[i] + c - mean[near[i]];
    return d;
  };
  const std::vector<double> disc = levenberg_marquardt(disc_residual, {cen[0], cen[1], R_stated, 0.5 * dk},
                                                       {0.05 * dk, 0.05 * dk, 0.05 * dk, 0.05 * dk}, 100);
  const double c0 = disc[0], c1 = disc[1], R = disc[2], edge0 = edge_of(disc[3]);
  if (!(R > 0.5 * R_stated && R < 1.5 * R_stated)) {
    out.why_not = cat("the bright-field disc's radius came out ", R, " Å⁻¹ against the stated ", R_stated, " Å⁻¹");
    return out;
  }
  // 3. The bright field's pixels, each a series over the block with the mean removed.
  constexpr double region = 1.1;  // in disc radii
  std::vector<std::size_t> px;
  for (int64_t j = 0; j < N; ++j)
    if (std::hypot(kx[std::size_t(j)] - c0, ky[std::size_t(j)] - c1) < region * R) px.push_back(std::size_t(j));
  const std::size_t P = px.size();
  std::vector<double> X(std::size_t(B) * P);  // (B, P)
  for (int64_t p = 0; p < B; ++p)
    for (std::size_t q = 0; q < P; ++q)
      X[std::size_t(p) * P + q] = double(blk.patterns[std::size_t(p * N) + px[q]]) - mean[px[q]];
  // 4. The scan's spectrum summed over those pixels, zero-padded 4 x.
  constexpr int64_t pad = 4;
  const int64_t m0 = pad * b0, m1 = pad * b1;
  std::vector<double> S(static_cast<std::size_t>(m0 * m1), 0.0);
  {
    std::vector<cplx> buf(static_cast<std::size_t>(m0 * m1));
    fftw_transform_2d forward(buf.data(), m0, m1, -1);
    for (std::size_t q = 0; q < P; ++q) {
      std::fill(buf.begin(), buf.end(), cplx(0, 0));
      for (int64_t i = 0; i < b0; ++i)
        for (int64_t k = 0; k < b1; ++k)
          buf[std::size_t(i * m1 + k)] = w[std::size_t(i * b1 + k)] * X[std::size_t(i * b1 + k) * P + q];
      forward.run();
      for (std::size_t j = 0; j < S.size(); ++j) S[j] += std::norm(buf[j]);
    }
  }
  auto freq = [](int64_t u, int64_t m) { return double(signed_index(u, m)) / double(m); };  // cycles per index
  struct peak {
    double q[2];
    double power;
  };
  std::vector<peak> peaks;
  for (int64_t u = 0; u < m0; ++u)
    for (int64_t v = 0; v < m1; ++v) {
      const double q0 = freq(u, m0), q1 = freq(v, m1);
      if (std::hypot(q0 * double(b0), q1 * double(b1)) <= 2.5) continue;  // the mean's own lobe
      const double s = S[std::size_t(u * m1 + v)];
      bool top = true;
      for (int64_t du = -pad; du <= pad && top; ++du)
        for (int64_t dv = -pad; dv <= pad && top; ++dv)
          if ((du || dv) && S[std::size_t(((u + du + m0) % m0) * m1 + (v + dv + m1) % m1)] > s) top = false;
      if (top) peaks.push_back({{q0, q1}, s});
    }
  std::sort(peaks.begin(), peaks.end(), [](const peak& a, const peak& b) { return a.power > b.power; });
  std::vector<double> sorted = S;
  std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(sorted.size() / 2), sorted.end());
  const double median = sorted[sorted.size() / 2];
  if (peaks.size() < 2 || !(median > 0)) {
    out.why_not = "the scan's spectrum has no peaks";
    return out;
  }
  const peak& pa = peaks[0];
  const peak* pb = nullptr;
  for (std::size_t i = 1; i < peaks.size() && !pb; ++i) {
    const double cross = pa.q[0] * peaks[i].q[1] - pa.q[1] * peaks[i].q[0];
    if (std::abs(cross) > 0.3 * std::hypot(pa.q[0], pa.q[1]) * std::hypot(peaks[i].q[0], peaks[i].q[1])) pb = &peaks[i];
  }
  out.peak_contrast = pb ? pb->power / median : 0;
  if (!pb || out.peak_contrast < lattice_peak_contrast_min) {
    out.why_not = cat("no lattice in the scan's spectrum (the second basis peak ", out.peak_contrast,
                      " x the spectrum's median, fewer than ", lattice_peak_contrast_min, ")");
    return out;
  }
  // 5. Both basis frequencies refined together: every pixel's series projected on sinusoids at
  // h Q_a + k Q_b (|h| + |k| ≤ 2) and a constant; the power the projection keeps, maximised.
  static const int hk[6][2] = {{0, 1}, {0, 2}, {1, -1}, {1, 0}, {1, 1}, {2, 0}};
  constexpr std::size_t C = 13;
  // amplitudes (when given): every pixel's least-squares coefficients, (C, P).
  auto fit_sinusoids = [&](const std::vector<double>& x, std::vector<double>* amplitudes) {
    std::vector<double> D(std::size_t(B) * C);
    for (int64_t i = 0; i < b0; ++i)
      for (int64_t k = 0; k < b1; ++k) {
        double* d = D.data() + std::size_t(i * b1 + k) * C;
        d[0] = 1;
        for (int h = 0; h < 6; ++h) {
          const double f0 = hk[h][0] * x[0] + hk[h][1] * x[2], f1 = hk[h][0] * x[1] + hk[h][1] * x[3];
          const double ph = 2 * pi * (f0 * double(i) + f1 * double(k));
          d[1 + 2 * h] = std::cos(ph);
          d[2 + 2 * h] = std::sin(ph);
        }
      }
    std::vector<double> G(C * C, 0.0), Y(C * P, 0.0);
    for (int64_t p = 0; p < B; ++p) {
      const double* d = D.data() + std::size_t(p) * C;
      const double* xp = X.data() + std::size_t(p) * P;
      for (std::size_t a = 0; a < C; ++a) {
        for (std::size_t b = 0; b < C; ++b) G[a * C + b] += d[a] * d[b];
        double* y = Y.data() + a * P;
        for (std::size_t q = 0; q < P; ++q) y[q] += d[a] * xp[q];
      }
    }
    double keep = 0;
    if (amplitudes) amplitudes->assign(C * P, 0.0);
    for (std::size_t q = 0; q < P; ++q) {
      std::vector<double> y(C);
      for (std::size_t a = 0; a < C; ++a) y[a] = Y[a * P + q];
      const std::vector<double> z = solve(G, y, C);
      for (std::size_t a = 0; a < C; ++a) keep += y[a] * z[a];
      if (amplitudes)
        for (std::size_t a = 0; a < C; ++a) (*amplitudes)[a * P + q] = z[a];
    }
    return -keep;
  };
  auto kept = [&](const std::vector<double>& x) { return fit_sinusoids(x, nullptr); };
  const double h0 = 0.1 / double(b0), h1 = 0.1 / double(b1);
  const std::vector<double> Q = nelder_mead(kept, {pa.q[0], pa.q[1], pb->q[0], pb->q[1]}, {h0, h1, h0, h1}, 1e-7, 1e-12, 2000);
  // 6. The lunes of G(k, Q) at the two frequencies. The start map pairs each with its g.
  const auto& L0 = in.start.L;
  const double det0 = L0[0][0] * L0[1][1] - L0[0][1] * L0[1][0];
  if (!(std::abs(det0) > 1e-9)) {
    out.why_not = "the start map is singular";
    return out;
  }
  double g_start[2][2];  // [basis][axis]: solve L0ᵀ g = diag(step)⁻¹ Q
  for (int a = 0; a < 2; ++a) {
    const double t0 = Q[std::size_t(2 * a)] / in.step_A[0], t1 = Q[std::size_t(2 * a + 1)] / in.step_A[1];
    g_start[a][0] = (L0[1][1] * t0 - L0[1][0] * t1) / det0;
    g_start[a][1] = (-L0[0][1] * t0 + L0[0][0] * t1) / det0;
  }
  // G(k, Q) of each basis frequency: its sinusoid's complex amplitude c − i s (of e^{+2πi Q·p})
  // fitted jointly with the lattice's other harmonics, so that none of them leaks into it (a
  // Hann-windowed sum leaked ~1 % of the neighbouring peaks on a 24-position block and moved g).
  std::vector<double> amplitude;
  fit_sinusoids(Q, &amplitude);
  std::vector<cplx> Gq[2];
  double Gnorm[2] = {0, 0};
  for (int a = 0; a < 2; ++a) {
    const std::size_t column = a == 0 ? 7 : 1;  // hk row (1, 0) for Q_a, (0, 1) for Q_b
    Gq[a].resize(P);
    for (std::size_t q = 0; q < P; ++q) Gq[a][q] = cplx(amplitude[column * P + q], -amplitude[(column + 1) * P + q]);
    for (const cplx& g : Gq[a]) Gnorm[a] += std::norm(g);
  }
  if (!(Gnorm[0] > 0 && Gnorm[1] > 0)) {
    out.why_not = "the lattice peaks carry no signal on the bright field";
    return out;
  }
  // The lattice points g' whose lune pairs reach the region, fixed at the start.
  std::vector<std::array<int, 2>> points[2];
  for (int a = 0; a < 2; ++a)
    for (int h = -3; h <= 3; ++h)
      for (int k = -3; k <= 3; ++k) {
        const double gp0 = h * g_start[0][0] + k * g_start[1][0], gp1 = h * g_start[0][1] + k * g_start[1][1];
        double most = 0;
        for (std::size_t q = 0; q < P; ++q) {
          const double k0 = kx[px[q]], k1 = ky[px[q]];
          most = std::max(most, soft_disc(k0, k1, c0 + gp0, c1 + gp1, R, edge0) *
                                    soft_disc(k0, k1, c0 + gp0 + g_start[a][0], c1 + gp1 + g_start[a][1], R, edge0));
        }
        if (most > 0.5) points[a].push_back({h, k});
      }
  // x: g_a (2), g_b (2), ramp a (2), ramp b (2), disc centre (2), radius, edge.
  auto lune_residual = [&](const std::vector<double>& x, double* explained) {
    std::vector<double> r;
    r.reserve(4 * P);
    const double edge = edge_of(x[11]);
    double kept_power = 0;
    for (int a = 0; a < 2; ++a) {
      const double g0 = x[std::size_t(2 * a)], g1 = x[std::size_t(2 * a + 1)];
      const double beta0 = x[std::size_t(4 + 2 * a)], beta1 = x[std::size_t(5 + 2 * a)];
      const std::size_t M = points[a].size();
      std::vector<cplx> cols(M * P);
      for (std::size_t m = 0; m < M; ++m) {
        const double gp0 = points[a][m][0] * x[0] + points[a][m][1] * x[2];
        const double gp1 = points[a][m][0] * x[1] + points[a][m][1] * x[3];
        for (std::size_t q = 0; q < P; ++q) {
          const double k0 = kx[px[q]], k1 = ky[px[q]];
          const double lune = soft_disc(k0, k1, x[8] + gp0, x[9] + gp1, x[10], edge) *
                              soft_disc(k0, k1, x[8] + gp0 + g0, x[9] + gp1 + g1, x[10], edge);
          const double ph = -(beta0 * (k0 - x[8]) + beta1 * (k1 - x[9]));
          cols[m * P + q] = lune * cplx(std::cos(ph), std::sin(ph));
        }
      }
      std::vector<cplx> A(M * M, cplx(0, 0)), b(M, cplx(0, 0));
      for (std::size_t m = 0; m < M; ++m) {
        for (std::size_t l = 0; l < M; ++l) {
          cplx s(0, 0);
          for (std::size_t q = 0; q < P; ++q) s += std::conj(cols[m * P + q]) * cols[l * P + q];
          A[m * M + l] = s;
        }
        for (std::size_t q = 0; q < P; ++q) b[m] += std::conj(cols[m * P + q]) * Gq[a][q];
        A[m * M + m] += 1e-9 * (std::real(A[m * M + m]) + 1e-30);
      }
      const std::vector<cplx> coef = solve(A, b, M);
      const double norm = std::sqrt(Gnorm[a] / double(P));
      double res_power = 0;
      for (std::size_t q = 0; q < P; ++q) {
        cplx model(0, 0);
        for (std::size_t m = 0; m < M; ++m) model += coef[m] * cols[m * P + q];
        const cplx d = model - Gq[a][q];
        res_power += std::norm(d);
        r.push_back(d.real() / norm);
        r.push_back(d.imag() / norm);
      }
      kept_power += 0.5 * (1 - res_power / Gnorm[a]);
    }
    if (explained) *explained = kept_power;
    return r;
  };
  auto residual = [&](const std::vector<double>& x) { return lune_residual(x, nullptr); };
  // The ramp's start: the defocus on a grid (both signs), the g's and the disc held.
  const double ramp_per_C10[2][2] = {{-2 * pi * in.wavelength_A * g_start[0][0], -2 * pi * in.wavelength_A * g_start[0][1]},
                                     {-2 * pi * in.wavelength_A * g_start[1][0], -2 * pi * in.wavelength_A * g_start[1][1]}};
  const double span = std::max(2 * std::abs(in.C10_A), 300.0);
  std::vector<double> x0;
  double best = std::numeric_limits<double>::infinity();
  for (int s = -40; s <= 40; ++s) {
    const double C10 = span * s / 40.0;
    std::vector<double> x = {g_start[0][0], g_start[0][1], g_start[1][0], g_start[1][1],
                             C10 * ramp_per_C10[0][0], C10 * ramp_per_C10[0][1], C10 * ramp_per_C10[1][0],
                             C10 * ramp_per_C10[1][1], c0, c1, R, edge0};
    const std::vector<double> r = residual(x);
    const double cost = std::inner_product(r.begin(), r.end(), r.begin(), 0.0);
    if (cost < best) best = cost, x0 = x;
  }
  const double gs = 0.02 * dk, bs = 0.01 / dk;
  const std::vector<double> steps = {gs, gs, gs, gs, bs, bs, bs, bs, gs, gs, gs, gs};
  const std::vector<double> x = levenberg_marquardt(residual, x0, steps, 100);
  // The scale's standard error: the fit's covariance s² (JᵀJ)⁻¹ (s² the residual variance, which
  // carries the model's misfit as well as the counting noise) carried to √|det G|'s inverse.
  {
    const std::vector<double> r0 = lune_residual(x, &out.lune_fit);
    const std::size_t m = r0.size(), n = x.size();
    const std::vector<double> JtJ = normal_matrix(jacobian(residual, x, r0, steps), m, n);
    const double s2 = std::inner_product(r0.begin(), r0.end(), r0.begin(), 0.0) / double(std::max<std::size_t>(m - n, 1));
    // ∂ det G / ∂ (g_a0, g_a1, g_b0, g_b1) for det G = g_a0 g_b1 − g_a1 g_b0.
    std::vector<double> grad(n, 0.0);
    grad[0] = x[3], grad[1] = -x[2], grad[2] = -x[1], grad[3] = x[0];
    const std::vector<double> z = solve(JtJ, grad, n);
    const double var_det = s2 * std::inner_product(grad.begin(), grad.end(), z.begin(), 0.0);
    const double detG = x[0] * x[3] - x[1] * x[2];
    out.scale_sd = 0.5 * std::sqrt(std::max(var_det, 0.0)) / std::abs(detG);
  }
  for (int a = 0; a < 2; ++a) {
    out.scan_frequency[a][0] = Q[std::size_t(2 * a)];
    out.scan_frequency[a][1] = Q[std::size_t(2 * a + 1)];
    out.lattice_invA[a][0] = x[std::size_t(2 * a)];
    out.lattice_invA[a][1] = x[std::size_t(2 * a + 1)];
    const double g2 = x[std::size_t(2 * a)] * x[std::size_t(2 * a)] + x[std::size_t(2 * a + 1)] * x[std::size_t(2 * a + 1)];
    out.C10_A[a] = -(x[std::size_t(4 + 2 * a)] * x[std::size_t(2 * a)] + x[std::size_t(5 + 2 * a)] * x[std::size_t(2 * a + 1)]) /
                   (2 * pi * in.wavelength_A * g2);
  }
  out.disc_centre_invA[0] = x[8];
  out.disc_centre_invA[1] = x[9];
  out.disc_radius_invA = x[10];
  out.disc_edge_invA = edge_of(x[11]);
  // Lᵀ = diag(step)⁻¹ [Q_a Q_b] [g_a g_b]⁻¹ (columns Q_a, Q_b and g_a, g_b).
  const double Gm[2][2] = {{x[0], x[2]}, {x[1], x[3]}};
  const double detG = Gm[0][0] * Gm[1][1] - Gm[0][1] * Gm[1][0];
  if (!(std::abs(detG) > 0)) {
    out.why_not = "the lattice's two vectors came out collinear";
    return out;
  }
  const double Gi[2][2] = {{Gm[1][1] / detG, -Gm[0][1] / detG}, {-Gm[1][0] / detG, Gm[0][0] / detG}};
  const double Qm[2][2] = {{Q[0], Q[2]}, {Q[1], Q[3]}};
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) {
      const double LT = (Qm[r][0] * Gi[0][c] + Qm[r][1] * Gi[1][c]) / in.step_A[r];  // (Lᵀ)[r][c]
      out.map.L[std::size_t(c)][std::size_t(r)] = LT;
    }
  if (out.lune_fit < lattice_lune_fit_min) {
    out.why_not = cat("the lunes explain ", std::round(out.lune_fit * 1000) / 10, " % of the lattice peaks' signal, less than ",
                      lattice_lune_fit_min * 100, " %");
    return out;
  }
  if (!(out.scale_sd <= lattice_scale_sd_max)) {
    out.why_not = cat("the scale's standard error is ", out.scale_sd * 100, " %, more than ", lattice_scale_sd_max * 100, " %");
    return out;
  }
  if (!std::isfinite(out.map.det()) || out.map.det() == 0) {
    out.why_not = "the map came out singular";
    return out;
  }
  out.done = true;
  return out;
}

}  // namespace tycho
