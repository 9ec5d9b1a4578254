#include "previews/preview_model.hpp"

#include <tycho/host/optics.hpp>

#include <algorithm>
#include <cmath>

namespace tycho::host {

using cf = std::complex<float>;

std::vector<double> modelled_mean_pattern(const std::vector<cf>& object, int64_t slices, int64_t h, int64_t w,
                                          const std::vector<cf>& probe, int64_t modes, int64_t n0, int64_t n1,
                                          const double* positions_px, int64_t positions, int64_t max_positions) {
  std::vector<double> mean(std::size_t(n0 * n1), 0.0);
  if (positions <= 0 || max_positions <= 0) return mean;
  // The transmission of all slices together (projection), so one patch per position.
  std::vector<cf> projected(object.begin(), object.begin() + h * w);
  for (int64_t s = 1; s < slices; ++s)
    for (int64_t k = 0; k < h * w; ++k) projected[std::size_t(k)] *= object[std::size_t(s * h * w + k)];
  const int64_t used = std::min(positions, max_positions);
  std::vector<std::complex<double>> field(std::size_t(n0 * n1));
  int64_t counted = 0;
  for (int64_t u = 0; u < used; ++u) {
    const int64_t j = u * positions / used;  // evenly over the scan
    const int64_t i0 = int64_t(std::floor(positions_px[2 * j] - double(n0 / 2)));
    const int64_t j0 = int64_t(std::floor(positions_px[2 * j + 1] - double(n1 / 2)));
    if (i0 < 0 || j0 < 0 || i0 + n0 > h || j0 + n1 > w) continue;
    for (int64_t m = 0; m < modes; ++m) {
      for (int64_t r = 0; r < n0; ++r)
        for (int64_t c = 0; c < n1; ++c)
          field[std::size_t(r * n1 + c)] = std::complex<double>(
              probe[std::size_t((m * n0 + r) * n1 + c)] * projected[std::size_t((i0 + r) * w + j0 + c)]);
      const auto spectrum = dft2(field, n0, n1, /*inverse=*/false);
      for (int64_t k = 0; k < n0 * n1; ++k) mean[std::size_t(k)] += std::norm(spectrum[std::size_t(k)]);
    }
    ++counted;
  }
  if (counted > 0)
    for (double& v : mean) v /= double(counted);
  return mean;
}

}  // namespace tycho::host
