#include "tycho/core/scan_map.hpp"

#include <cmath>
#include <limits>

namespace tycho {

namespace {
constexpr double pi = 3.14159265358979323846;
}

scan_map scan_map::from_parameters(double rotation_rad, double scale0, double scale1, double shear) {
  const scan_map r = rotation_map(rotation_rad);
  // R · [[s0, 0], [h, s1]]
  scan_map m;
  for (int a = 0; a < 2; ++a) {
    m.L[a][0] = r.L[a][0] * scale0 + r.L[a][1] * shear;
    m.L[a][1] = r.L[a][1] * scale1;
  }
  return m;
}

scan_map::parameters scan_map::decompose() const {
  parameters p;
  // The second column of L = R · [[s0, 0], [h, s1]] is s1 · R e1: its angle gives θ.
  const double s1 = std::hypot(L[0][1], L[1][1]);
  if (!(det() > 0) || !(s1 > 0)) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return {nan, nan, nan, nan};
  }
  p.rotation_rad = std::atan2(-L[0][1], L[1][1]);
  p.scale1 = s1;
  // R⁻¹ times the first column: (s0, h).
  const double c = std::cos(p.rotation_rad), s = std::sin(p.rotation_rad);
  p.scale0 = c * L[0][0] + s * L[1][0];
  p.shear = -s * L[0][0] + c * L[1][0];
  return p;
}

scan_map rotation_map(double rotation_rad) {
  scan_map m;
  const double quarter = rotation_rad / (pi / 2);
  const double nearest = std::round(quarter);
  if (std::abs(quarter - nearest) < 1e-9 * 2 / pi) {
    const int turns = int(((int64_t(nearest) % 4) + 4) % 4);
    static constexpr double cs[4][2] = {{1, 0}, {0, 1}, {-1, 0}, {0, -1}};  // cos, sin
    const double c = cs[turns][0], s = cs[turns][1];
    m.L = {{{c, -s}, {s, c}}};
    return m;
  }
  const double c = std::cos(rotation_rad), s = std::sin(rotation_rad);
  m.L = {{{c, -s}, {s, c}}};
  return m;
}

void scan_map::apply_in_place(std::vector<double>& positions_A) const {
  for (std::size_t j = 0; j + 1 < positions_A.size(); j += 2) {
    const auto r = apply({positions_A[j], positions_A[j + 1]});
    positions_A[j] = r[0];
    positions_A[j + 1] = r[1];
  }
}

std::vector<double> raster_positions_A(int64_t rx, int64_t ry, double step0, double step1) {
  std::vector<double> n(std::size_t(2 * rx * ry));
  for (int64_t i = 0; i < rx; ++i)
    for (int64_t k = 0; k < ry; ++k) {
      n[std::size_t(2 * (i * ry + k))] = double(i) * step0;
      n[std::size_t(2 * (i * ry + k) + 1)] = double(k) * step1;
    }
  return n;
}

object_layout layout_mapped_raster(const scan_geometry& g, const scan_map& map) {
  if (map.is_identity()) return layout_object(g);
  std::vector<double> mapped = raster_positions_A(g.scan_shape[0], g.scan_shape[1], g.step_A[0], g.step_A[1]);
  map.apply_in_place(mapped);
  return layout_object(g, mapped);
}

}  // namespace tycho
