// Separable Gaussian filter with scipy.ndimage's kernel and boundary rules, so the accuracy
// metric gives the same numbers as the Python reference it was defined with.
#include "tycho/core/accuracy.hpp"

#include "tycho/core/error.hpp"

#include <cmath>

namespace tycho {
namespace {

// Index into [0, n) of the sample read at i (any integer). Both rules are periodic (reflect with
// period 2n), so kernels wider than the image are handled like scipy does.
int64_t edge_index(int64_t i, int64_t n, filter_boundary boundary) {
  const int64_t period = boundary == filter_boundary::wrap ? n : 2 * n;
  int64_t m = i % period;
  if (m < 0) m += period;
  if (m >= n) m = period - 1 - m;  // reflect only: half-sample symmetric about the edge
  return m;
}

// The taps at offsets k = -r..r (r = taps.size() / 2), for a line of n samples. Both boundary
// rules read the sample at i + k periodically (period n or 2n), so a kernel longer than the
// period is folded onto it: taps whose offsets differ by the period read the same sample and are
// summed once. The result is the same sum in another order; the filter then costs n · period
// per line rather than n · (2r + 1) (a sigma of 1e5 px took minutes on a 200 px object).
struct line_kernel {
  std::vector<double> taps;
  int64_t first = 0;  // the offset of taps[0]
};
line_kernel fold_kernel(const std::vector<double>& taps, int64_t n, filter_boundary boundary) {
  const int64_t r = static_cast<int64_t>(taps.size() / 2);
  const int64_t period = boundary == filter_boundary::wrap ? n : 2 * n;
  if (2 * r + 1 <= period) return {taps, -r};
  line_kernel k;
  k.taps.assign(static_cast<size_t>(period), 0.0);
  for (int64_t o = -r; o <= r; ++o) {
    int64_t m = o % period;
    if (m < 0) m += period;
    k.taps[static_cast<size_t>(m)] += taps[static_cast<size_t>(o + r)];
  }
  return k;
}

// Filters `n` samples spaced `stride` apart starting at `line`; `buf` is scratch of size n.
void filter_line(std::complex<double>* line, int64_t n, int64_t stride,
                 const line_kernel& kernel, filter_boundary boundary,
                 std::vector<std::complex<double>>& buf) {
  const int64_t count = static_cast<int64_t>(kernel.taps.size());
  for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = line[i * stride];
  for (int64_t i = 0; i < n; ++i) {
    std::complex<double> acc = 0.0;
    for (int64_t t = 0; t < count; ++t) {
      const int64_t j = i + kernel.first + t;
      const int64_t src = (j >= 0 && j < n) ? j : edge_index(j, n, boundary);
      acc += kernel.taps[static_cast<size_t>(t)] * buf[static_cast<size_t>(src)];
    }
    line[i * stride] = acc;
  }
}

}  // namespace

std::vector<double> gaussian_kernel(double sigma_px) {
  if (!(sigma_px > 0.0) || !std::isfinite(sigma_px))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "gaussian_kernel: sigma must be positive and finite, got ",
         sigma_px, " px");
  // The radius is bounded before it is converted (1e300 px made the cast undefined) and the
  // kernel allocated (2^24 px: 256 MiB of taps; a wider Gaussian is a mean over any image).
  constexpr double k_most_radius = 16777216.0;
  if (!(4.0 * sigma_px + 0.5 < k_most_radius))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "gaussian_kernel: sigma ", sigma_px, " px is wider than ", k_most_radius / 4,
         " px");
  const int64_t r = static_cast<int64_t>(4.0 * sigma_px + 0.5);
  std::vector<double> taps(static_cast<size_t>(2 * r + 1));
  double sum = 0.0;
  for (int64_t x = -r; x <= r; ++x) {
    // The centre tap is 1 whatever sigma: for sigma below 1e-154 px, sigma² is 0 and 0 / 0 made
    // it NaN (a filter that should leave the image as it is).
    const double v = x == 0 ? 1.0 : std::exp(-0.5 * static_cast<double>(x * x) / (sigma_px * sigma_px));
    taps[static_cast<size_t>(x + r)] = v;
    sum += v;
  }
  for (double& v : taps) v /= sum;
  return taps;
}

void gaussian_filter_2d(std::complex<double>* image, int64_t h, int64_t w, double sigma_px,
                        filter_boundary boundary) {
  if (image == nullptr || h <= 0 || w <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "gaussian_filter_2d: empty image (", h, " x ", w, ")");
  const std::vector<double> taps = gaussian_kernel(sigma_px);
  std::vector<std::complex<double>> buf(static_cast<size_t>(h > w ? h : w));
  const line_kernel along_rows = fold_kernel(taps, w, boundary), along_cols = fold_kernel(taps, h, boundary);
  for (int64_t row = 0; row < h; ++row) filter_line(image + row * w, w, 1, along_rows, boundary, buf);
  for (int64_t col = 0; col < w; ++col) filter_line(image + col, h, w, along_cols, boundary, buf);
}

}  // namespace tycho
