// The preprocessing stage ([preprocess] com_fit, recentre, scan_rotation_deg, scan_transpose,
// crop_detector, binning, normalise; host/src/data/preprocess.cpp), prepared files (`tycho preprocess`,
// `tycho reconstruct --from prepared.zip`; host/src/data/prepared.cpp) and the SHA-256 they record.
// Synthetic patterns check the arithmetic; the MoS2 counts check the rotation estimate, the
// binning refusal and the round trip through a self-contained prepared file.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/host/preprocess.hpp>
#include <tycho/host/result_record.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "../host/src/data/sha256.hpp"
#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
namespace th = tycho::host;
using tycho::test::command_result;
using tycho::test::run_command;

namespace {

constexpr double pi = 3.14159265358979323846;

tycho::config_document config(const std::string& text) { return tycho::config_document::parse(text, "<test>", ""); }

// A dataset of rx x ry patterns of n0 x n1 pixels: value(j, f0, f1) at frequency (f0, f1) of
// pattern j (f = centred index − ⌊n/2⌋), stored in FFT order as read_dataset leaves it.
th::dataset make_dataset(int64_t rx, int64_t ry, int64_t n0, int64_t n1,
                         const std::function<double(int64_t, int64_t, int64_t)>& value) {
  th::dataset d;
  d.info.struct_size = sizeof d.info;
  d.info.scan_shape[0] = rx;
  d.info.scan_shape[1] = ry;
  d.info.detector_shape[0] = n0;
  d.info.detector_shape[1] = n1;
  for (int a = 0; a < 2; ++a) d.info.scan_step_A[a] = d.info.detector_pixel_invA[a] = NAN;
  d.info.energy_eV = d.info.semiangle_mrad = d.info.C10_A = NAN;
  d.info.patterns_centred = 1;
  d.all_patterns = d.patterns = rx * ry;
  d.n0 = n0;
  d.n1 = n1;
  d.targets.resize(std::size_t(d.patterns * n0 * n1));
  std::vector<float> centred(std::size_t(n0 * n1));
  for (int64_t j = 0; j < d.patterns; ++j) {
    for (int64_t c0 = 0; c0 < n0; ++c0)
      for (int64_t c1 = 0; c1 < n1; ++c1)
        centred[std::size_t(c0 * n1 + c1)] = float(value(j, c0 - n0 / 2, c1 - n1 / 2));
    th::ifftshift_pattern(centred.data(), d.targets.data() + j * n0 * n1, n0, n1);
  }
  th::recompute_totals(d);
  return d;
}

// Pattern j of `d`, centred.
std::vector<float> centred_pattern(const th::dataset& d, int64_t j) {
  std::vector<float> out(std::size_t(d.n0 * d.n1));
  th::fftshift_pattern(d.targets.data() + j * d.n0 * d.n1, out.data(), d.n0, d.n1);
  return out;
}

// A recognisable label of a frequency: 1000 (f0 + 500) + (f1 + 500).
double label(int64_t f0, int64_t f1) { return 1000.0 * double(f0 + 500) + double(f1 + 500); }

double gaussian(double f0, double f1, double x0, double x1, double sigma = 2.0) {
  return 1000.0 * std::exp(-((f0 - x0) * (f0 - x0) + (f1 - x1) * (f1 - x1)) / (2 * sigma * sigma));
}

// ---------------------------------------------------------------- settings

TEST(Preprocess, DefaultsDoNothing) {
  auto d = make_dataset(3, 2, 8, 6, [](int64_t j, int64_t f0, int64_t f1) { return label(f0, f1) + j; });
  const auto before = d.targets;
  const double total = d.total_intensity;
  auto rep = th::preprocess_dataset(d, config("[preprocess]\nobject_padding_px = 4\n"), th::sum_on_one_rank);
  EXPECT_FALSE(rep.active);
  EXPECT_EQ(rep.to_json(), "");
  EXPECT_TRUE(d.targets == before);
  EXPECT_EQ(d.total_intensity, total);
}

TEST(Preprocess, SettingsRefused) {
  auto read = [](const std::string& text) { return th::read_preprocess_settings(config(text).table_at("preprocess"), "<test>"); };
  EXPECT_THROW(read("[preprocess]\ncom_fit = \"cubic\"\n"), tycho::error);
  EXPECT_THROW(read("[preprocess]\nrecentre = true\n"), tycho::error);  // needs a fit
  EXPECT_THROW(read("[preprocess]\nbinning = 0\n"), tycho::error);
  EXPECT_THROW(read("[preprocess]\ncrop_detector = [4]\n"), tycho::error);
  EXPECT_THROW(read("[preprocess]\nscan_transpose = \"auto\"\n"), tycho::error);  // only with rotation "auto"
  EXPECT_THROW(read("[preprocess]\nscan_rotation_deg = \"sideways\"\n"), tycho::error);
  EXPECT_THROW(read("[preprocess]\nscan_rotation_deg = nan\n"), tycho::error);
  EXPECT_EQ(read("[preprocess]\nscan_rotation_deg = 37.5\n").rotation_deg, 37.5);  // any angle: the positions turn
  const auto s = read("[preprocess]\nscan_rotation_deg = \"auto\"\ncom_fit = \"plane\"\nrecentre = true\n");
  EXPECT_TRUE(s.rotation_auto);
  EXPECT_TRUE(s.transpose_auto);
  EXPECT_EQ(read("[preprocess]\nscan_rotation_deg = -270\n").rotation_deg, -270.0);
  // scan_scale: "stated" (the default), "lattice", which measures the map with the rotation, or
  // "auto", the lattice where nothing else fixes the scale (with a stated rotation: the stated map).
  EXPECT_TRUE(read("[preprocess]\n").scale_auto);  // the default
  EXPECT_FALSE(read("[preprocess]\nscan_scale = \"stated\"\n").scale_from_lattice);
  EXPECT_TRUE(read("[preprocess]\nscan_scale = \"lattice\"\n").scale_from_lattice);
  EXPECT_FALSE(read("[preprocess]\nscan_scale = \"lattice\"\n").scale_auto);
  EXPECT_TRUE(read("[preprocess]\nscan_scale = \"auto\"\n").scale_auto);
  EXPECT_TRUE(read("[preprocess]\nscan_scale = \"auto\"\n").scale_from_lattice);
  EXPECT_FALSE(read("[preprocess]\nscan_rotation_deg = 10\nscan_scale = \"auto\"\n").scale_from_lattice);
  auto refusal = [&](const std::string& text) {
    try {
      read(text);
    } catch (const tycho::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refusal("[preprocess]\nscan_scale = \"crystal\"\n").find("scan_scale"), std::string::npos);
  EXPECT_NE(refusal("[preprocess]\nscan_scale = 1.02\n").find("scan_scale"), std::string::npos);
  EXPECT_NE(refusal("[preprocess]\nscan_rotation_deg = 10\nscan_scale = \"lattice\"\n").find("scan_rotation_deg"),
            std::string::npos);
  // scan_geometry_search: "auto" (the default: where nothing measured the geometry), true (with the
  // rotation "auto"), false; its step 1-90 degrees, its iterations 4-100000.
  using search = th::preprocess_settings::search_mode;
  EXPECT_EQ(read("[preprocess]\n").geometry_search, search::fallback);
  EXPECT_EQ(read("[preprocess]\nscan_geometry_search = true\n").geometry_search, search::always);
  EXPECT_EQ(read("[preprocess]\nscan_geometry_search = false\n").geometry_search, search::never);
  EXPECT_EQ(read("[preprocess]\n").geometry_search_step_deg, 20.0);
  EXPECT_EQ(read("[preprocess]\n").geometry_search_iterations, 200);
  for (const char* bad : {"scan_geometry_search = \"yes\"", "scan_geometry_search = 1", "scan_geometry_search_step_deg = 0",
                          "scan_geometry_search_step_deg = 91", "scan_geometry_search_step_deg = nan",
                          "scan_geometry_search_step_deg = \"20\"", "scan_geometry_search_iterations = 3",
                          "scan_geometry_search_iterations = 100001", "scan_geometry_search_iterations = 2.5"})
    EXPECT_NE(refusal(std::string("[preprocess]\n") + bad + "\n").find(std::string(bad).substr(0, std::string(bad).find(' '))),
              std::string::npos)
        << bad;
  EXPECT_NE(refusal("[preprocess]\nscan_rotation_deg = 10\nscan_geometry_search = true\n").find("scan_rotation_deg"),
            std::string::npos);
}

// ---------------------------------------------------------------- centre of mass and its fit

TEST(Preprocess, CentreOfMassOfAShiftedPattern) {
  // One spot 2.25 px down and 1.5 px left of the centre, the same in every pattern.
  auto d = make_dataset(2, 2, 32, 32, [](int64_t, int64_t f0, int64_t f1) { return gaussian(f0, f1, 2.25, -1.5); });
  auto rep = th::preprocess_dataset(d, config("[preprocess]\ncom_fit = \"constant\"\n"), th::sum_on_one_rank);
  ASSERT_EQ(rep.com.size(), 8u);
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_NEAR(rep.com[std::size_t(2 * j)], 2.25, 1e-6);
    EXPECT_NEAR(rep.com[std::size_t(2 * j + 1)], -1.5, 1e-6);
  }
  EXPECT_NEAR(rep.fit.coefficients[0][0], 2.25, 1e-6);
  EXPECT_NEAR(rep.fit.coefficients[1][0], -1.5, 1e-6);
  EXPECT_EQ(rep.fit.coefficients[0][1], 0.0);
  EXPECT_NEAR(rep.fit.rms_residual[0], 0.0, 1e-6);
}

TEST(Preprocess, PlaneFitRecoversItsCoefficients) {
  // COM = a + b i + c k per axis, plus ±0.01 px of noise that averages out in the fit.
  const int64_t rx = 7, ry = 5;
  const double a0 = 0.5, b0 = 0.1, c0 = -0.2, a1 = -1.0, b1 = 0.05, c1 = 0.3;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> noise(-0.01, 0.01);
  std::vector<double> com;
  for (int64_t i = 0; i < rx; ++i)
    for (int64_t k = 0; k < ry; ++k) {
      com.push_back(a0 + b0 * i + c0 * k);
      com.push_back(a1 + b1 * i + c1 * k);
    }
  auto exact = th::solve_com_fit(th::com_sums(com, 0, ry), th::com_fit_kind::plane);
  EXPECT_NEAR(exact.coefficients[0][0], a0, 1e-12);
  EXPECT_NEAR(exact.coefficients[0][1], b0, 1e-12);
  EXPECT_NEAR(exact.coefficients[0][2], c0, 1e-12);
  EXPECT_NEAR(exact.coefficients[1][0], a1, 1e-12);
  EXPECT_NEAR(exact.coefficients[1][1], b1, 1e-12);
  EXPECT_NEAR(exact.coefficients[1][2], c1, 1e-12);
  EXPECT_NEAR(exact.rms_residual[0], 0.0, 1e-6);

  for (auto& v : com) v += noise(rng);
  // Two "ranks" holding patterns [0, 12) and [12, 35): their sums added equal the whole's.
  const std::vector<double> first(com.begin(), com.begin() + 24), second(com.begin() + 24, com.end());
  auto s1 = th::com_sums(first, 0, ry), s2 = th::com_sums(second, 12, ry), all = th::com_sums(com, 0, ry);
  for (int n = 0; n < th::com_fit_sums::size; ++n) {
    s1.s[std::size_t(n)] += s2.s[std::size_t(n)];
    EXPECT_NEAR(s1.s[std::size_t(n)], all.s[std::size_t(n)], 1e-9 * (1 + std::abs(all.s[std::size_t(n)])));
  }
  auto noisy = th::solve_com_fit(s1, th::com_fit_kind::plane);
  EXPECT_NEAR(noisy.coefficients[0][1], b0, 0.005);
  EXPECT_NEAR(noisy.coefficients[1][2], c1, 0.005);
  EXPECT_GT(noisy.rms_residual[0], 0.001);
  EXPECT_LT(noisy.rms_residual[0], 0.01);
}

TEST(Preprocess, PlaneFitAndRecentreOnPatterns) {
  // Spots drifting across the scan (a descan): centre (0.4 + 0.3 i − 0.25 k, −0.6 − 0.2 i + 0.45 k).
  const int64_t rx = 6, ry = 5;
  auto centre = [&](int64_t j, int axis) {
    const double i = double(j / ry), k = double(j % ry);
    return axis == 0 ? 0.4 + 0.3 * i - 0.25 * k : -0.6 - 0.2 * i + 0.45 * k;
  };
  auto d = make_dataset(rx, ry, 40, 36, [&](int64_t j, int64_t f0, int64_t f1) {
    return gaussian(f0, f1, centre(j, 0), centre(j, 1));
  });
  auto rep = th::preprocess_dataset(d, config("[preprocess]\ncom_fit = \"plane\"\nrecentre = true\n"),
                                    th::sum_on_one_rank);
  EXPECT_NEAR(rep.fit.coefficients[0][0], 0.4, 1e-6);
  EXPECT_NEAR(rep.fit.coefficients[0][1], 0.3, 1e-6);
  EXPECT_NEAR(rep.fit.coefficients[0][2], -0.25, 1e-6);
  EXPECT_NEAR(rep.fit.coefficients[1][0], -0.6, 1e-6);
  EXPECT_NEAR(rep.fit.coefficients[1][1], -0.2, 1e-6);
  EXPECT_NEAR(rep.fit.coefficients[1][2], 0.45, 1e-6);
  // Recentred by whole pixels: what is left of each centre is its distance to the nearest pixel.
  auto again = th::preprocess_dataset(d, config("[preprocess]\ncom_fit = \"constant\"\n"), th::sum_on_one_rank);
  for (int64_t j = 0; j < rx * ry; ++j)
    for (int a = 0; a < 2; ++a)
      EXPECT_NEAR(again.com[std::size_t(2 * j + a)], centre(j, a) - std::round(centre(j, a)), 1e-6) << j << " " << a;
  EXPECT_EQ(rep.shift_range[0][0], -1);  // round(0.4 + 0 − 1.0)
  EXPECT_EQ(rep.shift_range[0][1], 2);   // round(0.4 + 1.5)
  const auto json = nlohmann::json::parse(rep.to_json());
  EXPECT_EQ(json.at("com_fit"), "plane");
  EXPECT_TRUE(json.contains("com_fit_coefficients"));
}

// ---------------------------------------------------------------- scan rotation

// The COM field of a potential φ (a gradient: no curl), measured in detector axes rotated by θ
// and transposed: c = T R(−θ) ∇φ. The estimate recovers θ and T. ∇φ by central differences, whose
// discrete curl (central differences again) is exactly 0.
std::vector<double> rotated_gradient_field(int64_t rx, int64_t ry, double deg, bool transpose) {
  std::vector<double> com;
  const double t = deg * pi / 180;
  auto phi = [](double i, double k) { return std::sin(0.7 * i + 0.3) * std::cos(0.5 * k) + 0.5 * std::cos(0.4 * i - 0.9 * k); };
  for (int64_t i = 0; i < rx; ++i)
    for (int64_t k = 0; k < ry; ++k) {
      const double g0 = 0.5 * (phi(i + 1, k) - phi(i - 1, k)), g1 = 0.5 * (phi(i, k + 1) - phi(i, k - 1));
      double a = std::cos(t) * g0 + std::sin(t) * g1, b = -std::sin(t) * g0 + std::cos(t) * g1;
      if (transpose) std::swap(a, b);
      com.push_back(a);
      com.push_back(b);
    }
  return com;
}

TEST(Preprocess, RotationEstimateOfASyntheticField) {
  for (auto [deg, transpose] : {std::pair{17.3, false}, std::pair{-62.0, true}, std::pair{0.0, false}}) {
    const auto com = rotated_gradient_field(24, 20, deg, transpose);
    const auto e = th::estimate_scan_rotation(com, 24, 20, -1);
    EXPECT_NEAR(e.deg, deg, 0.1) << deg;
    EXPECT_EQ(e.transpose, transpose) << deg;
    EXPECT_LT(e.curl, 0.2 * e.curl_other) << deg;
    EXPECT_GT(e.contrast(), 0.9) << deg;  // noise-free: the curl vanishes at the estimate
    // θ + 180° measures −c: the same curl, the estimate stays in (−90°, 90°].
    const auto flipped = th::estimate_scan_rotation(rotated_gradient_field(24, 20, deg + 180, transpose), 24, 20, -1);
    EXPECT_NEAR(flipped.deg, deg, 0.1) << deg;
  }
  const auto given = th::estimate_scan_rotation(rotated_gradient_field(24, 20, 30, false), 24, 20, 0);
  EXPECT_NEAR(given.deg, 30, 0.1);
  EXPECT_TRUE(std::isnan(given.curl_other));
}

// The estimate's standard error against its scatter: the field of RotationEstimateOfASyntheticField
// (turned 17.3°) with Gaussian noise on every COM, 200 draws. The reported error is that of a
// least-squares fit with independent residuals; the estimate minimises the mean |curl| (less
// efficient than least squares by about √(π/2) for Gaussian noise) and neighbouring curls share
// differences, so the scatter may exceed it somewhat, but not by 2x, and never fall far below it.
TEST(Preprocess, RotationEstimatesStandardErrorMatchesItsScatter) {
  const int64_t rx = 24, ry = 20;
  const auto clean = rotated_gradient_field(rx, ry, 17.3, false);
  std::mt19937_64 rng(7);
  for (double noise : {0.02, 0.08}) {
    std::normal_distribution<double> gauss(0.0, noise);
    double sum = 0, sum2 = 0, sd_sum = 0;
    const int draws = 200;
    for (int d = 0; d < draws; ++d) {
      auto com = clean;
      for (double& v : com) v += gauss(rng);
      const auto e = th::estimate_scan_rotation(com, rx, ry, 0);
      sum += e.deg;
      sum2 += e.deg * e.deg;
      sd_sum += e.sd_deg;
    }
    const double mean = sum / draws, scatter = std::sqrt(sum2 / draws - mean * mean), reported = sd_sum / draws;
    std::cout << "noise " << noise << ": scatter " << scatter << "°, reported standard error " << reported << "°\n";
    EXPECT_NEAR(mean, 17.3, 3 * scatter / std::sqrt(double(draws)) + 0.02) << noise;
    EXPECT_GT(scatter / reported, 0.8) << noise;
    EXPECT_LT(scatter / reported, 2.0) << noise;
  }
}

TEST(Preprocess, TransposeReordersPixelsExactlyAndRotationsMoveNone) {
  // 6 x 4 detector of frequency labels; out(k) = in(T k): a rotation turns the positions
  // (scan_map.hpp), never the patterns.
  auto d0 = make_dataset(1, 1, 6, 4, [](int64_t, int64_t f0, int64_t f1) { return label(f0, f1); });
  auto check = [&](const std::string& keys, int64_t m0, int64_t m1, const std::function<std::pair<int64_t, int64_t>(int64_t, int64_t)>& from) {
    auto d = d0;
    th::preprocess_dataset(d, config("[preprocess]\n" + keys), th::sum_on_one_rank);
    ASSERT_EQ(d.n0, m0) << keys;
    ASSERT_EQ(d.n1, m1) << keys;
    EXPECT_EQ(d.info.detector_shape[0], m0);
    const auto p = centred_pattern(d, 0);
    for (int64_t c0 = 0; c0 < m0; ++c0)
      for (int64_t c1 = 0; c1 < m1; ++c1) {
        auto [q0, q1] = from(c0 - m0 / 2, c1 - m1 / 2);
        // Modulo the input's size (the Nyquist frequency of an even axis negates to itself).
        q0 = ((q0 + 3) % 6 + 6) % 6 - 3;
        q1 = ((q1 + 2) % 4 + 4) % 4 - 2;
        EXPECT_EQ(p[std::size_t(c0 * m1 + c1)], float(label(q0, q1))) << keys << " at " << c0 << ", " << c1;
      }
  };
  check("scan_transpose = true\n", 4, 6, [](int64_t k0, int64_t k1) { return std::pair{k1, k0}; });
  check("scan_rotation_deg = 90\n", 6, 4, [](int64_t k0, int64_t k1) { return std::pair{k0, k1}; });
  check("scan_rotation_deg = 180\n", 6, 4, [](int64_t k0, int64_t k1) { return std::pair{k0, k1}; });
  check("scan_rotation_deg = -37\n", 6, 4, [](int64_t k0, int64_t k1) { return std::pair{k0, k1}; });
  check("scan_rotation_deg = 90\nscan_transpose = true\n", 4, 6, [](int64_t k0, int64_t k1) { return std::pair{k1, k0}; });
}

// ---------------------------------------------------------------- crop, binning, normalise

TEST(Preprocess, CropKeepsTheCentredPixels) {
  auto d = make_dataset(2, 1, 7, 6, [](int64_t j, int64_t f0, int64_t f1) { return label(f0, f1) + 0.5 * double(j); });
  auto rep = th::preprocess_dataset(d, config("[preprocess]\ncrop_detector = [4, 3]\n"), th::sum_on_one_rank);
  ASSERT_EQ(d.n0, 4);
  ASSERT_EQ(d.n1, 3);
  EXPECT_EQ(d.targets.size(), 2u * 12u);
  EXPECT_EQ(rep.detector_out, (std::array<int64_t, 2>{4, 3}));
  double total = 0;
  for (int64_t j = 0; j < 2; ++j) {
    const auto p = centred_pattern(d, j);
    for (int64_t c0 = 0; c0 < 4; ++c0)
      for (int64_t c1 = 0; c1 < 3; ++c1) {
        EXPECT_EQ(p[std::size_t(c0 * 3 + c1)], float(label(c0 - 2, c1 - 1) + 0.5 * double(j)));
        total += p[std::size_t(c0 * 3 + c1)];
      }
  }
  EXPECT_DOUBLE_EQ(d.total_intensity, total);
  EXPECT_DOUBLE_EQ(d.mean_total_intensity, total / 2);
  auto too_big = make_dataset(1, 1, 7, 6, [](int64_t, int64_t, int64_t) { return 1.0; });
  EXPECT_THROW(th::preprocess_dataset(too_big, config("[preprocess]\ncrop_detector = [8, 6]\n"), th::sum_on_one_rank),
               tycho::error);
}

// A probe that fits a 32 x 24 window of 0.12 Å⁻¹ easily: in focus, 20 mrad at 80 keV.
const char* k_small_probe = "[data]\ndetector_pixel_invA = 0.06\n[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 20.0\nC10_A = 0.0\n";

TEST(Preprocess, BinningSumsCentredBlocks) {
  auto d = make_dataset(1, 2, 64, 48, [](int64_t j, int64_t f0, int64_t f1) { return label(f0, f1) + double(j); });
  const double total = d.total_intensity;
  auto rep = th::preprocess_dataset(d, config(std::string(k_small_probe) + "[preprocess]\nbinning = 2\n"),
                                    th::sum_on_one_rank);
  ASSERT_EQ(d.n0, 32);
  ASSERT_EQ(d.n1, 24);
  EXPECT_EQ(d.info.detector_shape[1], 24);
  EXPECT_TRUE(std::isnan(d.info.detector_pixel_invA[0]));  // the source's calibration, unchanged
  EXPECT_DOUBLE_EQ(d.total_intensity, total);  // integers: exact sums
  // Binned pixel of frequency (g0, g1) sums raw frequencies 2g + {0, 1} on both axes (64/2 and 48/2 are even).
  const auto p = centred_pattern(d, 1);
  for (int64_t g0 : {-16, -1, 0, 5, 15})
    for (int64_t g1 : {-12, 0, 11}) {
      double want = 0;
      for (int64_t a : {0, 1})
        for (int64_t b : {0, 1}) want += label(2 * g0 + a, 2 * g1 + b) + 1;
      EXPECT_EQ(p[std::size_t((g0 + 16) * 24 + g1 + 12)], float(want)) << g0 << ", " << g1;
    }
  EXPECT_EQ(rep.binning_offset_px, (std::array<double, 2>{0.5, 0.5}));
  // A factor that does not divide the detector names the crop that makes it divide.
  auto e = make_dataset(1, 1, 64, 48, [](int64_t, int64_t, int64_t) { return 1.0; });
  try {
    th::preprocess_dataset(e, config(std::string(k_small_probe) + "[preprocess]\nbinning = 5\n"), th::sum_on_one_rank);
    FAIL() << "binning 5 of 64 x 48 was accepted";
  } catch (const tycho::error& err) {
    EXPECT_NE(std::string(err.what()).find("crop_detector = [60, 45]"), std::string::npos) << err.what();
  }
}

TEST(Preprocess, NormaliseGivesEveryPatternTheMeanTotal) {
  auto d = make_dataset(3, 3, 16, 16, [](int64_t j, int64_t f0, int64_t f1) {
    return (1.0 + 0.2 * double(j)) * gaussian(f0, f1, 0, 0, 3.0);
  });
  const double mean = d.mean_total_intensity;
  auto rep = th::preprocess_dataset(d, config("[preprocess]\nnormalise = true\n"), th::sum_on_one_rank);
  EXPECT_NEAR(rep.normalised_to, mean, 1e-9 * mean);
  for (int64_t j = 0; j < 9; ++j)
    EXPECT_NEAR(th::pattern_total(d.targets.data() + j * 256, 16, 16, true), mean, 1e-5 * mean) << j;
  EXPECT_NEAR(d.mean_total_intensity, mean, 1e-5 * mean);
}

// ---------------------------------------------------------------- SHA-256

TEST(Preprocess, Sha256KnownDigests) {
  auto hex = [](const std::string& s) {
    th::sha256 h;
    h.update(s.data(), s.size());
    return h.hex_digest();
  };
  EXPECT_EQ(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Fed in pieces of odd sizes: the same digest as in one piece.
  const std::string million(1000000, 'a');
  th::sha256 h;
  for (std::size_t at = 0; at < million.size(); at += 997) h.update(million.data() + at, std::min<std::size_t>(997, million.size() - at));
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// ---------------------------------------------------------------- the command, on the MoS2 counts

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }
std::string mos2_counts() { return tycho::test::source_dir() + "/examples/data/mos2_80kV_32x24_counts.h5"; }

// The checksum a prepared file records of its source: the shipped counts file's SHA-256 as
// `sha256sum` prints it (14,173,584 bytes, read in 1 MiB pieces).
TEST(Preprocess, Sha256OfTheShippedCountsFile) {
  EXPECT_EQ(th::sha256_file(mos2_counts()), "fc6182b7be63788cafdc31dadee9d0984b881dc32f536818f266cce3fd9ff03a");
}

nlohmann::json manifest_of(const std::string& path) {
  return nlohmann::json::parse(tycho::test::load_result(path).manifest_json);
}

TEST(PreprocessMoS2, RotationEstimateIsZero) {
  // The data README: no scan rotation, no transpose. Measured: 1.26° (the curl is flat within
  // about ±1.5° on these 32 x 24 noisy positions; 0.24° on the noise-free patterns), transpose
  // false (mean |curl| 0.0272 against 0.0308 transposed, 0.0350 at the worst angle); applied: 0°.
  tycho::test::temp_folder tmp;
  auto r = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "-o", tmp / "p.zip", "--set",
                        "preprocess.com_fit=\"plane\"", "--set", "preprocess.scan_rotation_deg=\"auto\""});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto m = manifest_of(tmp / "p.zip");
  EXPECT_EQ(m.at("format"), "tycho-prepared");
  EXPECT_EQ(m.at("format_version"), 1);
  EXPECT_FALSE(m.at("data").at("embedded").get<bool>());
  const auto& pre = m.at("preprocess");
  const auto& e = pre.at("rotation_estimate");
  EXPECT_LT(std::abs(e.at("scan_rotation_deg").get<double>()), 2.0) << e.dump();
  EXPECT_FALSE(e.at("scan_transpose").get<bool>()) << e.dump();
  // Noise flattens the curl: 22 % contrast over the angles, below the 25 % that warns.
  const double contrast = 1 - e.at("mean_abs_curl").get<double>() / e.at("mean_abs_curl_max").get<double>();
  EXPECT_GT(contrast, 0.15);
  EXPECT_LT(contrast, th::rotation_contrast_warn);
  // The curl alone is uncertain here; the bright field's parallax decides (standard error 1.2 %).
  EXPECT_NE(r.err.find("scan geometry from the parallax of the bright field"), std::string::npos) << r.err;
  EXPECT_EQ(pre.at("scan_map").at("source"), "parallax") << pre.dump();
  EXPECT_EQ(pre.at("scan_rotation_deg").get<double>(), 0.0);
  EXPECT_FALSE(pre.at("scan_transpose").get<bool>());
  // The COM of these centred patterns: within a hundredth of a pixel of the centre.
  for (int a = 0; a < 2; ++a) EXPECT_LT(std::abs(pre.at("com_mean_px")[a].get<double>()), 0.01);
  EXPECT_EQ(m.at("data").at("source_sha256").get<std::string>().size(), 64u);
  EXPECT_TRUE(tycho::test::load_result(tmp / "p.zip").array("com", "p.zip").shape == (std::vector<int64_t>{32, 24, 2}));
}

// With no defocus stated ([optics] C10_A = 0 overrides the file's), the parallax is measured all
// the same: its scale at the nominal step gives C10's magnitude, underfocus is assumed (the sign
// the parallax cannot tell from a scan turned 180°), and the log says so. The same rotation and
// the same C10 as with the defocus stated (−150 Å, the truth's too; the parallax measures −136.5).
TEST(PreprocessMoS2, TheParallaxMeasuresTheDefocusNobodyStated) {
  tycho::test::temp_folder tmp;
  auto stated = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "-o", tmp / "a.zip"});
  ASSERT_TRUE(stated.exited_with(0)) << stated.describe();
  auto none = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "-o", tmp / "b.zip", "--set",
                           "optics.C10_A=0"});
  ASSERT_TRUE(none.exited_with(0)) << none.describe();
  const auto a = manifest_of(tmp / "a.zip").at("preprocess").at("scan_map");
  const auto b = manifest_of(tmp / "b.zip").at("preprocess").at("scan_map");
  ASSERT_EQ(b.at("source"), "parallax") << b.dump();
  EXPECT_NE(none.err.find("none stated: underfocus assumed"), std::string::npos) << none.err;
  EXPECT_EQ(a.at("rotation_deg").get<double>(), b.at("rotation_deg").get<double>());
  EXPECT_EQ(a.at("transpose").get<bool>(), b.at("transpose").get<bool>());
  const double C10_a = a.at("parallax").at("C10_estimate_A").get<double>();
  const double C10_b = b.at("parallax").at("C10_estimate_A").get<double>();
  EXPECT_LT(C10_b, -120);  // within 20 % of the truth's −150 Å
  EXPECT_GT(C10_b, -180);
  EXPECT_NEAR(C10_b, C10_a, 1e-6 * std::abs(C10_a));  // the same shifts, read with the same step
}

// A stated C10 gives way to the parallax's only where the two disagree by more than the
// parallax's uncertainty at the entrance surface: its standard error (1.2 % here) and, with
// several slices, the depth its contrast lies at, anywhere in the slices' span T (T / √12). The
// example's parallax measures −136.5 Å against the stated −150 Å: replaced with one slice; with
// five slices of 10 Å it reads −161.5 ± 14.5 Å at the entrance and the stated −150 Å stays (the
// shared bilayer's parallax read 5.5 Å off the stated, truthful −200 Å: its scan map, starting
// there, settled 1.2 % small, its top layer 0.895 against 0.914 from the stated C10).
TEST(PreprocessMoS2, AStatedC10TheParallaxAgreesWithIsKept) {
  tycho::test::temp_folder tmp;
  auto one = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "-o", tmp / "a.zip"});
  ASSERT_TRUE(one.exited_with(0)) << one.describe();
  const auto map = manifest_of(tmp / "a.zip").at("preprocess").at("scan_map");
  const auto& a = map.at("parallax");
  const double measured = a.at("C10_at_nominal_step_A").get<double>(), error = a.at("relative_error").get<double>();
  ASSERT_LT(error, 0.02) << a.dump();
  // One slice: the middle is the entrance; at the crystal lattice's scale (0.9997 of the stated
  // step here, scan_scale = "auto"), since the parallax fixes C10 / step.
  ASSERT_TRUE(map.at("lattice").at("used").get<bool>()) << map.dump();
  const double at_scale = map.at("lattice").at("scale").get<double>() * measured;
  EXPECT_NEAR(a.at("C10_at_entrance_A").get<double>(), at_scale, 1e-9 * std::abs(measured));
  EXPECT_NEAR(a.at("C10_sd_A").get<double>(), error * std::abs(measured), 1e-9);
  EXPECT_NEAR(a.at("C10_estimate_A").get<double>(), at_scale, 1e-9 * std::abs(measured));  // 13 Å from the stated −150 Å: replaced
  // Stated within the standard error: kept (no estimate recorded).
  const std::string near = "optics.C10_A=" + std::to_string(measured + 0.5 * error * std::abs(measured));
  auto agree = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "-o", tmp / "b.zip", "--set", near});
  ASSERT_TRUE(agree.exited_with(0)) << agree.describe();
  EXPECT_FALSE(manifest_of(tmp / "b.zip").at("preprocess").at("scan_map").at("parallax").contains("C10_estimate_A"));
  // Five slices of 10 Å: the depth's uncertainty, 50 / √12 Å, keeps the stated −150 Å.
  auto thick = run_command({tycho::test::tycho_exe(), "preprocess", example_config(), "-o", tmp / "c.zip", "--set",
                            "reconstruct.slices=5", "--set", "reconstruct.slice_thickness_A=10"});
  ASSERT_TRUE(thick.exited_with(0)) << thick.describe();
  const auto c = manifest_of(tmp / "c.zip").at("preprocess").at("scan_map").at("parallax");
  EXPECT_NEAR(c.at("C10_at_entrance_A").get<double>(), c.at("C10_at_nominal_step_A").get<double>() - 25, 1e-9);
  EXPECT_NEAR(c.at("C10_sd_A").get<double>(),
              std::hypot(c.at("relative_error").get<double>() * c.at("C10_at_nominal_step_A").get<double>(),
                         50 / std::sqrt(12.0)),
              1e-9);
  EXPECT_FALSE(c.contains("C10_estimate_A")) << c.dump();
}

// A C10 stated with the wrong sign: the parallax then turns the scan 180° and the run finds the
// specimen's twin, which explains the data exactly as well; the object's phase then peaks
// negative, and the manifest's phase_check and a warning say so (tycho/core/phase_twin.hpp).
// Measured: −150 Å skewness +1.99 ± 0.24, +150 Å −1.98 ± 0.24 after 30 iterations (binned to
// 0.35 Å pixels: −1.77 ± 0.25).
TEST(PreprocessMoS2, AWrongSignOfC10IsCalledTheTwin) {
  tycho::test::temp_folder tmp;
  for (const char* c10 : {"-150", "150"}) {
    const std::string out = tmp / (std::string("r") + c10 + ".zip");
    auto r = run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations", "30", "--set",
                          "output.previews=false", "--set", std::string("optics.C10_A=") + c10, "-o", out});
    ASSERT_TRUE(r.exited_with(0)) << r.describe();
    const auto check = manifest_of(out).at("phase_check");
    const bool wrong = std::string(c10) == "150";
    EXPECT_EQ(check.at("verdict"), wrong ? "twin" : "specimen") << check.dump();
    EXPECT_GT(std::abs(check.at("skewness").get<double>()), 5 * check.at("standard_error").get<double>());
    EXPECT_EQ(r.err.find("specimen's twin") != std::string::npos, wrong) << r.err;
  }
}

TEST(PreprocessMoS2, BinningRefusedNamingTheAllowedFactor) {
  // binning = 2 halves the 16.7 Å window to 8.3 Å: 5.6 % of the defocused probe lies within 5 % of
  // its edge (1 % allowed; 0.28 % unbinned).
  tycho::test::temp_folder tmp;
  for (const char* command : {"reconstruct", "preprocess"}) {
    auto r = run_command({tycho::test::tycho_exe(), command, example_config(), "-q", "-o", tmp / "out.zip", "--set",
                          "preprocess.binning=2"});
    EXPECT_TRUE(r.exited_with(2)) << r.describe();
    EXPECT_NE(r.err.find("[preprocess] binning = 2: the probe would not fit the binned window"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("the largest binning factor allowed for these data is 1"), std::string::npos) << r.err;
    // What the window's size came from: the wavelength, its radiation and energy, and where each was set.
    EXPECT_NE(r.err.find("Used: λ = 0.0417573 Å: electrons (the default: neither [optics] radiation nor"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("of 80000 eV ([optics] energy_eV in " + example_config()), std::string::npos) << r.err;
  }
}

class PreprocessRuns : public ::testing::Test {
 protected:
  command_result reconstruct(std::vector<std::string> args, const std::string& cwd = "",
                             const std::string& iterations = "3") {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", "-q", "--set", "output.previews=false",
                                     "--iterations", iterations};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, {}, cwd);
  }
  // The arrays of two results are the same bytes.
  void expect_identical(const std::string& a, const std::string& b) {
    auto ra = tycho::test::load_result(a), rb = tycho::test::load_result(b);
    for (const char* name : {"object", "probe", "loss_history", "positions_px"}) {
      const auto& x = ra.array(name, a);
      const auto& y = rb.array(name, b);
      EXPECT_EQ(x.shape, y.shape) << name;
      EXPECT_TRUE(x.bytes == y.bytes) << name << " differs between " << a << " and " << b;
    }
  }
  tycho::test::temp_folder tmp_;
};

TEST_F(PreprocessRuns, BinningOneAndAFullCropAreNoPreprocessing) {
  // binning = 1 with a crop to the whole detector: the stage runs but changes nothing.
  auto a = reconstruct({example_config(), "-o", tmp_ / "a.zip"});
  ASSERT_TRUE(a.exited_with(0)) << a.describe();
  auto b = reconstruct({example_config(), "-o", tmp_ / "b.zip", "--set", "preprocess.binning=1", "--set",
                        "preprocess.crop_detector=[96, 96]"});
  ASSERT_TRUE(b.exited_with(0)) << b.describe();
  expect_identical(tmp_ / "a.zip", tmp_ / "b.zip");
  // The default stage measures the scan's geometry (and changes no pattern): its report is there.
  EXPECT_TRUE(manifest_of(tmp_ / "a.zip").at("preprocess").contains("scan_map"));
  EXPECT_EQ(manifest_of(tmp_ / "b.zip").at("preprocess").at("binning"), 1);
}

TEST_F(PreprocessRuns, CropShrinksTheWindow) {
  auto r = reconstruct({example_config(), "-o", tmp_ / "c.zip", "--set", "preprocess.crop_detector=[80, 80]"}, "", "1");
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto m = manifest_of(tmp_ / "c.zip");
  EXPECT_EQ(m.at("calibration").at("window_shape"), nlohmann::json::array({80, 80}));
  EXPECT_NEAR(m.at("calibration").at("object_pixel_A")[0].get<double>(), 1 / (80 * 0.06), 1e-12);
  EXPECT_EQ(m.at("preprocess").at("detector_shape_in"), nlohmann::json::array({96, 96}));
  auto plan = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set", "preprocess.crop_detector=[80, 80]"});
  EXPECT_NE(plan.out.find("window 80 x 80"), std::string::npos) << plan.describe();
}

TEST_F(PreprocessRuns, SelfContainedRoundTripIsBitForBit) {
  // The source is a copy that is deleted before the run from the prepared file, which runs in a
  // fresh folder of its own, without CONFIG: only the prepared file can provide the data.
  const std::vector<std::string> stage = {"--set", "preprocess.com_fit=\"plane\"", "--set", "preprocess.recentre=true",
                                          "--set", "preprocess.normalise=true"};
  fs::create_directories(tmp_.path() / "src");
  fs::copy_file(mos2_counts(), tmp_.path() / "src" / "counts.h5");
  std::vector<std::string> with_data = stage;
  with_data.insert(with_data.end(), {"--set", "data.path=\"" + (tmp_ / "src/counts.h5") + "\""});

  std::vector<std::string> direct = {example_config(), "-o", tmp_ / "direct.zip"};
  direct.insert(direct.end(), with_data.begin(), with_data.end());
  auto d = reconstruct(direct);
  ASSERT_TRUE(d.exited_with(0)) << d.describe();

  std::vector<std::string> pre = {tycho::test::tycho_exe(), "preprocess", example_config(), "-q", "-o",
                                  tmp_ / "prepared.zip", "--save-raw-data"};
  pre.insert(pre.end(), with_data.begin(), with_data.end());
  auto p = run_command(pre);
  ASSERT_TRUE(p.exited_with(0)) << p.describe();
  EXPECT_NE(p.out.find("wrote"), std::string::npos);
  fs::remove_all(tmp_.path() / "src");
  fs::create_directories(tmp_.path() / "far");
  fs::copy_file(tmp_ / "prepared.zip", tmp_.path() / "far" / "copy.zip");
  fs::remove(tmp_ / "prepared.zip");

  auto r = reconstruct({"--from", "copy.zip", "-o", "from-prepared.zip"}, tmp_ / "far");
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  expect_identical(tmp_ / "direct.zip", tmp_ / "far/from-prepared.zip");
  const auto m = manifest_of(tmp_ / "far/copy.zip");
  EXPECT_TRUE(m.at("data").at("embedded").get<bool>());
  const auto patterns = tycho::test::load_result(tmp_ / "far/copy.zip").array("patterns", "copy.zip");
  EXPECT_EQ(patterns.shape, (std::vector<int64_t>{32, 24, 96, 96}));
  const auto result = manifest_of(tmp_ / "far/from-prepared.zip");
  EXPECT_EQ(result.at("preprocess"), manifest_of(tmp_ / "direct.zip").at("preprocess"));
  EXPECT_EQ(result.at("history").at("iterations"), 3);
}

TEST_F(PreprocessRuns, SourceChecksumIsChecked) {
  // Without the patterns, the prepared file re-reads its source: refused once the source changed
  // or is gone.
  fs::copy_file(mos2_counts(), tmp_.path() / "counts.h5");
  const std::string cfg = tmp_.write("run.toml", "[data]\npath = \"counts.h5\"\n[preprocess]\ncom_fit = \"constant\"\n"
                                                 "[reconstruct]\niterations = 1\n");
  auto p = run_command({tycho::test::tycho_exe(), "preprocess", cfg, "-q", "-o", tmp_ / "p.zip"});
  ASSERT_TRUE(p.exited_with(0)) << p.describe();
  auto ok = reconstruct({"--from", tmp_ / "p.zip", "-o", tmp_ / "r.zip"}, "", "1");
  EXPECT_TRUE(ok.exited_with(0)) << ok.describe();
  {
    std::ofstream(tmp_ / "counts.h5", std::ios::binary | std::ios::app) << "x";
  }
  // (r2.zip: r.zip exists, and an existing result is refused before the source is checked)
  auto changed = reconstruct({"--from", tmp_ / "p.zip", "-o", tmp_ / "r2.zip"});
  EXPECT_TRUE(changed.exited_with(2)) << changed.describe();
  EXPECT_NE(changed.err.find("has changed since it was prepared"), std::string::npos) << changed.err;
  fs::remove(tmp_ / "counts.h5");
  auto gone = reconstruct({cfg, "--from", tmp_ / "p.zip", "-o", tmp_ / "r2.zip"});
  EXPECT_TRUE(gone.exited_with(2)) << gone.describe();
  EXPECT_NE(gone.err.find("does not embed its patterns, and its source"), std::string::npos) << gone.err;
  EXPECT_NE(gone.err.find("is gone"), std::string::npos) << gone.err;
}

// The stage under `mpirun -np 2` (each rank holds half the patterns): the COM fit, the rotation
// estimate and the normalisation see the whole scan, as with one rank.
TEST_F(PreprocessRuns, TwoRanksFitTheWholeScan) {
  if (!run_command({"/bin/sh", "-c", "command -v mpirun"}).exited_with(0)) GTEST_SKIP() << "mpirun not found";
  bool mpi = false;
  for (const auto& c : tycho::test::plugins().components())
    if (c.kind == TYCHO_COMPONENT_REDUCER && c.name == "mpi") mpi = true;
  if (!mpi) GTEST_SKIP() << "the mpi reducer plugin was not built";
  auto run = [&](int np, const std::string& out) {
    return run_command({"mpirun", "--oversubscribe", "-np", std::to_string(np), tycho::test::tycho_exe(),
                        "reconstruct", example_config(), "-q", "--iterations", "1", "-o", out, "--set",
                        "output.previews=false", "--set", "reconstruct.threads=1", "--set",
                        "preprocess.com_fit=\"plane\"", "--set", "preprocess.scan_rotation_deg=\"auto\"", "--set",
                        "preprocess.recentre=true", "--set", "preprocess.normalise=true"},
                       {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_btl=self,vader",
                        "OMPI_MCA_rmaps_base_oversubscribe=1"});
  };
  auto one = run(1, tmp_ / "one.zip");
  ASSERT_TRUE(one.exited_with(0)) << one.describe();
  auto two = run(2, tmp_ / "two.zip");
  ASSERT_TRUE(two.exited_with(0)) << two.describe();
  const auto a = manifest_of(tmp_ / "one.zip").at("preprocess"), b = manifest_of(tmp_ / "two.zip").at("preprocess");
  for (const char* axis : {"axis0", "axis1"})
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(a.at("com_fit_coefficients").at(axis)[c].get<double>(),
                  b.at("com_fit_coefficients").at(axis)[c].get<double>(), 1e-12) << axis << c;
  EXPECT_EQ(a.at("com_patterns"), b.at("com_patterns"));
  EXPECT_NEAR(a.at("rotation_estimate").at("scan_rotation_deg").get<double>(),
              b.at("rotation_estimate").at("scan_rotation_deg").get<double>(), 1e-9);
  EXPECT_NEAR(a.at("normalised_to").get<double>(), b.at("normalised_to").get<double>(), 1e-6);
  const auto la = tycho::test::load_result(tmp_ / "one.zip").array("loss_history", "one.zip");
  const auto lb = tycho::test::load_result(tmp_ / "two.zip").array("loss_history", "two.zip");
  EXPECT_NEAR(la.as<double>()[0], lb.as<double>()[0], 1e-6 * la.as<double>()[0]);
}

}  // namespace
