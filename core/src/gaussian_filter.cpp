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

// Filters `n` samples spaced `stride` apart starting at `line`; `buf` is scratch of size n.
void filter_line(std::complex<double>* line, int64_t n, int64_t stride,
                 const std::vector<double>& taps, filter_boundary boundary,
                 std::vector<std::complex<double>>& buf) {
  const int64_t r = static_cast<int64_t>(taps.size() / 2);
  for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = line[i * stride];
  for (int64_t i = 0; i < n; ++i) {
    std::complex<double> acc = 0.0;
    for (int64_t k = -r; k <= r; ++k) {
      const int64_t j = i + k;
      const int64_t src = (j >= 0 && j < n) ? j : edge_index(j, n, boundary);
      acc += taps[static_cast<size_t>(k + r)] * buf[static_cast<size_t>(src)];
    }
    line[i * stride] = acc;
  }
}

}  // namespace

std::vector<double> gaussian_kernel(double sigma_px) {
  if (!(sigma_px > 0.0) || !std::isfinite(sigma_px))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "gaussian_kernel: sigma must be positive and finite, got ",
         sigma_px, " px");
  const int64_t r = static_cast<int64_t>(4.0 * sigma_px + 0.5);
  std::vector<double> taps(static_cast<size_t>(2 * r + 1));
  double sum = 0.0;
  for (int64_t x = -r; x <= r; ++x) {
    const double v = std::exp(-0.5 * static_cast<double>(x * x) / (sigma_px * sigma_px));
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
  for (int64_t row = 0; row < h; ++row) filter_line(image + row * w, w, 1, taps, boundary, buf);
  for (int64_t col = 0; col < w; ++col) filter_line(image + col, h, w, taps, boundary, buf);
}

}  // namespace tycho
