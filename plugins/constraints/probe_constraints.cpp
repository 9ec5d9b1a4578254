// The constraints on the probe: orthonormal modes, power, Fourier aperture.
#include <tycho/core/multislice.hpp>
#include <tycho/sdk/optics.hpp>

#include <cmath>
#include <complex>
#include <vector>

#include "constraints.hpp"

namespace tycho::constraints {

using namespace tycho::sdk;

probe_orthogonal_modes::probe_orthogonal_modes(const config_view&, const tycho_constraint_setup&) {}

void probe_orthogonal_modes::apply(const constraint_arguments& a) {
  const int64_t modes = a.probe->shape[0];
  if (modes <= 1) return;
  with_complex_values(*a.probe, [&](auto* p) {
    tycho::orthogonalize_probe_modes(p, modes, a.probe->shape[1] * a.probe->shape[2]);
  });
}

probe_power::probe_power(const config_view& cfg, const tycho_constraint_setup& setup) {
  const double relative = cfg.get_double("relative_power").value_or(1.0);
  if (!(relative > 0) || !std::isfinite(relative))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'relative_power' in ", cfg.table_name(), " must be > 0, got ", relative);
  if (!(setup.measured_power > 0) || !std::isfinite(setup.measured_power))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint 'probe_power': the measured power ", setup.measured_power,
         " is not a number > 0");
  target_ = relative * setup.measured_power;
}

void probe_power::apply(const constraint_arguments& a) {
  const int64_t n = element_count(*a.probe);
  with_complex_values(*a.probe, [&](auto* p) {
    using value = std::remove_pointer_t<decltype(p)>;
    double power = 0;
    for (int64_t k = 0; k < n; ++k) power += std::norm(std::complex<double>(p[k]));
    if (!(power > 0)) return;  // a probe of no power has no direction to scale
    const auto scale = typename value::value_type(std::sqrt(target_ / power));
    for (int64_t k = 0; k < n; ++k) p[k] *= scale;
  });
}

probe_aperture::probe_aperture(const config_view& cfg, const tycho_constraint_setup& setup) {
  const double factor = cfg.get_double("semiangle_factor").value_or(1.1);
  if (!(factor > 0) || !std::isfinite(factor))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'semiangle_factor' in ", cfg.table_name(), " must be > 0, got ", factor);
  if (!(setup.semiangle_mrad > 0) || !(setup.wavelength_A > 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "constraint 'probe_aperture': the semiangle (", setup.semiangle_mrad,
         " mrad) and wavelength (", setup.wavelength_A, " Å) must be > 0");
  k_cut_invA_ = factor * setup.semiangle_mrad * 1e-3 / setup.wavelength_A;
  pixel_A_[0] = setup.pixel_A[0];
  pixel_A_[1] = setup.pixel_A[1];
}

void probe_aperture::apply(const constraint_arguments& a) {
  const int64_t modes = a.probe->shape[0], n0 = a.probe->shape[1], n1 = a.probe->shape[2];
  const double dk0 = 1.0 / (double(n0) * pixel_A_[0]), dk1 = 1.0 / (double(n1) * pixel_A_[1]);
  auto freq = [](int64_t i, int64_t n) { return double(i < (n + 1) / 2 ? i : i - n); };
  std::vector<std::complex<double>> mode(std::size_t(n0 * n1));
  with_complex_values(*a.probe, [&](auto* p) {
    using value = std::remove_pointer_t<decltype(p)>;
    for (int64_t m = 0; m < modes; ++m) {
      value* q = p + m * n0 * n1;
      for (int64_t k = 0; k < n0 * n1; ++k) mode[std::size_t(k)] = std::complex<double>(q[k]);
      auto spectrum = dft2(mode, n0, n1, /*inverse=*/false);
      for (int64_t i = 0; i < n0; ++i)
        for (int64_t j = 0; j < n1; ++j) {
          const double k0 = freq(i, n0) * dk0, k1 = freq(j, n1) * dk1;
          if (k0 * k0 + k1 * k1 > k_cut_invA_ * k_cut_invA_) spectrum[std::size_t(i * n1 + j)] = 0.0;
        }
      const auto back = dft2(spectrum, n0, n1, /*inverse=*/true);
      for (int64_t k = 0; k < n0 * n1; ++k) q[k] = value(back[std::size_t(k)]);
    }
  });
}

}  // namespace tycho::constraints
