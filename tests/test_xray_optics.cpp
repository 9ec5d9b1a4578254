// X-ray optics (docs/xray.md): the photon wavelength, the zone plate's annular pupil and the
// pinhole probe (sdk/optics.hpp), and how a run resolves [optics] radiation, the probe model and a
// far-field detector's reciprocal pixel from the config and the source (host/src/geometry/).
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/sdk/optics.hpp>

#include <toml++/toml.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../host/src/geometry/beam_optics.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::sdk::probe_optics;
using tycho::sdk::window_sampling;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

tycho_dataset_info blank_info() {
  tycho_dataset_info i{};
  i.struct_size = sizeof i;
  i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = i.energy_eV = i.semiangle_mrad = i.C10_A = nan;
  i.detector_distance_m = i.detector_pixel_m[0] = i.detector_pixel_m[1] = nan;
  return i;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const tycho::error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(XrayOptics, PhotonWavelengthIsHcOverE) {
  // hc = 12.39841984 keV·Å: 8 keV → 1.54980248 Å (Cu Kα1 is 1.5406 Å at 8.048 keV).
  EXPECT_NEAR(tycho::sdk::photon_wavelength_A(8000.0), 1.54980248, 1e-8);
  EXPECT_NEAR(tycho::sdk::photon_wavelength_A(8047.8), 1.54060, 1e-4);
  EXPECT_EQ(tycho::sdk::wavelength_A(8000.0, tycho::sdk::radiation::xray), tycho::sdk::photon_wavelength_A(8000.0));
  EXPECT_EQ(tycho::sdk::wavelength_A(80e3, tycho::sdk::radiation::electron), tycho::sdk::wavelength_A(80e3));
  EXPECT_NEAR(tycho::sdk::wavelength_A(80e3), 0.041757, 1e-6);  // unchanged for electrons
}

// The zone plate's pupil is an annulus: no intensity inside the central stop's radius, the
// aperture's outside; a central stop of 0 is the plain aperture, bit for bit.
TEST(XrayOptics, ZonePlatePupilIsAnAnnulus) {
  const double lambda = tycho::sdk::photon_wavelength_A(8200.0);
  probe_optics o;
  o.energy_eV = 8200.0;
  o.kind = tycho::sdk::radiation::xray;
  o.semiangle_mrad = 1.512;
  o.central_stop = 0.4;
  const int64_t n = 128;
  const double dk = 75e-6 / (1.2 * lambda);  // the bench/xray detector: p / (z λ)
  const window_sampling w{{n, n}, {dk, dk}};
  const auto probe = tycho::sdk::make_probe(o, w, 1.0);
  // Undo the centring, transform: the pupil in natural FFT order.
  std::vector<std::complex<double>> shifted(probe.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) shifted[std::size_t(i * n + j)] = probe[std::size_t(((i + n / 2) % n) * n + (j + n / 2) % n)];
  const auto pupil = tycho::sdk::dft2(shifted, n, n, false);
  const double k_out = o.semiangle_mrad * 1e-3 / lambda, k_in = 0.4 * k_out;
  double inside_stop = 0, annulus = 0, outside = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double k = std::hypot(double(i < n / 2 ? i : i - n), double(j < n / 2 ? j : j - n)) * dk;
      const double p = std::norm(pupil[std::size_t(i * n + j)]);
      if (k < k_in - 1.5 * dk) inside_stop += p;
      else if (k > k_in + 1.5 * dk && k < k_out - 1.5 * dk) annulus += p;
      else if (k > k_out + 1.5 * dk) outside += p;
    }
  EXPECT_GT(annulus, 0.75);  // the rest lies in the soft edges' bands, left out above
  EXPECT_LT(inside_stop, 1e-12);
  EXPECT_LT(outside, 1e-12);
  // No stop: the electron aperture's probe, bit for bit.
  probe_optics e{80e3, 25.0, -150.0};
  probe_optics e0 = e;
  e0.central_stop = 0.0;
  const window_sampling we{{96, 96}, {0.06, 0.06}};
  const auto a = tycho::sdk::make_probe(e, we, 1.0), b = tycho::sdk::make_probe(e0, we, 1.0);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])), 0);
}

// A pinhole at C10 = 0 is its own disc: flat inside, dark outside, centred in the window.
TEST(XrayOptics, PinholeInFocusIsItsDisc) {
  probe_optics o;
  o.energy_eV = 6200.0;
  o.kind = tycho::sdk::radiation::xray;
  o.model = tycho::sdk::probe_model::pinhole;
  o.pinhole_diameter_A = 40 * 100.0;  // 40 px of 100 Å
  const int64_t n = 96;
  const double dk = 1.0 / (n * 100.0);
  const auto p = tycho::sdk::make_probe(o, window_sampling{{n, n}, {dk, dk}}, 1.0);
  double in = 0, out = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double r = std::hypot(double(i - n / 2), double(j - n / 2));
      const double v = std::norm(p[std::size_t(i * n + j)]);
      if (r < 18) in += v;
      if (r > 22) out += v;
    }
  EXPECT_NEAR(in, (18.0 / 20) * (18.0 / 20), 0.01);  // flat: the area's share
  EXPECT_LT(out, 1e-6);
  // Propagated by ±20 µm: power kept, the beam's mean square radius grows, and a real disc gives
  // P(−z) = conj(P(z)), so the same intensity either way.
  const auto radius2 = [&](const std::vector<std::complex<float>>& v) {
    double r2 = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        r2 += (std::pow(double(i - n / 2), 2) + std::pow(double(j - n / 2), 2)) * std::norm(v[std::size_t(i * n + j)]);
    return r2;
  };
  o.C10_A = 20e4;
  const auto q = tycho::sdk::make_probe(o, window_sampling{{n, n}, {dk, dk}}, 1.0);
  o.C10_A = -20e4;
  const auto q_back = tycho::sdk::make_probe(o, window_sampling{{n, n}, {dk, dk}}, 1.0);
  double power = 0, differ = 0;
  for (std::size_t k = 0; k < q.size(); ++k) {
    power += std::norm(q[k]);
    differ = std::max(differ, double(std::abs(std::norm(q[k]) - std::norm(q_back[k]))));
  }
  EXPECT_NEAR(power, 1.0, 1e-6);
  EXPECT_GT(radius2(q), 1.01 * radius2(p));  // 196.47 → 199.88 px², as numpy computes it
  EXPECT_LT(differ, 1e-6);
}

TEST(XrayOptics, RadiationFromTheConfigElseTheFileElseElectrons) {
  tycho_dataset_info i = blank_info();
  const toml::table none, xray = toml::parse("radiation = 'xray'"), bad = toml::parse("radiation = 'neutron'");
  EXPECT_EQ(tycho::host::resolve_radiation(none, i, "d"), tycho::sdk::radiation::electron);
  EXPECT_EQ(tycho::host::resolve_radiation(xray, i, "d"), tycho::sdk::radiation::xray);
  i.radiation = TYCHO_RADIATION_XRAY;
  EXPECT_EQ(tycho::host::resolve_radiation(none, i, "d"), tycho::sdk::radiation::xray);
  // A source built before the field (struct_size 128): its bytes there are not read.
  i.struct_size = 128;
  EXPECT_EQ(tycho::host::resolve_radiation(none, i, "d"), tycho::sdk::radiation::electron);
  EXPECT_NE(error_of([&] { tycho::host::resolve_radiation(bad, i, "d"); }).find("\"electron\" or \"xray\""),
            std::string::npos);
}

TEST(XrayOptics, ProbeModelKeys) {
  const tycho_dataset_info i = blank_info();
  probe_optics o;
  o.energy_eV = 8200.0;
  tycho::host::resolve_probe_model(
      toml::parse("radiation = 'xray'\nzone_plate_diameter_m = 150e-6\nfocal_length_m = 0.0496\ncentral_stop = 0.4"), i,
      "d", o);
  EXPECT_EQ(o.kind, tycho::sdk::radiation::xray);
  EXPECT_NEAR(o.semiangle_mrad, 1e3 * 150e-6 / (2 * 0.0496), 1e-12);
  EXPECT_EQ(o.central_stop, 0.4);
  probe_optics p;
  p.energy_eV = 6200.0;
  tycho::host::resolve_probe_model(toml::parse("radiation = 'xray'\nprobe_model = 'pinhole'\npinhole_diameter_m = 5e-6"),
                                   i, "d", p);
  EXPECT_EQ(p.model, tycho::sdk::probe_model::pinhole);
  EXPECT_NEAR(p.pinhole_diameter_A, 5e4, 1e-9);
  EXPECT_NEAR(p.semiangle_mrad, 1e3 * 1.22 * tycho::sdk::photon_wavelength_A(6200.0) / 5e4, 1e-12);
  const auto refused = [&](const char* toml_text, const char* part) {
    probe_optics q;
    q.energy_eV = 8200.0;
    const std::string m = error_of([&] { tycho::host::resolve_probe_model(toml::parse(toml_text), i, "d", q); });
    EXPECT_NE(m.find(part), std::string::npos) << toml_text << " → " << m;
  };
  refused("semiangle_mrad = 1.5\nzone_plate_diameter_m = 1e-4\nfocal_length_m = 0.05", "give one");
  refused("zone_plate_diameter_m = 1e-4", "needs focal_length_m");
  refused("probe_model = 'pinhole'", "needs pinhole_diameter_m");
  refused("pinhole_diameter_m = 5e-6", "needs probe_model = \"pinhole\"");
  refused("central_stop = 1.0\nsemiangle_mrad = 1", "[0, 1)");
  refused("", "semiangle is not known");
}

// dk = p / (λ z) from the source's metres with the run's wavelength, or from [data]'s keys;
// [data] detector_pixel_invA first; the source's own dk last.
TEST(XrayOptics, FarFieldDetectorPixel) {
  tycho_dataset_info i = blank_info();
  const double lambda = tycho::sdk::photon_wavelength_A(8200.0);
  i.detector_distance_m = 1.2;
  i.detector_pixel_m[0] = 75e-6;
  i.detector_pixel_m[1] = 55e-6;
  const toml::table none;
  auto dk = tycho::host::resolve_detector_pixel_invA(none, i, "d", lambda);
  EXPECT_DOUBLE_EQ(dk[0], 75e-6 / (1.2 * lambda));
  EXPECT_DOUBLE_EQ(dk[1], 55e-6 / (1.2 * lambda));
  dk = tycho::host::resolve_detector_pixel_invA(toml::parse("detector_distance_m = 2.4"), i, "d", lambda);
  EXPECT_DOUBLE_EQ(dk[0], 75e-6 / (2.4 * lambda));
  dk = tycho::host::resolve_detector_pixel_invA(toml::parse("detector_pixel_invA = 0.01"), i, "d", lambda);
  EXPECT_EQ(dk[0], 0.01);
  EXPECT_EQ(dk[1], 0.01);
  // A source without the fields (struct_size 128): its own dk.
  i.struct_size = 128;
  i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = 0.002;
  dk = tycho::host::resolve_detector_pixel_invA(none, i, "d", lambda);
  EXPECT_EQ(dk[0], 0.002);
  // Neither: the keys named. Half a far field: the other half named.
  tycho_dataset_info empty = blank_info();
  EXPECT_NE(error_of([&] { tycho::host::resolve_detector_pixel_invA(none, empty, "d", lambda); }).find("detector_distance_m"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tycho::host::resolve_detector_pixel_invA(toml::parse("detector_distance_m = 1"), empty, "d", lambda); })
                .find("needs detector_pixel_size_m"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              tycho::host::resolve_detector_pixel_invA(toml::parse("detector_pixel_invA = 1\ndetector_distance_m = 1"),
                                                       empty, "d", lambda);
            }).find("give one"),
            std::string::npos);
}

// What the config alone decides is refused before any data is read, whatever a file could
// record; what a file could supply (a distance without its pixel) is left to the run.
TEST(XrayOptics, BeamSettingsCheckedWithoutTheData) {
  const toml::table none;
  EXPECT_NO_THROW(tycho::host::check_beam_settings(
      toml::parse("radiation = 'xray'\nzone_plate_diameter_m = 150e-6\nfocal_length_m = 0.0496\ncentral_stop = 0.4"),
      none));
  EXPECT_NO_THROW(tycho::host::check_beam_settings(none, toml::parse("detector_distance_m = 1.2")));
  const auto refused = [&](const char* optics, const char* data, const char* part) {
    const std::string m = error_of([&] { tycho::host::check_beam_settings(toml::parse(optics), toml::parse(data)); });
    EXPECT_NE(m.find(part), std::string::npos) << optics << " | " << data << " → " << m;
  };
  refused("radiation = 'neutron'", "", "\"electron\" or \"xray\"");
  refused("probe_model = 'disc'", "", "\"pinhole\"");
  refused("central_stop = 1.5", "", "[0, 1)");
  refused("zone_plate_diameter_m = 1e-4", "", "needs focal_length_m");
  refused("pinhole_diameter_m = 1e-6", "", "needs probe_model = \"pinhole\"");
  refused("", "detector_distance_m = -1", "must be > 0");
  refused("", "detector_pixel_invA = 0.01\ndetector_distance_m = 1", "give one");
}

// As a user meets it: `tycho reconstruct` refuses these keys, and a missing probe file, naming
// them before it reads a pattern (the shipped MoS2 example's data).
TEST(XrayOptics, RunRefusesBadBeamKeysBeforeReadingTheData) {
  tycho::test::temp_folder tmp;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"optics.radiation=\"neutron\"", "'radiation'"},
      {"optics.zone_plate_diameter_m=1e-4", "zone_plate_diameter_m needs focal_length_m"},
      {"reconstruct.probe.initial=\"no-such-probe.npy\"", "no-such-probe.npy"}};
  for (const auto& [set, part] : cases) {
    auto r = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct",
                                       tycho::test::source_dir() + "/examples/mos2.toml", "--set", set, "-o",
                                       tmp / "never.zip"});
    EXPECT_TRUE(r.exited && r.exit_code != 0) << r.describe();
    EXPECT_NE(r.err.find(part), std::string::npos) << set << "\n" << r.describe();
    EXPECT_EQ(r.err.find("patterns"), std::string::npos) << "read the data before refusing " << set << "\n" << r.describe();
    EXPECT_FALSE(std::filesystem::exists(tmp / "never.zip"));
  }
}

}  // namespace
