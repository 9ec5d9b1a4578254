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
// position, t = g · n + c, when `fast_axis` is the axis the beam sweeps first: g_fast =
// 1 / step_fast, g_slow = (positions along the fast axis) / step_slow. Throws when the nominal
// positions are not a raster (distinct values per axis times each other ≠ their count).
std::array<double, 2> drift_direction(const std::vector<double>& nominal, int fast_axis) {
  const std::size_t count = nominal.size() / 2;
  double lo[2] = {nominal[0], nominal[1]}, hi[2] = {nominal[0], nominal[1]};
  for (std::size_t j = 0; j < count; ++j)
    for (int a = 0; a < 2; ++a) {
      lo[a] = std::min(lo[a], nominal[2 * j + a]);
      hi[a] = std::max(hi[a], nominal[2 * j + a]);
    }
  int64_t along[2];
  double step[2];
  for (int a = 0; a < 2; ++a) {
    std::vector<double> v(count);
    for (std::size_t j = 0; j < count; ++j) v[j] = nominal[2 * j + a];
    std::sort(v.begin(), v.end());
    const double tol = 1e-6 * std::max(hi[a] - lo[a], 1.0);
    along[a] = 1;
    for (std::size_t j = 1; j < count; ++j)
      if (v[j] - v[j - 1] > tol) ++along[a];
    step[a] = along[a] > 1 ? (hi[a] - lo[a]) / double(along[a] - 1) : 1.0;
  }
  if (along[0] * along[1] != int64_t(count) || along[0] < 2 || along[1] < 2)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint 'positions_affine': linear = \"drift\" needs a raster scan of at least ",
         "2 x 2 positions; the nominal positions take ", along[0], " x ", along[1], " distinct values for ", count,
         " positions");
  const int slow = 1 - fast_axis;
  // And stored in raster order, C order over the grid (pattern j = (j / n1, j mod n1), as every
  // source stores a raster; fast_axis then says which axis the beam swept first). A list taking
  // the grid's values in another order (a snake scan, shuffled frames) is not such a raster.
  for (std::size_t j = 0; j < count; ++j) {
    const double i0 = std::round((nominal[2 * j] - lo[0]) / step[0]);
    const double i1 = std::round((nominal[2 * j + 1] - lo[1]) / step[1]);
    if (i0 * double(along[1]) + i1 != double(j))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint 'positions_affine': linear = \"drift\" needs a raster scan stored ",
           "in raster order; nominal position ", j, " lies at (", i0, ", ", i1, ") of the ", along[0], " x ", along[1],
           " grid, where raster order puts position ", i0 * double(along[1]) + i1, ": the positions are listed in ",
           "another order");
  }
  std::array<double, 2> g{};
  g[std::size_t(fast_axis)] = 1.0 / step[fast_axis];
  g[std::size_t(slow)] = double(along[fast_axis]) / step[slow];
  return g;
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
