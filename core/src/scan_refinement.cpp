#include "tycho/core/scan_refinement.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tycho/core/error.hpp"
#include "tycho/core/exact_sum.hpp"

namespace tycho {

namespace {
constexpr int P = 5;  // rotation, scale0, scale1, shear, C10
using vec = std::array<double, P>;
using mat = std::array<vec, P>;

double dot(const vec& a, const vec& b) {
  double s = 0;
  for (int k = 0; k < P; ++k) s += a[std::size_t(k)] * b[std::size_t(k)];
  return s;
}
double norm(const vec& a) { return std::sqrt(dot(a, a)); }

// ∂L/∂p_k of L = R(θ) · [[s0, 0], [h, s1]] for p = (θ, s0, s1, h).
std::array<std::array<std::array<double, 2>, 2>, 4> map_derivatives(const scan_map::parameters& p) {
  const double c = std::cos(p.rotation_rad), s = std::sin(p.rotation_rad);
  const double R[2][2] = {{c, -s}, {s, c}}, dR[2][2] = {{-s, -c}, {c, -s}};
  const double U[2][2] = {{p.scale0, 0}, {p.shear, p.scale1}};
  std::array<std::array<std::array<double, 2>, 2>, 4> d{};
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      d[0][std::size_t(a)][std::size_t(b)] = dR[a][0] * U[0][b] + dR[a][1] * U[1][b];
      d[1][std::size_t(a)][std::size_t(b)] = b == 0 ? R[a][0] : 0.0;  // ∂/∂s0: R · E00
      d[2][std::size_t(a)][std::size_t(b)] = b == 1 ? R[a][1] : 0.0;  // ∂/∂s1: R · E11
      d[3][std::size_t(a)][std::size_t(b)] = b == 0 ? R[a][1] : 0.0;  // ∂/∂h: R · E10
    }
  return d;
}
// Σ over every rank's terms ((count, C) row-major: C components per position), the same bits on
// any number of ranks: a float sum depends on how the ranks cut the scan (1 rank against 2 moved
// the map, and so the positions, in their last bits, breaking the deterministic sums' promise).
// A first rank sum finds, per component, the largest exponent of any term (a one-hot of
// exponents, summed) and the total count N; each term is then rounded to the grid
// 2^(e_max − 52 + ⌈log2 N⌉ + 1), on which every partial sum of at most N terms is a double
// exactly, in any order. The rounding is 2^-(51 − ⌈log2 N⌉) of the largest term (2^-31 for 10^6
// positions). Non-finite terms make that component's sum NaN.
std::vector<double> exact_rank_sums(const std::vector<double>& terms, std::size_t C,
                                    const scan_refinement::rank_sum& sum) {
  constexpr int k_offset = 1100, k_slots = 2200;  // frexp exponents of finite doubles: −1073 … 1024
  const std::size_t count = C > 0 ? terms.size() / C : 0;
  std::vector<double> first(C * std::size_t(k_slots) + C + 1, 0.0);  // one-hots, non-finite counts, N
  for (std::size_t c = 0; c < C; ++c) {
    int top = -k_offset;
    bool any = false;
    for (std::size_t j = 0; j < count; ++j) {
      const double v = terms[j * C + c];
      if (!std::isfinite(v)) {
        first[C * std::size_t(k_slots) + c] += 1;
        continue;
      }
      if (v == 0) continue;
      int e = 0;
      std::frexp(v, &e);
      top = std::max(top, e);
      any = true;
    }
    if (any) first[c * std::size_t(k_slots) + std::size_t(top + k_offset)] = 1;
  }
  first.back() = double(count);
  sum(first);
  const double N = std::max(first.back(), 1.0);
  std::vector<double> out(C, 0.0);
  for (std::size_t c = 0; c < C; ++c) {
    if (first[C * std::size_t(k_slots) + c] > 0) {
      out[c] = std::nan("");
      continue;
    }
    int e_max = std::numeric_limits<int>::min();
    for (int k = k_slots - 1; k >= 0; --k)
      if (first[c * std::size_t(k_slots) + std::size_t(k)] > 0) {
        e_max = k - k_offset;
        break;
      }
    if (e_max == std::numeric_limits<int>::min()) continue;  // every term 0
    const double q = exact_sum_quantum(e_max, N);
    for (std::size_t j = 0; j < count; ++j) out[c] += std::nearbyint(terms[j * C + c] / q) * q;  // exact
  }
  // The partial sums (NaN where a term was not finite: a NaN stays one), then over the ranks.
  std::vector<double> partial = out;
  for (double& v : partial)
    if (std::isnan(v)) v = 0;
  sum(partial);
  for (std::size_t c = 0; c < C; ++c)
    if (!std::isnan(out[c])) out[c] = partial[c];
  return out;
}
}  // namespace

scan_refinement::scan_refinement(scan_refinement_options options, std::vector<double> nominal_A, double rms_radius_A,
                                 std::array<double, 2> pixel_A, const scan_map& start)
    : o_(options), n_(std::move(nominal_A)), radius_(rms_radius_A), pixel_(pixel_A), map_(start), C10_(options.C10_A) {
  if (o_.first_iteration < 1)  // iterations count from 1: converged_at_ = 0 means "not yet"
    fail(TYCHO_ERR_INVALID_ARGUMENT, "scan map refinement: its first iteration is ", o_.first_iteration, ", not >= 1");
  if (!(radius_ > 0) || !std::isfinite(radius_))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "scan map refinement: the scan spans no area (rms radius ", radius_, " Å)");
  wait_for_the_rest(o_.free[1] && o_.scale_after_rest);
  p_ = map_.decompose();
  held_length_ = o_.hold == scan_refinement_options::held_scale::axis0 ? std::hypot(p_.scale0, p_.shear) : p_.scale1;
  if (!std::isfinite(p_.rotation_rad))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "scan map refinement: the starting map has no positive determinant");
}

scan_refinement::vec scan_refinement::slope(const double* gradient, double C10_slope, const rank_sum& sum) const {
  // G_ab = Σ_j (∂L/∂r_j,a) · n_j,b / pixel_a: the loss's slope along each entry of the map; with
  // the noise penalty, the nominal positions' Σ n_0², Σ n_1² and count in the same rank sum.
  const bool penalty = o_.noise_per_A2 > 0;
  const std::size_t C = penalty ? 7 : 4;
  const std::size_t count = n_.size() / 2;
  std::vector<double> terms(count * C);
  for (std::size_t j = 0; j < count; ++j) {
    double* t = terms.data() + j * C;
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b)
        t[2 * a + b] = gradient[2 * j + std::size_t(a)] * n_[2 * j + std::size_t(b)] / pixel_[std::size_t(a)];
    if (penalty) {
      t[4] = n_[2 * j] * n_[2 * j];
      t[5] = n_[2 * j + 1] * n_[2 * j + 1];
      t[6] = 1;
    }
  }
  const std::vector<double> G = exact_rank_sums(terms, C, sum);
  const auto d = map_derivatives(p_);
  double by[4] = {0, 0, 0, 0};  // dL/dθ, dL/ds0, dL/ds1, dL/dh
  for (int k = 0; k < 4; ++k)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) by[k] += G[std::size_t(2 * a + b)] * d[std::size_t(k)][std::size_t(a)][std::size_t(b)];
  // The parameters: θ, m = ½ log(s0 s1) (the isotropic scale), a = ½ log(s0 / s1), h: dL/dm =
  // s0 dL/ds0 + s1 dL/ds1, dL/da = s0 dL/ds0 − s1 dL/ds1; each per Å at the rms radius.
  double full[4] = {by[0], p_.scale0 * by[1] + p_.scale1 * by[2], p_.scale0 * by[1] - p_.scale1 * by[2], by[3]};
  if (penalty) {
    // The covered area A ≈ (E0 + W)(E1 + W), E_a = √(12 ⟨n_a²⟩) s_a the scan's extent along its
    // axis a (a uniform raster's), W the window: dA/dm = E0 (E1 + W) + E1 (E0 + W) and dA/da =
    // E0 (E1 + W) − E1 (E0 + W) for m = ½ log(s0 s1), a = ½ log(s0 / s1).
    const double E0 = std::sqrt(12 * G[4] / std::max(G[6], 1.0)) * p_.scale0;
    const double E1 = std::sqrt(12 * G[5] / std::max(G[6], 1.0)) * p_.scale1;
    const double W = o_.window_A;
    full[1] += o_.noise_per_A2 * (E0 * (E1 + W) + E1 * (E0 + W));
    full[2] += o_.noise_per_A2 * (E0 * (E1 + W) - E1 * (E0 + W));
  }
  vec g{};
  for (int k = 0; k < 4; ++k)
    if (free_[std::size_t(k)]) g[std::size_t(k)] = full[k] / radius_;
  if (moves_C10()) g[4] = C10_slope / o_.C10_displacement_per_A;  // per Å of the edge image's shift
  return g;
}

void scan_refinement::apply(const vec& du, double* positions) {
  scan_map::parameters q = p_;
  q.rotation_rad += du[0] / radius_;
  q.scale0 *= std::exp((du[1] + du[2]) / radius_);
  q.scale1 *= std::exp((du[1] - du[2]) / radius_);
  q.shear += du[3] / radius_;
  double C10_ratio = 1;
  if (o_.hold != scan_refinement_options::held_scale::isotropic && !o_.free[1]) {
    // The isotropic scale follows the held axis: the one that keeps that axis's step vector
    // (column f of U) as long as the start's, with a = ½ log(s0 / s1) as the step left it.
    const double a = 0.5 * std::log(q.scale0 / q.scale1);
    const double iso_before = std::sqrt(q.scale0 * q.scale1);
    double iso = 0;
    if (o_.hold == scan_refinement_options::held_scale::axis1) {
      iso = held_length_ * std::exp(a);  // s1 = iso e^(−a) = held
    } else {
      const double s0 = std::sqrt(std::max(held_length_ * held_length_ - q.shear * q.shear, 1e-12));
      iso = s0 * std::exp(-a);  // s0 = iso e^a, |(s0, h)| = held
    }
    q.scale0 = iso * std::exp(a);
    q.scale1 = iso * std::exp(-a);
    C10_ratio = iso / iso_before;
  }
  const scan_map next = scan_map::from_parameters(q.rotation_rad, q.scale0, q.scale1, q.shear);
  double dL[2][2];
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) dL[a][b] = next.L[std::size_t(a)][std::size_t(b)] - map_.L[std::size_t(a)][std::size_t(b)];
  const std::size_t count = n_.size() / 2;
  for (std::size_t j = 0; j < count; ++j)
    for (int a = 0; a < 2; ++a)
      positions[2 * j + std::size_t(a)] +=
          (dL[a][0] * n_[2 * j] + dL[a][1] * n_[2 * j + 1]) / pixel_[std::size_t(a)];
  map_ = next;
  p_ = q;
  if (refines_C10()) {
    C10_ += du[4] / o_.C10_displacement_per_A;
    // Along the valley the bright field's parallax leaves flat: C10 / scale is what it fixes.
    C10_ = o_.C10_model_shift_A + (C10_ - o_.C10_model_shift_A) * C10_ratio;
  }
}

const char* scan_refinement::held_scale_text() const {
  switch (o_.hold) {
    case scan_refinement_options::held_scale::axis0: return "fast axis 0";
    case scan_refinement_options::held_scale::axis1: return "fast axis 1";
    default: return "isotropic";
  }
}

bool scan_refinement::due(int64_t iteration) const {
  return o_.enabled && !converged() && iteration >= o_.first_iteration &&
         (iteration - o_.first_iteration) % std::max<int64_t>(o_.every, 1) == 0;
}

scan_refinement_move scan_refinement::step(int64_t iteration, const double* gradient, double C10_slope,
                                           double* positions, const rank_sum& sum) {
  scan_refinement_move move;
  if (!due(iteration)) return move;
  const vec g = slope(gradient, C10_slope, sum);
  for (double v : g)
    if (!std::isfinite(v)) fail(TYCHO_ERR_BAD_DATA, "scan map refinement: the slope of the loss is not finite");
  const double gn = norm(g);
  if (!(gn > 0)) {
    report_ = cat("iteration ", iteration, ": no slope along the free parameters: the map is kept");
    settled(iteration);
    return move;
  }
  if (have_previous_) {
    vec y{};
    for (int k = 0; k < P; ++k) y[std::size_t(k)] = g[std::size_t(k)] - previous_slope_[std::size_t(k)];
    const vec& s = previous_step_;
    const double ys = dot(y, s);
    if (ys > 1e-12 * norm(y) * norm(s)) {
      if (!have_curvature_) {
        const double scale = ys / dot(y, y);
        for (int a = 0; a < P; ++a)
          for (int b = 0; b < P; ++b)
            inverse_hessian_[std::size_t(a)][std::size_t(b)] = a == b && free_[std::size_t(a)] ? scale : 0.0;
        have_curvature_ = true;
      }
      // H ← (I − ρ s yᵀ) H (I − ρ y sᵀ) + ρ s sᵀ, ρ = 1 / (yᵀ s).
      const double rho = 1.0 / ys;
      mat A{}, T{};
      const mat H = inverse_hessian_;
      for (int a = 0; a < P; ++a)
        for (int b = 0; b < P; ++b)
          A[std::size_t(a)][std::size_t(b)] = (a == b ? 1.0 : 0.0) - rho * s[std::size_t(a)] * y[std::size_t(b)];
      for (int a = 0; a < P; ++a)
        for (int b = 0; b < P; ++b) {
          double v = 0;
          for (int k = 0; k < P; ++k) v += A[std::size_t(a)][std::size_t(k)] * H[std::size_t(k)][std::size_t(b)];
          T[std::size_t(a)][std::size_t(b)] = v;
        }
      for (int a = 0; a < P; ++a)
        for (int b = 0; b < P; ++b) {
          double v = 0;
          for (int k = 0; k < P; ++k) v += T[std::size_t(a)][std::size_t(k)] * A[std::size_t(b)][std::size_t(k)];
          inverse_hessian_[std::size_t(a)][std::size_t(b)] = v + rho * s[std::size_t(a)] * s[std::size_t(b)];
        }
    }
  }
  vec du{};
  if (have_curvature_) {
    for (int a = 0; a < P; ++a)
      for (int b = 0; b < P; ++b) du[std::size_t(a)] -= inverse_hessian_[std::size_t(a)][std::size_t(b)] * g[std::size_t(b)];
    if (!(dot(du, g) < 0)) {  // not a descent direction (noise in the slopes): a short steepest step
      for (int k = 0; k < P; ++k) du[std::size_t(k)] = -0.25 * o_.max_move_A * g[std::size_t(k)] / gn;
      have_curvature_ = false;
    }
  } else {
    // No curvature yet: a probing step of a sixth of the largest move along the slope.
    for (int k = 0; k < P; ++k) du[std::size_t(k)] = -(o_.max_move_A / 6) * g[std::size_t(k)] / gn;
  }
  const double length = norm(du);
  if (length > o_.max_move_A)
    for (double& v : du) v *= o_.max_move_A / length;
  const double before = C10_;
  apply(du, positions);
  move.moved = true;
  move.delta_C10_A = C10_ - before;
  previous_slope_ = g;
  previous_step_ = du;
  have_previous_ = true;
  ++steps_;
  small_steps_ = norm(du) < o_.tolerance_A ? small_steps_ + 1 : 0;
  const auto q = p_;
  report_ = cat("iteration ", iteration, ": scan map rotation ", q.rotation_rad * 180 / 3.14159265358979323846,
                "°, step scales ", q.scale0, ", ", q.scale1, " (isotropic ", std::sqrt(q.scale0 * q.scale1), "), shear ", q.shear,
                refines_C10() ? cat(", probe C10 ", physical_C10_A(), " Å") : std::string(), " (moved ", norm(du), " Å at the rms radius",
                ")");
  if (small_steps_ >= 2) settled(iteration);
  if (converged()) report_.insert(report_.size() - 1, "; converged");
  return move;
}

void scan_refinement::wait_for_the_rest(bool wait) {
  scale_waits_ = wait;
  free_ = o_.free;
  if (wait) free_[1] = free_[4] = false;
}

void scan_refinement::settled(int64_t iteration) {
  if (!scale_waits_) {
    converged_at_ = iteration;
    return;
  }
  // The rest has converged around an object formed at the held scale: free the scale and C10,
  // their slopes now measured on that object, with a fresh quasi-Newton memory (the curvature
  // learnt without them says nothing about theirs).
  wait_for_the_rest(false);
  small_steps_ = 0;
  have_previous_ = false;
  have_curvature_ = false;
  inverse_hessian_ = {};
  report_ += cat("; the rest has converged: the isotropic scale", refines_C10() ? " and C10 are" : " is",
                 " freed from the next step");
}

std::vector<double> scan_refinement::state() const {
  std::vector<double> v;
  v.reserve(state_size);
  for (const auto& row : map_.L) v.insert(v.end(), row.begin(), row.end());
  v.insert(v.end(), {p_.rotation_rad, p_.scale0, p_.scale1, p_.shear, C10_});
  v.insert(v.end(), previous_slope_.begin(), previous_slope_.end());
  v.insert(v.end(), previous_step_.begin(), previous_step_.end());
  for (const vec& row : inverse_hessian_) v.insert(v.end(), row.begin(), row.end());
  v.insert(v.end(), {have_previous_ ? 1.0 : 0.0, have_curvature_ ? 1.0 : 0.0, double(steps_), double(small_steps_),
                     converged() ? 1.0 : 0.0, double(converged_at_)});
  v.push_back(scale_waits_ ? 1.0 : 0.0);
  return v;
}

void scan_refinement::restore(const std::vector<double>& v, const std::string& origin) {
  if (v.size() != state_size && v.size() != older_state_size)
    fail(TYCHO_ERR_BAD_DATA, origin, ": the scan map's refinement state holds ", v.size(), " numbers, expected ",
         state_size, " (or ", older_state_size, " from an older tycho)");
  for (std::size_t k = 0; k < v.size(); ++k)
    if (!std::isfinite(v[k]))
      fail(TYCHO_ERR_BAD_DATA, origin, ": the scan map's refinement state holds a non-finite number at ", k);
  scan_map m;
  m.L = {{{v[0], v[1]}, {v[2], v[3]}}};
  scan_map::parameters q{v[4], v[5], v[6], v[7]};
  const double counters[3] = {v[46], v[47], v[49]};
  auto is_flag = [](double x) { return x == 0.0 || x == 1.0; };
  if (!(m.det() > 0) || !(q.scale0 > 0) || !(q.scale1 > 0) || !is_flag(v[44]) || !is_flag(v[45]) ||
      !is_flag(v[48]) || !std::all_of(std::begin(counters), std::end(counters), [](double c) { return c >= 0 && c <= 1e12 && c == std::floor(c); }) ||
      (v[48] != 0) != (v[49] > 0) ||
      (v.size() > older_state_size && (!is_flag(v[older_state_size]) || (v[older_state_size] != 0 && v[48] != 0))))
    fail(TYCHO_ERR_BAD_DATA, origin, ": the scan map's refinement state is not one a run writes (a map with ",
         "determinant ", m.det(), ", step scales ", q.scale0, ", ", q.scale1, ")");
  map_ = m;
  p_ = q;
  C10_ = v[8];
  std::size_t k = 9;
  for (double& x : previous_slope_) x = v[k++];
  for (double& x : previous_step_) x = v[k++];
  for (vec& row : inverse_hessian_)
    for (double& x : row) x = v[k++];
  have_previous_ = v[k++] != 0;
  have_curvature_ = v[k++] != 0;
  steps_ = int64_t(v[k++]);
  small_steps_ = int64_t(v[k++]);
  ++k;  // the converged flag: converged_at > 0 (checked above)
  converged_at_ = int64_t(v[k++]);
  // An older file's refinement freed the scale from its first step: it does not wait.
  // (A run that holds the scale has nothing to wait for.)
  wait_for_the_rest(v.size() > older_state_size && v[older_state_size] != 0 && o_.free[1]);
}

void scan_refinement::remove_affine_part(double* steps, const rank_sum& sum) const {
  // Least squares of steps ≈ A n + b over every rank's positions (n is centred on the whole scan,
  // so b is their mean and A = (Σ s nᵀ)(Σ n nᵀ)⁻¹).
  constexpr std::size_t C = 10;  // Σ n nᵀ (3), Σ s nᵀ (4), Σ s (2), count
  const std::size_t count = n_.size() / 2;
  std::vector<double> terms(count * C);
  for (std::size_t j = 0; j < count; ++j) {
    const double n0 = n_[2 * j], n1 = n_[2 * j + 1], s0 = steps[2 * j], s1 = steps[2 * j + 1];
    double* t = terms.data() + j * C;
    t[0] = n0 * n0;
    t[1] = n0 * n1;
    t[2] = n1 * n1;
    t[3] = s0 * n0;
    t[4] = s0 * n1;
    t[5] = s1 * n0;
    t[6] = s1 * n1;
    t[7] = s0;
    t[8] = s1;
    t[9] = 1;
  }
  const std::vector<double> sums = exact_rank_sums(terms, C, sum);
  const double det = sums[0] * sums[2] - sums[1] * sums[1];
  if (!(sums[9] > 0) || !(std::abs(det) > 1e-12 * (sums[0] * sums[2] + 1e-300))) return;
  const double inv[2][2] = {{sums[2] / det, -sums[1] / det}, {-sums[1] / det, sums[0] / det}};
  const double A[2][2] = {{sums[3] * inv[0][0] + sums[4] * inv[1][0], sums[3] * inv[0][1] + sums[4] * inv[1][1]},
                          {sums[5] * inv[0][0] + sums[6] * inv[1][0], sums[5] * inv[0][1] + sums[6] * inv[1][1]}};
  const double b[2] = {sums[7] / sums[9], sums[8] / sums[9]};
  for (std::size_t j = 0; j < count; ++j)
    for (int a = 0; a < 2; ++a)
      steps[2 * j + std::size_t(a)] -= A[a][0] * n_[2 * j] + A[a][1] * n_[2 * j + 1] + b[a];
}

}  // namespace tycho
