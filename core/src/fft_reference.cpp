#include "tycho/core/fft_reference.hpp"

#include <algorithm>
#include <cmath>

namespace tycho {
namespace {
// 1-D DFT of `n` values at stride `stride`, via a precomputed twiddle table.
void dft1(std::complex<double>* data, int64_t n, int64_t stride, bool inverse,
          std::vector<std::complex<double>>& scratch, const std::vector<std::complex<double>>& tw) {
  for (int64_t k = 0; k < n; ++k) {
    std::complex<double> acc = 0;
    for (int64_t r = 0; r < n; ++r) {
      auto w = tw[std::size_t((k * r) % n)];
      acc += data[r * stride] * (inverse ? std::conj(w) : w);
    }
    scratch[std::size_t(k)] = acc;
  }
  for (int64_t k = 0; k < n; ++k) data[k * stride] = scratch[std::size_t(k)];
}
std::vector<std::complex<double>> twiddles(int64_t n) {
  std::vector<std::complex<double>> tw(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) tw[std::size_t(i)] = std::polar(1.0, -2.0 * M_PI * double(i) / double(n));
  return tw;
}
}  // namespace

std::vector<std::complex<double>> dft2_reference(const std::vector<std::complex<double>>& in,
                                                 int64_t n0, int64_t n1, bool inverse) {
  std::vector<std::complex<double>> out = in;
  std::vector<std::complex<double>> scratch(std::size_t(std::max(n0, n1)));
  auto tw0 = twiddles(n0), tw1 = twiddles(n1);
  for (int64_t i = 0; i < n0; ++i) dft1(out.data() + i * n1, n1, 1, inverse, scratch, tw1);
  for (int64_t j = 0; j < n1; ++j) dft1(out.data() + j, n0, n1, inverse, scratch, tw0);
  double s = 1.0 / std::sqrt(double(n0 * n1));
  for (auto& v : out) v *= s;
  return out;
}
}  // namespace tycho
