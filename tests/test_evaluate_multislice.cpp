// `tycho evaluate` with the multislice truths of ../shared/data (si110, bilayer, mos2_partial):
// synthetic results built from the truth arrays themselves, so every figure is known: the
// truth's own slabs as slices score Pearson 1 and an RMS of 0 on the unwrapped total phase (even
// with each slice's phase offset by 2.5 rad, a total of 25 rad); the bilayer's layers placed in
// the slices at their depths correlate 1 with their own layer and as little as the two truths
// correlate with each other with the other; positions = truth + a global shift + a jitter of
// exactly 0.05 Å give a position RMS of 0.05 Å and the shift back. Mismatched shapes are refused
// naming the member. About 1 s in all (Release, one core).
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/host/evaluate.hpp>
#include <tycho/host/result_record.hpp>

#include <cmath>
#include <complex>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "npy_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "zip_members.hpp"

namespace fs = std::filesystem;
using tycho::owned_array;
using tycho::test::bytes_of;
using tycho::test::npy_bytes;

namespace {

std::string data_file(const std::string& set, const std::string& name) {
  return tycho::test::source_dir() + "/../shared/data/" + set + "/" + name;
}

// The truth's arrays, read through the zip format as a result would be.
struct truth_arrays {
  tycho::host::loaded_record record;
  const owned_array& operator[](const std::string& name) const { return record.array(name, "truth"); }
  double scalar(const std::string& name) const { return (*this)[name].as<double>()[0]; }
};

// A synthetic result: `slices` (S, H, W) complex64, probe centres `positions_A` (P, 2) in Å from
// the object's corner; the manifest records the pixel and, when > 0, the slice thickness.
struct synthetic_result {
  int64_t h = 0, w = 0;
  double pixel_A = 0;
  std::vector<std::complex<float>> slices;  // S·H·W
  std::vector<double> positions_A;          // 2P
  double slice_thickness_A = 0;             // 0: not recorded
  std::string config_toml;                  // "" : none

  void save(const std::string& path) const {
    const int64_t s = int64_t(slices.size()) / (h * w), p = int64_t(positions_A.size()) / 2;
    std::vector<double> px(positions_A);
    for (double& v : px) v /= pixel_A;
    // Every member and key a result holds (tycho evaluate reads results as strictly as --from):
    // positions listed (no raster step), an 8 x 8 window, 7 iterations.
    constexpr int64_t n = 8, iterations = 7;
    std::vector<owned_array> arrays;
    arrays.push_back(owned_array::from_vector("object", {kDLComplex, 64, 1}, {s, h, w}, slices));
    arrays.push_back(owned_array::from_vector("probe", {kDLComplex, 64, 1}, {1, n, n},
                                              std::vector<std::complex<float>>(n * n, 1.0f)));
    arrays.push_back(owned_array::from_vector("positions_px", {kDLFloat, 64, 1}, {p, 2}, px));
    arrays.push_back(owned_array::from_vector("positions_A", {kDLFloat, 64, 1}, {p, 2}, positions_A));
    arrays.push_back(owned_array::from_vector("loss_history", {kDLFloat, 64, 1}, {iterations},
                                              std::vector<double>(iterations, 1.0)));
    nlohmann::ordered_json m;
    m["format"] = "tycho-result";
    m["format_version"] = 1;
    if (!config_toml.empty()) m["config_toml"] = config_toml;
    m["data"] = {{"scan_shape", {p, 1}}};
    m["calibration"] = {{"object_pixel_A", {pixel_A, pixel_A}},   {"scan_step_A", {nullptr, nullptr}},
                        {"scan_origin_A", {0.0, 0.0}},           {"window_shape", {n, n}},
                        {"object_padding_px", 0}};
    if (slice_thickness_A > 0) m["calibration"]["slice_thickness_A"] = slice_thickness_A;
    m["history"] = {{"iterations", iterations}};
    tycho::host::save_record(tycho::host::format_for_path(tycho::test::plugins(), path), arrays, m.dump(), path,
                             TYCHO_SAVE_OVERWRITE);
  }
};

int64_t wrap(int64_t i, int64_t n) { return ((i % n) + n) % n; }

// exp(i·phase) of a truth cell cut so that truth index = object index + shift, (h, w).
std::vector<std::complex<float>> cut(const float* phase, int64_t th, int64_t tw, int64_t h, int64_t w,
                                     const int64_t shift[2], double offset_rad = 0.0) {
  std::vector<std::complex<float>> z(std::size_t(h * w));
  for (int64_t r = 0; r < h; ++r)
    for (int64_t c = 0; c < w; ++c)
      z[std::size_t(r * w + c)] = std::polar(
          1.0f, float(offset_rad + phase[wrap(r + shift[0], th) * tw + wrap(c + shift[1], tw)]));
  return z;
}

// The truth's raster, laid out in an object whose scan index (0, 0) is at object pixel
// (anchor, anchor), far enough from the edges that the filter (4σ) does not reach them from the
// compared field: sets the shift truth index − object index that the evaluation should find.
std::vector<double> raster_A(const truth_arrays& t, double pixel_A, double anchor, int64_t shift[2]) {
  const int64_t* shape = t["scan_shape"].as<int64_t>();
  const double step = t.scalar("scan_step_A");
  const double* origin = t["scan_origin_A"].as<double>();
  std::vector<double> pos;
  for (int64_t i = 0; i < shape[0]; ++i)
    for (int64_t j = 0; j < shape[1]; ++j) {
      pos.push_back(anchor * pixel_A + double(i) * step);
      pos.push_back(anchor * pixel_A + double(j) * step);
    }
  for (int a = 0; a < 2; ++a) shift[a] = std::llround(origin[a] / pixel_A - anchor);
  return pos;
}

class EvaluateMultislice : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tycho_evaluate_multislice_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static nlohmann::json evaluate(const std::string& result, const std::string& truth,
                                 std::optional<double> dz = std::nullopt) {
    return nlohmann::json::parse(tycho::host::evaluate_result(tycho::test::plugins(), result, truth, 2.0, 0.8, dz));
  }
  static std::string error_of(const std::string& result, const std::string& truth) {
    try {
      (void)evaluate(result, truth);
    } catch (const tycho::error& e) {
      return e.what();
    }
    return "(no error)";
  }
  static fs::path dir_;
};
fs::path EvaluateMultislice::dir_;

// The si110 truth's 10 slabs of 10 Å as 10 slices, each offset by 2.5 rad: the total phase
// (25 rad of offset, 8.9 rad of contrast) is recovered unwrapped, and every depth scores 1.
TEST_F(EvaluateMultislice, Si110SlabsAsSlicesScorePerfectlyUnwrapped) {
  const std::string truth_path = data_file("si110", "si110_ground_truth.npz");
  if (!fs::exists(truth_path)) GTEST_SKIP() << "no " << truth_path;
  const truth_arrays t{tycho::test::load_result(truth_path)};
  const owned_array& slabs = t["phase_slices"];
  const int64_t g = slabs.shape[0], th = slabs.shape[1], tw = slabs.shape[2];
  synthetic_result r;
  r.h = r.w = 176;
  r.pixel_A = t.scalar("pixel_size_A");
  int64_t shift[2];
  r.positions_A = raster_A(t, r.pixel_A, 60.0, shift);
  for (int64_t s = 0; s < g; ++s) {
    const auto z = cut(slabs.as<float>() + s * th * tw, th, tw, r.h, r.w, shift, 2.5);
    r.slices.insert(r.slices.end(), z.begin(), z.end());
  }
  r.slice_thickness_A = 10.0;
  const std::string path = (dir_ / "si110_10x10.zip").string();
  r.save(path);

  const auto j = evaluate(path, truth_path);
  EXPECT_EQ(j.at("slices"), 10);
  EXPECT_EQ(j.at("slice_thickness_A"), 10.0);
  const auto& total = j.at("total_phase");
  EXPECT_GT(total.at("pearson").get<double>(), 1.0 - 1e-9) << j.dump(2);
  EXPECT_LT(total.at("rms_rad").get<double>(), 2e-6) << j.dump(2);
  EXPECT_EQ(total.at("shift_px"), nlohmann::json({shift[0], shift[1]}));
  ASSERT_EQ(j.at("depths").size(), 10u) << j.dump(2);
  for (int k = 0; k < 10; ++k) {
    const auto& d = j.at("depths")[k];
    EXPECT_EQ(d.at("slices"), nlohmann::json({k}));
    EXPECT_EQ(d.at("truth_slabs"), nlohmann::json({k}));
    EXPECT_GT(d.at("pearson").get<double>(), 1.0 - 1e-9) << d.dump();
    EXPECT_LT(d.at("rms_rad").get<double>(), 1e-6) << d.dump();
  }
  EXPECT_EQ(j.at("depths")[3].at("z_A"), nlohmann::json({30.0, 40.0}));
  // The wrap-safe local phase of the product of the slices still scores it (exp(i·25) drops out).
  EXPECT_GT(j.at("pearson").get<double>(), 1.0 - 1e-9);
  EXPECT_FALSE(j.contains("layers"));
  EXPECT_FALSE(j.contains("positions"));

  // Half the phase in every slice: the same map up to scale (Pearson 1), and an RMS error that is
  // half the truth's high-passed RMS, i.e. that of the difference.
  for (auto& v : r.slices) v = std::polar(1.0f, 0.5f * std::arg(v * std::polar(1.0f, -2.5f)));
  r.save(path);
  const auto half = evaluate(path, truth_path).at("total_phase");
  EXPECT_GT(half.at("pearson").get<double>(), 1.0 - 1e-9);
  // 0.5 × the RMS of the truth's high-passed total phase over the compared field, by an
  // independent scipy reference of the metric (phase_total − gaussian_filter(phase_total,
  // 2 Å / 0.16972 Å, mode='wrap'), the same field of view and registration): 0.59223 rad.
  EXPECT_NEAR(half.at("rms_rad").get<double>(), 0.59223, 2e-5) << half.dump();
}

// Five slices of 20 Å against ten slabs of 10 Å: each slice pairs with the two slabs inside it.
TEST_F(EvaluateMultislice, ThickerSlicesPairWithTheSlabsInside) {
  const std::string truth_path = data_file("si110", "si110_ground_truth.npz");
  if (!fs::exists(truth_path)) GTEST_SKIP() << "no " << truth_path;
  const truth_arrays t{tycho::test::load_result(truth_path)};
  const owned_array& slabs = t["phase_slices"];
  const int64_t th = slabs.shape[1], tw = slabs.shape[2];
  synthetic_result r;
  r.h = r.w = 176;
  r.pixel_A = t.scalar("pixel_size_A");
  int64_t shift[2];
  r.positions_A = raster_A(t, r.pixel_A, 60.0, shift);
  for (int64_t s = 0; s < 5; ++s) {
    std::vector<float> sum(std::size_t(th * tw));
    for (std::size_t i = 0; i < sum.size(); ++i)
      sum[i] = slabs.as<float>()[2 * s * th * tw + i] + slabs.as<float>()[(2 * s + 1) * th * tw + i];
    const auto z = cut(sum.data(), th, tw, r.h, r.w, shift);
    r.slices.insert(r.slices.end(), z.begin(), z.end());
  }
  // Not in the manifest: the config records it, as a run of the multislice engine does.
  r.config_toml = "[reconstruct]\nslices = 5\nslice_thickness_A = 20.0\n";
  const std::string path = (dir_ / "si110_5x20.zip").string();
  r.save(path);
  const auto j = evaluate(path, truth_path);
  EXPECT_EQ(j.at("slice_thickness_A"), 20.0);
  ASSERT_EQ(j.at("depths").size(), 5u) << j.dump(2);
  for (int k = 0; k < 5; ++k) {
    const auto& d = j.at("depths")[k];
    EXPECT_EQ(d.at("slices"), nlohmann::json({k}));
    EXPECT_EQ(d.at("truth_slabs"), nlohmann::json({2 * k, 2 * k + 1}));
    EXPECT_GT(d.at("pearson").get<double>(), 1.0 - 1e-9) << d.dump();
  }
  EXPECT_GT(j.at("total_phase").at("pearson").get<double>(), 1.0 - 1e-9);
}

// The bilayer's layers in 10 slices of 5 Å, each at its depth (1.595 Å: slice 0; 44.785 Å:
// slice 8), the other slices empty: each layer correlates 1 with its own truth, and with the other
// layer's as the two truths correlate (0.08799 and 0.08520 by an independent scipy reference of
// the metric, each at its best shift). Swapped depths swap the figures.
TEST_F(EvaluateMultislice, BilayerLayersAreFoundAtTheirDepths) {
  const std::string truth_path = data_file("bilayer", "bilayer_ground_truth.npz");
  if (!fs::exists(truth_path)) GTEST_SKIP() << "no " << truth_path;
  const truth_arrays t{tycho::test::load_result(truth_path)};
  const owned_array &top = t["phase_top"], &bottom = t["phase_bottom"];
  const int64_t th = top.shape[0], tw = top.shape[1];
  synthetic_result r;
  r.h = r.w = 140;
  r.pixel_A = t.scalar("pixel_size_A");
  int64_t shift[2];
  r.positions_A = raster_A(t, r.pixel_A, 40.0, shift);
  auto build = [&](const owned_array& at0, const owned_array& at8) {
    r.slices.assign(std::size_t(10 * r.h * r.w), std::complex<float>(1.0f, 0.0f));
    const auto a = cut(at0.as<float>(), th, tw, r.h, r.w, shift), b = cut(at8.as<float>(), th, tw, r.h, r.w, shift);
    std::copy(a.begin(), a.end(), r.slices.begin());
    std::copy(b.begin(), b.end(), r.slices.begin() + 8 * r.h * r.w);
  };
  build(top, bottom);
  const std::string path = (dir_ / "bilayer.zip").string();
  r.save(path);
  // The slice thickness from the command line (the manifest records none).
  auto j = evaluate(path, truth_path, 5.0);
  ASSERT_EQ(j.at("layers").size(), 2u) << j.dump(2);
  const auto &lt = j.at("layers")[0], &lb = j.at("layers")[1];
  EXPECT_EQ(lt.at("layer"), "top");
  EXPECT_EQ(lt.at("slice"), 0);
  EXPECT_EQ(lt.at("other_layer"), "bottom");
  EXPECT_EQ(lb.at("layer"), "bottom");
  EXPECT_EQ(lb.at("slice"), 8);
  EXPECT_DOUBLE_EQ(lb.at("depth_A").get<double>(), 44.785);
  EXPECT_GT(lt.at("pearson").get<double>(), 1.0 - 1e-9) << lt.dump();
  EXPECT_GT(lb.at("pearson").get<double>(), 1.0 - 1e-9) << lb.dump();
  EXPECT_NEAR(lt.at("pearson_other").get<double>(), 0.08799, 2e-5) << lt.dump();
  EXPECT_NEAR(lb.at("pearson_other").get<double>(), 0.08520, 2e-5) << lb.dump();
  EXPECT_GT(j.at("total_phase").at("pearson").get<double>(), 1.0 - 1e-9);  // phase_total = top + bottom

  build(bottom, top);
  r.save(path);
  j = evaluate(path, truth_path, 5.0);
  EXPECT_NEAR(j.at("layers")[0].at("pearson").get<double>(), 0.08520, 2e-5);
  EXPECT_GT(j.at("layers")[0].at("pearson_other").get<double>(), 1.0 - 1e-9);
}

// Positions = truth + a global shift (the object's corner is not the cell's) + a jitter of
// |0.05| Å at every position with zero mean: the RMS is the jitter, the shift comes back, and the
// nominal raster's RMS is the data README's 0.374 Å.
TEST_F(EvaluateMultislice, PositionErrorIsTheJitterAfterRemovingTheShift) {
  const std::string truth_path = data_file("mos2_partial", "mos2_jitter_ground_truth.npz");
  if (!fs::exists(truth_path)) GTEST_SKIP() << "no " << truth_path;
  const truth_arrays t{tycho::test::load_result(truth_path)};
  const owned_array& phase = t["phase"];
  const owned_array& truth_pos = t["positions_true_A"];
  synthetic_result r;
  r.h = 200;
  r.w = 170;
  r.pixel_A = t.scalar("pixel_size_A");
  int64_t shift[2];
  (void)raster_A(t, r.pixel_A, 50.0, shift);
  r.slices = cut(phase.as<float>(), phase.shape[0], phase.shape[1], r.h, r.w, shift);
  // Object pixel 50 is the truth's scan origin: cell coordinates − (origin − 50 px).
  const double* origin = t["scan_origin_A"].as<double>();
  const double global[2] = {50.0 * r.pixel_A - origin[0], 50.0 * r.pixel_A - origin[1]};
  const int64_t p = truth_pos.shape[0];
  for (int64_t k = 0; k < p; ++k) {
    const double sign = k % 2 == 0 ? 1.0 : -1.0;  // P = 768 is even: the jitter's mean is 0
    r.positions_A.push_back(truth_pos.as<double>()[2 * k] + global[0] + sign * 0.03);
    r.positions_A.push_back(truth_pos.as<double>()[2 * k + 1] + global[1] - sign * 0.04);
  }
  const std::string path = (dir_ / "jitter.zip").string();
  r.save(path);
  const auto j = evaluate(path, truth_path);
  const auto& pj = j.at("positions");
  EXPECT_NEAR(pj.at("rms_A").get<double>(), 0.05, 1e-12) << pj.dump();
  EXPECT_NEAR(pj.at("max_A").get<double>(), 0.05, 1e-12) << pj.dump();
  EXPECT_NEAR(pj.at("mean_shift_A")[0].get<double>(), global[0], 1e-12);
  EXPECT_NEAR(pj.at("mean_shift_A")[1].get<double>(), global[1], 1e-12);
  // numpy: sqrt(mean(sum((d - d.mean(0))**2, 1))), d = positions_nominal_A - positions_true_A.
  EXPECT_NEAR(pj.at("start_rms_A").get<double>(), 0.3737653980012509, 1e-12) << pj.dump();
  EXPECT_GT(j.at("pearson").get<double>(), 0.999);  // one slice: scored as it always was
  EXPECT_FALSE(j.contains("slices"));
  EXPECT_FALSE(j.contains("total_phase"));
}

class EvaluateMultisliceRefusals : public EvaluateMultislice {
 protected:
  // A small truth of a 96 x 96 cell (0.2 Å pixels) and a one-slice result of its 8 x 8 raster.
  void SetUp() override {
    phase_.resize(96 * 96);
    for (std::size_t i = 0; i < phase_.size(); ++i)
      phase_[i] = 0.3f * std::sin(0.37f * float(i % 96)) * std::cos(0.23f * float(i / 96));
    base_ = {{"phase", npy_bytes("<f4", "(96, 96)", bytes_of(phase_))},
             {"pixel_size_A", npy_bytes("<f8", "()", bytes_of(std::vector<double>{0.2}))},
             {"scan_origin_A", npy_bytes("<f8", "(2,)", bytes_of(std::vector<double>{4.0, 4.0}))}};
    synthetic_result r;
    r.h = r.w = 64;
    r.pixel_A = 0.2;
    int64_t shift[2] = {0, 0};
    r.slices = cut(phase_.data(), 96, 96, 64, 64, shift);
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < 8; ++k) r.positions_A.insert(r.positions_A.end(), {4.0 + i, 4.0 + k});
    result_ = (dir_ / "small.zip").string();
    r.save(result_);
  }
  // The base truth with `extra` members added; returns its path.
  std::string truth_with(const std::vector<std::pair<std::string, std::string>>& extra, const std::string& name) {
    const std::string path = (dir_ / name).string();
    tycho::test::zip_members all;
    for (const auto& [member, content] : base_) all.emplace_back(member + ".npy", content);
    for (const auto& [member, content] : extra) all.emplace_back(member + ".npy", content);
    tycho::test::write_zip_members(path, all, {}, /*stored=*/false);
    return path;
  }
  std::vector<float> phase_;
  std::vector<std::pair<std::string, std::string>> base_;
  std::string result_;
};

TEST_F(EvaluateMultisliceRefusals, PhaseSlicesOfAnotherCellAreRefused) {
  const std::string t =
      truth_with({{"phase_slices", npy_bytes("<f4", "(2, 64, 64)", std::string(2 * 64 * 64 * 4, '\0'))},
                  {"slice_thickness_A", npy_bytes("<f8", "()", bytes_of(std::vector<double>{5.0}))}},
                 "slices64.npz");
  EXPECT_EQ(error_of(result_, t),
            "'" + t + "': 'phase_slices' is 64 x 64 pixels; expected (slabs, 96, 96) (phase is (96, 96))");
}

TEST_F(EvaluateMultisliceRefusals, LayerOfAnotherCellIsRefused) {
  const std::string t =
      truth_with({{"phase_top", npy_bytes("<f4", "(96, 96)", std::string(96 * 96 * 4, '\0'))},
                  {"phase_bottom", npy_bytes("<f4", "(96, 48)", std::string(96 * 48 * 4, '\0'))},
                  {"layer_depths_A", npy_bytes("<f8", "(2,)", bytes_of(std::vector<double>{1.0, 40.0}))}},
                 "layers.npz");
  EXPECT_EQ(error_of(result_, t),
            "'" + t + "': 'phase_bottom' is 96 x 48 pixels; expected the cell of phase (phase is (96, 96))");
}

TEST_F(EvaluateMultisliceRefusals, PositionsOfAnotherScanAreRefused) {
  const std::string t = truth_with({{"positions_true_A", npy_bytes("<f8", "(10, 2)", std::string(10 * 2 * 8, '\0'))}},
                                   "pos10.npz");
  EXPECT_EQ(error_of(result_, t), "'" + t + "': 'positions_true_A' holds 10 positions; the result '" + result_ +
                                      "' has 64: expected (64, 2), in the result's scan order");
  const std::string t3 = truth_with({{"positions_true_A", npy_bytes("<f8", "(64, 3)", std::string(64 * 3 * 8, '\0'))}},
                                    "pos3.npz");
  EXPECT_EQ(error_of(result_, t3), "'" + t3 + "': 'positions_true_A' is (64, 3); expected (P, 2) positions in Å");
}

// A member a figure needs that is absent leaves that figure out and scores the rest: layers
// without depths (a warning on standard error), slabs of a multislice result with no slice
// thickness, which --slice-thickness-A then gives.
TEST_F(EvaluateMultisliceRefusals, MissingMembersLeaveTheirFiguresOut) {
  const std::string t = truth_with({{"phase_top", npy_bytes("<f4", "(96, 96)", std::string(96 * 96 * 4, '\0'))},
                                    {"phase_bottom", npy_bytes("<f4", "(96, 96)", std::string(96 * 96 * 4, '\0'))}},
                                   "nodepths.npz");
  auto r = tycho::test::run_command({tycho::test::tycho_exe(), "evaluate", result_, "--truth", t});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j.at("pearson").get<double>(), 0.95);  // < 1: the small object's edges are within the filter's reach
  EXPECT_FALSE(j.contains("layers"));
  EXPECT_NE(r.err.find("[tycho warning] evaluate: '" + t +
                       "': the truth has phase_top but not all of phase_top, phase_bottom and layer_depths_A: the "
                       "per-layer figures are left out"),
            std::string::npos)
      << r.err;

  // Two slices (the second empty) and no recorded thickness: the depths need the option.
  synthetic_result two;
  const auto one = tycho::test::load_result(result_);
  two.h = two.w = 64;
  two.pixel_A = 0.2;
  const auto* z = one.array("object", result_).as<std::complex<float>>();
  two.slices.assign(z, z + 64 * 64);
  two.slices.resize(2 * 64 * 64, std::complex<float>(1.0f, 0.0f));
  const auto* pa = one.array("positions_A", result_).as<double>();
  two.positions_A.assign(pa, pa + 128);
  const std::string two_path = (dir_ / "two.zip").string();
  two.save(two_path);
  std::vector<float> slabs(phase_);  // the phase in the first slab, none in the second
  slabs.resize(2 * 96 * 96, 0.0f);
  const std::string ts = truth_with({{"phase_slices", npy_bytes("<f4", "(2, 96, 96)", bytes_of(slabs))},
                                     {"slice_thickness_A", npy_bytes("<f8", "()", bytes_of(std::vector<double>{5.0}))}},
                                    "slabs.npz");
  r = tycho::test::run_command({tycho::test::tycho_exe(), "evaluate", two_path, "--truth", ts});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_FALSE(nlohmann::json::parse(r.out).contains("depths")) << r.out;
  EXPECT_NE(r.err.find("'" + two_path + "' has 2 slices and records no slice thickness: the per-depth figures are "
                       "left out; give --slice-thickness-A"),
            std::string::npos)
      << r.err;
  r = tycho::test::run_command({tycho::test::tycho_exe(), "evaluate", two_path, "--truth", ts, "--slice-thickness-A", "5"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto d = nlohmann::json::parse(r.out).at("depths");
  ASSERT_EQ(d.size(), 2u) << d.dump();
  EXPECT_GT(d[0].at("pearson").get<double>(), 0.95) << d.dump();
  // An empty slice against an empty slab: constant maps, an undefined correlation (issue 28:
  // null and a warning, where it was 0.0).
  EXPECT_TRUE(d[1].at("pearson").is_null()) << d.dump();
  EXPECT_NE(r.err.find("[tycho warning] evaluate: the depths 5 to 10 Å: the result's map is constant over the field "
                       "of view, so the correlation is undefined: pearson is null"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(d[1].at("z_A"), nlohmann::json({5.0, 10.0}));
}

}  // namespace
