#include "tycho/core/geometry.hpp"

#include <tycho/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tycho {

namespace {
// The object's size along one axis, refused (rather than converted with undefined behaviour to
// a wrapped int64) when the scan's extent, the window and the padding do not make a sane size:
// the scan step, the pixel size or the positions come from files and the config.
// 2^31 px per axis is far beyond any memory (the memory plan refuses much less).
int64_t object_side(double extent_px, const scan_geometry& g, int a, const char* extent_from) {
  constexpr double k_most = double(int64_t(1) << 31);
  const double side = std::ceil(extent_px + 1.0) + double(g.window[a]) + 2.0 * double(g.padding_px) + 1.0;
  if (!(extent_px >= 0 && side <= k_most) || g.window[a] < 1 || g.padding_px < 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the object would be ", side, " px along axis ", a, " (", extent_from, " span ",
         extent_px, " pixels of ", g.pixel_A[a], " Å, window ", g.window[a], ", padding ", g.padding_px,
         " px); expected at most 2^31 px: check the scan step, the positions and the detector pixel size");
  return int64_t(side);
}
}  // namespace

object_layout layout_object(const scan_geometry& g) {
  object_layout out;
  // Overflow-safe (core depends on the ABI only, so not through tycho/sdk/checked.hpp): the
  // positions' bytes, 16 per position, must fit int64.
  int64_t p = 0, bytes = 0;
  if (g.scan_shape[0] < 1 || g.scan_shape[1] < 1 || __builtin_mul_overflow(g.scan_shape[0], g.scan_shape[1], &p) ||
      __builtin_mul_overflow(p, int64_t(16), &bytes))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "layout_object: a scan of ", g.scan_shape[0], " x ", g.scan_shape[1],
         " positions, expected at least one and at most 2^59");
  out.positions_px.resize(std::size_t(2 * p));
  double extent[2], first[2];
  for (int a = 0; a < 2; ++a) {
    extent[a] = double(g.scan_shape[a] - 1) * g.step_A[a] / g.pixel_A[a];
    double origin_px = g.scan_origin_A[a] / g.pixel_A[a];
    first[a] = double(g.padding_px + g.window[a] / 2) + (origin_px - std::floor(origin_px));
  }
  for (int64_t i = 0; i < g.scan_shape[0]; ++i)
    for (int64_t j = 0; j < g.scan_shape[1]; ++j) {
      int64_t k = i * g.scan_shape[1] + j;
      out.positions_px[std::size_t(2 * k)] = first[0] + double(i) * g.step_A[0] / g.pixel_A[0];
      out.positions_px[std::size_t(2 * k + 1)] = first[1] + double(j) * g.step_A[1] / g.pixel_A[1];
    }
  for (int a = 0; a < 2; ++a) out.shape[a] = object_side(extent[a], g, a, "the raster scan's steps");
  return out;
}

object_layout layout_object(const scan_geometry& g, const std::vector<double>& positions_A) {
  const std::size_t p = positions_A.size() / 2;
  if (p == 0 || positions_A.size() % 2 != 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "layout_object: ", positions_A.size(),
         " position values, expected (P, 2) with P >= 1");
  double lo[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  double hi[2] = {-lo[0], -lo[1]};
  for (std::size_t k = 0; k < p; ++k)
    for (int a = 0; a < 2; ++a) {
      const double x = positions_A[2 * k + std::size_t(a)];
      if (!std::isfinite(x))
        fail(TYCHO_ERR_BAD_DATA, "position ", k, " is ", x, " Å along axis ", a, "; expected finite positions");
      lo[a] = std::min(lo[a], x);
      hi[a] = std::max(hi[a], x);
    }
  object_layout out;
  out.positions_px.resize(2 * p);
  // The same arithmetic as the raster: with lo = 0 and p = i·step, (p − lo)/px is i·step/px
  // and the corner is the origin, bit for bit.
  double extent[2], first[2];
  for (int a = 0; a < 2; ++a) {
    extent[a] = (hi[a] - lo[a]) / g.pixel_A[a];
    double corner_px = (g.scan_origin_A[a] + lo[a]) / g.pixel_A[a];
    first[a] = double(g.padding_px + g.window[a] / 2) + (corner_px - std::floor(corner_px));
  }
  for (std::size_t k = 0; k < p; ++k)
    for (int a = 0; a < 2; ++a) {
      const std::size_t i = 2 * k + std::size_t(a);
      out.positions_px[i] = first[a] + (positions_A[i] - lo[a]) / g.pixel_A[a];
    }
  for (int a = 0; a < 2; ++a) out.shape[a] = object_side(extent[a], g, a, "the listed positions");
  return out;
}

namespace {
// splitmix64: a small, well-mixed generator with a fixed definition.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + uint64_t(epoch) + 1;
  for (int64_t i = n - 1; i > 0; --i) {
    // The modulo bias (< n / 2^64) is far below anything a reconstruction can notice.
    int64_t j = int64_t(splitmix64(state) % uint64_t(i + 1));
    std::swap(perm[std::size_t(i)], perm[std::size_t(j)]);
  }
  return perm;
}

}  // namespace tycho
