// The accuracy metric (see accuracy.hpp and the data README's "Ground truth"): local phases of
// object and truth, the inner field of view, brute-force integer registration by Pearson
// correlation. Each image is filtered once; a shift then costs one pass over the field of view.
#include "tycho/core/accuracy.hpp"

#include "tycho/core/error.hpp"
#include "tycho/core/fft_size.hpp"
#include "tycho/core/fftw_planner.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>

namespace tycho {

std::vector<double> local_phase(const std::complex<double>* z, int64_t h, int64_t w,
                                double sigma_px, filter_boundary boundary) {
  if (z == nullptr || h <= 0 || w <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "local_phase: empty image (", h, " x ", w, ")");
  const size_t n = static_cast<size_t>(h * w);
  std::vector<std::complex<double>> smooth(z, z + n);
  gaussian_filter_2d(smooth.data(), h, w, sigma_px, boundary);
  std::vector<double> phase(n);
  for (size_t i = 0; i < n; ++i) phase[i] = std::arg(z[i] * std::conj(smooth[i]));
  return phase;
}

std::vector<double> high_passed_phase(const double* phase, int64_t h, int64_t w, double sigma_px,
                                      filter_boundary boundary) {
  if (phase == nullptr || h <= 0 || w <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "high_passed_phase: empty image (", h, " x ", w, ")");
  const size_t n = static_cast<size_t>(h * w);
  std::vector<std::complex<double>> smooth(phase, phase + n);  // imaginary parts stay 0
  gaussian_filter_2d(smooth.data(), h, w, sigma_px, boundary);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = phase[i] - smooth[i].real();
  return out;
}

std::vector<double> summed_slice_phases(const std::complex<double>* slices, int64_t count, int64_t h,
                                        int64_t w) {
  if (slices == nullptr || count <= 0 || h <= 0 || w <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "summed_slice_phases: empty input (", count, " x ", h, " x ", w, ")");
  const size_t n = static_cast<size_t>(h * w);
  std::vector<double> total(n, 0.0);
  for (int64_t s = 0; s < count; ++s) {
    const std::complex<double>* z = slices + size_t(s) * n;
    std::complex<double> mean = 0.0;
    for (size_t i = 0; i < n; ++i) mean += z[i];
    // A slice whose mean vanishes has no reference phase: take its phases as they are
    // (arg(0) = 0).
    const std::complex<double> ref = std::abs(mean) > 0.0 ? std::conj(mean) / std::abs(mean) : 1.0;
    const double offset = std::arg(mean);
    for (size_t i = 0; i < n; ++i) total[i] += offset + std::arg(z[i] * ref);
  }
  return total;
}

position_error compare_positions(const double* result_A, const double* truth_A, int64_t n) {
  if (result_A == nullptr || truth_A == nullptr || n <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "compare_positions: no positions (", n, ")");
  position_error e{};
  for (int64_t k = 0; k < 2 * n; ++k) {
    if (!std::isfinite(result_A[k]) || !std::isfinite(truth_A[k]))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "compare_positions: position ", k / 2, " is not finite");
    e.mean_shift_A[k % 2] += result_A[k] - truth_A[k];
  }
  e.mean_shift_A[0] /= double(n);
  e.mean_shift_A[1] /= double(n);
  double sum2 = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    const double dx = result_A[2 * k] - truth_A[2 * k] - e.mean_shift_A[0];
    const double dy = result_A[2 * k + 1] - truth_A[2 * k + 1] - e.mean_shift_A[1];
    const double d2 = dx * dx + dy * dy;
    sum2 += d2;
    e.max_A = std::max(e.max_A, std::sqrt(d2));
  }
  e.rms_A = std::sqrt(sum2 / double(n));
  return e;
}

namespace {

void check_input(const accuracy_input& in) {
  const auto bad = [](const auto&... what) {
    fail(TYCHO_ERR_INVALID_ARGUMENT, "accuracy: ", what...);
  };
  const int given = (in.object != nullptr) + (in.object64 != nullptr) + (in.object_phase != nullptr);
  if (given != 1) bad("give exactly one of object, object64 and object_phase");
  if ((in.object_phase != nullptr) != (in.metric == phase_metric::high_passed_phase))
    bad("the high-passed metric takes object_phase, the local-phase metric object or object64");
  if (in.positions_px == nullptr) bad("positions_px is null");
  if (in.truth_phase == nullptr) bad("truth_phase is null");
  if (in.object_shape[0] <= 0 || in.object_shape[1] <= 0)
    bad("object_shape must be positive, got (", in.object_shape[0], ", ", in.object_shape[1], ")");
  if (in.truth_shape[0] <= 0 || in.truth_shape[1] <= 0)
    bad("truth_shape must be positive, got (", in.truth_shape[0], ", ", in.truth_shape[1], ")");
  if (in.n_positions <= 0) bad("n_positions must be positive, got ", in.n_positions);
  for (int64_t i = 0; i < 2 * in.n_positions; ++i)
    if (!std::isfinite(in.positions_px[i])) bad("positions_px[", i / 2, "] is not finite");
  if (!(in.object_pixel_A > 0.0) || !std::isfinite(in.object_pixel_A))
    bad("object_pixel_A must be positive, got ", in.object_pixel_A);
  if (!(in.truth_pixel_A > 0.0) || !std::isfinite(in.truth_pixel_A))
    bad("truth_pixel_A must be positive, got ", in.truth_pixel_A);
  // The metric compares pixel to pixel; resampling would blur one side and bias the figure.
  if (std::abs(in.truth_pixel_A - in.object_pixel_A) > 1e-3 * in.object_pixel_A)
    bad("object pixel ", in.object_pixel_A, " Å differs from truth pixel ", in.truth_pixel_A,
        " Å (must agree within 1e-3 relative; resample one first)");
  if (!std::isfinite(in.scan_origin_A[0]) || !std::isfinite(in.scan_origin_A[1]))
    bad("scan_origin_A is not finite");
  if (!(in.sigma_A > 0.0) || !std::isfinite(in.sigma_A))
    bad("sigma_A must be positive, got ", in.sigma_A);
  // Below 1/8 px the Gaussian is one tap (r = int(4σ + 0.5) = 0): the local phase is 0 everywhere
  // and so is every figure.
  if (in.sigma_A < 0.125 * in.object_pixel_A)
    bad("sigma_A = ", in.sigma_A, " Å is below 1/8 of the object's pixel (", in.object_pixel_A,
        " Å): the Gaussian is a single tap and the local phase is 0 everywhere; expected at least ",
        0.125 * in.object_pixel_A, " Å");
  if (!(in.fov_fraction > 0.0 && in.fov_fraction <= 1.0))
    bad("fov_fraction must lie in (0, 1], got ", in.fov_fraction);
  if (in.search_radius_px < 0 || in.search_radius_px > 10000)
    bad("search_radius_px must lie in [0, 10000], got ", in.search_radius_px);
}

// Inclusive pixel range [lo, hi] on one axis: the central fov_fraction of the positions' extent,
// rounded to whole pixels and clipped to the object.
void fov_axis(const accuracy_input& in, int axis, int64_t& lo, int64_t& hi) {
  double mn = std::numeric_limits<double>::infinity(), mx = -mn;
  for (int64_t p = 0; p < in.n_positions; ++p) {
    const double v = in.positions_px[2 * p + axis];
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  const double centre = 0.5 * (mn + mx), half = 0.5 * in.fov_fraction * (mx - mn);
  lo = static_cast<int64_t>(std::llround(centre - half));
  hi = static_cast<int64_t>(std::llround(centre + half));
  if (lo < 0) lo = 0;
  if (hi > in.object_shape[axis] - 1) hi = in.object_shape[axis] - 1;
  if (lo > hi)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "accuracy: the field of view on axis ", axis, " (positions ",
         mn, "..", mx, " px) lies outside the object of size ", in.object_shape[axis]);
  // One pixel has no variance: the Pearson figure of it is 0 whatever the object.
  if (hi == lo)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "accuracy: the field of view on axis ", axis, " is 1 px (fov_fraction ",
         in.fov_fraction, " of the positions' extent, ", mx - mn, " px); expected at least 2 px: give a larger fov_fraction");
}

int64_t wrap(int64_t i, int64_t n) {
  const int64_t m = i % n;
  return m < 0 ? m + n : m;
}

}  // namespace

accuracy_result evaluate_accuracy(const accuracy_input& in) {
  check_input(in);
  const int64_t oh = in.object_shape[0], ow = in.object_shape[1];
  const int64_t th = in.truth_shape[0], tw = in.truth_shape[1];

  std::vector<double> obj, truth;
  if (in.metric == phase_metric::high_passed_phase) {
    obj = high_passed_phase(in.object_phase, oh, ow, in.sigma_A / in.object_pixel_A, filter_boundary::reflect);
    const std::vector<double> t(in.truth_phase, in.truth_phase + th * tw);
    truth = high_passed_phase(t.data(), th, tw, in.sigma_A / in.truth_pixel_A, filter_boundary::wrap);
  } else {
    std::vector<std::complex<double>> z = in.object64 != nullptr
                                              ? std::vector<std::complex<double>>(in.object64, in.object64 + oh * ow)
                                              : std::vector<std::complex<double>>(in.object, in.object + oh * ow);
    obj = local_phase(z.data(), oh, ow, in.sigma_A / in.object_pixel_A, filter_boundary::reflect);
    z.resize(static_cast<size_t>(th * tw));
    for (size_t i = 0; i < z.size(); ++i) z[i] = std::polar(1.0, double(in.truth_phase[i]));
    truth = local_phase(z.data(), th, tw, in.sigma_A / in.truth_pixel_A, filter_boundary::wrap);
  }

  int64_t r0, r1, c0, c1;
  fov_axis(in, 0, r0, r1);
  fov_axis(in, 1, c0, c1);
  const int64_t nr = r1 - r0 + 1, nc = c1 - c0 + 1;
  const double n = double(nr * nc);
  // The truth is indexed periodically (a cell of a crystal), but a cell smaller than the field
  // it is compared on would be compared with itself, repeated: a 2 x 2 truth scored.
  if (nr > th || nc > tw)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "accuracy: the truth's cell (", th, " x ", tw,
         " px) is smaller than the field of view it is compared on (", nr, " x ", nc,
         " px of the object): a truth must cover that field; it is not repeated to fill it");

  // Object side, centred once: Pearson = Σ a_c b / (|a_c| · sqrt(Σb² - (Σb)²/n)).
  std::vector<double> a(static_cast<size_t>(nr * nc));
  double mean_a = 0.0;
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t c = 0; c < nc; ++c) {
      const double v = obj[size_t((r0 + r) * ow + c0 + c)];
      a[size_t(r * nc + c)] = v;
      mean_a += v;
    }
  mean_a /= n;
  double saa = 0.0;
  for (double& v : a) {
    v -= mean_a;
    saa += v * v;
  }

  // Expected offset (truth index - object index) from the scan geometry.
  int64_t base[2];
  for (int axis = 0; axis < 2; ++axis)
    base[axis] = std::llround(in.scan_origin_A[axis] / in.truth_pixel_A - in.positions_px[axis]);

  std::vector<int64_t> cols(static_cast<size_t>(nc));
  bool truth_varies = false;  // at some shift searched: else the truth's map is constant there
  const auto pearson_of = [&](const std::vector<double>& map, int64_t sr, int64_t sc) {
    for (int64_t c = 0; c < nc; ++c) cols[size_t(c)] = wrap(c0 + c + sc, tw);
    double sb = 0.0, sbb = 0.0, sab = 0.0;
    for (int64_t r = 0; r < nr; ++r) {
      const double* trow = map.data() + wrap(r0 + r + sr, th) * tw;
      const double* arow = a.data() + r * nc;
      for (int64_t c = 0; c < nc; ++c) {
        const double b = trow[cols[size_t(c)]];
        sb += b;
        sbb += b * b;
        sab += arow[c] * b;
      }
    }
    const double var_b = sbb - sb * sb / n;
    // A constant map has no defined correlation (the relative floor catches the rounding residue
    // this one-pass variance leaves for a constant truth): 0 here, and said (result.constant).
    const bool varies = var_b > 1e-12 * sbb;
    truth_varies = truth_varies || varies;
    return (saa > 0.0 && varies) ? sab / std::sqrt(saa * var_b) : 0.0;
  };
  const auto pearson_at = [&](int64_t sr, int64_t sc) { return pearson_of(truth, sr, sc); };

  // The expected shift first, so ties (e.g. all-constant maps) keep it.
  int64_t best[2] = {base[0], base[1]};
  double best_p = pearson_at(base[0], base[1]);
  const int64_t R = in.search_radius_px;
  for (int64_t dr = -R; dr <= R; ++dr)
    for (int64_t dc = -R; dc <= R; ++dc) {
      const double p = pearson_at(base[0] + dr, base[1] + dc);
      if (p > best_p) {
        best_p = p;
        best[0] = base[0] + dr;
        best[1] = base[1] + dc;
      }
    }

  // RMS of the difference with its mean removed; two passes, as the differences can be tiny.
  std::vector<double> d(a.size());
  double mean_d = 0.0;
  for (int64_t r = 0; r < nr; ++r) {
    const double* trow = truth.data() + wrap(r0 + r + best[0], th) * tw;
    for (int64_t c = 0; c < nc; ++c) {
      const size_t i = size_t(r * nc + c);
      d[i] = a[i] - trow[wrap(c0 + c + best[1], tw)];  // a is centred: the offset drops out
      mean_d += d[i];
    }
  }
  mean_d /= n;
  double sdd = 0.0;
  for (double v : d) sdd += (v - mean_d) * (v - mean_d);

  accuracy_result res{};
  res.subpixel_pearson = std::nan("");
  res.subpixel_shift_px[0] = res.subpixel_shift_px[1] = std::nan("");
  if (saa > 0.0 && truth_varies) {
    // The truth's map moved by (f0, f1) px, t(x + f), through its transform: T(k) e^{2πi k·f/N}.
    std::vector<std::complex<double>> spectrum(truth.begin(), truth.end()), moved(spectrum.size());
    fftw_transform_2d(spectrum.data(), th, tw, -1).run();
    fftw_transform_2d inverse(moved.data(), th, tw, +1);
    std::vector<double> map(truth.size());
    const double two_pi = 2 * std::acos(-1.0), norm = 1.0 / double(th * tw);
    const auto pearson_moved = [&](double f0, double f1) {
      for (int64_t u = 0; u < th; ++u) {
        const double k0 = double(fft_frequency(u, th)) / double(th);
        for (int64_t v = 0; v < tw; ++v) {
          const double k1 = double(fft_frequency(v, tw)) / double(tw);
          moved[size_t(u * tw + v)] = spectrum[size_t(u * tw + v)] * std::polar(norm, two_pi * (k0 * f0 + k1 * f1));
        }
      }
      inverse.run();
      for (size_t i = 0; i < map.size(); ++i) map[i] = moved[i].real();
      return pearson_of(map, best[0], best[1]);
    };
    // A pattern search: steps of 1/4 px along each axis, halved down to 1/64, within ±1 px.
    double f[2] = {0, 0}, p = pearson_moved(0, 0);
    for (double step = 0.25; step >= 1.0 / 64; step /= 2)
      for (bool moved_once = true; moved_once;) {
        moved_once = false;
        for (int axis = 0; axis < 2; ++axis)
          for (double sign : {-1.0, 1.0}) {
            double g[2] = {f[0], f[1]};
            g[axis] += sign * step;
            if (std::abs(g[axis]) > 1) continue;
            const double q = pearson_moved(g[0], g[1]);
            if (q > p) {
              p = q;
              f[0] = g[0];
              f[1] = g[1];
              moved_once = true;
            }
          }
      }
    res.subpixel_pearson = p;
    res.subpixel_shift_px[0] = double(best[0]) + f[0];
    res.subpixel_shift_px[1] = double(best[1]) + f[1];
  }
  res.pearson = best_p;
  res.rms_rad = std::sqrt(sdd / n);
  res.shift_px[0] = best[0];
  res.shift_px[1] = best[1];
  res.fov_shape[0] = nr;
  res.fov_shape[1] = nc;
  res.constant = !(saa > 0.0) ? constant_map::object : !truth_varies ? constant_map::truth : constant_map::none;
  return res;
}

}  // namespace tycho
