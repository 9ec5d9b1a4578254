// The constraint on the positions: a global affine map of the nominal scan plus a residual.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "constraints.hpp"

namespace tycho::constraints {

using namespace tycho::sdk;

affine_fit fit_affine(const double* nominal, const double* positions, int64_t count) {
  affine_fit f;
  if (count <= 0) return f;
  double nm[2] = {0, 0}, pm[2] = {0, 0};
  for (int64_t j = 0; j < count; ++j)
    for (int a = 0; a < 2; ++a) {
      nm[a] += nominal[2 * j + a];
      pm[a] += positions[2 * j + a];
    }
  for (int a = 0; a < 2; ++a) {
    nm[a] /= double(count);
    pm[a] /= double(count);
  }
  // Normal equations of p − p̄ ≈ A (n − n̄): A = (Σ Δp Δnᵀ)(Σ Δn Δnᵀ)⁻¹.
  double nn[2][2] = {{0, 0}, {0, 0}}, pn[2][2] = {{0, 0}, {0, 0}};
  for (int64_t j = 0; j < count; ++j) {
    const double dn[2] = {nominal[2 * j] - nm[0], nominal[2 * j + 1] - nm[1]};
    const double dp[2] = {positions[2 * j] - pm[0], positions[2 * j + 1] - pm[1]};
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        nn[a][b] += dn[a] * dn[b];
        pn[a][b] += dp[a] * dn[b];
      }
  }
  const double det = nn[0][0] * nn[1][1] - nn[0][1] * nn[1][0];
  if (!(std::abs(det) > 1e-12 * (nn[0][0] * nn[1][1] + 1e-300))) {
    // The nominal positions span a line (or a point): only the shift is determined.
    f.linear[0][0] = f.linear[1][1] = 1;
    f.linear[0][1] = f.linear[1][0] = 0;
  } else {
    const double inv[2][2] = {{nn[1][1] / det, -nn[0][1] / det}, {-nn[1][0] / det, nn[0][0] / det}};
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) f.linear[a][b] = pn[a][0] * inv[0][b] + pn[a][1] * inv[1][b];
  }
  for (int a = 0; a < 2; ++a) f.shift[a] = pm[a] - f.linear[a][0] * nm[0] - f.linear[a][1] * nm[1];
  return f;
}

namespace {
// For a raster of nominal positions: the acquisition index t as a linear function of the
// position, t = g · n + c. A raster here is what every source stores: pattern j at grid index
// (i0, i1) = (j / n1, j mod n1), C order, and its nominal position n_j = c + M (i0, i1) for one
// 2 x 2 matrix M whose columns are the steps along the grid's axes: an axis-aligned raster, or one
// the scan map turned, scaled or sheared (scan_rotation_deg, the parallax's rotation). The beam
// sweeps `fast_axis` first, so t = w · (i0, i1) with w = (n1, 1) (fast axis 1) or (1, n0), and
// g = M⁻ᵀ w. Every n1 that divides the count is tried; the positions must lie on the grid to
// 1e-6 of their extent. Throws when no grid of at least 2 x 2 takes them in their listed order.
std::array<double, 2> drift_direction(const std::vector<double>& nominal, int fast_axis) {
  const int64_t count = int64_t(nominal.size() / 2);
  double lo[2] = {nominal[0], nominal[1]}, hi[2] = {nominal[0], nominal[1]};
  for (int64_t j = 0; j < count; ++j)
    for (int a = 0; a < 2; ++a) {
      lo[a] = std::min(lo[a], nominal[2 * j + a]);
      hi[a] = std::max(hi[a], nominal[2 * j + a]);
    }
  const double tol = 1e-6 * std::max({hi[0] - lo[0], hi[1] - lo[1], 1.0});
  for (int64_t n1 = 2; n1 <= count / 2; ++n1) {
    if (count % n1 != 0) continue;
    const int64_t n0 = count / n1;
    // Least squares of n_j on (1, i0, i1): the grid's indices are centred, so their sums vanish
    // and the normal equations split (the cross sum of i0 and i1 is 0 on a full grid).
    const double m0 = 0.5 * double(n0 - 1), m1 = 0.5 * double(n1 - 1);
    double mean[2] = {0, 0}, s0[2] = {0, 0}, s1[2] = {0, 0}, q0 = 0, q1 = 0;
    for (int64_t j = 0; j < count; ++j) {
      const double i0 = double(j / n1) - m0, i1 = double(j % n1) - m1;
      q0 += i0 * i0;
      q1 += i1 * i1;
      for (int a = 0; a < 2; ++a) {
        mean[a] += nominal[2 * j + a];
        s0[a] += nominal[2 * j + a] * i0;
        s1[a] += nominal[2 * j + a] * i1;
      }
    }
    double M[2][2];
    for (int a = 0; a < 2; ++a) {
      mean[a] /= double(count);
      M[a][0] = s0[a] / q0;
      M[a][1] = s1[a] / q1;
    }
    bool on_grid = true;
    for (int64_t j = 0; j < count && on_grid; ++j) {
      const double i0 = double(j / n1) - m0, i1 = double(j % n1) - m1;
      for (int a = 0; a < 2; ++a)
        on_grid = on_grid && std::abs(nominal[2 * j + a] - (mean[a] + M[a][0] * i0 + M[a][1] * i1)) <= tol;
    }
    const double det = M[0][0] * M[1][1] - M[0][1] * M[1][0];
    if (!on_grid || !(std::abs(det) > 0)) continue;
    const double w[2] = {fast_axis == 1 ? double(n1) : 1.0, fast_axis == 1 ? 1.0 : double(n0)};
    // g = M⁻ᵀ w: M⁻ᵀ = [[M11, −M10], [−M01, M00]] / det.
    return {(M[1][1] * w[0] - M[1][0] * w[1]) / det, (-M[0][1] * w[0] + M[0][0] * w[1]) / det};
  }
  fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint 'positions_affine': linear = \"drift\" needs a raster scan of at least ",
       "2 x 2 positions listed in raster order (pattern j at grid index (j / n1, j mod n1), the grid turned or not); ",
       "no grid takes the ", count, " nominal positions in their listed order (nominal position 0 lies at (",
       nominal[0], ", ", nominal.size() > 1 ? nominal[1] : 0.0, ") px)");
}
}  // namespace

positions_affine::positions_affine(const config_view& cfg, const tycho_constraint_setup& setup) {
  residual_weight_ = cfg.get_double("residual_weight").value_or(1.0);
  if (!(residual_weight_ >= 0 && residual_weight_ <= 1))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'residual_weight' in ", cfg.table_name(), " must be in [0, 1], got ",
         residual_weight_);
  const double max_A = cfg.get_double("residual_max_A").value_or(0.0);
  if (!(max_A >= 0) || !std::isfinite(max_A))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'residual_max_A' in ", cfg.table_name(), " must be >= 0, got ", max_A);
  residual_max_px_[0] = max_A / setup.pixel_A[0];
  residual_max_px_[1] = max_A / setup.pixel_A[1];
  const std::string linear = cfg.get_string("linear").value_or("free");
  if (linear != "free" && linear != "nominal" && linear != "drift")
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'linear' in ", cfg.table_name(),
         " must be \"free\", \"drift\" or \"nominal\", got \"", linear, "\"");
  linear_ = linear;
  const int64_t fast = cfg.get_int("fast_axis").value_or(1);
  if (fast != 0 && fast != 1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'fast_axis' in ", cfg.table_name(), " must be 0 or 1, got ", fast);
  const DLTensor* n = setup.nominal_positions;
  if (n == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint 'positions_affine': the host gave no nominal positions");
  expect_tensor(n, "nominal_positions", dtype_float64, 2);
  const double* v = data_of<const double>(*n);
  nominal_.assign(v, v + element_count(*n));
  if (linear_ == "drift") drift_ = drift_direction(nominal_, int(fast));
}

void positions_affine::apply(const constraint_arguments& a) {
  const int64_t count = a.positions->shape[0];
  if (int64_t(nominal_.size()) != 2 * count)
    fail(TYCHO_ERR_BAD_DATA, "constraint 'positions_affine': ", count, " positions, but ", nominal_.size() / 2,
         " nominal ones");
  double* p = data_of<double>(*a.positions);
  affine_fit f = fit_affine(nominal_.data(), p, count);
  if (linear_ == "drift") {
    // The linear part nearest the fitted one among I + u gᵀ (a drift linear in acquisition
    // time, t = g · n + c): u = (A − I) g / |g|², in the least-squares sense over A's entries.
    const double gg = drift_[0] * drift_[0] + drift_[1] * drift_[1];
    double u[2];
    for (int b = 0; b < 2; ++b)
      u[b] = ((f.linear[b][0] - (b == 0)) * drift_[0] + (f.linear[b][1] - (b == 1)) * drift_[1]) / gg;
    // Keep the fitted map's value at the positions' centre: the shift absorbs the change.
    double centre[2] = {0, 0};
    for (int64_t j = 0; j < count; ++j)
      for (int b = 0; b < 2; ++b) centre[b] += nominal_[std::size_t(2 * j + b)] / double(count);
    affine_fit d;
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) d.linear[b][c] = (b == c) + u[b] * drift_[std::size_t(c)];
    for (int b = 0; b < 2; ++b)
      d.shift[b] = f.shift[b] + (f.linear[b][0] - d.linear[b][0]) * centre[0] + (f.linear[b][1] - d.linear[b][1]) * centre[1];
    // p = f(n) + r becomes d(n) + r: r is the residual from the full fit.
    for (int64_t j = 0; j < count; ++j) {
      const double* n = nominal_.data() + 2 * j;
      for (int b = 0; b < 2; ++b) {
        const double full = f.linear[b][0] * n[0] + f.linear[b][1] * n[1] + f.shift[b];
        const double model = d.linear[b][0] * n[0] + d.linear[b][1] * n[1] + d.shift[b];
        double r = (p[2 * j + b] - full) * residual_weight_;
        if (residual_max_px_[b] > 0) r = std::clamp(r, -residual_max_px_[b], residual_max_px_[b]);
        p[2 * j + b] = model + r;
      }
    }
    return;
  }
  if (linear_ == "nominal") {  // the scan's own geometry: only the shift is fitted
    double shift[2] = {0, 0};
    for (int64_t j = 0; j < count; ++j)
      for (int b = 0; b < 2; ++b) shift[b] += p[2 * j + b] - nominal_[std::size_t(2 * j + b)];
    f.linear[0][0] = f.linear[1][1] = 1;
    f.linear[0][1] = f.linear[1][0] = 0;
    for (int b = 0; b < 2; ++b) f.shift[b] = shift[b] / double(count);
  }
  for (int64_t j = 0; j < count; ++j) {
    const double* n = nominal_.data() + 2 * j;
    for (int b = 0; b < 2; ++b) {
      const double model = f.linear[b][0] * n[0] + f.linear[b][1] * n[1] + f.shift[b];
      double r = (p[2 * j + b] - model) * residual_weight_;
      if (residual_max_px_[b] > 0) r = std::clamp(r, -residual_max_px_[b], residual_max_px_[b]);
      p[2 * j + b] = model + r;
    }
  }
}

}  // namespace tycho::constraints
