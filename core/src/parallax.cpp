#include "tycho/core/parallax.hpp"

#include "tycho/core/fft_size.hpp"

#include <fftw3.h>

#include "tycho/core/fftw_planner.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <mutex>

#include "tycho/core/error.hpp"

namespace tycho {

namespace {
constexpr double pi = 3.14159265358979323846;
using cplx = std::complex<double>;



// A robust mean of 2-vectors (iteratively reweighted, Huber weights at twice the median
// distance): the centre, the scatter (rms distance of the inliers) and the count.
struct robust_mean {
  double v[2] = {0, 0};
  double scatter = 0;
  int64_t n = 0;
};
robust_mean huber_mean(const std::vector<std::array<double, 2>>& x) {
  robust_mean r;
  r.n = int64_t(x.size());
  if (x.empty()) return r;
  std::vector<double> w(x.size(), 1.0), d(x.size());
  for (int it = 0; it < 8; ++it) {
    double s[2] = {0, 0}, sw = 0;
    for (std::size_t j = 0; j < x.size(); ++j) {
      s[0] += w[j] * x[j][0];
      s[1] += w[j] * x[j][1];
      sw += w[j];
    }
    r.v[0] = s[0] / sw;
    r.v[1] = s[1] / sw;
    for (std::size_t j = 0; j < x.size(); ++j) d[j] = std::hypot(x[j][0] - r.v[0], x[j][1] - r.v[1]);
    std::vector<double> sorted = d;
    std::nth_element(sorted.begin(), sorted.begin() + long(sorted.size() / 2), sorted.end());
    const double mad = sorted[sorted.size() / 2] + 1e-12;
    for (std::size_t j = 0; j < x.size(); ++j) w[j] = 1.0 / std::max(1.0, d[j] / (2 * mad));
  }
  double ss = 0, sw = 0;
  for (std::size_t j = 0; j < x.size(); ++j) {
    ss += w[j] * d[j] * d[j];
    sw += w[j];
  }
  r.scatter = std::sqrt(ss / std::max(sw, 1e-12));
  return r;
}

// The shift s (scan indices) with b(n) ≈ a(n − s), from the cross-power spectrum X = B · conj(A)
// of zero-padded (m0, m1) transforms of (b0, b1) images: integer peak of the overlap-normalised
// correlation within `radius` of `centre`, refined on a 1/16 grid. nullopt-like: false when no
// pixel lies within the radius.
class shift_finder {
 public:
  shift_finder(int64_t b0, int64_t b1) : b_{b0, b1}, m_{2 * b0, 2 * b1}, inverse_buffer_(std::size_t(4 * b0 * b1)),
        inverse_(inverse_buffer_.data(), 2 * b0, 2 * b1, FFTW_BACKWARD) {
    for (int a = 0; a < 2; ++a) {
      freq_[a].resize(std::size_t(m_[a]));
      for (int64_t f = 0; f < m_[a]; ++f) freq_[a][std::size_t(f)] = double(fft_frequency(f, m_[a]));
    }
  }
  int64_t size(int a) const { return m_[a]; }

  bool find(const std::vector<cplx>& X, const double centre[2], double radius, double out[2]) {
    auto& c = inverse_buffer_;
    std::copy(X.begin(), X.end(), c.begin());
    inverse_.run();
    double best = -1e300;
    int64_t p0 = -1, p1 = -1;
    for (int64_t i = 0; i < m_[0]; ++i) {
      const double x0 = freq_[0][std::size_t(i)];
      if (std::abs(x0 - centre[0]) > radius) continue;
      for (int64_t k = 0; k < m_[1]; ++k) {
        const double x1 = freq_[1][std::size_t(k)];
        if (std::hypot(x0 - centre[0], x1 - centre[1]) > radius) continue;
        const double v = c[std::size_t(i * m_[1] + k)].real() / overlap(x0, x1);
        if (v > best) best = v, p0 = i, p1 = k;
      }
    }
    if (p0 < 0) return false;
    // Matrix DFTs c(x) = Σ_f X(f) e^{2πi f x / m} near the peak: on a quarter-pixel grid over ±1.5 px,
    // then on a sixteenth over ±0.25 px around the best (a tenth of the work of one 1/16 grid).
    double at[2] = {freq_[0][std::size_t(p0)], freq_[1][std::size_t(p1)]};
    xr_.resize(X.size());
    xi_.resize(X.size());
    for (std::size_t f = 0; f < X.size(); ++f) {
      xr_[f] = X[f].real();
      xi_[f] = X[f].imag();
    }
    refine(at, 0.25, 6);
    refine(at, 1.0 / 16, 4);
    out[0] = at[0];
    out[1] = at[1];
    return true;
  }

 private:
  // Moves `at` to the largest overlap-normalised correlation on the grid at ± half·step around it:
  // c(x0, x1) = Re Σ_f0 Σ_f1 e^{2πi f0 x0 / m0} X(f0, f1) e^{2πi f1 x1 / m1}, separable, with the
  // complex products written out (core is not built with -fcx-limited-range, and std::complex's
  // checked products cost several times the arithmetic) and the grid's exponentials by recurrence
  // from one sincos per frequency and axis.
  void refine(double at[2], double step, int half) {
    const int u = 2 * half + 1;
    const int64_t n0 = m_[0], n1 = m_[1];
    const double start[2] = {at[0] - half * step, at[1] - half * step};
    // e_a[g][f] = e^{2πi f (start_a + g·step) / m_a}, as (re, im) planes [g][f].
    auto exponentials = [&](int axis, std::vector<double>& re, std::vector<double>& im) {
      const int64_t m = m_[axis];
      re.resize(std::size_t(u * m));
      im.resize(std::size_t(u * m));
      for (int64_t f = 0; f < m; ++f) {
        const double w = 2 * pi * freq_[axis][std::size_t(f)] / double(m);
        const cplx first = std::polar(1.0, w * start[axis]), by = std::polar(1.0, w * step);
        double er = first.real(), ei = first.imag();
        for (int g = 0; g < u; ++g) {
          re[std::size_t(g * m + f)] = er;
          im[std::size_t(g * m + f)] = ei;
          const double nr = er * by.real() - ei * by.imag();
          ei = er * by.imag() + ei * by.real();
          er = nr;
        }
      }
    };
    exponentials(0, e0r_, e0i_);
    exponentials(1, e1r_, e1i_);
    tr_.assign(std::size_t(u * n1), 0.0);  // E0 · X, (re, im) planes [a][f1]
    ti_.assign(std::size_t(u * n1), 0.0);
    for (int a = 0; a < u; ++a) {
      double* tr = tr_.data() + a * n1;
      double* ti = ti_.data() + a * n1;
      for (int64_t f0 = 0; f0 < n0; ++f0) {
        const double er = e0r_[std::size_t(a * n0 + f0)], ei = e0i_[std::size_t(a * n0 + f0)];
        const double* xr = xr_.data() + f0 * n1;
        const double* xi = xi_.data() + f0 * n1;
        for (int64_t f1 = 0; f1 < n1; ++f1) {
          tr[f1] += er * xr[f1] - ei * xi[f1];
          ti[f1] += er * xi[f1] + ei * xr[f1];
        }
      }
    }
    double fine = -1e300, best[2] = {at[0], at[1]};
    for (int a = 0; a < u; ++a)
      for (int b = 0; b < u; ++b) {
        const double* tr = tr_.data() + a * n1;
        const double* ti = ti_.data() + a * n1;
        const double* er = e1r_.data() + b * n1;
        const double* ei = e1i_.data() + b * n1;
        double v = 0;
        for (int64_t f1 = 0; f1 < n1; ++f1) v += tr[f1] * er[f1] - ti[f1] * ei[f1];
        const double x0 = start[0] + a * step, x1 = start[1] + b * step;
        v /= overlap(x0, x1);
        if (v > fine) fine = v, best[0] = x0, best[1] = x1;
      }
    at[0] = best[0];
    at[1] = best[1];
  }

  double overlap(double x0, double x1) const {
    return std::max(double(b_[0]) - std::abs(x0), 0.25 * double(b_[0])) *
           std::max(double(b_[1]) - std::abs(x1), 0.25 * double(b_[1]));
  }
  int64_t b_[2], m_[2];
  std::vector<cplx> inverse_buffer_;  // before the transform planned on it
  fftw_transform_2d inverse_;
  std::vector<double> freq_[2];
  std::vector<double> xr_, xi_;             // X as (re, im) planes, for refine
  std::vector<double> e0r_, e0i_, e1r_, e1i_, tr_, ti_;
};

// The power of the bright-field groups' images summed after each is shifted back by the shift the
// map R(θ) A predicts for it: S(θ) = Σ_q |Σ_g F_g(q) e^{2πi q · R(θ) A κ_g}|² (q in cycles per scan
// index, F_g the zero-padded transform of group g's contrast image, κ_g its centre in detector
// pixels). At the right map every image lands on the others, as in tilt-corrected bright field.
// Rotating the shifts keeps their lengths, so the images' overlaps, which bias a scale, do not
// bias θ. The exponentials are separable per group: one sincos per frequency and axis.
class aligned_power {
 public:
  aligned_power(const std::vector<std::vector<std::complex<float>>>& spectrum, std::vector<int64_t> groups,
                std::vector<std::array<double, 2>> kappa, int64_t m0, int64_t m1, const double A[2][2])
      : spectrum_(spectrum), groups_(std::move(groups)), kappa_(std::move(kappa)), m_{m0, m1} {
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) A_[a][b] = A[a][b];
    for (int a = 0; a < 2; ++a) {
      q_[a].resize(std::size_t(m_[a]));
      for (int64_t f = 0; f < m_[a]; ++f) q_[a][std::size_t(f)] = double(fft_frequency(f, m_[a])) / double(m_[a]);
    }
  }
  // S(θ) over the groups: all with `part` = −1, else every `parts`-th group from `part` on
  // (independent subsets: each group's counts are its own).
  static constexpr int parts = 4;
  double operator()(double theta, int part = -1) {
    const int64_t m0 = m_[0], m1 = m_[1];
    sum_r_.assign(std::size_t(m0 * m1), 0.0);
    sum_i_.assign(std::size_t(m0 * m1), 0.0);
    e0r_.resize(std::size_t(m0));
    e0i_.resize(std::size_t(m0));
    e1r_.resize(std::size_t(m1));
    e1i_.resize(std::size_t(m1));
    const double c = std::cos(theta), s = std::sin(theta);
    for (std::size_t j = 0; j < groups_.size(); ++j) {
      if (part >= 0 && int(j % parts) != part) continue;
      const double u0 = A_[0][0] * kappa_[j][0] + A_[0][1] * kappa_[j][1];
      const double u1 = A_[1][0] * kappa_[j][0] + A_[1][1] * kappa_[j][1];
      const double d0 = c * u0 - s * u1, d1 = s * u0 + c * u1;
      for (int64_t f = 0; f < m0; ++f) {
        const double w = 2 * pi * q_[0][std::size_t(f)] * d0;
        e0r_[std::size_t(f)] = std::cos(w);
        e0i_[std::size_t(f)] = std::sin(w);
      }
      for (int64_t f = 0; f < m1; ++f) {
        const double w = 2 * pi * q_[1][std::size_t(f)] * d1;
        e1r_[std::size_t(f)] = std::cos(w);
        e1i_[std::size_t(f)] = std::sin(w);
      }
      const std::complex<float>* F = spectrum_[std::size_t(groups_[j])].data();
      for (int64_t f0 = 0; f0 < m0; ++f0) {
        const double ar = e0r_[std::size_t(f0)], ai = e0i_[std::size_t(f0)];
        double* sr = sum_r_.data() + f0 * m1;
        double* si = sum_i_.data() + f0 * m1;
        const std::complex<float>* row = F + f0 * m1;
        for (int64_t f1 = 0; f1 < m1; ++f1) {
          // F · e0 · e1, the complex products written out (see shift_finder::refine)
          const double er = ar * e1r_[std::size_t(f1)] - ai * e1i_[std::size_t(f1)];
          const double ei = ar * e1i_[std::size_t(f1)] + ai * e1r_[std::size_t(f1)];
          const double fr = row[f1].real(), fi = row[f1].imag();
          sr[f1] += fr * er - fi * ei;
          si[f1] += fr * ei + fi * er;
        }
      }
    }
    double power = 0;
    for (std::size_t k = 0; k < sum_r_.size(); ++k) power += sum_r_[k] * sum_r_[k] + sum_i_[k] * sum_i_[k];
    return power;
  }

  // The θ in [−range, range] that maximises S: a grid of `step`, then the parabola through the
  // best point and its neighbours, then 7 points of step / 5 around that (S's peak is degrees
  // wide: the parabola through them is exact to far below the estimate's noise), and their
  // parabola. NaN when the best lies on the range's edge (the maximum is not inside it).
  double best(double range, double step, int part = -1) {
    auto search = [&](double centre, double span, double by, bool edge_fails) {
      const int n = int(std::round(span / by));
      std::vector<double> v(std::size_t(2 * n + 1));
      for (int j = -n; j <= n; ++j) v[std::size_t(j + n)] = (*this)(centre + j * by, part);
      const int k = int(std::max_element(v.begin(), v.end()) - v.begin());
      if (k == 0 || k == 2 * n) return edge_fails ? std::nan("") : centre + (k - n) * by;
      const double a = v[std::size_t(k - 1)], b = v[std::size_t(k)], cc = v[std::size_t(k + 1)];
      const double curvature = a - 2 * b + cc;
      const double offset = curvature < 0 ? std::clamp(0.5 * (a - cc) / curvature, -0.5, 0.5) : 0.0;
      return centre + (k - n + offset) * by;
    };
    const double coarse = search(0.0, range, step, true);
    if (!std::isfinite(coarse)) return coarse;
    return search(coarse, 0.6 * step, step / 5, false);
  }

 private:
  const std::vector<std::vector<std::complex<float>>>& spectrum_;
  std::vector<int64_t> groups_;
  std::vector<std::array<double, 2>> kappa_;
  int64_t m_[2];
  double A_[2][2];
  std::vector<double> q_[2], sum_r_, sum_i_, e0r_, e0i_, e1r_, e1i_;
};
}  // namespace

parallax_images parallax_images::make(int64_t rx, int64_t ry, int64_t n0, int64_t n1, double radius_px,
                                      int64_t group_px, int64_t max_block) {
  parallax_images p;
  const int64_t scan[2] = {rx, ry}, det[2] = {n0, n1};
  p.group_px = std::max<int64_t>(1, group_px);
  for (int a = 0; a < 2; ++a) {
    p.block[a] = std::min(scan[a], max_block);
    p.first[a] = (scan[a] - p.block[a]) / 2;
    p.detector[a] = det[a];
    // Groups cover [−r, r] px around the zero frequency, within the detector.
    const int64_t half = std::min<int64_t>(int64_t(std::ceil(radius_px)), det[a] / 2 - 1);
    p.groups[a] = std::max<int64_t>(1, (2 * half + 1) / p.group_px);
    p.first_px[a] = -(p.groups[a] * p.group_px) / 2;
  }
  p.sums.assign(std::size_t(p.groups[0] * p.groups[1] * p.block[0] * p.block[1]), 0.0);
  p.seen.assign(std::size_t(p.block[0] * p.block[1]), 0.0);
  return p;
}

void parallax_images::add(int64_t i, int64_t k, const float* pattern) {
  const int64_t b = (i - first[0]) * block[1] + (k - first[1]);
  const int64_t positions = block[0] * block[1];
  seen[std::size_t(b)] = 1.0;
  for (int64_t g0 = 0; g0 < groups[0]; ++g0)
    for (int64_t g1 = 0; g1 < groups[1]; ++g1) {
      double s = 0;
      for (int64_t a = 0; a < group_px; ++a) {
        const int64_t f0 = first_px[0] + g0 * group_px + a;
        const float* row = pattern + ((f0 % detector[0] + detector[0]) % detector[0]) * detector[1];
        for (int64_t c = 0; c < group_px; ++c) {
          const int64_t f1 = first_px[1] + g1 * group_px + c;
          const float v = row[(f1 % detector[1] + detector[1]) % detector[1]];
          if (std::isfinite(v)) s += double(v);
        }
      }
      sums[std::size_t((g0 * groups[1] + g1) * positions + b)] = s;
    }
}

parallax_result estimate_parallax(const parallax_images& im, double expected_shift_per_px) {
  parallax_result r;
  const int64_t G0 = im.groups[0], G1 = im.groups[1], P = im.block[0] * im.block[1];
  double seen = 0;
  for (double s : im.seen) seen += s;
  if (im.block[0] < 4 || im.block[1] < 4 || seen < 16) {
    r.why_not = "the scan block is smaller than 4 x 4 positions";
    return r;
  }
  // Bright-field groups: mean intensity above half the brightest group's, and above 0.8 of the
  // bright field's median (groups cut by the aperture's edge are left out).
  std::vector<double> mean(std::size_t(G0 * G1), 0.0);
  for (int64_t g = 0; g < G0 * G1; ++g) {
    double s = 0;
    for (int64_t b = 0; b < P; ++b) s += im.sums[std::size_t(g * P + b)] * im.seen[std::size_t(b)];
    mean[std::size_t(g)] = s / seen;
  }
  const double brightest = *std::max_element(mean.begin(), mean.end());
  std::vector<double> bf_means;
  for (double m : mean)
    if (m > 0.5 * brightest) bf_means.push_back(m);
  std::nth_element(bf_means.begin(), bf_means.begin() + long(bf_means.size() / 2), bf_means.end());
  const double median = bf_means.empty() ? 0.0 : bf_means[bf_means.size() / 2];
  std::vector<char> bf(std::size_t(G0 * G1), 0);
  for (int64_t g = 0; g < G0 * G1; ++g) bf[std::size_t(g)] = brightest > 0 && mean[std::size_t(g)] > 0.8 * median;
  r.groups = std::count(bf.begin(), bf.end(), 1);
  if (r.groups < 9) {
    r.why_not = cat("only ", r.groups, " detector groups lie inside the bright field");
    return r;
  }
  // The groups' virtual images as contrast (I / mean − 1, 0 where no pattern), transformed once.
  shift_finder finder(im.block[0], im.block[1]);
  const int64_t m0 = finder.size(0), m1 = finder.size(1);
  std::vector<cplx> buf(std::size_t(m0 * m1));
  fftw_transform_2d forward(buf.data(), m0, m1, FFTW_FORWARD);
  // Kept in single precision: ~450 groups' spectra of a 32 x 32 block are 15 MiB so (a run under a
  // memory limit holds the scan's counts beside them), and the shifts' noise is far above float's
  // 1e-7 relative rounding; the cross-power spectra are formed in double.
  std::vector<std::vector<std::complex<float>>> spectrum(std::size_t(G0 * G1));
  // Each bright-field group's contrast image (I / mean − 1, 0 where no pattern), times `window`
  // (one weight per position of the block; empty: 1), zero-padded and transformed.
  auto transform_groups = [&](const std::vector<double>& window) {
    for (int64_t g = 0; g < G0 * G1; ++g) {
      if (!bf[std::size_t(g)]) continue;
      std::fill(buf.begin(), buf.end(), cplx(0, 0));
      for (int64_t i = 0; i < im.block[0]; ++i)
        for (int64_t k = 0; k < im.block[1]; ++k) {
          const int64_t b = i * im.block[1] + k;
          if (!(im.seen[std::size_t(b)] > 0)) continue;
          const double contrast = im.sums[std::size_t(g * P + b)] / mean[std::size_t(g)] - 1.0;
          buf[std::size_t(i * m1 + k)] = window.empty() ? contrast : window[std::size_t(b)] * contrast;
        }
      forward.run();
      spectrum[std::size_t(g)].assign(buf.begin(), buf.end());
    }
  };
  transform_groups({});
  // The levels: separations of 1, 2, 4, ... groups.
  bool known = false;
  double A[2][2] = {{0, 0}, {0, 0}};
  double weighted[2][2] = {{0, 0}, {0, 0}}, weight[2] = {0, 0};
  std::vector<cplx> X(std::size_t(m0 * m1));
  const double radius0 = std::max(1.5, 1.6 * expected_shift_per_px * double(im.group_px));
  for (int64_t sep = 1;; sep *= 2) {
    std::vector<std::array<double, 2>> per_px[2];
    const double dkappa = double(sep * im.group_px);
    for (int axis = 0; axis < 2; ++axis) {
      std::vector<std::pair<int64_t, int64_t>> pairs;
      for (int64_t g0 = 0; g0 < G0; ++g0)
        for (int64_t g1 = 0; g1 < G1; ++g1) {
          const int64_t h0 = g0 + (axis == 0 ? sep : 0), h1 = g1 + (axis == 1 ? sep : 0);
          if (h0 >= G0 || h1 >= G1) continue;
          const int64_t a = g0 * G1 + g1, b = h0 * G1 + h1;
          if (bf[std::size_t(a)] && bf[std::size_t(b)]) pairs.emplace_back(a, b);
        }
      // At most 400 pairs per axis and level, spread evenly: enough for the fit's statistics.
      const std::size_t stride = std::max<std::size_t>(1, (pairs.size() + 399) / 400);
      for (std::size_t q = 0; q < pairs.size(); q += stride) {
        const auto& fa = spectrum[std::size_t(pairs[q].first)];
        const auto& fb = spectrum[std::size_t(pairs[q].second)];
        for (std::size_t f = 0; f < X.size(); ++f)  // fb · conj(fa), written out (see refine)
          X[f] = cplx(double(fb[f].real()) * fa[f].real() + double(fb[f].imag()) * fa[f].imag(),
                      double(fb[f].imag()) * fa[f].real() - double(fb[f].real()) * fa[f].imag());
        double centre[2] = {0, 0}, radius = radius0;
        if (known) {
          centre[0] = A[0][axis] * dkappa;
          centre[1] = A[1][axis] * dkappa;
          radius = 1.0 + 0.15 * std::hypot(centre[0], centre[1]);
        }
        double s[2] = {0, 0};
        if (finder.find(X, centre, radius, s)) per_px[axis].push_back({s[0] / dkappa, s[1] / dkappa});
      }
    }
    if (per_px[0].size() < 3 || per_px[1].size() < 3) break;
    double level_var[2];
    for (int axis = 0; axis < 2; ++axis) {
      const robust_mean m = huber_mean(per_px[axis]);
      A[0][axis] = m.v[0];
      A[1][axis] = m.v[1];
      level_var[axis] = (m.scatter * m.scatter + 1e-6) / double(m.n);
      r.pairs += m.n;
    }
    // Levels whose shifts stay within two scan steps count, each with the weight of its own
    // statistics at the *smallest* separation's scale: larger separations cross more of the
    // boundaries where a lattice's overlapping discs enter or leave a group's image, which
    // shortens the measured shift (by 10 % at four times the first separation on MoS2), so
    // they must not dominate through their longer lever.
    const double largest = std::max(std::hypot(A[0][0], A[1][0]), std::hypot(A[0][1], A[1][1])) * dkappa;
    if (known && largest > 2.0) break;
    const double lever = dkappa / double(im.group_px);  // 1, 2, 4, ... separations
    for (int axis = 0; axis < 2; ++axis) {
      const double var = level_var[axis] * lever * lever;
      weighted[0][axis] += A[0][axis] / var;
      weighted[1][axis] += A[1][axis] / var;
      weight[axis] += 1.0 / var;
    }
    known = true;
    ++r.levels;
    r.largest_separation_px = dkappa;
  }
  if (!known) {
    r.why_not = "fewer than 3 neighbouring bright-field groups per detector axis";
    return r;
  }
  for (int axis = 0; axis < 2; ++axis) {
    r.A[0][axis] = weighted[0][axis] / weight[axis];
    r.A[1][axis] = weighted[1][axis] / weight[axis];
    const double length = std::hypot(r.A[0][axis], r.A[1][axis]);
    r.relative_error = std::max(r.relative_error, std::sqrt(1.0 / weight[axis]) / std::max(length, 1e-12));
  }
  r.done = true;
  // The pairs of neighbouring groups fix A within r.relative_error; the rotation is then refined
  // with all groups at once (their longest separations carry it, and at low dose their summed
  // images are what rises above the noise): within ±3 standard errors (at least 2°, at most 15°)
  // of the pairs' rotation. Its own standard error: the scatter of the rotations four disjoint
  // quarters of the groups find (independent counts), over √4, but no smaller than a fifth of the
  // pairs' relative error: what the quarters share (the specimen's contrast, the window's few
  // positions on a small scan) is not in their scatter (an 11 x 13 scan of tycho's own simulation,
  // rotation 0: 0.23° off where the scatter said 0.06°; the pairs' 1.8 % / 5 is 0.21°); the pairs'
  // own where a quarter finds no maximum within the range.
  // The images are windowed for this first, by a round window (cos² falling to 0 at half the
  // block's shorter side): shifted images overlap the less the longer their relative shift, and
  // through a round window that loss depends on the shift's length alone, which turning the
  // shifts keeps; through the block's rectangle it depends on their direction too and would pull
  // θ towards the block's axes (0.21° on a 16 x 16 scan of tycho's own simulation, rotation 0).
  // The pairs' spectra are no longer needed: they are overwritten.
  {
    const double c0 = 0.5 * double(im.block[0] - 1), c1 = 0.5 * double(im.block[1] - 1);
    const double R = 0.5 * double(std::min(im.block[0], im.block[1]));
    std::vector<double> window(std::size_t(P), 0.0);
    for (int64_t i = 0; i < im.block[0]; ++i)
      for (int64_t k = 0; k < im.block[1]; ++k) {
        const double d = std::hypot(double(i) - c0, double(k) - c1) / R;
        const double c = std::cos(0.5 * pi * d);
        window[std::size_t(i * im.block[1] + k)] = d < 1 ? c * c : 0.0;
      }
    transform_groups(window);
  }
  std::vector<int64_t> groups;
  std::vector<std::array<double, 2>> kappa;
  for (int64_t g0 = 0; g0 < G0; ++g0)
    for (int64_t g1 = 0; g1 < G1; ++g1)
      if (bf[std::size_t(g0 * G1 + g1)]) {
        groups.push_back(g0 * G1 + g1);
        kappa.push_back({im.group_centre_px(0, g0), im.group_centre_px(1, g1)});
      }
  aligned_power power(spectrum, std::move(groups), std::move(kappa), m0, m1, r.A);
  const double range = std::clamp(3 * r.relative_error, 2 * pi / 180, 15 * pi / 180);
  // The round window needs room: on a block under 8 x 8 positions it holds a dozen, and the pairs'
  // A stands.
  const bool room = std::min(im.block[0], im.block[1]) >= 8;
  const double theta = room ? power.best(range, 0.5 * pi / 180) : std::nan("");
  if (std::isfinite(theta)) {
    double t[aligned_power::parts], mean_t = 0;
    bool all = true;
    for (int q = 0; q < aligned_power::parts; ++q) {
      t[q] = power.best(range, 0.5 * pi / 180, q);
      all = all && std::isfinite(t[q]);
      mean_t += t[q] / aligned_power::parts;
    }
    double ss = 0;
    for (double v : t) ss += (v - mean_t) * (v - mean_t);
    const double spread = std::sqrt(ss / (aligned_power::parts - 1) / aligned_power::parts);
    r.rotation_sd = all ? std::max(spread, r.relative_error / 5) : r.relative_error;
    r.aligned_rotation = theta;
    r.aligned = true;
    const double c = std::cos(theta), s = std::sin(theta);
    const double A00 = r.A[0][0], A01 = r.A[0][1], A10 = r.A[1][0], A11 = r.A[1][1];
    r.A[0][0] = c * A00 - s * A10;
    r.A[0][1] = c * A01 - s * A11;
    r.A[1][0] = s * A00 + c * A10;
    r.A[1][1] = s * A01 + c * A11;
  } else {
    r.rotation_sd = r.relative_error;
    r.not_aligned_because = room ? cat("the summed images' power has no maximum within ±", range * 180 / pi, "°")
                                 : std::string("the scan block is smaller than 8 x 8 positions");
  }
  return r;
}

}  // namespace tycho
