// The constraints on the probe: orthonormal modes, power, Fourier aperture, centring.
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
  // At most 1e6 times the measured power: 1e300 overflowed a float32 probe to inf, and the run
  // stopped blaming the learning rate.
  if (!(relative > 0 && relative <= 1e6))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'relative_power' in ", cfg.table_name(), " must be in (0, 1e6], got ",
         relative);
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

namespace {
constexpr double k_pi = 3.14159265358979323846;
double signed_frequency(int64_t i, int64_t n) { return double(i < (n + 1) / 2 ? i : i - n); }

// The centroid of a periodic intensity profile (n values): n/(2π)·arg Σ_i I_i e^{2πi·i/n}, in
// [0, n). For a profile well inside the window it is the ordinary centroid; a profile that
// wrapped across the edge is measured where it lies, not pulled to the middle.
double periodic_centroid(const std::vector<double>& profile) {
  const int64_t n = int64_t(profile.size());
  std::complex<double> first(0);
  for (int64_t i = 0; i < n; ++i) first += profile[std::size_t(i)] * std::polar(1.0, 2 * k_pi * double(i) / double(n));
  const double c = std::arg(first) / (2 * k_pi) * double(n);
  return c < 0 ? c + double(n) : c;
}

// x(r) ← x(r − s) on the periodic n0 × n1 grid: the spectrum times exp(−2πi (f0 s0/n0 + f1 s1/n1))
// (sub-pixel, exact for a band-limited x), in double precision whatever the tensor's.
template <class Value>
void fourier_shift(Value* x, int64_t n0, int64_t n1, const double s[2]) {
  std::vector<std::complex<double>> plane(std::size_t(n0 * n1));
  for (int64_t k = 0; k < n0 * n1; ++k) plane[std::size_t(k)] = std::complex<double>(x[k]);
  auto spectrum = dft2(plane, n0, n1, /*inverse=*/false);
  std::vector<std::complex<double>> ramp1(static_cast<std::size_t>(n1));
  for (int64_t j = 0; j < n1; ++j) ramp1[std::size_t(j)] = std::polar(1.0, -2 * k_pi * signed_frequency(j, n1) * s[1] / double(n1));
  for (int64_t i = 0; i < n0; ++i) {
    const auto ramp0 = std::polar(1.0, -2 * k_pi * signed_frequency(i, n0) * s[0] / double(n0));
    for (int64_t j = 0; j < n1; ++j) spectrum[std::size_t(i * n1 + j)] *= ramp0 * ramp1[std::size_t(j)];
  }
  plane = dft2(spectrum, n0, n1, /*inverse=*/true);
  for (int64_t k = 0; k < n0 * n1; ++k) x[k] = Value(plane[std::size_t(k)]);
}
}  // namespace

probe_centre::probe_centre(const config_view& cfg, const tycho_constraint_setup& setup) {
  tolerance_A_ = cfg.get_double("tolerance_A").value_or(0.01);
  if (!(tolerance_A_ >= 0) || !std::isfinite(tolerance_A_))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'tolerance_A' in ", cfg.table_name(), " must be >= 0 (Å), got ", tolerance_A_);
  shift_object_ = cfg.get_bool("shift_object").value_or(true);
  pixel_A_[0] = setup.pixel_A[0];
  pixel_A_[1] = setup.pixel_A[1];
}

void probe_centre::apply(const constraint_arguments& a) {
  const int64_t modes = a.probe->shape[0], n0 = a.probe->shape[1], n1 = a.probe->shape[2];
  double shift[2] = {0, 0}, power = 0;
  with_complex_values(*a.probe, [&](auto* p) {
    std::vector<double> along0(std::size_t(n0), 0.0), along1(std::size_t(n1), 0.0);
    for (int64_t m = 0; m < modes; ++m)
      for (int64_t i = 0; i < n0; ++i)
        for (int64_t j = 0; j < n1; ++j) {
          const double v = std::norm(std::complex<double>(p[(m * n0 + i) * n1 + j]));
          along0[std::size_t(i)] += v;
          along1[std::size_t(j)] += v;
          power += v;
        }
    const int64_t n[2] = {n0, n1};
    const std::vector<double>* profile[2] = {&along0, &along1};
    for (int axis = 0; axis < 2; ++axis) {
      double off = periodic_centroid(*profile[axis]) - double(n[axis] / 2);  // the centre: index ⌊N/2⌋
      if (off >= double(n[axis]) / 2) off -= double(n[axis]);                 // the nearer way round
      if (off < -double(n[axis]) / 2) off += double(n[axis]);
      shift[axis] = -off;
    }
  });
  if (!(power > 0) || !std::isfinite(power)) return;  // a probe of no power has no centroid
  if (std::hypot(shift[0] * pixel_A_[0], shift[1] * pixel_A_[1]) <= tolerance_A_) return;
  with_complex_values(*a.probe, [&](auto* p) {
    for (int64_t m = 0; m < modes; ++m) fourier_shift(p + m * n0 * n1, n0, n1, shift);
  });
  if (!shift_object_) return;
  // P(r) → P(r − s) and O(x) → O(x − s) make every exit wave P(r − s)·O(r − s + R) = ψ(r − s):
  // a translation of the exit wave, which the diffraction intensities do not see (nor does the
  // Fresnel propagation between slices, which commutes with it). Equivalently the scan positions
  // move by −s; the object is shifted instead so the positions stay the data's.
  const int64_t slices = a.object->shape[0], h = a.object->shape[1], w = a.object->shape[2];
  with_complex_values(*a.object, [&](auto* o) {
    for (int64_t s = 0; s < slices; ++s) fourier_shift(o + s * h * w, h, w, shift);
  });
}

}  // namespace tycho::constraints
