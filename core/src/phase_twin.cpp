#include "tycho/core/phase_twin.hpp"

#include "tycho/core/accuracy.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tycho {

template <class T>
phase_skewness local_phase_skewness(const std::complex<T>* object, int64_t slices, int64_t h, int64_t w,
                                    const int64_t box_px[4], double sigma_px, int64_t bin) {
  phase_skewness out;
  if (object == nullptr || slices < 1 || h < 1 || w < 1 || bin < 1 || !(sigma_px > 0) || !std::isfinite(sigma_px))
    return out;
  // In binned pixels from here on: the object's (h / bin) × (w / bin) grid, the box and σ with it.
  const int64_t H = h / bin, W = w / bin;
  const double sigma = sigma_px / double(bin);
  if (H < 1 || W < 1) return out;
  const int64_t r0 = std::clamp<int64_t>(box_px[0] / bin, 0, H), r1 = std::clamp<int64_t>(box_px[1] / bin, 0, H);
  const int64_t c0 = std::clamp<int64_t>(box_px[2] / bin, 0, W), c1 = std::clamp<int64_t>(box_px[3] / bin, 0, W);
  const int64_t bh = r1 - r0, bw = c1 - c0;
  if (bh < 8 || bw < 8) return out;
  // The projected object over the box with a margin of the Gaussian's reach (4σ, the kernel's
  // radius), so the low-pass sees beyond the box where the object goes on.
  const int64_t m = int64_t(4.0 * sigma + 0.5);
  const int64_t e0 = std::max<int64_t>(0, r0 - m), e1 = std::min(H, r1 + m);
  const int64_t f0 = std::max<int64_t>(0, c0 - m), f1 = std::min(W, c1 + m);
  const int64_t eh = e1 - e0, ew = f1 - f0;
  std::vector<std::complex<double>> o(std::size_t(eh * ew));
  for (int64_t i = 0; i < eh; ++i)
    for (int64_t j = 0; j < ew; ++j) {
      std::complex<double> mean_of_bin = 0;
      for (int64_t u = 0; u < bin; ++u)
        for (int64_t v = 0; v < bin; ++v) {
          std::complex<double> p = 1;
          const int64_t y = (e0 + i) * bin + u, x = (f0 + j) * bin + v;
          for (int64_t s = 0; s < slices; ++s) p *= std::complex<double>(object[std::size_t((s * h + y) * w + x)]);
          mean_of_bin += p;
        }
      o[std::size_t(i * ew + j)] = mean_of_bin / double(bin * bin);
    }
  // The local phase `tycho evaluate` scores (accuracy.hpp), over the box.
  const std::vector<double> local = local_phase(o.data(), eh, ew, sigma, filter_boundary::reflect);
  std::vector<double> phi(std::size_t(bh * bw));
  double mean = 0;
  for (int64_t i = 0; i < bh; ++i)
    for (int64_t j = 0; j < bw; ++j) {
      const double v = local[std::size_t((r0 - e0 + i) * ew + (c0 - f0 + j))];
      phi[std::size_t(i * bw + j)] = std::isfinite(v) ? v : 0.0;
      mean += phi[std::size_t(i * bw + j)];
    }
  const double n = double(bh * bw);
  mean /= n;
  double m2 = 0, m3 = 0;
  for (double& v : phi) {
    v -= mean;
    m2 += v * v;
    m3 += v * v * v;
  }
  m2 /= n;
  m3 /= n;
  if (!(m2 > 0)) return out;
  // n_eff from the autocorrelation over lags up to 2σ (both signs of one axis, by symmetry).
  const int64_t L = std::min<int64_t>({int64_t(std::ceil(2 * sigma)), bh - 1, bw - 1});
  double sum_rho2 = 0;
  for (int64_t di = 0; di <= L; ++di)
    for (int64_t dj = -L; dj <= L; ++dj) {
      if (di == 0 && dj < 0) continue;
      double c = 0;
      int64_t count = 0;
      for (int64_t i = 0; i + di < bh; ++i)
        for (int64_t j = std::max<int64_t>(0, -dj); j < bw && j + dj < bw; ++j) {
          c += phi[std::size_t(i * bw + j)] * phi[std::size_t((i + di) * bw + j + dj)];
          ++count;
        }
      const double rho = count > 0 ? c / double(count) / m2 : 0.0;
      sum_rho2 += (di == 0 && dj == 0 ? 1.0 : 2.0) * rho * rho * rho;
    }
  out.pixels = bh * bw;
  out.effective_pixels = std::clamp(n / std::max(sum_rho2, 1.0), 1.0, n);
  out.skewness = m3 / std::pow(m2, 1.5);
  out.standard_error = std::sqrt(6.0 / out.effective_pixels);
  out.done = out.pixels >= 64 && std::isfinite(out.skewness);
  return out;
}

template phase_skewness local_phase_skewness<float>(const std::complex<float>*, int64_t, int64_t, int64_t,
                                                    const int64_t[4], double, int64_t);
template phase_skewness local_phase_skewness<double>(const std::complex<double>*, int64_t, int64_t, int64_t,
                                                     const int64_t[4], double, int64_t);

}  // namespace tycho
