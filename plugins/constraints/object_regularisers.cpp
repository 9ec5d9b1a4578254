// The regularisers of the object applied once per iteration: total variation within each slice
// and a low-pass along the slices (depth).
#include <fftw3.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <cmath>
#include <complex>
#include <vector>

#include "constraints.hpp"
#include <tycho/sdk/optics.hpp>

namespace tycho::constraints {

namespace {
// One in-place 3-D transform (FFTW, double, unnormalised), planned under FFTW's thread-safe
// planner (the cpu engine and the SDK's probe make the same call).
void transform_3d(std::vector<std::complex<double>>& v, int64_t n0, int64_t n1, int64_t n2, bool inverse) {
  static std::once_flag thread_safe;
  std::call_once(thread_safe, [] { fftw_make_planner_thread_safe(); });
  fftw_plan p = fftw_plan_dft_3d(int(n0), int(n1), int(n2), reinterpret_cast<fftw_complex*>(v.data()),
                                 reinterpret_cast<fftw_complex*>(v.data()), inverse ? FFTW_BACKWARD : FFTW_FORWARD,
                                 FFTW_ESTIMATE);
  if (p == nullptr) tycho::sdk::fail(TYCHO_ERR_OUT_OF_MEMORY, "object_missing_cone: FFTW could not plan a ", n0, " x ", n1, " x ", n2,
                         " transform");
  fftw_execute(p);
  fftw_destroy_plan(p);
}
}  // namespace


using namespace tycho::sdk;

namespace {
using cd = std::complex<double>;

// The proximal map of λ·TV on one h × w complex image, in place: u = argmin ½‖u − f‖² + λ TV(u),
// TV(u) = Σ sqrt(|∂₀u|² + |∂₁u|²) with forward differences (0 across the last row and column:
// Neumann edges). Chambolle's dual iteration (J. Math. Imaging Vis. 20, 89 (2004), eq. 9 and
// Theorem 3.1: τ ≤ 1/8 converges), the two real channels of the complex values sharing one
// dual norm (the vectorial TV of Bresson & Chan 2008): p ← (p + τ∇g)/(1 + τ|∇g|),
// g = div p − f/λ; then u = f − λ div p.
void tv_prox(cd* f, int64_t h, int64_t w, double lambda, int64_t iterations) {
  const std::size_t n = std::size_t(h * w);
  std::vector<cd> p0(n, 0.0), p1(n, 0.0), g(n);
  auto divergence = [&](std::vector<cd>& out) {
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        const std::size_t k = std::size_t(i * w + j);
        cd d0 = i < h - 1 ? p0[k] : cd(0), d1 = j < w - 1 ? p1[k] : cd(0);
        if (i > 0) d0 -= p0[k - std::size_t(w)];
        if (j > 0) d1 -= p1[k - 1];
        out[k] = d0 + d1;
      }
  };
  constexpr double tau = 0.125;
  for (int64_t it = 0; it < iterations; ++it) {
    divergence(g);
    for (std::size_t k = 0; k < n; ++k) g[k] -= f[k] / lambda;
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        const std::size_t k = std::size_t(i * w + j);
        const cd a = i < h - 1 ? g[k + std::size_t(w)] - g[k] : cd(0);
        const cd b = j < w - 1 ? g[k + 1] - g[k] : cd(0);
        const double scale = 1.0 + tau * std::sqrt(std::norm(a) + std::norm(b));
        p0[k] = (p0[k] + tau * a) / scale;
        p1[k] = (p1[k] + tau * b) / scale;
      }
  }
  divergence(g);
  for (std::size_t k = 0; k < n; ++k) f[k] -= lambda * g[k];
}

// Mirror index of t on 0..n−1 (… 1 0 | 0 1 … n−1 | n−1 n−2 …), periodic with 2n: the extension
// under which the DCT-II's cosines, cos(π k (s + ½)/n), are the eigenvectors of a symmetric
// filter (gain Σ_j g_j cos(π k j / n) for mode k).
int64_t mirror(int64_t t, int64_t n) {
  t %= 2 * n;
  if (t < 0) t += 2 * n;
  return t < n ? t : 2 * n - 1 - t;
}
}  // namespace

object_tv::object_tv(const config_view& cfg, const tycho_constraint_setup&) {
  weight_ = cfg.get_double("weight").value_or(0.001);
  iterations_ = cfg.get_int("iterations").value_or(20);
  if (!(weight_ >= 0) || !std::isfinite(weight_))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'weight' in ", cfg.table_name(), " must be >= 0, got ", weight_);
  if (iterations_ < 1 || iterations_ > 1000)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'iterations' in ", cfg.table_name(), " must be in [1, 1000], got ",
         iterations_);
}

void object_tv::apply(const constraint_arguments& a) {
  const double weight = weight_ * regulariser_pull(a);
  if (weight == 0 || !a.last_batch()) return;  // weight 0: nothing at all; else once per iteration
  const int64_t slices = a.object->shape[0], h = a.object->shape[1], w = a.object->shape[2];
  std::vector<cd> slice(std::size_t(h * w));
  with_complex_values(*a.object, [&](auto* z) {
    using value = std::remove_pointer_t<decltype(z)>;
    for (int64_t s = 0; s < slices; ++s) {
      value* o = z + s * h * w;
      for (int64_t k = 0; k < h * w; ++k) slice[std::size_t(k)] = cd(o[k]);
      tv_prox(slice.data(), h, w, weight, iterations_);
      for (int64_t k = 0; k < h * w; ++k) o[k] = value(slice[std::size_t(k)]);
    }
  });
}

object_depth::object_depth(const config_view& cfg, const tycho_constraint_setup& setup) {
  const double sigma_A = cfg.get_double("sigma_A").value_or(5.0);
  weight_ = cfg.get_double("weight").value_or(1.0);
  if (!(sigma_A > 0) || !std::isfinite(sigma_A))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'sigma_A' in ", cfg.table_name(), " must be > 0 (Å), got ", sigma_A);
  if (!(weight_ > 0 && weight_ <= 1))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'weight' in ", cfg.table_name(), " must be in (0, 1], got ", weight_);
  if (!(setup.slice_thickness_A > 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, cfg.table_name(),
         ": constraint 'object_depth' smooths along the slices, and this run has one slice; leave it out, or set "
         "[reconstruct] slices > 1");
  sigma_slices_ = sigma_A / setup.slice_thickness_A;
}

void object_depth::apply(const constraint_arguments& a) {
  const double weight = weight_ * regulariser_pull(a);
  if (weight == 0 || !a.last_batch()) return;  // once per iteration
  const int64_t slices = a.object->shape[0], n = a.object->shape[1] * a.object->shape[2];
  if (slices < 2) return;
  // Taps g_j ∝ exp(−j²/2σ²) out to 4σ (or the mirrored stack's period), normalised to 1.
  // The reach is bounded in double before the conversion: sigma_A / slice_thickness_A may be
  // 1e300 (undefined as int64). The centre tap is 1 whatever σ (σ² = 0 made it 0 / 0 = NaN).
  const int64_t reach = int64_t(std::min(std::ceil(4 * sigma_slices_), double(2 * slices)));
  std::vector<double> taps(std::size_t(2 * reach + 1));
  double total = 0;
  for (int64_t j = -reach; j <= reach; ++j)
    total += taps[std::size_t(j + reach)] =
        j == 0 ? 1.0 : std::exp(-0.5 * double(j * j) / (sigma_slices_ * sigma_slices_));
  for (double& t : taps) t /= total;
  std::vector<cd> logs(static_cast<std::size_t>(slices)), smooth(static_cast<std::size_t>(slices));
  with_complex_values(*a.object, [&](auto* z) {
    using value = std::remove_pointer_t<decltype(z)>;
    for (int64_t k = 0; k < n; ++k) {
      // ln O = ln|O| + i arg O, arg in (−π, π] (a thin slice's phase lies well inside); |O| = 0
      // is taken as 1e-12, so a hole stays a hole rather than a NaN.
      for (int64_t s = 0; s < slices; ++s) {
        const cd o(z[s * n + k]);
        logs[std::size_t(s)] = cd(std::log(std::max(std::abs(o), 1e-12)), std::arg(o));
      }
      for (int64_t s = 0; s < slices; ++s) {
        cd acc = 0;
        for (int64_t j = -reach; j <= reach; ++j) acc += taps[std::size_t(j + reach)] * logs[std::size_t(mirror(s + j, slices))];
        smooth[std::size_t(s)] = (1.0 - weight) * logs[std::size_t(s)] + weight * acc;
      }
      for (int64_t s = 0; s < slices; ++s) z[s * n + k] = value(std::exp(smooth[std::size_t(s)]));
    }
  });
}

object_missing_cone::object_missing_cone(const config_view& cfg, const tycho_constraint_setup& setup) {
  const std::optional<double> gamma = cfg.get_double("gamma");
  if (gamma && (!(*gamma > 0) || !std::isfinite(*gamma) || *gamma > 100))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'gamma' in ", cfg.table_name(), " must be in (0, 100], got ", *gamma);
  if (!(setup.slice_thickness_A > 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, cfg.table_name(),
         ": constraint 'object_missing_cone' filters along the slices, and this run has one slice; leave it out, or ",
         "set [reconstruct] slices > 1");
  if (!(setup.wavelength_A > 0) || !(setup.semiangle_mrad > 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, cfg.table_name(), ": constraint 'object_missing_cone' needs the wavelength and ",
         "the aperture's semiangle");
  alpha_rad_ = setup.semiangle_mrad * 1e-3;
  wavelength_A_ = setup.wavelength_A;
  slice_A_ = setup.slice_thickness_A;
  pixel_A_[0] = setup.pixel_A[0];
  pixel_A_[1] = setup.pixel_A[1];
  if (!(pixel_A_[0] > 0) || !(pixel_A_[1] > 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, cfg.table_name(), ": constraint 'object_missing_cone' needs the object's pixel");
  // The detector's largest angle (the window's Nyquist frequency, the coarser axis's) over the
  // aperture's: the band of every interference the patterns record.
  gamma_ = gamma ? *gamma : std::max(1.0, wavelength_A_ / (2 * std::max(pixel_A_[0], pixel_A_[1])) / alpha_rad_);
}

void object_missing_cone::apply(const constraint_arguments& a) {
  const double pull = regulariser_pull(a);
  if (pull == 0 || !a.last_batch()) return;  // once per iteration
  const int64_t S = a.object->shape[0], H = a.object->shape[1], W = a.object->shape[2];
  if (S < 2) return;
  const int64_t Z = 2 * S, n = H * W;  // the depth mirrored: slices 0 … S−1, S−1 … 0
  std::vector<cd> volume(std::size_t(Z * n));
  with_complex_values(*a.object, [&](auto* z) {
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < n; ++k) {
        const cd o(z[s * n + k]);
        const cd l(std::log(std::max(std::abs(o), 1e-12)), std::arg(o));
        volume[std::size_t(s * n + k)] = l;
        volume[std::size_t((Z - 1 - s) * n + k)] = l;
      }
  });
  transform_3d(volume, Z, H, W, /*inverse=*/false);
  const double kz_step = 1.0 / (double(Z) * slice_A_), ky_step = 1.0 / (double(H) * pixel_A_[0]),
               kx_step = 1.0 / (double(W) * pixel_A_[1]);
  const double band_end = 2 * alpha_rad_ / wavelength_A_;
  for (int64_t iz = 0; iz < Z; ++iz) {
    const double kz = std::abs(tycho::sdk::detail::freq(iz, Z)) * kz_step;
    for (int64_t iy = 0; iy < H; ++iy) {
      const double ky = tycho::sdk::detail::freq(iy, H) * ky_step;
      for (int64_t ix = 0; ix < W; ++ix) {
        if (iz == 0) continue;  // the mean over the depth: kept
        const double kx = tycho::sdk::detail::freq(ix, W) * kx_step, kr = std::hypot(kx, ky);
        const double b = kr < band_end ? gamma_ * kr * (alpha_rad_ - 0.5 * wavelength_A_ * kr) : 0.0;
        const double w = 1.0 - pull * (1.0 - (b > 0 ? 1.0 / (1.0 + std::pow(kz / b, 4)) : 0.0));
        volume[std::size_t((iz * H + iy) * W + ix)] *= w;
      }
    }
  }
  transform_3d(volume, Z, H, W, /*inverse=*/true);
  const double norm = 1.0 / double(Z * n);
  with_complex_values(*a.object, [&](auto* z) {
    using value = std::remove_pointer_t<decltype(z)>;
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < n; ++k) z[s * n + k] = value(std::exp(volume[std::size_t(s * n + k)] * norm));
  });
}

}  // namespace tycho::constraints
