// [reconstruct.probe] vacuum_pattern (host/src/runtime/vacuum_pattern.cpp): the initial probe's
// aperture measured from a vacuum pattern. The model's own pattern gives the model's probe; the
// pattern follows the data's binning, crop and transpose, masked pixels are filled, frames are
// summed; bad files and keys are refused naming them; and end to end, a run whose stated
// semiangle is 25 % off reaches, from the vacuum pattern, the figure of a run given the true one.
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/host/optics.hpp>
#include <tycho/sdk/npy.hpp>

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <iostream>
#include <string>
#include <vector>

#include "../host/src/runtime/vacuum_pattern.hpp"
#include "cxi_test_file.hpp"
#include "simulated_truth.hpp"

namespace {

using tycho::host::vacuum_pattern_steps;
using cd = std::complex<double>;

constexpr double k_lambda_80keV = 0.041757;  // Å, relativistic, 80 keV

// The model's probe at 80 keV on an (n0, n1) window of `dk` Å⁻¹.
std::vector<std::complex<float>> model_probe(int64_t n0, int64_t n1, double dk, double semiangle, double C10,
                                             const std::vector<double>* amplitude = nullptr) {
  tycho::sdk::probe_optics o;
  o.energy_eV = 80e3;
  o.semiangle_mrad = semiangle;
  o.C10_A = C10;
  return tycho::sdk::make_probe(o, tycho::sdk::window_sampling{{n0, n1}, {dk, dk}}, 1.0, amplitude);
}

// |F P|² of a centred probe, centred (as a detector records it), scaled by `counts`.
std::vector<double> vacuum_of(const std::vector<std::complex<float>>& probe, int64_t n0, int64_t n1, double counts) {
  std::vector<cd> corner(probe.size());  // ifftshift: the probe's centre to index 0
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      corner[std::size_t(i * n1 + j)] = cd(probe[std::size_t(((i + n0 / 2) % n0) * n1 + (j + n1 / 2) % n1)]);
  const std::vector<cd> f = tycho::sdk::dft2(corner, n0, n1, false);
  std::vector<double> centred(f.size());
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      centred[std::size_t(((i + n0 / 2) % n0) * n1 + (j + n1 / 2) % n1)] = counts * std::norm(f[std::size_t(i * n1 + j)]);
  return centred;
}

class VacuumPattern : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (tmp_.path() / name).string(); }
  template <class T>
  void write(const std::string& name, DLDataType dtype, const std::vector<int64_t>& shape, const std::vector<T>& v) {
    const std::string h = tycho::sdk::npy::write_header(dtype, shape.data(), int(shape.size()));
    tmp_.write(name, h + std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
  }
  std::optional<tycho::host::vacuum_amplitude> load(const std::string& toml_text, const vacuum_pattern_steps& steps) {
    const double dk[2] = {0.06, 0.06};
    return tycho::host::read_vacuum_amplitude(toml::parse(toml_text), tmp_.path().string(), steps, k_lambda_80keV, dk);
  }
  std::string refused(const std::string& toml_text, const vacuum_pattern_steps& steps) {
    try {
      load(toml_text, steps);
    } catch (const tycho::error& e) {
      return e.what();
    }
    return "(no error)";
  }
  static vacuum_pattern_steps plain(int64_t n0, int64_t n1) {
    vacuum_pattern_steps s;
    s.detector = s.window = {n0, n1};
    return s;
  }
  tycho::test::temp_folder tmp_;
};

TEST_F(VacuumPattern, TheModelsOwnPatternGivesTheModelsProbe) {
  const int64_t n0 = 48, n1 = 40;
  const auto model = model_probe(n0, n1, 0.06, 20, -80);
  // Three frames of 1000, 2000 and 3000 counts' worth, uint16-like whole numbers not needed:
  // float64 frames, summed by the reader.
  const std::vector<double> one = vacuum_of(model, n0, n1, 1000);
  std::vector<double> frames;
  for (int f = 1; f <= 3; ++f)
    for (double v : one) frames.push_back(f * v);
  write("v.npy", {kDLFloat, 64, 1}, {3, n0, n1}, frames);
  const auto got = load("vacuum_pattern = 'v.npy'", plain(n0, n1));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->frames, 3);
  EXPECT_NEAR(got->centre_px[0], 0.0, 1e-9);
  EXPECT_NEAR(got->centre_px[1], 0.0, 1e-9);
  // The bright field's half-maximum disc: the 20 mrad aperture less its soft edge's ≈ 0.2 px.
  EXPECT_NEAR(got->bright_field_semiangle_mrad, 20.0, 1.0);
  const auto probe = model_probe(n0, n1, 0.06, 20, -80, &got->amplitude);
  double worst = 0;
  for (std::size_t k = 0; k < probe.size(); ++k) worst = std::max(worst, std::abs(cd(probe[k]) - cd(model[k])));
  EXPECT_LT(worst, 1e-5) << "the probe from the model's own vacuum pattern differs from the model's";
}

TEST_F(VacuumPattern, ItFollowsTheDatasCropBinningTransposeAndMask) {
  // A 64 x 48 detector with a bright disc of radius 6 px centred at (+8, −4) px from the zero
  // frequency (centred index (32 + 8, 24 − 4)); cropped to 60 x 44, binned 2 and transposed: the
  // 22 x 30 result holds it at (−2, +4) px, on a window padded to 24 x 32.
  const int64_t d0 = 64, d1 = 48;
  std::vector<uint16_t> v(std::size_t(d0 * d1), 0);
  for (int64_t i = 0; i < d0; ++i)
    for (int64_t j = 0; j < d1; ++j)
      if (std::hypot(double(i - 40), double(j - 20)) <= 6) v[std::size_t(i * d1 + j)] = 500;
  write("v.npy", {kDLUInt, 16, 1}, {d0, d1}, v);
  vacuum_pattern_steps s;
  s.detector = {d0, d1};
  s.crop = {60, 44};
  s.binning = 2;
  s.transpose = true;
  s.window = {24, 32};
  auto got = load("vacuum_pattern = 'v.npy'", s);
  ASSERT_TRUE(got);
  EXPECT_NEAR(got->centre_px[0], -2.0, 0.3);
  EXPECT_NEAR(got->centre_px[1], 4.0, 0.3);
  EXPECT_EQ(got->moved_px, (std::array<int64_t, 2>{0, 0}));
  // Recentred patterns: the vacuum pattern moves by its own centre of mass too.
  s.recentre = true;
  got = load("vacuum_pattern = 'v.npy'", s);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->moved_px, (std::array<int64_t, 2>{-2, 4}));
  double c[2] = {0, 0}, total = 0;
  for (int64_t i = 0; i < 24; ++i)
    for (int64_t j = 0; j < 32; ++j) {
      const double a2 = got->amplitude[std::size_t(i * 32 + j)] * got->amplitude[std::size_t(i * 32 + j)];
      c[0] += a2 * double(i < 12 ? i : i - 24);
      c[1] += a2 * double(j < 16 ? j : j - 32);
      total += a2;
    }
  EXPECT_NEAR(total, 1.0, 1e-9);
  EXPECT_NEAR(c[0] / total, 0.0, 0.3);
  EXPECT_NEAR(c[1] / total, 0.0, 0.3);

  // A masked pixel inside the bright field takes its neighbours' mean, not 0.
  vacuum_pattern_steps m = plain(d0, d1);
  m.mask.assign(std::size_t(d0 * d1), 1);
  const int64_t fi = 8, fj = (d1 - 4) % d1;  // FFT order of frequency (+8, −4)
  m.mask[std::size_t(fi * d1 + fj)] = 0;
  v[std::size_t(40 * d1 + 20)] = 60000;  // a hot pixel there in the vacuum frame
  write("hot.npy", {kDLUInt, 16, 1}, {d0, d1}, v);
  got = load("vacuum_pattern = 'hot.npy'", m);
  ASSERT_TRUE(got);
  EXPECT_NEAR(got->amplitude[std::size_t(fi * d1 + fj)], got->amplitude[std::size_t(fi * d1 + fj + 1)], 1e-12);
}

TEST_F(VacuumPattern, HdfFramesAreSummed) {
  const int64_t n0 = 32, n1 = 32;
  const auto model = model_probe(n0, n1, 0.06, 15, -50);
  const std::vector<double> one = vacuum_of(model, n0, n1, 100);
  std::vector<double> frames;
  for (int f = 0; f < 2 * 3; ++f) frames.insert(frames.end(), one.begin(), one.end());
  {
    tycho::test::h5_file_writer w(path("vac.h5"));
    w.doubles("/frames", {2, 3, n0, n1}, frames);
  }
  const auto got = load("vacuum_pattern = 'vac.h5'\nvacuum_pattern_dataset = '/frames'", plain(n0, n1));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->frames, 6);
  const auto probe = model_probe(n0, n1, 0.06, 15, -50, &got->amplitude);
  double worst = 0;
  for (std::size_t k = 0; k < probe.size(); ++k) worst = std::max(worst, std::abs(cd(probe[k]) - cd(model[k])));
  EXPECT_LT(worst, 1e-5);
  EXPECT_NE(refused("vacuum_pattern = 'vac.h5'", plain(n0, n1)).find("set vacuum_pattern_dataset"), std::string::npos);
  const std::string m = refused("vacuum_pattern = 'vac.h5'\nvacuum_pattern_dataset = '/none'", plain(n0, n1));
  EXPECT_NE(m.find("vac.h5:/none' is not a dataset"), std::string::npos) << m;
}

TEST_F(VacuumPattern, BadFilesAndKeysAreRefusedNamingThem) {
  const auto s = plain(8, 6);
  EXPECT_FALSE(load("", s));
  std::string m = refused("vacuum_pattern_dataset = '/x'", s);
  EXPECT_NE(m.find("vacuum_pattern_dataset needs vacuum_pattern"), std::string::npos) << m;
  EXPECT_NE(refused("vacuum_pattern = 'missing.npy'", s).find("is not a file"), std::string::npos);
  write("v.npy", {kDLFloat, 32, 1}, {8, 6}, std::vector<float>(48, 1.f));
  m = refused("vacuum_pattern = 'v.npy'\ninitial = 'v.npy'", s);
  EXPECT_NE(m.find("vacuum_pattern and initial"), std::string::npos) << m;
  EXPECT_TRUE(load("vacuum_pattern = 'v.npy'\ninitial = 'model'", s));
  m = refused("vacuum_pattern = 'v.npy'\nvacuum_pattern_dataset = '/x'", s);
  EXPECT_NE(m.find("is an .npy file"), std::string::npos) << m;
  m = refused("vacuum_pattern = 5", s);
  EXPECT_NE(m.find("'vacuum_pattern' in [reconstruct.probe] must be a string"), std::string::npos) << m;
  // The detector's shape, named with the file's.
  m = refused("vacuum_pattern = 'v.npy'", plain(6, 8));
  EXPECT_NE(m.find("(8, 6)"), std::string::npos) << m;
  EXPECT_NE(m.find("(6, 8) or (..., 6, 8)"), std::string::npos) << m;
  write("c.npy", {kDLComplex, 64, 1}, {8, 6}, std::vector<std::complex<float>>(48, 1.f));
  EXPECT_NE(refused("vacuum_pattern = 'c.npy'", s).find("expected a little-endian C-order array of float32"),
            std::string::npos);
  std::vector<float> nan(48, 1.f);
  nan[7] = std::nanf("");
  write("nan.npy", {kDLFloat, 32, 1}, {8, 6}, nan);
  EXPECT_NE(refused("vacuum_pattern = 'nan.npy'", s).find("non-finite"), std::string::npos);
  write("neg.npy", {kDLInt, 16, 1}, {8, 6}, std::vector<int16_t>(48, -3));
  EXPECT_NE(refused("vacuum_pattern = 'neg.npy'", s).find("holds no intensity"), std::string::npos);
  write("empty.npy", {kDLFloat, 32, 1}, {0, 8, 6}, std::vector<float>{});
  EXPECT_NE(refused("vacuum_pattern = 'empty.npy'", s).find("no frames"), std::string::npos);
  // An HDF5 dataset may declare frames it never stores: more than 2^20 are refused, not read.
  {
    const hid_t file = H5Fcreate(path("huge.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[3] = {hsize_t(1) << 21, 8, 6}, chunk[3] = {1, 8, 6};
    const hid_t space = H5Screate_simple(3, dims, nullptr);
    const hid_t plist = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(plist, 3, chunk);
    H5Dclose(H5Dcreate2(file, "/frames", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, plist, H5P_DEFAULT));
    H5Pclose(plist);
    H5Sclose(space);
    H5Fclose(file);
  }
  m = refused("vacuum_pattern = 'huge.h5'\nvacuum_pattern_dataset = '/frames'", s);
  EXPECT_NE(m.find("more than the 1048576"), std::string::npos) << m;
  // A header that promises more frames than the file holds: refused before anything is read,
  // naming the key as every refusal does.
  tmp_.write("short.npy", tycho::sdk::npy::write_header({kDLFloat, 32, 1}, std::vector<int64_t>{1000000, 8, 6}.data(), 3));
  m = refused("vacuum_pattern = 'short.npy'", s);
  EXPECT_NE(m.find("only 0 follow the header"), std::string::npos) << m;
  EXPECT_EQ(m.rfind("[reconstruct.probe] vacuum_pattern: ", 0), 0u) << m;
}

// Any finite sum is used, however large: it is scaled to [0, 1] before the float32 steps (a
// float64 pattern of 1e300, or float32 frames whose sum passes float32's range, gave NaN).
TEST_F(VacuumPattern, HugeFiniteValuesAreScaledNotOverflowed) {
  const int64_t n0 = 32, n1 = 32;
  const std::vector<double> one = vacuum_of(model_probe(n0, n1, 0.06, 15, -50), n0, n1, 1.0);
  std::vector<double> huge(one);
  for (double& v : huge) v *= 1e300;
  write("one.npy", {kDLFloat, 64, 1}, {n0, n1}, one);
  write("huge.npy", {kDLFloat, 64, 1}, {n0, n1}, huge);
  std::vector<float> twice;
  for (int f = 0; f < 2; ++f)
    for (double v : one) twice.push_back(float(v / *std::max_element(one.begin(), one.end()) * 3e38));
  write("twice.npy", {kDLFloat, 32, 1}, {2, n0, n1}, twice);
  const auto a = load("vacuum_pattern = 'one.npy'", plain(n0, n1));
  for (const char* name : {"huge.npy", "twice.npy"}) {
    const auto b = load(std::string("vacuum_pattern = '") + name + "'", plain(n0, n1));
    ASSERT_TRUE(a && b) << name;
    for (std::size_t k = 0; k < a->amplitude.size(); ++k) ASSERT_NEAR(b->amplitude[k], a->amplitude[k], 1e-6) << name << " " << k;
  }
}

// The preprocessing report a prepared file carries is read from the file: a report whose steps
// cannot be applied is refused naming it, never used to shape a read (binning 0 divided by zero).
TEST(VacuumPatternSteps, AReportThatCannotBeAppliedIsRefused) {
  const auto steps = [](const std::string& json) {
    return tycho::host::vacuum_steps_of_report(json, "the preprocessing report", {96, 96}, {96, 96}, {});
  };
  const auto ok = steps(R"({"detector_shape_in": [128, 96], "crop_detector": [96, 96], "binning": 2,
                             "scan_transpose": true, "recentre": false})");
  EXPECT_EQ(ok.detector, (std::array<int64_t, 2>{128, 96}));
  EXPECT_EQ(ok.crop, (std::array<int64_t, 2>{96, 96}));
  EXPECT_EQ(ok.binning, 2);
  EXPECT_TRUE(ok.transpose);
  for (const char* bad : {R"({"binning": 0})", R"({"binning": 200})", R"({"binning": 1.5})",
                          R"({"crop_detector": [100, 96]})", R"({"crop_detector": [96]})",
                          R"({"detector_shape_in": [0, 96]})", R"({"detector_shape_in": [99999999, 96]})",
                          R"([1, 2])", R"(not json)"}) {
    try {
      steps(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const tycho::error& e) {
      EXPECT_NE(std::string(e.what()).find("the preprocessing report"), std::string::npos) << e.what();
    }
  }
}

TEST(VacuumPatternWarning, ABrightFieldFarFromTheStatedSemiangleIsWarnedOf) {
  tycho::host::vacuum_amplitude v;
  v.file = "v.npy";
  v.bright_field_semiangle_mrad = 20.0;
  EXPECT_EQ(v.semiangle_warning(24.0), "");  // within 25 %: a semiangle stated 20 % off says nothing
  EXPECT_EQ(v.semiangle_warning(16.5), "");
  const std::string w = v.semiangle_warning(30.0);
  EXPECT_NE(w.find("'v.npy' has a bright field of 20 mrad against the stated semiangle of 30 mrad"), std::string::npos) << w;
  EXPECT_NE(v.semiangle_warning(10.0), "");
}

// A 16 x 16 scan simulated with a 20 mrad aperture, reconstructed for 40 iterations with the
// semiangle stated as 15 mrad: from the model's disc, and from the vacuum pattern of the true
// probe. The vacuum pattern gives the figure of the run stated the true semiangle (measured:
// 0.9713 against 0.9712; the wrong disc 0.9511). The scan's geometry is held at the truth (no
// rotation estimate, no map refinement), so that only the probe differs between the runs.
TEST_F(VacuumPattern, AWrongSemiangleIsMendedByTheVacuumPattern) {
  const int64_t n = 64;
  write("vacuum.npy", {kDLFloat, 64, 1}, {n, n}, vacuum_of(model_probe(n, n, 0.06, 20, -100), n, n, 1e5));
  const std::string base = tycho::test::lattice_scan_16x16(tmp_.path().string()) + R"(
[preprocess]
scan_rotation_deg = 0
[reconstruct]
engine = "cpu"
iterations = 40
[reconstruct.positions]
refine_scan_map = false
[output]
previews = false
)";
  auto pearson = [&](const std::string& name, const std::string& extra) {
    const std::string result = path(name + ".zip");
    const auto r = tycho::test::reconstruct(tmp_, base + extra, result);
    EXPECT_TRUE(r.run.exited_with(0)) << r.run.describe();
    return tycho::test::evaluate(result, path("truth.npz")).at("pearson").get<double>();
  };
  const double truth = pearson("truth", "");
  const double wrong = pearson("wrong", "[optics]\nsemiangle_mrad = 15.0\n");
  const double vacuum =
      pearson("vacuum", "[optics]\nsemiangle_mrad = 15.0\n[reconstruct.probe]\nvacuum_pattern = 'vacuum.npy'\n");
  std::cout << "pearson: true semiangle " << truth << ", 25 % too small " << wrong << ", its vacuum pattern " << vacuum
            << "\n";
  EXPECT_GT(truth - wrong, 0.01) << "the wrong semiangle should cost something for this test to mean anything";
  EXPECT_NEAR(vacuum, truth, 0.002);
  // The manifest says where the probe came from.
  const auto rec = tycho::host::load_record(tycho::host::format_for_path(tycho::test::plugins(), path("vacuum.zip")),
                                            path("vacuum.zip"));
  const auto j = nlohmann::json::parse(rec.manifest_json).at("initial_probe");
  EXPECT_EQ(j.at("from"), "vacuum_pattern");
  EXPECT_EQ(j.at("frames"), 1);
  EXPECT_NEAR(j.at("bright_field_semiangle_mrad").get<double>(), 20.0, 1.0);
  EXPECT_EQ(j.at("stated_semiangle_mrad").get<double>(), 15.0);
}

}  // namespace
