// The constraints on the object: amplitude range, pure phase, non-negative potential, Gaussian
// low-pass.
#include <tycho/core/accuracy.hpp>
#include <tycho/core/multislice.hpp>

#include <cmath>
#include <algorithm>
#include <complex>
#include <limits>
#include <string>
#include <vector>

#include "constraints.hpp"

namespace tycho::constraints {

using namespace tycho::sdk;

namespace {
double number(const config_view& cfg, const char* key, double fallback) {
  const double v = cfg.get_double(key).value_or(fallback);
  if (!std::isfinite(v)) fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in ", cfg.table_name(), " must be finite");
  return v;
}

// |z| ≤ hi and ≥ lo, in the object's own precision (the runtime's amplitude clamp of ABI 1.2,
// unchanged when lo = 0).
template <class Real>
void clamp_amplitude(std::complex<Real>* z, int64_t n, double lo, double hi) {
  const Real cap = Real(hi), floor = Real(lo);
  for (int64_t k = 0; k < n; ++k) {
    Real a = std::abs(z[k]);
    if (a > cap)
      z[k] *= cap / a;
    else if (a < floor)
      z[k] = a > Real(0) ? z[k] * (floor / a) : std::complex<Real>(floor);
  }
}

template <class Real>
void project_phase(std::complex<Real>* z, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const Real a = std::abs(z[k]);
    z[k] = a > Real(0) ? z[k] / a : std::complex<Real>(1);
  }
}
}  // namespace

object_amplitude::object_amplitude(const config_view& cfg, const tycho_constraint_setup&) {
  min_ = number(cfg, "min", 0.0);
  max_ = number(cfg, "max", 1.0);
  if (!(min_ >= 0) || !(max_ > 0) || !(min_ <= max_))
    fail(TYCHO_ERR_INVALID_ARGUMENT, cfg.table_name(), ": min = ", min_, " and max = ", max_,
         " must satisfy 0 <= min <= max and max > 0");
}

// Pointwise: only where the object changed (the batch's boxes when the run steps tiles).
void object_amplitude::apply(const constraint_arguments& a) {
  with_complex_values(*a.object, [&](auto* z) {
    a.for_each_object_run([&](int64_t at, int64_t n) { clamp_amplitude(z + at, n, min_, max_); });
  });
}

object_phase::object_phase(const config_view&, const tycho_constraint_setup&) {}

void object_phase::apply(const constraint_arguments& a) {
  with_complex_values(*a.object, [&](auto* z) {
    a.for_each_object_run([&](int64_t at, int64_t n) { project_phase(z + at, n); });
  });
}

object_potential::object_potential(const config_view& cfg, const tycho_constraint_setup& setup) {
  const std::string reference = cfg.get_string("reference").value_or("zero");
  if (reference != "zero" && reference != "minimum")
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'reference' in ", cfg.table_name(), " must be \"zero\" or \"minimum\", got \"",
         reference, "\"");
  subtract_minimum_ = reference == "minimum";
  if (setup.wavelength_A > 0 && std::isfinite(setup.wavelength_A)) {
    const double sigma = tycho::interaction_constant_rad_per_VA(setup.wavelength_A);
    log(TYCHO_LOG_INFO, "object_potential",
        cat("σ = ", sigma, " rad/(V·Å) at λ = ", setup.wavelength_A,
            " Å: each slice's projected potential is V = arg O / σ, in V·Å (1 rad = ", 1.0 / sigma, " V·Å)"));
  }
}

void object_potential::apply(const constraint_arguments& a) {
  const int64_t slices = a.object->shape[0], n = a.object->shape[1] * a.object->shape[2];
  with_complex_values(*a.object, [&](auto* z) {
    using value = std::remove_pointer_t<decltype(z)>;
    using real = typename value::value_type;
    for (int64_t s = 0; s < slices; ++s) {
      value* o = z + s * n;
      // arg in (−π, π]: a slice's phase is taken to lie in (−π, π) (thin slices), so a negative
      // one is a potential below the vacuum's, which V ≥ 0 does not allow.
      real floor = 0;
      if (subtract_minimum_) {
        floor = std::numeric_limits<real>::max();
        for (int64_t k = 0; k < n; ++k) floor = std::min(floor, std::arg(o[k]));
      }
      for (int64_t k = 0; k < n; ++k) o[k] = std::polar(real(1), std::max(std::arg(o[k]) - floor, real(0)));
    }
  });
}

object_lowpass::object_lowpass(const config_view& cfg, const tycho_constraint_setup& setup) {
  const double sigma_A = number(cfg, "sigma_A", 0.5);
  weight_ = number(cfg, "weight", 1.0);
  // At most 1 µm: far wider than any field of view a low-pass is for; the filter's cost and its
  // kernel grow with σ in pixels (1e5 Å ran for minutes per iteration and ignored SIGTERM).
  if (!(sigma_A > 0 && sigma_A <= 1e4))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'sigma_A' in ", cfg.table_name(), " must be in (0, 10000] (Å), got ",
         sigma_A);
  if (!(weight_ > 0 && weight_ <= 1))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'weight' in ", cfg.table_name(), " must be in (0, 1], got ", weight_);
  sigma_px_ = sigma_A / std::sqrt(setup.pixel_A[0] * setup.pixel_A[1]);
}

void object_lowpass::apply(const constraint_arguments& a) {
  const double weight = weight_ * regulariser_pull(a);
  if (weight == 0 || !a.last_batch()) return;  // once per iteration
  const int64_t slices = a.object->shape[0], h = a.object->shape[1], w = a.object->shape[2];
  std::vector<std::complex<double>> slice(std::size_t(h * w));
  with_complex_values(*a.object, [&](auto* z) {
    using value = std::remove_pointer_t<decltype(z)>;
    for (int64_t s = 0; s < slices; ++s) {
      value* o = z + s * h * w;
      for (int64_t k = 0; k < h * w; ++k) slice[std::size_t(k)] = std::complex<double>(o[k]);
      gaussian_filter_2d(slice.data(), h, w, sigma_px_, filter_boundary::reflect);
      for (int64_t k = 0; k < h * w; ++k)
        o[k] = value((1.0 - weight) * std::complex<double>(o[k]) + weight * slice[std::size_t(k)]);
    }
  });
}

}  // namespace tycho::constraints
