// The `cxi` and `hdf5` sources (plugins/sources/cxi), loaded through the host like any plugin: a CXI
// file made from the MoS2 counts (metres, joules, translations (3, N) and (N, 3)) reads the same
// patterns as the EMD file and lists its positions; bad files are refused naming the file and
// the path inside it; the generic hdf5 source reads axis-permuted datasets bit for bit as the
// emd source does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/registry.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tycho/host/dataset.hpp>

#include "../host/src/data/bad_pixels.hpp"
#include "built_in_plugins.hpp"
#include "cxi_test_file.hpp"
#include "source_under_test.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
using tycho::test::h5_file_writer;

namespace {

constexpr int64_t k_patterns = 32 * 24;
constexpr int64_t k_pattern_px = 96 * 96;
const char* const k_cxi_data = "/entry_1/data_1/data";

class CxiSource : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("tycho_cxi_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
    ASSERT_EQ(tycho::test::mos2_counts().size(), size_t(k_patterns * k_pattern_px)) << "cannot read the MoS2 counts";
  }
  void TearDown() override {
    close();
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  // Opens `source` on a [data] table given as TOML lines.
  tycho_status open(const std::string& data_toml, const char* source = "cxi") {
    return source_.open(tycho::test::plugins(), source, data_toml, tmp_.string());
  }
  tycho_status open_path(const std::string& path, const std::string& more = "", const char* source = "cxi") {
    return open("path = '" + path + "'\n" + more, source);
  }
  void close() { source_.close(); }
  tycho_dataset_info info() { return source_.info(); }
  std::vector<float> read(int64_t first, int64_t count) { return source_.read(first, count); }
  std::vector<uint16_t> read_uint16(int64_t first, int64_t count) { return source_.read_uint16(first, count); }
  tycho_status positions(std::vector<double>& out) { return source_.positions(out); }
  std::vector<double> positions() {
    std::vector<double> p;
    EXPECT_EQ(positions(p), TYCHO_OK) << tycho::last_error();
    return p;
  }

  // The MoS2 counts through the emd source, every pattern.
  std::vector<float> emd_patterns() {
    EXPECT_EQ(open_path(tycho::test::example_data("mos2_80kV_32x24_counts.h5"), "", "emd"), TYCHO_OK)
        << tycho::last_error();
    auto v = read(0, k_patterns);
    close();
    return v;
  }

  std::string tmp(const std::string& name) const { return (tmp_ / name).string(); }

  // Expects open() of `path` to fail with `status` and a message holding each of `parts`.
  void expect_refused(const std::string& path, const std::string& more, tycho_status status,
                      const std::vector<std::string>& parts, const char* source = "cxi") {
    EXPECT_EQ(open_path(path, more, source), status) << tycho::last_error();
    const std::string msg = tycho::last_error();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }

  fs::path tmp_;
  tycho::test::source_under_test source_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---------------------------------------------------------------- cxi: a good file

TEST_F(CxiSource, Mos2FileReadsLikeTheEmdFile) {
  const std::vector<float> emd = emd_patterns();
  const std::string file = tmp("mos2.cxi");
  tycho::test::write_mos2_cxi(file);  // translations (3, N)
  ASSERT_EQ(open_path(file), TYCHO_OK) << tycho::last_error();
  tycho_dataset_info i = info();
  EXPECT_EQ(i.scan_shape[0], k_patterns);
  EXPECT_EQ(i.scan_shape[1], 1);
  EXPECT_EQ(i.detector_shape[0], 96);
  EXPECT_EQ(i.detector_shape[1], 96);
  EXPECT_EQ(i.stored_dtype.code, kDLUInt);
  EXPECT_EQ(i.stored_dtype.bits, 16);
  EXPECT_NEAR(i.energy_eV, 80e3, 80e3 * 1e-12);
  // The detector in metres: the host makes the reciprocal pixel p / (z λ) with the run's
  // wavelength (electrons here, as the file does not say: 0.06 Å⁻¹), not the source.
  EXPECT_TRUE(std::isnan(i.detector_pixel_invA[0]) && std::isnan(i.detector_pixel_invA[1]));
  EXPECT_DOUBLE_EQ(i.detector_distance_m, tycho::test::k_mos2_distance_m);
  for (int a = 0; a < 2; ++a) {
    EXPECT_DOUBLE_EQ(i.detector_pixel_m[a], tycho::test::mos2_pixel_m());
    EXPECT_NEAR(i.detector_pixel_m[a] / (i.detector_distance_m * tycho::test::electron_wavelength_A(i.energy_eV)), 0.06, 1e-12);
  }
  EXPECT_EQ(i.radiation, TYCHO_RADIATION_UNKNOWN);
  EXPECT_TRUE(std::isnan(i.scan_step_A[0]) && std::isnan(i.scan_step_A[1]));  // a list, not a raster
  EXPECT_TRUE(std::isnan(i.semiangle_mrad) && std::isnan(i.C10_A));           // not in CXI: config
  EXPECT_EQ(i.patterns_centred, 1);
  EXPECT_EQ(std::string(i.description), file + ":" + k_cxi_data);

  EXPECT_TRUE(same_bits(read(0, k_patterns), emd));
  // A read that starts and ends inside the file's chunking of the emd rows.
  const std::vector<float> part = read(37, 50);
  EXPECT_TRUE(same_bits(part, std::vector<float>(emd.begin() + 37 * k_pattern_px, emd.begin() + 87 * k_pattern_px)));

  // Pattern k of the EMD raster is (i, j) = (k / 24, k % 24), its probe at (i, j) · 0.5 Å.
  const std::vector<double> p = positions();
  ASSERT_EQ(p.size(), size_t(2 * k_patterns));
  for (int64_t k = 0; k < k_patterns; ++k) {
    EXPECT_NEAR(p[size_t(2 * k)], double(k / 24) * 0.5, 1e-12) << k;
    EXPECT_NEAR(p[size_t(2 * k + 1)], double(k % 24) * 0.5, 1e-12) << k;
  }
}

TEST_F(CxiSource, FramesFirstTranslationsAndOtherPathsGiveTheSamePositions) {
  tycho::test::write_mos2_cxi(tmp("columns.cxi"));
  ASSERT_EQ(open_path(tmp("columns.cxi")), TYCHO_OK) << tycho::last_error();
  const std::vector<double> columns = positions();

  tycho::test::mos2_cxi_options o;
  o.translations_frames_first = true;  // (N, 3)
  o.translation_path = "/entry_1/sample_1/geometry/translations";
  o.data_path = "/entry_1/instrument_1/detector_1/data";
  tycho::test::write_mos2_cxi(tmp("rows.cxi"), o);
  ASSERT_EQ(open_path(tmp("rows.cxi")), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(std::string(info().description), tmp("rows.cxi") + ":/entry_1/instrument_1/detector_1/data");
  const std::vector<double> rows = positions();
  ASSERT_EQ(rows.size(), columns.size());
  EXPECT_EQ(std::memcmp(rows.data(), columns.data(), rows.size() * sizeof(double)), 0);
  const std::vector<float> frames = read(0, k_patterns);
  EXPECT_TRUE(same_bits(frames, emd_patterns()));

  // A NeXus raster (Rx, Ry, Qx, Qy) is read as Rx·Ry frames in C order, with the same list.
  {
    h5_file_writer w(tmp("raster.nxs"));
    w.u16(k_cxi_data, {32, 24, 96, 96}, tycho::test::mos2_counts().data());
    w.doubles("/entry_1/sample_1/geometry_1/translation", {3, 768}, tycho::test::mos2_translations_m(false));
  }
  ASSERT_EQ(open_path(tmp("raster.nxs")), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(info().scan_shape[0], 32);
  EXPECT_EQ(info().scan_shape[1], 24);
  const std::vector<double> raster = positions();
  EXPECT_EQ(std::memcmp(raster.data(), columns.data(), raster.size() * sizeof(double)), 0);
  EXPECT_TRUE(same_bits(read(0, k_patterns), frames));

  // The paths may also be given, and a file may keep its data behind a soft link.
  {
    h5_file_writer w(tmp("linked.cxi"));
    w.u16("/elsewhere/frames", {768, 96, 96}, tycho::test::mos2_counts().data());
    w.soft_link("/elsewhere/frames", "/entry_1/data_1/data");
    w.doubles("/elsewhere/t", {3, 768}, tycho::test::mos2_translations_m(false));
  }
  ASSERT_EQ(open_path(tmp("linked.cxi"), "translations = 'elsewhere/t'\n"), TYCHO_OK) << tycho::last_error();
  const std::vector<double> linked = positions();
  EXPECT_EQ(std::memcmp(linked.data(), columns.data(), linked.size() * sizeof(double)), 0);
  ASSERT_EQ(open_path(tmp("linked.cxi"), "dataset = '/elsewhere/frames'\ntranslations = '/elsewhere/t'\n"), TYCHO_OK)
      << tycho::last_error();
  EXPECT_EQ(std::string(info().description), tmp("linked.cxi") + ":/elsewhere/frames");
}

TEST_F(CxiSource, UnitsAttributesAreConverted) {
  // Translations in nm, energy in keV, distance in mm, pixels in um: the same data set.
  {
    h5_file_writer w(tmp("units.cxi"));
    w.u16(k_cxi_data, {768, 96, 96}, tycho::test::mos2_counts().data());
    std::vector<double> t = tycho::test::mos2_translations_m(false);
    for (double& v : t) v *= 1e9;
    w.doubles("/entry_1/sample_1/geometry_1/translation", {3, 768}, t);
    w.string_attr("/entry_1/sample_1/geometry_1/translation", "units", "nm");
    w.number("/entry_1/instrument_1/source_1/energy", 80.0);
    w.string_attr("/entry_1/instrument_1/source_1/energy", "units", "keV");
    w.number("/entry_1/instrument_1/detector_1/distance", tycho::test::k_mos2_distance_m * 1e3);
    w.string_attr("/entry_1/instrument_1/detector_1/distance", "units", "mm");
    for (const char* px : {"x_pixel_size", "y_pixel_size"}) {
      const std::string p = std::string("/entry_1/instrument_1/detector_1/") + px;
      w.number(p, tycho::test::mos2_pixel_m() * 1e6);
      w.string_attr(p, "units", "um");
    }
  }
  ASSERT_EQ(open_path(tmp("units.cxi")), TYCHO_OK) << tycho::last_error();
  tycho_dataset_info i = info();
  EXPECT_DOUBLE_EQ(i.energy_eV, 80e3);
  EXPECT_NEAR(i.detector_distance_m, tycho::test::k_mos2_distance_m, 1e-15);
  EXPECT_NEAR(i.detector_pixel_m[0], tycho::test::mos2_pixel_m(), 1e-18);
  EXPECT_NEAR(i.detector_pixel_m[1], tycho::test::mos2_pixel_m(), 1e-18);
  const std::vector<double> p = positions();
  EXPECT_NEAR(p[2 * 100], 100 / 24 * 0.5, 1e-9);
  EXPECT_NEAR(p[2 * 100 + 1], 100 % 24 * 0.5, 1e-9);
}

TEST_F(CxiSource, ProbePositionChoosesComponentsAndSigns) {
  tycho::test::write_mos2_cxi(tmp("mos2.cxi"));
  // The translations as probe positions, x along object axis 0.
  ASSERT_EQ(open_path(tmp("mos2.cxi"), "probe_position = ['x', 'y']\n"), TYCHO_OK) << tycho::last_error();
  const std::vector<double> p = positions();
  EXPECT_NEAR(p[2 * 100], -(100 % 24) * 0.5, 1e-12);
  EXPECT_NEAR(p[2 * 100 + 1], -(100 / 24) * 0.5, 1e-12);
  ASSERT_EQ(open_path(tmp("mos2.cxi"), "probe_position = ['-y', '+x']\n"), TYCHO_OK) << tycho::last_error();
  const std::vector<double> q = positions();
  EXPECT_NEAR(q[2 * 100], (100 / 24) * 0.5, 1e-12);
  EXPECT_NEAR(q[2 * 100 + 1], -(100 % 24) * 0.5, 1e-12);

  expect_refused(tmp("mos2.cxi"), "probe_position = ['x', 'x']\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"probe_position", "same component twice"});
  expect_refused(tmp("mos2.cxi"), "probe_position = ['z', 'x']\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"probe_position", "\"z\""});
  expect_refused(tmp("mos2.cxi"), "probe_position = ['x']\n", TYCHO_ERR_INVALID_ARGUMENT, {"probe_position", "two"});
}

TEST_F(CxiSource, ThreeFramesNeedTranslationsShape) {
  // With N = 3, a (3, 3) table does not say which axis runs over the frames.
  const std::vector<double> t = {1e-10, 2e-10, 3e-10, 4e-10, 5e-10, 6e-10, 7e-10, 8e-10, 9e-10};
  {
    h5_file_writer w(tmp("three.cxi"));
    w.u16(k_cxi_data, {3, 96, 96}, tycho::test::mos2_counts().data());
    w.doubles("/entry_1/sample_1/geometry_1/translation", {3, 3}, t);
  }
  expect_refused(tmp("three.cxi"), "", TYCHO_ERR_BAD_DATA,
                 {tmp("three.cxi") + ":/entry_1/sample_1/geometry_1/translation", "(3, 3)", "ambiguous",
                  "translations_shape"});
  // Default probe_position ["-y", "-x"]: axis 0 = −y · 1e10, axis 1 = −x · 1e10.
  ASSERT_EQ(open_path(tmp("three.cxi"), "translations_shape = 'N,3'\n"), TYCHO_OK) << tycho::last_error();
  std::vector<double> p = positions();
  EXPECT_NEAR(p[0], -2.0, 1e-12);  // frame 0 = row 0: (x, y, z) = (1, 2, 3) Å
  EXPECT_NEAR(p[1], -1.0, 1e-12);
  EXPECT_NEAR(p[2], -5.0, 1e-12);
  ASSERT_EQ(open_path(tmp("three.cxi"), "translations_shape = '(3, N)'\n"), TYCHO_OK) << tycho::last_error();
  p = positions();
  EXPECT_NEAR(p[0], -4.0, 1e-12);  // frame 0 = column 0: (x, y, z) = (1, 4, 7) Å
  EXPECT_NEAR(p[1], -1.0, 1e-12);
  EXPECT_NEAR(p[3], -2.0, 1e-12);  // frame 1: x = 2
  expect_refused(tmp("three.cxi"), "translations_shape = '3 by N'\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"translations_shape", "\"N,3\"", "\"3,N\""});
}

// ---------------------------------------------------------------- cxi: bad files

TEST_F(CxiSource, MissingDatasetsAreNamed) {
  const std::string file = tmp("bad.cxi");
  {
    h5_file_writer w(file);
    w.doubles("/entry_1/sample_1/geometry_1/translation", {3, 768}, tycho::test::mos2_translations_m(false));
  }
  expect_refused(file, "", TYCHO_ERR_NOT_FOUND,
                 {"'" + file + "'", "/entry_1/data_1/data", "/entry_1/instrument_1/detector_1/data", "(N, Qx, Qy)"});
  expect_refused(file, "dataset = '/entry_1/frames'\n", TYCHO_ERR_NOT_FOUND,
                 {file + ":/entry_1/frames", "does not exist", "(N, Qx, Qy)"});
  {
    h5_file_writer w(file);
    w.u16(k_cxi_data, {768, 96, 96}, tycho::test::mos2_counts().data());
  }
  expect_refused(file, "", TYCHO_ERR_NOT_FOUND,
                 {"'" + file + "'", "/entry_1/sample_1/geometry_1/translation", "/entry_1/sample_1/geometry/translations",
                  "metres"});
  expect_refused(file, "translations = '/entry_1/t'\n", TYCHO_ERR_NOT_FOUND, {file + ":/entry_1/t", "does not exist"});
  expect_refused(tmp("none.cxi"), "", TYCHO_ERR_NOT_FOUND, {tmp("none.cxi"), "does not exist"});
}

TEST_F(CxiSource, WrongShapesAndUnitsAreRefused) {
  const std::string file = tmp("bad.cxi");
  const std::string t_path = "/entry_1/sample_1/geometry_1/translation";
  auto write = [&](auto&& more) {
    h5_file_writer w(file);
    w.u16(k_cxi_data, {768, 96, 96}, tycho::test::mos2_counts().data());
    more(w);
  };
  write([&](h5_file_writer& w) { w.doubles(t_path, {768, 2}, std::vector<double>(768 * 2, 0.0)); });
  expect_refused(file, "", TYCHO_ERR_BAD_DATA, {file + ":" + t_path, "(768, 2)", "(768, 3) or (3, 768)"});
  write([&](h5_file_writer& w) { w.doubles(t_path, {700, 3}, std::vector<double>(700 * 3, 0.0)); });
  expect_refused(file, "", TYCHO_ERR_BAD_DATA, {file + ":" + t_path, "(700, 3)", "768 patterns"});
  write([&](h5_file_writer& w) {
    w.doubles(t_path, {3, 768}, tycho::test::mos2_translations_m(false));
    w.string_attr(t_path, "units", "furlong");
  });
  expect_refused(file, "", TYCHO_ERR_BAD_DATA, {file + ":" + t_path, "'furlong'", "metres"});
  expect_refused(file, "translations_shape = 'N,3'\n", TYCHO_ERR_BAD_DATA,
                 {file + ":" + t_path, "(3, 768)", "translations_shape"});
  write([&](h5_file_writer& w) {
    w.doubles(t_path, {3, 768}, tycho::test::mos2_translations_m(false));
    w.number("/entry_1/instrument_1/source_1/energy", 80e3);
    w.string_attr("/entry_1/instrument_1/source_1/energy", "units", "V");
  });
  expect_refused(file, "", TYCHO_ERR_BAD_DATA, {file + ":/entry_1/instrument_1/source_1/energy", "'V'", "joules"});
  write([&](h5_file_writer& w) {
    w.doubles(t_path, {3, 768}, tycho::test::mos2_translations_m(false));
    w.doubles("/entry_1/instrument_1/detector_1/distance", {2}, {0.25, 0.25});
  });
  expect_refused(file, "", TYCHO_ERR_BAD_DATA,
                 {file + ":/entry_1/instrument_1/detector_1/distance", "(2,)", "scalar or one value per frame"});
  write([&](h5_file_writer& w) {
    w.doubles(t_path, {3, 768}, tycho::test::mos2_translations_m(false));
    w.number("/entry_1/instrument_1/source_1/energy", -1.0);
  });
  expect_refused(file, "", TYCHO_ERR_BAD_DATA, {file + ":/entry_1/instrument_1/source_1/energy", "> 0"});
  {
    h5_file_writer w(file);
    w.u16(k_cxi_data, {768, 96 * 96}, tycho::test::mos2_counts().data());
    w.doubles(t_path, {3, 768}, tycho::test::mos2_translations_m(false));
  }
  expect_refused(file, "", TYCHO_ERR_BAD_DATA, {file + ":" + k_cxi_data, "(768, 9216)", "(N, Qx, Qy)"});
}

TEST_F(CxiSource, PerFrameEnergyMustBeConstant) {
  const std::string file = tmp("energy.cxi");
  const std::string e_path = "/entry_1/instrument_1/source_1/energy";
  auto write = [&](const std::vector<double>& energy_J) {
    h5_file_writer w(file);
    w.u16(k_cxi_data, {768, 96, 96}, tycho::test::mos2_counts().data());
    w.doubles("/entry_1/sample_1/geometry_1/translation", {3, 768}, tycho::test::mos2_translations_m(false));
    w.doubles(e_path, {hsize_t(energy_J.size())}, energy_J);
  };
  write(std::vector<double>(768, 80e3 * tycho::test::k_joule_per_eV));
  ASSERT_EQ(open_path(file), TYCHO_OK) << tycho::last_error();
  EXPECT_NEAR(info().energy_eV, 80e3, 1e-6);
  close();  // before the file is rewritten
  std::vector<double> drifting(768, 80e3 * tycho::test::k_joule_per_eV);
  drifting[500] = 80.5e3 * tycho::test::k_joule_per_eV;
  write(drifting);
  expect_refused(file, "", TYCHO_ERR_BAD_DATA, {file + ":" + e_path, "varies across the 768 frames", "spread of 500", "eV"});
}

// The file's detector mask (CXI: 0 = good) goes to the host (read_detector_mask): a mask that
// marks nothing is no mask; one that marks 2 pixels hands exactly those over, and the host's
// read masks them in every pattern (0 in the targets, 0 in the engine's mask, counted as the
// detector's own in the log and the manifest) and nothing else (the MoS2 counts hold no other bad
// pixel). A mask of another shape is refused, naming it.
TEST_F(CxiSource, MaskLeavesItsPixelsOut) {
  tycho::test::mos2_cxi_options o;
  o.mask = std::vector<uint8_t>(96 * 96, 0);
  tycho::test::write_mos2_cxi(tmp("clean_mask.cxi"), o);
  ASSERT_EQ(open_path(tmp("clean_mask.cxi")), TYCHO_OK) << tycho::last_error();
  std::vector<uint8_t> mask;
  EXPECT_EQ(source_.detector_mask(mask), TYCHO_ERR_UNSUPPORTED);
  close();
  (*o.mask)[17 * 96 + 3] = 1;
  (*o.mask)[40 * 96 + 41] = 4;
  tycho::test::write_mos2_cxi(tmp("bad_pixels.cxi"), o);
  ASSERT_EQ(open_path(tmp("bad_pixels.cxi")), TYCHO_OK) << tycho::last_error();
  ASSERT_EQ(source_.detector_mask(mask), TYCHO_OK) << tycho::last_error();
  for (int64_t k = 0; k < 96 * 96; ++k) EXPECT_EQ(mask[std::size_t(k)], k == 17 * 96 + 3 || k == 40 * 96 + 41) << k;
  close();

  // Through the host's read, as a run reads it.
  auto doc = tycho::config_document::parse("[data]\nsource = \"cxi\"\npath = \"" + tmp("bad_pixels.cxi") + "\"\n",
                                           "<test>", tmp_.string());
  tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
  const auto& cxi = tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "cxi");
  tycho::host::dataset d = tycho::host::read_dataset(cxi, &cfg, 0, 1, false);
  ASSERT_EQ(d.source_mask.size(), std::size_t(96 * 96));
  const std::string warning = tycho::host::mask_bad_pixels(
      d, tycho::host::read_bad_pixel_settings(doc.table_at("preprocess"), "<test>", d.info.stored_dtype));
  EXPECT_EQ(d.bad_pixels.masked_pixels, 2) << warning;
  EXPECT_EQ(d.bad_pixels.detector_mask_pixels, 2);
  EXPECT_TRUE(d.bad_pixels.found.empty()) << warning;
  EXPECT_NE(warning.find("2 marked bad by the detector's own mask, as the 'cxi' source reads it"), std::string::npos)
      << warning;
  ASSERT_EQ(d.detector_mask.size(), std::size_t(96 * 96));
  for (int64_t r = 0; r < 96; ++r)
    for (int64_t c = 0; c < 96; ++c) {
      const bool bad = (r == 17 && c == 3) || (r == 40 && c == 41);
      const std::size_t k = std::size_t(((r + 48) % 96) * 96 + (c + 48) % 96);  // FFT order
      EXPECT_EQ(d.detector_mask[k], bad ? 0 : 1) << r << ", " << c;
      for (int64_t j = 0; j < k_patterns && bad; ++j) EXPECT_EQ(d.targets[std::size_t(j * k_pattern_px) + k], 0.0f);
    }
  const auto json = nlohmann::json::parse(tycho::host::bad_pixels_json(d));
  EXPECT_EQ(json.at("detector_mask_pixels"), 2);
  EXPECT_EQ(json.at("masked_pixels"), 2);

  {
    h5_file_writer w(tmp("odd_mask.cxi"));
    w.u16(k_cxi_data, {768, 96, 96}, tycho::test::mos2_counts().data());
    w.doubles("/entry_1/sample_1/geometry_1/translation", {3, 768}, tycho::test::mos2_translations_m(false));
    w.u8("/entry_1/instrument_1/detector_1/mask", {48, 96}, std::vector<uint8_t>(48 * 96, 0));
  }
  expect_refused(tmp("odd_mask.cxi"), "", TYCHO_ERR_BAD_DATA,
                 {tmp("odd_mask.cxi") + ":/entry_1/instrument_1/detector_1/mask", "(48, 96)", "(96, 96)"});
}

TEST_F(CxiSource, MissingOpticsLeaveCalibrationsToTheConfig) {
  tycho::test::mos2_cxi_options o;
  o.energy = false;
  tycho::test::write_mos2_cxi(tmp("no_energy.cxi"), o);
  ASSERT_EQ(open_path(tmp("no_energy.cxi")), TYCHO_OK) << tycho::last_error();
  tycho_dataset_info i = info();
  EXPECT_TRUE(std::isnan(i.energy_eV));
  EXPECT_TRUE(std::isnan(i.detector_pixel_invA[0]));  // needs the energy
  o = {};
  o.detector = false;
  tycho::test::write_mos2_cxi(tmp("no_detector.cxi"), o);
  ASSERT_EQ(open_path(tmp("no_detector.cxi")), TYCHO_OK) << tycho::last_error();
  i = info();
  EXPECT_NEAR(i.energy_eV, 80e3, 1e-6);
  EXPECT_TRUE(std::isnan(i.detector_pixel_invA[0]) && std::isnan(i.detector_pixel_invA[1]));
}

// ---------------------------------------------------------------- hdf5: any axis order

// The MoS2 counts permuted so that the dataset's axes are `order` (a permutation of Rx, Ry, Qx,
// Qy given as indices 0..3 into (32, 24, 96, 96)).
std::vector<uint16_t> permuted_counts(const std::vector<int>& order, std::vector<hsize_t>& dims) {
  const int64_t src_dims[4] = {32, 24, 96, 96};
  dims.clear();
  for (int a : order) dims.push_back(hsize_t(src_dims[a]));
  const auto& c = tycho::test::mos2_counts();
  std::vector<uint16_t> out(c.size());
  int64_t src_stride[4] = {24 * 96 * 96, 96 * 96, 96, 1};
  int64_t idx[4] = {0, 0, 0, 0};  // over the permuted dims
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t s = 0;
    for (int a = 0; a < 4; ++a) s += idx[a] * src_stride[order[size_t(a)]];
    out[k] = c[size_t(s)];
    for (int a = 3; a >= 0; --a) {
      if (++idx[a] < int64_t(dims[size_t(a)])) break;
      idx[a] = 0;
    }
  }
  return out;
}

TEST_F(CxiSource, Hdf5PermutedAxesReadLikeEmdBitForBit) {
  // The emd source delivers the stored uint16 too (ABI 1.3): the counts, in two pieces.
  ASSERT_EQ(open_path(tycho::test::example_data("mos2_80kV_32x24_counts.h5"), "", "emd"), TYCHO_OK)
      << tycho::last_error();
  EXPECT_EQ(info().reads_stored_dtype, 1);
  std::vector<uint16_t> emd_counts = read_uint16(0, 37);
  const std::vector<uint16_t> rest = read_uint16(37, k_patterns - 37);
  emd_counts.insert(emd_counts.end(), rest.begin(), rest.end());
  EXPECT_TRUE(emd_counts == tycho::test::mos2_counts());
  close();
  const std::vector<float> emd = emd_patterns();
  struct variant {
    std::vector<int> order;
    const char* axes;
  };
  for (const variant& v : {variant{{2, 3, 0, 1}, "['Qx', 'Qy', 'Rx', 'Ry']"},
                           variant{{1, 2, 0, 3}, "['Ry', 'Qx', 'Rx', 'Qy']"},
                           variant{{0, 1, 2, 3}, "['Rx', 'Ry', 'Qx', 'Qy']"}}) {
    SCOPED_TRACE(v.axes);
    close();  // before the file is rewritten
    std::vector<hsize_t> dims;
    const std::vector<uint16_t> data = permuted_counts(v.order, dims);
    {
      h5_file_writer w(tmp("permuted.h5"));
      w.u16("/scan/frames", dims, data.data());
    }
    ASSERT_EQ(open_path(tmp("permuted.h5"), std::string("dataset = 'scan/frames'\naxes = ") + v.axes + "\n", "hdf5"),
              TYCHO_OK)
        << tycho::last_error();
    tycho_dataset_info i = info();
    EXPECT_EQ(i.scan_shape[0], 32);
    EXPECT_EQ(i.scan_shape[1], 24);
    EXPECT_EQ(i.detector_shape[0], 96);
    EXPECT_EQ(i.detector_shape[1], 96);
    EXPECT_TRUE(std::isnan(i.scan_step_A[0]) && std::isnan(i.detector_pixel_invA[0]) && std::isnan(i.energy_eV));
    EXPECT_EQ(std::string(i.description), tmp("permuted.h5") + ":/scan/frames");
    EXPECT_TRUE(same_bits(read(0, k_patterns), emd));
    // Pieces: the end of a row, whole rows, the start of a row; a single pattern.
    EXPECT_TRUE(same_bits(read(5, 60), std::vector<float>(emd.begin() + 5 * k_pattern_px, emd.begin() + 65 * k_pattern_px)));
    EXPECT_TRUE(same_bits(read(767, 1), std::vector<float>(emd.end() - k_pattern_px, emd.end())));
    // In the stored dtype (ABI 1.3, reads_stored_dtype): the counts themselves, in scan order.
    const auto& counts = tycho::test::mos2_counts();
    EXPECT_EQ(i.reads_stored_dtype, 1);
    EXPECT_TRUE(read_uint16(0, k_patterns) == counts);
    EXPECT_TRUE(read_uint16(5, 60) ==
                std::vector<uint16_t>(counts.begin() + 5 * k_pattern_px, counts.begin() + 65 * k_pattern_px));
    std::vector<double> p;
    EXPECT_EQ(positions(p), TYCHO_ERR_UNSUPPORTED);  // a raster: the host lays it out from scan_step_A
  }
}

TEST_F(CxiSource, Hdf5ListedPatternsTakeTheirPositions) {
  const std::vector<float> emd = emd_patterns();
  std::vector<double> p_nm(2 * k_patterns), p_t(2 * k_patterns);
  for (int64_t k = 0; k < k_patterns; ++k) {
    p_nm[size_t(2 * k)] = double(k / 24) * 0.05;
    p_nm[size_t(2 * k + 1)] = double(k % 24) * 0.05;
    p_t[size_t(k)] = p_nm[size_t(2 * k)];
    p_t[size_t(k_patterns + k)] = p_nm[size_t(2 * k + 1)];
  }
  // (P, Qx, Qy), and (Qx, P, Qy) with the positions stored (2, P).
  std::vector<hsize_t> dims;
  const std::vector<uint16_t> qx_first = permuted_counts({2, 0, 1, 3}, dims);
  {
    h5_file_writer w(tmp("list.h5"));
    w.u16("/frames", {768, 96, 96}, tycho::test::mos2_counts().data());
    w.u16("/frames_qx_first", {96, 768, 96}, qx_first.data());
    w.doubles("/positions", {768, 2}, p_nm);
    w.doubles("/positions_t", {2, 768}, p_t);
  }
  for (const char* more : {"dataset = '/frames'\npositions_dataset = '/positions'\n",
                           "dataset = '/frames_qx_first'\naxes = ['Qx', 'P', 'Qy']\npositions_dataset = 'positions_t'\n"}) {
    SCOPED_TRACE(more);
    ASSERT_EQ(open_path(tmp("list.h5"), std::string(more) + "positions_unit = 'nm'\n", "hdf5"), TYCHO_OK)
        << tycho::last_error();
    tycho_dataset_info i = info();
    EXPECT_EQ(i.scan_shape[0], k_patterns);
    EXPECT_EQ(i.scan_shape[1], 1);
    EXPECT_TRUE(same_bits(read(0, k_patterns), emd));
    const std::vector<double> p = positions();
    for (int64_t k = 0; k < k_patterns; k += 97) {
      EXPECT_NEAR(p[size_t(2 * k)], double(k / 24) * 0.5, 1e-12) << k;
      EXPECT_NEAR(p[size_t(2 * k + 1)], double(k % 24) * 0.5, 1e-12) << k;
    }
  }
}

// A raster stored as a flat stack (P, Qx, Qy) with [data] scan_shape: the emd source's scan, bit
// for bit; a shape that does not multiply to the frame count, or one given beside positions or
// for a 4-D dataset, is refused naming the key and the counts.
TEST_F(CxiSource, Hdf5StackWithScanShapeIsTheRaster) {
  const std::vector<float> emd = emd_patterns();
  const std::string file = tmp("stack.h5");
  {
    h5_file_writer w(file);
    w.u16("/frames", {768, 96, 96}, tycho::test::mos2_counts().data());
    w.u16("/cube", {32, 24, 96, 96}, tycho::test::mos2_counts().data());
    w.doubles("/positions", {768, 2}, std::vector<double>(768 * 2, 0.0));
  }
  ASSERT_EQ(open_path(file, "dataset = '/frames'\nscan_shape = [32, 24]\n", "hdf5"), TYCHO_OK) << tycho::last_error();
  const tycho_dataset_info i = info();
  EXPECT_EQ(i.scan_shape[0], 32);
  EXPECT_EQ(i.scan_shape[1], 24);
  EXPECT_TRUE(same_bits(read(0, k_patterns), emd));
  EXPECT_TRUE(same_bits(read(23, 3), std::vector<float>(emd.begin() + 23 * k_pattern_px, emd.begin() + 26 * k_pattern_px)));
  std::vector<double> p;
  EXPECT_EQ(positions(p), TYCHO_ERR_UNSUPPORTED);  // a raster
  close();
  expect_refused(file, "dataset = '/frames'\nscan_shape = [32, 25]\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"'scan_shape'", "[32, 25]", "800 positions", "768 frames", "[32, 24]"}, "hdf5");
  expect_refused(file, "dataset = '/frames'\nscan_shape = [768]\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"'scan_shape'", "two integers"}, "hdf5");
  expect_refused(file, "dataset = '/frames'\nscan_shape = [0, 768]\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"'scan_shape'", "at least 1"}, "hdf5");
  expect_refused(file, "dataset = '/frames'\nscan_shape = [4294967296, 4294967296]\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"'scan_shape'", "2^63"}, "hdf5");
  expect_refused(file, "dataset = '/frames'\nscan_shape = [32, 24]\npositions_dataset = '/positions'\npositions_unit = 'A'\n",
                 TYCHO_ERR_INVALID_ARGUMENT, {"'scan_shape'", "positions listed"}, "hdf5");
  expect_refused(file, "dataset = '/cube'\nscan_shape = [24, 32]\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"'scan_shape'", "[Rx, Ry, Qx, Qy]"}, "hdf5");
  expect_refused(file, "dataset = '/frames'\n", TYCHO_ERR_INVALID_ARGUMENT, {"positions_dataset", "scan_shape"}, "hdf5");
}

TEST_F(CxiSource, Hdf5RefusesBadAxesAndPositions) {
  const std::string file = tmp("f.h5");
  {
    h5_file_writer w(file);
    w.u16("/cube", {32, 24, 96, 96}, tycho::test::mos2_counts().data());
    w.u16("/list", {768, 96, 96}, tycho::test::mos2_counts().data());
    w.doubles("/pos3", {768, 3}, std::vector<double>(768 * 3, 0.0));
  }
  expect_refused(file, "dataset = '/cube'\naxes = ['Rx', 'Ry', 'Qx', 'Qz']\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"'axes'", "\"Qz\""}, "hdf5");
  expect_refused(file, "dataset = '/cube'\naxes = ['Rx', 'Rx', 'Qx', 'Qy']\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"'axes'", "each axis once"}, "hdf5");
  expect_refused(file, "dataset = '/cube'\naxes = ['P', 'Qx', 'Qy']\npositions_dataset = 'pos3'\npositions_unit = 'A'\n",
                 TYCHO_ERR_BAD_DATA, {file + ":/cube", "(32, 24, 96, 96)", "3 axes"}, "hdf5");
  expect_refused(file, "dataset = '/cube'\naxes = 'Rx'\n", TYCHO_ERR_INVALID_ARGUMENT, {"'axes'", "array of strings"},
                 "hdf5");
  expect_refused(file, "dataset = '/list'\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {file + ":/list", "positions_dataset", "positions_unit"}, "hdf5");
  expect_refused(file, "dataset = '/list'\npositions_dataset = '/pos3'\n", TYCHO_ERR_INVALID_ARGUMENT,
                 {"positions_unit"}, "hdf5");
  expect_refused(file, "dataset = '/list'\npositions_dataset = '/pos3'\npositions_unit = 'parsec'\n",
                 TYCHO_ERR_INVALID_ARGUMENT, {"positions_unit", "parsec"}, "hdf5");
  expect_refused(file, "dataset = '/list'\npositions_dataset = '/pos3'\npositions_unit = 'A'\n", TYCHO_ERR_BAD_DATA,
                 {file + ":/pos3", "(768, 3)", "(768, 2) or (2, 768)"}, "hdf5");
  expect_refused(file, "dataset = '/list'\npositions_dataset = '/nope'\npositions_unit = 'A'\n", TYCHO_ERR_NOT_FOUND,
                 {file + ":/nope", "does not exist"}, "hdf5");
  expect_refused(file, "dataset = '/missing'\n", TYCHO_ERR_NOT_FOUND, {file + ":/missing", "does not exist"}, "hdf5");
  expect_refused(file, "", TYCHO_ERR_INVALID_ARGUMENT, {"'dataset'"}, "hdf5");
}


// ---------------------------------------------------------------- cxi: X-ray files

// basis_vectors turn the detector's axes into the object's: a frame axis stepping along lab −y
// makes object axis 0 run along −y, and the probe (at −t on the sample) then lies at +t_y there.
// Their lengths are the pixel sizes, whatever x_pixel_size and y_pixel_size say.
TEST_F(CxiSource, BasisVectorsOrientTheScanAndSizeThePixels) {
  std::vector<double> expected;
  {
    const std::string file = tmp("default.cxi");
    tycho::test::write_mos2_cxi(file);
    ASSERT_EQ(open_path(file), TYCHO_OK) << tycho::last_error();
    expected = positions();  // probe_position ["-y", "-x"]: (i, j) · 0.5 Å
    close();
  }
  const double p = 2 * tycho::test::mos2_pixel_m();
  const std::vector<double> rows = {0, -p, 0, -p, 0, 0};  // (2, 3): axis 0 along −y, axis 1 along −x
  const std::vector<double> columns = {0, -p, -p, 0, 0, 0};  // the same as (3, 2), vectors as columns
  std::vector<double> per_frame;
  for (int k = 0; k < 768; ++k) per_frame.insert(per_frame.end(), rows.begin(), rows.end());
  struct form {
    const char* name;
    std::vector<hsize_t> dims;
    const std::vector<double>* values;
  };
  for (const form& f : {form{"rows", {2, 3}, &rows}, form{"columns", {3, 2}, &columns},
                        form{"per_frame", {768, 2, 3}, &per_frame}}) {
    const std::string file = tmp(std::string(f.name) + ".cxi");
    tycho::test::write_mos2_cxi(file);
    {
      h5_file_writer w(file, true);
      w.doubles("/entry_1/instrument_1/detector_1/basis_vectors", f.dims, *f.values);
    }
    ASSERT_EQ(open_path(file), TYCHO_OK) << f.name << ": " << tycho::last_error();
    const tycho_dataset_info i = info();
    EXPECT_DOUBLE_EQ(i.detector_pixel_m[0], p) << f.name;
    EXPECT_DOUBLE_EQ(i.detector_pixel_m[1], p) << f.name;
    const std::vector<double> got = positions();
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], -expected[k], 1e-9) << f.name << " value " << k;
    close();
    // probe_position in the config still wins.
    ASSERT_EQ(open_path(file, "probe_position = ['-y', '-x']\n"), TYCHO_OK) << tycho::last_error();
    EXPECT_NEAR(positions()[2 * 100], expected[2 * 100], 1e-9) << f.name;
    close();
  }
  // A detector tilted out of the plane normal to the beam, or skewed, is refused by name.
  const std::string tilted = tmp("tilted.cxi");
  tycho::test::write_mos2_cxi(tilted);
  {
    h5_file_writer w(tilted, true);
    w.doubles("/entry_1/instrument_1/detector_1/basis_vectors", {2, 3}, {0, -p, 0.1 * p, -p, 0, 0});
  }
  expect_refused(tilted, "", TYCHO_ERR_UNSUPPORTED, {tilted + ":/entry_1/instrument_1/detector_1/basis_vectors", "z part"});
  const std::string bad = tmp("bad_shape.cxi");
  tycho::test::write_mos2_cxi(bad);
  {
    h5_file_writer w(bad, true);
    w.doubles("/entry_1/instrument_1/detector_1/basis_vectors", {4}, {0, 1, 0, 1});
  }
  expect_refused(bad, "", TYCHO_ERR_BAD_DATA, {"basis_vectors", "(2, 3), (3, 2) or (768, 2, 3)"});
  // Per frame: a later frame's NaN is a difference too, not a silent pass.
  const std::string nan_frame = tmp("nan_frame.cxi");
  tycho::test::write_mos2_cxi(nan_frame);
  {
    std::vector<double> v = per_frame;
    v[6 * 500 + 1] = std::numeric_limits<double>::quiet_NaN();
    h5_file_writer w(nan_frame, true);
    w.doubles("/entry_1/instrument_1/detector_1/basis_vectors", {768, 2, 3}, v);
  }
  expect_refused(nan_frame, "", TYCHO_ERR_BAD_DATA, {"basis_vectors", "frame 500 differ"});
}

// What the beam is: NXsource's probe where the file has one, else its wavelength against its
// energy (hc / E for photons); unknown when neither says.
TEST_F(CxiSource, RadiationFromTheSourceGroup) {
  const double hc_eV_m = 1.239841984e-6, e_eV = 80e3;
  struct file_case {
    const char* name;
    const char* probe;   // nullptr: none
    double wavelength_m; // 0: none
    int32_t expected;
  };
  for (const file_case& c : {file_case{"xray_probe", "x-ray", 0, TYCHO_RADIATION_XRAY},
                             file_case{"electron_probe", "electron", 0, TYCHO_RADIATION_ELECTRON},
                             file_case{"photon_wavelength", nullptr, hc_eV_m / e_eV, TYCHO_RADIATION_XRAY},
                             file_case{"electron_wavelength", nullptr, tycho::test::electron_wavelength_A(e_eV) * 1e-10,
                                       TYCHO_RADIATION_ELECTRON},
                             file_case{"neither", nullptr, 0, TYCHO_RADIATION_UNKNOWN}}) {
    const std::string file = tmp(std::string(c.name) + ".cxi");
    tycho::test::write_mos2_cxi(file);
    {
      h5_file_writer w(file, true);
      if (c.probe) w.string_attr("/entry_1/instrument_1/source_1", "probe", c.probe);
      if (c.wavelength_m > 0) w.number("/entry_1/instrument_1/source_1/wavelength", c.wavelength_m);
    }
    ASSERT_EQ(open_path(file), TYCHO_OK) << c.name << ": " << tycho::last_error();
    EXPECT_EQ(info().radiation, c.expected) << c.name;
    close();
  }
}

}  // namespace
