// The scan's geometry from the data (issue 27): the linear map of the scan (core/scan_map), its
// refinement from the positions' gradients (core/scan_refinement), and the estimate before the
// first iteration (host/src/geometry/scan_geometry_estimate) on the MoS2 counts rearranged as a
// turned scan or a transposed detector would record them.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <nlohmann/json.hpp>
#include <tycho/core/parallax.hpp>
#include <tycho/core/scan_map.hpp>
#include <tycho/core/scan_refinement.hpp>
#include <tycho/host/run_plan.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "npy_file.hpp"
#include "run_command.hpp"
#include "simulated_truth.hpp"
#include "test_paths.hpp"

namespace {

constexpr double pi = 3.14159265358979323846;

TEST(ScanMap, ParametersRoundTrip) {
  for (double deg : {-170.0, -37.0, 0.0, 12.5, 90.0, 179.0}) {
    const tycho::scan_map m = tycho::scan_map::from_parameters(deg * pi / 180, 1.03, 0.98, -0.02);
    const auto p = m.decompose();
    EXPECT_NEAR(p.rotation_rad * 180 / pi, deg, 1e-9);
    EXPECT_NEAR(p.scale0, 1.03, 1e-12);
    EXPECT_NEAR(p.scale1, 0.98, 1e-12);
    EXPECT_NEAR(p.shear, -0.02, 1e-12);
  }
  tycho::scan_map flipped;
  flipped.L = {{{0.0, 1.0}, {1.0, 0.0}}};  // a transpose: no rotation and scales describe it
  EXPECT_TRUE(std::isnan(flipped.decompose().rotation_rad));
}

// A loss whose minimum puts every position at L_true n (the positions' gradient r − r_true, in
// px): the refinement must walk the map there from the identity, with the scale held and freed.
struct synthetic_scan {
  std::vector<double> n;  // (P, 2) Å, centred
  double radius = 0;
  synthetic_scan(int rx, int ry, double step) {
    for (int i = 0; i < rx; ++i)
      for (int k = 0; k < ry; ++k) {
        n.push_back((i - (rx - 1) / 2.0) * step);
        n.push_back((k - (ry - 1) / 2.0) * step);
      }
    for (double v : n) radius += v * v;
    radius = std::sqrt(radius / double(n.size() / 2));
  }
  // r: the positions at the nominal raster, target: where `truth` puts them (both (P, 2) px).
  void lay_out(const tycho::scan_map& truth, const std::array<double, 2>& pixel, std::vector<double>& r,
               std::vector<double>& target) const {
    r.assign(n.size(), 0.0);
    target.assign(n.size(), 0.0);
    for (std::size_t j = 0; j < n.size() / 2; ++j) {
      const auto t = truth.apply({n[2 * j], n[2 * j + 1]});
      for (int a = 0; a < 2; ++a) {
        r[2 * j + std::size_t(a)] = n[2 * j + std::size_t(a)] / pixel[std::size_t(a)];
        target[2 * j + std::size_t(a)] = t[std::size_t(a)] / pixel[std::size_t(a)];
      }
    }
  }
};

tycho::scan_refinement::rank_sum one_rank() {
  return [](std::vector<double>&) {};
}

// A refinement that steps on every iteration from the first, moving `free`; with C10_A, the
// probe's C10 starts there (0.01 Å of displacement per Å).
tycho::scan_refinement_options every_iteration(std::array<bool, 5> free, double C10_A = 0) {
  tycho::scan_refinement_options o;
  o.enabled = true;
  o.first_iteration = 1;
  o.every = 1;
  o.free = free;
  if (C10_A != 0) {
    o.C10_displacement_per_A = 0.01;
    o.C10_A = C10_A;
  }
  return o;
}

TEST(ScanRefinement, FindsRotationStepRatioAndShear) {
  const synthetic_scan scan(20, 16, 0.5);
  const std::array<double, 2> pixel{0.2, 0.2};
  const tycho::scan_map truth = tycho::scan_map::from_parameters(2.0 * pi / 180, 1.015, 0.985, 0.01);
  tycho::scan_refinement_options o = every_iteration({true, false, true, true, false});  // the default: rotation, anisotropy, shear
  const std::size_t P = scan.n.size() / 2;
  std::vector<double> r, target, g(2 * P);
  scan.lay_out(truth, pixel, r, target);
  tycho::scan_refinement refine(o, scan.n, scan.radius, pixel, tycho::scan_map{});
  for (int it = 1; it <= 60 && !refine.converged(); ++it) {
    for (std::size_t k = 0; k < 2 * P; ++k) g[k] = r[k] - target[k];
    refine.step(it, g.data(), 0.0, r.data(), one_rank());
  }
  const auto p = refine.parameters();
  EXPECT_TRUE(refine.converged());
  EXPECT_NEAR(p.rotation_rad * 180 / pi, 2.0, 0.02);
  // The isotropic scale is held: only the ratio of the steps and the shear are found.
  EXPECT_NEAR(std::sqrt(p.scale0 * p.scale1), 1.0, 1e-12);
  EXPECT_NEAR(p.scale0 / p.scale1, 1.015 / 0.985, 5e-4);
  EXPECT_NEAR(p.shear, 0.01, 2e-3);
  // The positions moved with the map: each is where the map puts its nominal position.
  for (std::size_t j = 0; j < P; j += 37) {
    const auto m = refine.map().apply({scan.n[2 * j], scan.n[2 * j + 1]});
    EXPECT_NEAR(r[2 * j] * pixel[0], m[0], 1e-9);
    EXPECT_NEAR(r[2 * j + 1] * pixel[1], m[1], 1e-9);
  }
}

// A scan that drifted along its slow axis: the fast axis's step as stated, the slow axis's
// stretched and sheared. With the fast axis held the map finds all of it, the isotropic scale
// included (it follows the held axis), and C10 follows the isotropic scale (C10 / scale is what
// the parallax fixes), though its own slope is 0 here.
void expect_drift_found(int fast_axis) {
  const synthetic_scan scan(20, 16, 0.5);
  const std::array<double, 2> pixel{0.2, 0.2};
  const double h = 0.02, slow = 1.03;
  const tycho::scan_map truth = fast_axis == 1
                                    ? tycho::scan_map::from_parameters(2.0 * pi / 180, slow, 1.0, h)
                                    : tycho::scan_map::from_parameters(2.0 * pi / 180, std::sqrt(1 - h * h), slow, h);
  tycho::scan_refinement_options o = every_iteration({true, false, true, true, true}, -100);
  o.hold = fast_axis == 1 ? tycho::scan_refinement_options::held_scale::axis1
                          : tycho::scan_refinement_options::held_scale::axis0;
  const std::size_t P = scan.n.size() / 2;
  std::vector<double> r, target, g(2 * P);
  scan.lay_out(truth, pixel, r, target);
  tycho::scan_refinement refine(o, scan.n, scan.radius, pixel, tycho::scan_map{});
  EXPECT_STREQ(refine.held_scale_text(), fast_axis == 1 ? "fast axis 1" : "fast axis 0");
  for (int it = 1; it <= 80 && !refine.converged(); ++it) {
    for (std::size_t k = 0; k < 2 * P; ++k) g[k] = r[k] - target[k];
    refine.step(it, g.data(), 0.0, r.data(), one_rank());
  }
  const auto p = refine.parameters();
  const auto q = truth.decompose();
  EXPECT_TRUE(refine.converged());
  EXPECT_NEAR(p.rotation_rad * 180 / pi, 2.0, 0.02);
  EXPECT_NEAR(p.scale0, q.scale0, 1e-3);
  EXPECT_NEAR(p.scale1, q.scale1, 1e-3);
  EXPECT_NEAR(p.shear, h, 2e-3);
  // The held axis's step vector keeps its length exactly.
  if (fast_axis == 1)
    EXPECT_NEAR(p.scale1, 1.0, 1e-12);
  else
    EXPECT_NEAR(std::hypot(p.scale0, p.shear), 1.0, 1e-12);
  EXPECT_NEAR(refine.physical_C10_A(), -100 * std::sqrt(p.scale0 * p.scale1), 1e-9);
}

TEST(ScanRefinement, WithTheFastAxisHeldFindsADriftAlongTheSlowAxis) {
  expect_drift_found(1);
  expect_drift_found(0);
}

// With the isotropic scale freed (several slices), it and C10 wait, held, until the rest has
// converged, then the whole map is found; the waiting is part of the state a result keeps.
TEST(ScanRefinement, AFreedScaleWaitsForTheRestThenIsFound) {
  const synthetic_scan scan(20, 16, 0.5);
  const std::array<double, 2> pixel{0.2, 0.2};
  const tycho::scan_map truth = tycho::scan_map::from_parameters(2.0 * pi / 180, 1.03, 0.99, 0.01);
  tycho::scan_refinement_options o = every_iteration({true, true, true, true, true}, -100);
  const std::size_t P = scan.n.size() / 2;
  std::vector<double> r, target, g(2 * P);
  scan.lay_out(truth, pixel, r, target);
  tycho::scan_refinement refine(o, scan.n, scan.radius, pixel, tycho::scan_map{});
  EXPECT_TRUE(refine.scale_waiting());
  int released_at = 0;
  std::vector<double> waiting_state;
  for (int it = 1; it <= 120 && !refine.converged(); ++it) {
    for (std::size_t k = 0; k < 2 * P; ++k) g[k] = r[k] - target[k];
    refine.step(it, g.data(), 0.0, r.data(), one_rank());
    const auto p = refine.parameters();
    if (refine.scale_waiting()) {
      EXPECT_NEAR(std::sqrt(p.scale0 * p.scale1), 1.0, 1e-12) << it;
      EXPECT_EQ(refine.physical_C10_A(), -100) << it;
      if (it == 3) waiting_state = refine.state();
    } else if (released_at == 0) {
      released_at = it;
      EXPECT_TRUE(refine.last_report().find("the rest has converged: the isotropic scale and C10 are freed") != std::string::npos)
          << refine.last_report();
    }
  }
  EXPECT_GT(released_at, 3);
  EXPECT_TRUE(refine.converged());
  const auto p = refine.parameters();
  EXPECT_NEAR(p.scale0, 1.03, 1e-3);
  EXPECT_NEAR(p.scale1, 0.99, 1e-3);
  EXPECT_NEAR(p.shear, 0.01, 2e-3);
  // The state: 51 numbers, the last the waiting flag; an older file's 50 restore as not waiting.
  ASSERT_EQ(waiting_state.size(), tycho::scan_refinement::state_size);
  EXPECT_EQ(waiting_state.back(), 1.0);
  tycho::scan_refinement again(o, scan.n, scan.radius, pixel, tycho::scan_map{});
  again.restore(refine.state(), "test");
  EXPECT_FALSE(again.scale_waiting());
  again.restore(waiting_state, "test");
  EXPECT_TRUE(again.scale_waiting());
  EXPECT_EQ(again.state(), waiting_state);
  waiting_state.pop_back();
  again.restore(waiting_state, "test");
  EXPECT_FALSE(again.scale_waiting());
}

TEST(ScanRefinement, RemovesOnlyTheAffinePartOfSteps) {
  const synthetic_scan scan(9, 7, 0.5);
  const std::size_t P = scan.n.size() / 2;
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::vector<double> local(2 * P), steps(2 * P);
  for (double& v : local) v = noise(rng);
  for (std::size_t j = 0; j < P; ++j) {
    steps[2 * j] = local[2 * j] + 0.01 * scan.n[2 * j] - 0.03 * scan.n[2 * j + 1] + 0.2;
    steps[2 * j + 1] = local[2 * j + 1] + 0.02 * scan.n[2 * j] - 0.1;
  }
  tycho::scan_refinement_options o;
  o.enabled = true;
  tycho::scan_refinement refine(o, scan.n, scan.radius, {0.2, 0.2}, tycho::scan_map{});
  refine.remove_affine_part(steps.data(), one_rank());
  // What is left is the local part less its own affine fit: no mean, no slope along n.
  double mean[2] = {0, 0}, slope[2][2] = {{0, 0}, {0, 0}}, left = 0, put = 0;
  for (std::size_t j = 0; j < P; ++j)
    for (int a = 0; a < 2; ++a) {
      mean[a] += steps[2 * j + std::size_t(a)];
      for (int b = 0; b < 2; ++b) slope[a][b] += steps[2 * j + std::size_t(a)] * scan.n[2 * j + std::size_t(b)];
      left += steps[2 * j + std::size_t(a)] * steps[2 * j + std::size_t(a)];
      put += local[2 * j + std::size_t(a)] * local[2 * j + std::size_t(a)];
    }
  for (int a = 0; a < 2; ++a) {
    EXPECT_NEAR(mean[a], 0.0, 1e-9);
    for (int b = 0; b < 2; ++b) EXPECT_NEAR(slope[a][b], 0.0, 1e-9);
  }
  EXPECT_GT(left, 0.8 * put);  // the local steps stay (6 of 126 degrees of freedom removed)
  EXPECT_LE(left, put + 1e-12);
}

// The MoS2 counts (32 x 24 scan, 96 x 96 detector, uint16) read whole.
std::vector<uint16_t> mos2_counts() {
  const std::string path = tycho::test::source_dir() + "/examples/data/mos2_80kV_32x24_counts.h5";
  std::vector<uint16_t> v(std::size_t(32) * 24 * 96 * 96);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << path;
  const hid_t d = H5Dopen2(f, "/datacube_root/datacube/data", H5P_DEFAULT);
  EXPECT_GE(d, 0);
  EXPECT_GE(H5Dread(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

// The counts recorded as another scan would have: pattern (a, b) of an (sa, sb) scan is the MoS2
// pattern `from(a, b)`, its detector transposed when asked. Writes tmp/scan.npy and returns the
// config tmp/scan.toml that reads it.
std::string write_recorded_scan(const tycho::test::temp_folder& tmp, int64_t sa, int64_t sb,
                                const std::function<std::pair<int64_t, int64_t>(int64_t, int64_t)>& from,
                                bool transpose, const std::string& step_A) {
  static const std::vector<uint16_t> counts = mos2_counts();
  const int64_t n = 96, m = n * n;
  std::vector<uint16_t> out(std::size_t(sa * sb * m));
  for (int64_t a = 0; a < sa; ++a)
    for (int64_t b = 0; b < sb; ++b) {
      const auto [i, k] = from(a, b);
      const uint16_t* p = counts.data() + (i * 24 + k) * m;
      uint16_t* q = out.data() + (a * sb + b) * m;
      for (int64_t u = 0; u < n; ++u)
        for (int64_t v = 0; v < n; ++v) q[u * n + v] = transpose ? p[v * n + u] : p[u * n + v];
    }
  tycho::test::write_npy(tmp / "scan.npy", "<u2", {sa, sb, n, n}, out.data(), out.size() * 2);
  const std::string cfg = tmp / "scan.toml";
  std::ofstream f(cfg);
  f << "[data]\nsource = \"npy\"\npath = \"scan.npy\"\ncentred = true\nscan_step_A = " << step_A << "\n"
       "detector_pixel_invA = 0.06\n[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = -150.0\n";
  return cfg;
}

// The preprocessing's scan map of a scan recorded as write_recorded_scan() writes it; `sets`: more
// --set KEY=VALUE.
nlohmann::json estimate(const std::string& name, int64_t sa, int64_t sb,
                        const std::function<std::pair<int64_t, int64_t>(int64_t, int64_t)>& from, bool transpose,
                        std::string* log = nullptr, const std::string& step_A = "0.5",
                        const std::vector<std::string>& sets = {}) {
  tycho::test::temp_folder tmp;
  const std::string cfg = write_recorded_scan(tmp, sa, sb, from, transpose, step_A);
  std::vector<std::string> args = {tycho::test::tycho_exe(), "preprocess", cfg, "-q", "-o", tmp / "p.zip",
                                   "--set", "preprocess.scan_rotation_deg=\"auto\""};
  for (const std::string& kv : sets) args.insert(args.end(), {"--set", kv});
  const auto r = tycho::test::run_command(args);
  if (log != nullptr) *log = r.err;
  EXPECT_TRUE(r.exited_with(0)) << name << ": " << r.describe();
  if (!r.exited_with(0)) return {};
  const auto manifest = nlohmann::json::parse(tycho::test::load_result(tmp / "p.zip").manifest_json);
  return manifest.at("preprocess").at("scan_map");
}

void expect_map(const nlohmann::json& map, double L00, double L01, double L10, double L11, bool transpose) {
  ASSERT_TRUE(map.is_object()) << map.dump();
  EXPECT_EQ(map.at("source"), "parallax") << map.dump();
  EXPECT_EQ(map.at("transpose").get<bool>(), transpose) << map.dump();
  // Within 0.5° (the issue's figure): the map is a pure rotation of the nominal step.
  const auto& L = map.at("linear");
  const double want = std::atan2(L10, L00), got = std::atan2(L[1][0].get<double>(), L[0][0].get<double>());
  EXPECT_LT(std::abs(std::remainder(got - want, 2 * pi)) * 180 / pi, 0.5) << map.dump();
  EXPECT_NEAR(L[0][1].get<double>(), L01, 0.01) << map.dump();
  EXPECT_NEAR(L[1][1].get<double>(), L11, 0.01) << map.dump();
  // The parallax's defocus at the nominal step: the stated −150 Å within 10 % (measured −136.5 Å
  // on these counts, 1.2 % standard error: the specimen's own contrast biases it).
  const double C10 = map.at("parallax").at("C10_at_nominal_step_A").get<double>();
  EXPECT_NEAR(C10, -150.0, 15.0) << map.dump();
}

TEST(ScanGeometryMoS2, AsRecorded) {
  expect_map(estimate("as recorded", 32, 24, [](int64_t a, int64_t b) { return std::pair{a, b}; }, false), 1, 0, 0, 1,
             false);
}

TEST(ScanGeometryMoS2, TransposedDetector) {
  expect_map(estimate("transposed", 32, 24, [](int64_t a, int64_t b) { return std::pair{a, b}; }, true), 1, 0, 0, 1,
             true);
}

TEST(ScanGeometryMoS2, ScanTurnedHalfway) {
  // Pattern (a, b) was recorded at (31 − a, 23 − b): r = −n + c, a rotation by 180°, which only
  // the sign of the stated C10 tells from 0° (the curl of the centre of mass cannot).
  expect_map(estimate("180", 32, 24, [](int64_t a, int64_t b) { return std::pair{31 - a, 23 - b}; }, false), -1, 0, 0,
             -1, false);
}

TEST(ScanGeometryMoS2, ScanTurnedAQuarter) {
  // A 24 x 32 scan whose pattern (a, b) was recorded at (b, 23 − a): r = [[0, 1], [−1, 0]] n + c.
  expect_map(estimate("90", 24, 32, [](int64_t a, int64_t b) { return std::pair{b, 23 - a}; }, false), 0, 1, -1, 0,
             false);
}

// [data] shuffle_positions: the same positions given to the patterns in a random order seeded by
// [reconstruct] seed (a structureless baseline). The saved positions are the
// raster's, permuted (a few left in place of 144: core's epoch_permutation), the same for the
// same seed and another for another; and the patterns no longer fit one object: on 12 x 12 of the
// MoS2 counts the loss after 20 iterations rises from 0.01765 to 0.01992 (+13 %).
TEST(ScanGeometryMoS2, ShuffledPositionsAreTheRastersInAnotherOrder) {
  tycho::test::temp_folder tmp;
  const std::string cfg =
      write_recorded_scan(tmp, 12, 12, [](int64_t a, int64_t b) { return std::pair{a + 10, b + 6}; }, false, "0.5");
  struct run_result {
    std::vector<double> positions;
    double loss = 0;
  };
  const auto run = [&](const std::string& name, const std::string& shuffle, const std::string& seed) {
    const auto r = tycho::test::run_command(
        {tycho::test::tycho_exe(), "reconstruct", cfg, "-o", tmp / name, "--iterations", "20", "--set",
         "data.shuffle_positions=" + shuffle, "--set", "reconstruct.seed=" + seed, "--set",
         "preprocess.scan_rotation_deg=0", "--set", "preprocess.scan_transpose=false", "--set",
         "reconstruct.positions.correct=false", "--set", "reconstruct.positions.refine_scan_map=false", "--set",
         "output.previews=false"});
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    run_result out;
    if (!r.exited_with(0)) return out;
    if (shuffle == "true") EXPECT_NE(r.err.find("in a random order (seed " + seed + ")"), std::string::npos) << r.err;
    const auto record = tycho::test::load_result(tmp / name);
    const auto& p = record.array("positions_px", name);
    const auto* v = reinterpret_cast<const double*>(p.bytes.data());
    out.positions.assign(v, v + p.bytes.size() / sizeof(double));
    const auto& L = record.array("loss_history", name);
    out.loss = reinterpret_cast<const double*>(L.bytes.data())[L.bytes.size() / sizeof(double) - 1];
    return out;
  };
  const run_result raster = run("a.zip", "false", "0"), shuffled = run("b.zip", "true", "0"),
                   again = run("c.zip", "true", "0"), other = run("d.zip", "true", "1");
  ASSERT_EQ(raster.positions.size(), 288u);
  ASSERT_EQ(shuffled.positions.size(), 288u);
  EXPECT_EQ(shuffled.positions, again.positions);  // bit for bit: the seed decides
  EXPECT_NE(shuffled.positions, other.positions);
  std::size_t in_place = 0;
  std::vector<std::pair<double, double>> a, b;
  for (std::size_t k = 0; k < 144; ++k) {
    in_place += shuffled.positions[2 * k] == raster.positions[2 * k] &&
                shuffled.positions[2 * k + 1] == raster.positions[2 * k + 1];
    a.emplace_back(raster.positions[2 * k], raster.positions[2 * k + 1]);
    b.emplace_back(shuffled.positions[2 * k], shuffled.positions[2 * k + 1]);
  }
  EXPECT_LT(in_place, 5u);  // a random permutation leaves one in place on average
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);  // the same positions
  EXPECT_GT(shuffled.loss, 1.08 * raster.loss) << raster.loss << " " << shuffled.loss;
  std::printf("shuffled positions: loss %.5f against %.5f on the raster\n", shuffled.loss, raster.loss);
}

// [reconstruct] validation_fraction: a share of the patterns (drawn by the seed) never enters a
// batch, and their mean loss at the run's end is the held-out loss — how well the object and probe
// predict patterns they were not fitted to. On 12 x 12 of the MoS2 counts (36 of 144 held out, 50
// iterations) the neighbours' overlap predicts them where the positions place the patterns (held-out
// loss 0.01662), and not where the patterns are shuffled over the positions (0.01943, +17 %).
TEST(ScanGeometryMoS2, HeldOutPatternsArePredictedOnlyWhereThePositionsPlaceThem) {
  tycho::test::temp_folder tmp;
  const std::string cfg =
      write_recorded_scan(tmp, 12, 12, [](int64_t a, int64_t b) { return std::pair{a + 10, b + 6}; }, false, "0.5");
  const auto run = [&](const std::string& name, const std::string& shuffle, const std::string& seed) {
    const auto r = tycho::test::run_command(
        {tycho::test::tycho_exe(), "reconstruct", cfg, "-o", tmp / name, "--iterations", "50", "--set",
         "reconstruct.validation_fraction=0.25", "--set", "data.shuffle_positions=" + shuffle, "--set",
         "reconstruct.seed=" + seed, "--set", "preprocess.scan_rotation_deg=0", "--set", "preprocess.scan_transpose=false",
         "--set", "reconstruct.positions.correct=false", "--set", "reconstruct.positions.refine_scan_map=false", "--set",
         "output.previews=false"});
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    EXPECT_NE(r.err.find("the 36 held-out patterns' mean loss"), std::string::npos) << r.err;
    if (!r.exited_with(0)) return nlohmann::json{};
    return nlohmann::json::parse(tycho::test::load_result(tmp / name).manifest_json).at("validation");
  };
  const nlohmann::json placed = run("a.zip", "false", "0"), again = run("b.zip", "false", "0"),
                       shuffled = run("c.zip", "true", "0");
  ASSERT_FALSE(placed.is_null());
  ASSERT_FALSE(shuffled.is_null());
  EXPECT_EQ(placed.at("patterns").get<int64_t>(), 36) << placed.dump();
  EXPECT_DOUBLE_EQ(placed.at("fraction").get<double>(), 0.25) << placed.dump();
  EXPECT_EQ(placed.dump(), again.dump());  // the seed decides the held-out patterns; the run is deterministic
  const double p = placed.at("held_out_loss").get<double>(), q = shuffled.at("held_out_loss").get<double>();
  EXPECT_TRUE(std::isfinite(p)) << placed.dump();
  EXPECT_GT(q, 1.1 * p) << placed.dump() << " " << shuffled.dump();
  std::printf("held-out loss %.5f where the positions place the patterns, %.5f shuffled (fitted %.5f, %.5f)\n", p, q,
              placed.at("last_iteration_loss").get<double>(), shuffled.at("last_iteration_loss").get<double>());
  // Bad values name the key; the positions' correction (a held-out pattern has no gradient) is refused.
  for (const std::string& bad : {"0.6", "-0.1", "\"half\""}) {
    const auto r = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct", cfg, "-o", tmp / "x.zip",
                                             "--iterations", "1", "--set", "reconstruct.validation_fraction=" + bad});
    EXPECT_FALSE(r.exited_with(0)) << bad;
    EXPECT_NE(r.err.find("validation_fraction"), std::string::npos) << bad << ": " << r.err;
  }
  const auto held = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct", cfg, "-o", tmp / "y.zip",
                                              "--iterations", "1", "--set", "reconstruct.validation_fraction=0.1",
                                              "--set", "preprocess.scan_rotation_deg=0", "--set",
                                              "preprocess.scan_transpose=false", "--set", "output.previews=false"});
  EXPECT_FALSE(held.exited_with(0)) << held.describe();
  EXPECT_NE(held.err.find("validation_fraction needs the positions held"), std::string::npos) << held.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "y.zip"));
}

// scan_geometry_search = true (host/src/runtime/geometry_search.hpp): trial reconstructions rank
// the candidate geometries by their loss. The MoS2 counts turned a quarter (as ScanTurnedAQuarter)
// on a transposed detector; candidates every 90° with both transposes, 20 iterations each (on
// these counts the best's loss is 0.0153 against 0.0179 for the best elsewhere, with every seed).
// The run then reads the data again with the search's geometry and holds its placed rotation.
TEST(ScanGeometryMoS2, TrialReconstructionsRankTheGeometry) {
  tycho::test::temp_folder tmp;
  const std::string cfg = write_recorded_scan(tmp, 24, 32, [](int64_t a, int64_t b) { return std::pair{b, 23 - a}; },
                                              true, "0.5");
  const auto r = tycho::test::run_command(
      {tycho::test::tycho_exe(), "reconstruct", cfg, "-o", tmp / "r.zip", "--set", "preprocess.scan_geometry_search=true",
       "--set", "preprocess.scan_geometry_search_step_deg=90", "--set", "preprocess.scan_geometry_search_iterations=20",
       "--set", "reconstruct.iterations=1", "--set", "output.previews=false"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.err.find("the search's geometry is taken"), std::string::npos) << r.err;
  const auto manifest = nlohmann::json::parse(tycho::test::load_result(tmp / "r.zip").manifest_json);
  const nlohmann::json& search = manifest.at("preprocess").at("scan_geometry_search");
  EXPECT_TRUE(search.at("conclusive").get<bool>()) << search.dump();
  // The ranking's 90°, placed between the candidates by eleven trials in batches of a fifth of
  // the scan (20 iterations: 100 steps of the object), one draw for all, a parabola's vertex.
  EXPECT_NEAR(search.at("rotation_deg").get<double>(), 90.0, 0.5) << search.dump();
  EXPECT_EQ(search.at("fine_offsets_deg").size(), 11u) << search.dump();
  EXPECT_EQ(search.at("fine_losses").size(), 11u) << search.dump();
  EXPECT_EQ(search.at("fine_batch").get<int64_t>(), 154) << search.dump();
  EXPECT_TRUE(search.at("transpose").get<bool>()) << search.dump();
  std::printf("placed at %.3f°\n", search.at("rotation_deg").get<double>());
  // 8 candidates, the best's two neighbours half a step away, and the best and the runner-up with
  // five other seeds, each holding out four folds of the patterns in turn (the placement's are
  // listed apart).
  const nlohmann::json& trials = search.at("trials_rotation_transpose_seed_fold_loss");
  EXPECT_EQ(trials.size(), 50u) << search.dump();
  int64_t held_out_trials = 0;
  for (const auto& t : trials) held_out_trials += t[3].get<int64_t>() >= 0;
  EXPECT_EQ(held_out_trials, 40) << search.dump();
  ASSERT_EQ(search.at("gaps").size(), 20u) << search.dump();
  EXPECT_DOUBLE_EQ(search.at("t_critical").get<double>(), 1.729) << search.dump();  // 19 degrees of freedom
  EXPECT_GT(search.at("t_statistic").get<double>(), 1.729) << search.dump();
  std::printf("the held-out gaps' t %.3f\n", search.at("t_statistic").get<double>());
  // The first read's measurement stays in the record: here the parallax's (the search was asked for).
  EXPECT_EQ(search.at("preprocessing_scan_map").at("source"), "parallax") << search.dump();
  const nlohmann::json& map = manifest.at("preprocess").at("scan_map");
  EXPECT_EQ(map.at("source"), "trial reconstructions") << map.dump();
  const auto& L = map.at("linear");
  EXPECT_NEAR(L[0][1].get<double>(), 1.0, 1e-4) << map.dump();  // cos 0.5° = 1 − 4e-5
  EXPECT_NEAR(L[1][0].get<double>(), -1.0, 1e-4) << map.dump();
  // Resumed from the config it ran from (the default "auto"): the search's geometry again, read
  // from the result, not searched anew (the patterns transposed as the run had them).
  const auto again = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct", cfg, "--from", tmp / "r.zip",
                                               "--iterations", "2", "-o", tmp / "r2.zip", "--set", "output.previews=false"});
  ASSERT_TRUE(again.exited_with(0)) << again.describe();
  EXPECT_NE(again.err.find("resuming with the geometry the trial reconstructions"), std::string::npos) << again.err;
  EXPECT_EQ(again.err.find("iterations (positions held"), std::string::npos) << again.err;  // no trials
  EXPECT_NE(again.err.find("patterns transposed"), std::string::npos) << again.err;
}

// The search on a scan of pure Poisson noise (no specimen: a disc of 1,000 counts a pattern over
// 12 x 12 positions): neighbouring patterns differ by no more than their noise, so the check takes
// the one-sided 99 % point; the trials rank some geometry first (the one whose trial fitted this
// noise best), but it predicts held-out patterns no better than the runner-up: inconclusive, the
// nominal raster stays. (Session 21's check on the fitted loss passed its first test here, t 11.4.)
TEST(ScanGeometryMoS2, TrialReconstructionsOfPureNoiseAreInconclusive) {
  const int64_t sa = 12, sb = 12, n = 32;
  std::vector<uint16_t> counts(std::size_t(sa * sb * n * n), 0);
  uint64_t state = 12345;
  const auto uniform = [&state] {  // SplitMix64: the same counts on every platform
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return double((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  int64_t disc = 0;
  for (int64_t u = 0; u < n; ++u)
    for (int64_t v = 0; v < n; ++v) disc += (u - n / 2) * (u - n / 2) + (v - n / 2) * (v - n / 2) <= 100;
  const double lambda = 1000.0 / double(disc);
  for (int64_t p = 0; p < sa * sb; ++p)
    for (int64_t u = 0; u < n; ++u)
      for (int64_t v = 0; v < n; ++v) {
        if ((u - n / 2) * (u - n / 2) + (v - n / 2) * (v - n / 2) > 100) continue;
        int k = 0;  // Knuth's Poisson sampler (λ ≈ 3)
        for (double prod = uniform(); prod > std::exp(-lambda); prod *= uniform()) ++k;
        counts[std::size_t((p * n + u) * n + v)] = uint16_t(k);
      }
  tycho::test::temp_folder tmp;
  tycho::test::write_npy(tmp / "noise.npy", "<u2", {sa, sb, n, n}, counts.data(), counts.size() * 2);
  const std::string cfg = tmp / "noise.toml";
  {
    std::ofstream f(cfg);
    f << "[data]\nsource = \"npy\"\npath = \"noise.npy\"\ncentred = true\nscan_step_A = 0.5\n"
         "detector_pixel_invA = 0.06\n[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = -150.0\n"
         "[preprocess]\nscan_geometry_search = true\nscan_geometry_search_step_deg = 90\n[reconstruct]\n"
         "iterations = 1\n[output]\npreviews = false\n";
  }
  const auto r = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct", cfg, "-o", tmp / "r.zip"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.err.find("the search's checks need the one-sided 99 % point"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the search is inconclusive"), std::string::npos) << r.err;
  const auto manifest = nlohmann::json::parse(tycho::test::load_result(tmp / "r.zip").manifest_json);
  const nlohmann::json& search = manifest.at("preprocess").at("scan_geometry_search");
  EXPECT_FALSE(search.at("conclusive").get<bool>()) << search.dump();
  EXPECT_DOUBLE_EQ(search.at("t_critical").get<double>(), 2.539) << search.dump();  // 99 %, 19 degrees of freedom
  EXPECT_LE(search.at("neighbour_information").get<double>(),
            2 * search.at("neighbour_information_standard_error").get<double>())
      << search.dump();
  EXPECT_LE(search.at("t_statistic").get<double>(), 2.539) << search.dump();
  // No placement between the candidates: it follows a conclusive check only.
  EXPECT_EQ(search.at("trials_rotation_transpose_seed_fold_loss").size(), 50u) << search.dump();
  std::printf("noise scan: the held-out gaps' t %.3f against %.3f; neighbours %.3f ± %.3f\n",
              search.at("t_statistic").get<double>(), search.at("t_critical").get<double>(),
              search.at("neighbour_information").get<double>(),
              search.at("neighbour_information_standard_error").get<double>());
}

// scan_scale = "lattice" (core/lattice_map): the MoS2 counts with the step stated 4 % short
// (0.48 Å for the true 0.5 Å) and the detector transposed: the map from the crystal's lattice
// puts the scale back (measured 0.9997 of the true step as recorded), the transpose kept.
TEST(ScanGeometryMoS2, TheLatticeFindsAStepStatedWrong) {
  std::string log;
  const nlohmann::json map =
      estimate("lattice", 32, 24, [](int64_t a, int64_t b) { return std::pair{a, b}; }, true, &log, "0.48",
               {"preprocess.scan_scale=\"lattice\""});
  ASSERT_TRUE(map.is_object()) << log;
  const auto& lattice = map.at("lattice");
  ASSERT_TRUE(lattice.at("used").get<bool>()) << lattice.dump() << "\n" << log;
  EXPECT_NEAR(lattice.at("scale").get<double>(), 0.5 / 0.48, 0.005 * 0.5 / 0.48) << lattice.dump();
  EXPECT_TRUE(map.at("transpose").get<bool>());
  const auto& L = map.at("linear");
  const double det = L[0][0].get<double>() * L[1][1].get<double>() - L[0][1].get<double>() * L[1][0].get<double>();
  EXPECT_NEAR(std::sqrt(det), 0.5 / 0.48, 0.005 * 0.5 / 0.48) << map.dump();
  // Its anisotropy is within 5 %: the scale alone, on the parallax's rotation (0 here).
  EXPECT_EQ(lattice.at("applied"), "scale") << lattice.dump();
  EXPECT_NEAR(L[0][0].get<double>(), L[1][1].get<double>(), 1e-12) << map.dump();
  EXPECT_NEAR(L[0][1].get<double>(), -L[1][0].get<double>(), 1e-12) << map.dump();
  EXPECT_NE(map.at("notes").dump().find("from the crystal's lattice"), std::string::npos) << map.dump();
}

// scan_scale = "auto" takes the lattice's map as "lattice" does (the same counts, step stated 4 %
// short), and with [data] fast_axis given keeps the stated step, which the run then holds along
// the fast axis, and says so.
TEST(ScanGeometryMoS2, AutoTakesTheLatticeUnlessAFastAxisHoldsTheStep) {
  const auto as_recorded = [](int64_t a, int64_t b) { return std::pair{a, b}; };
  std::string log;
  const nlohmann::json map = estimate("auto", 32, 24, as_recorded, false, &log, "0.48", {"preprocess.scan_scale=\"auto\""});
  ASSERT_TRUE(map.is_object()) << log;
  ASSERT_TRUE(map.at("lattice").at("used").get<bool>()) << map.dump() << "\n" << log;
  EXPECT_NEAR(map.at("lattice").at("scale").get<double>(), 0.5 / 0.48, 0.005 * 0.5 / 0.48) << map.dump();
  EXPECT_NE(map.at("notes").dump().find("scan_scale = \\\"auto\\\""), std::string::npos) << map.dump();

  const nlohmann::json held = estimate("auto, fast axis", 32, 24, as_recorded, false, &log, "0.48",
                                       {"preprocess.scan_scale=\"auto\"", "data.fast_axis=1"});
  ASSERT_TRUE(held.is_object()) << log;
  EXPECT_FALSE(held.contains("lattice")) << held.dump();
  EXPECT_NE(held.at("notes").dump().find("[data] fast_axis"), std::string::npos) << held.dump();
  const auto& L = held.at("linear");
  const double det = L[0][0].get<double>() * L[1][1].get<double>() - L[0][1].get<double>() * L[1][0].get<double>();
  EXPECT_NEAR(det, 1.0, 1e-12) << held.dump();  // the parallax's rotation only: the stated step
}

// Where the lattice's step ratio or shear exceeds 5 % (a drift's stretch, a wrong step along one
// axis) its whole map is the start; below, its isotropic scale on the parallax's rotation (the
// case above: L a multiple of the identity). Every other row of the MoS2 counts along axis 0
// (true steps 1.0 and 0.5 Å) with 0.707 Å stated: step scales √2 and 1/√2, isotropic 1.
TEST(ScanGeometryMoS2, TheLatticeGivesTheWholeMapWhereItIsAnisotropic) {
  std::string log;
  const nlohmann::json map = estimate("stretched", 16, 24, [](int64_t a, int64_t b) { return std::pair{2 * a, b}; },
                                      false, &log, "0.70710678", {"preprocess.scan_scale=\"auto\""});
  ASSERT_TRUE(map.is_object()) << log;
  ASSERT_TRUE(map.at("lattice").at("used").get<bool>()) << map.dump() << "\n" << log;
  const auto& L = map.at("linear");
  EXPECT_NEAR(L[0][0].get<double>(), std::sqrt(2.0), 0.02) << map.dump();
  EXPECT_NEAR(L[1][1].get<double>(), 1 / std::sqrt(2.0), 0.01) << map.dump();
  EXPECT_NEAR(L[0][1].get<double>(), 0.0, 0.02) << map.dump();
  EXPECT_NEAR(L[1][0].get<double>(), 0.0, 0.02) << map.dump();
  EXPECT_NE(map.at("notes").dump().find("the whole map"), std::string::npos) << map.dump();
  EXPECT_EQ(map.at("lattice").at("applied"), "whole map") << map.dump();
}

// The run reads back the lattice's scale only where the preprocessing used it (the log says what
// the map holds).
TEST(ScanGeometryReport, TheLatticeScaleIsReadOnlyWhereUsed) {
  EXPECT_DOUBLE_EQ(tycho::host::lattice_scale_of_report(R"({"scan_map":{"lattice":{"used":true,"scale":1.03}}})"), 1.03);
  EXPECT_TRUE(std::isnan(tycho::host::lattice_scale_of_report(R"({"scan_map":{"lattice":{"used":false}}})")));
  EXPECT_TRUE(std::isnan(tycho::host::lattice_scale_of_report(R"({"scan_map":{"lattice":{"used":true,"scale":-2}}})")));
  EXPECT_TRUE(std::isnan(tycho::host::lattice_scale_of_report(R"({"scan_map":{}})")));
  EXPECT_TRUE(std::isnan(tycho::host::lattice_scale_of_report("not json")));
  EXPECT_TRUE(std::isnan(tycho::host::lattice_scale_of_report("")));
}

// At low dose the shifts between neighbouring groups are noisy and their fit misjudges the
// rotation; aligning all groups at once holds it (core/parallax.cpp). The MoS2 counts as recorded
// (rotation 0) thinned binomially to a tenth (2,500 electrons per pattern; single detector pixels
// are the groups here, so each holds few counts), three seeds: the pairs alone 0.33°, 2.23° and
// 0.57° off, the alignment 0.07°, 0.14°, 0.18° (at a twentieth, 0.14°, 0.29°, 1.13°: noisier).
TEST(ScanGeometryMoS2, AtLowDoseAllGroupsAlignedHoldTheRotation) {
  const std::vector<uint16_t> full = mos2_counts();
  const int64_t n = 96, m = n * n;
  // The groups as the session makes them (scan_geometry_estimate.cpp): 80 keV, 25 mrad, dk 0.06:
  // a disc of 10 px, groups of 1 px (0.75 scan steps of shift per pixel at C10 = −150 Å).
  const double lambda = 12.2643 / std::sqrt(80e3 * (1 + 0.978476e-6 * 80e3));
  const double radius = 1.1 * 25e-3 / lambda / 0.06, shift_per_px = lambda * 150 * 0.06 / 0.5;
  double sum_aligned = 0, sum_pairs = 0;
  for (uint64_t seed : {1u, 2u, 3u}) {
    std::mt19937_64 rng(seed);
    tycho::parallax_images images = tycho::parallax_images::make(32, 24, n, n, radius, 1, 32);
    std::vector<float> pattern(static_cast<std::size_t>(m));
    double electrons = 0;
    for (int64_t i = 0; i < 32; ++i)
      for (int64_t k = 0; k < 24; ++k) {
        const uint16_t* p = full.data() + (i * 24 + k) * m;
        for (int64_t u = 0; u < n; ++u)  // centred → FFT order
          for (int64_t v = 0; v < n; ++v) {
            const int thinned = std::binomial_distribution<int>(p[u * n + v], 0.1)(rng);
            pattern[std::size_t(((u + n / 2) % n) * n + (v + n / 2) % n)] = float(thinned);
            electrons += thinned;
          }
        images.add(i, k, pattern.data());
      }
    EXPECT_NEAR(electrons / 768, 2500, 20);
    const tycho::parallax_result r = tycho::estimate_parallax(images, shift_per_px);
    ASSERT_TRUE(r.done) << r.why_not;
    ASSERT_TRUE(r.aligned);
    // The rotation of A nearest a pure rotation (0 here), and the pairs' before the alignment.
    const double rotation = std::atan2(r.A[1][0] - r.A[0][1], r.A[0][0] + r.A[1][1]) * 180 / pi;
    const double pairs = rotation - r.aligned_rotation * 180 / pi;
    const double sd = r.rotation_sd * 180 / pi;
    EXPECT_LT(std::abs(rotation), 0.5) << "seed " << seed << ": the pairs alone " << pairs << "°, sd " << sd << "°";
    EXPECT_LT(std::abs(rotation), 3 * sd) << "seed " << seed << ": its standard error " << sd << "° is not honest";
    sum_aligned += std::abs(rotation);
    sum_pairs += std::abs(pairs);
  }
  EXPECT_LT(sum_aligned, 0.5 * sum_pairs) << "the alignment gains nothing over the pairs";
}

// A small scan of an atomic lattice, simulated (16 x 16 positions of 0.5 Å, 64² detector of
// 0.06 Å⁻¹, 20 mrad, C10 −100 Å, 25,000 electrons per pattern; true rotation 0): the parallax is
// too uncertain (5.2 %) and the centre-of-mass curl, though its contrast over the angles is 64 %,
// has a flat minimum: −2.24°. Its own standard error (about 1.3°) says so, and within two of them
// of a quarter turn the estimate is the quarter turn: 0°, not −2.24° (a default run then reaches
// Pearson 0.971 against 0.921, docs/scan-geometry.md).
TEST(ScanGeometrySimulated, ACurlEstimateWithinItsErrorOfAQuarterTurnIsTheQuarterTurn) {
  tycho::test::temp_folder tmp;
  const std::string cfg = tmp.write("scan.toml", tycho::test::lattice_scan_16x16(tmp.path().string()));
  const auto r = tycho::test::run_command({tycho::test::tycho_exe(), "preprocess", cfg, "-q", "-o", tmp / "p.zip"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto pre = nlohmann::json::parse(tycho::test::load_result(tmp / "p.zip").manifest_json).at("preprocess");
  const auto& curl = pre.at("rotation_estimate");
  const double sd = curl.at("standard_error_deg").get<double>();
  EXPECT_GT(sd, 0.5) << curl.dump();
  EXPECT_LT(sd, 3.0) << curl.dump();
  EXPECT_GT(std::abs(curl.at("scan_rotation_deg").get<double>()), 1.0) << "the curl alone is off here: " << curl.dump();
  const auto& map = pre.at("scan_map");
  EXPECT_EQ(map.at("source"), "centre-of-mass curl") << map.dump();
  EXPECT_EQ(map.at("rotation_deg").get<double>(), 0.0) << map.dump();
}

}  // namespace
