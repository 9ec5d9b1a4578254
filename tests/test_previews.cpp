// The PNG previews (tycho/host/previews.hpp): the files and their sizes, the scale bar's length
// on the image against the pixel size, NaN-free objects giving NaN-free images, the caption.
#include <gtest/gtest.h>

#include <cairo.h>
#include <tycho/core/error.hpp>

#include <cmath>
#include <complex>
#include <filesystem>
#include <numbers>

#include "tycho/host/preview_layout.hpp"
#include "tycho/host/previews.hpp"

namespace fs = std::filesystem;
using namespace tycho::host;
using tycho::owned_array;

namespace {

// A PNG read back through cairo (RGB24 or ARGB32: 0x00RRGGBB per pixel).
struct png_image {
  int w = 0, h = 0;
  std::vector<uint32_t> px;
  uint32_t at(int x, int y) const { return px[std::size_t(y) * std::size_t(w) + std::size_t(x)] & 0xFFFFFFu; }
};

png_image read_png(const std::string& path) {
  png_image im;
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(s);
    ADD_FAILURE() << "cannot read " << path;
    return im;
  }
  im.w = cairo_image_surface_get_width(s);
  im.h = cairo_image_surface_get_height(s);
  const int stride = cairo_image_surface_get_stride(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  for (int y = 0; y < im.h; ++y)
    for (int x = 0; x < im.w; ++x) im.px.push_back(reinterpret_cast<const uint32_t*>(data + y * stride)[x]);
  cairo_surface_destroy(s);
  return im;
}

constexpr uint32_t k_white = 0xFFFFFF, k_black = 0x000000, k_nan_grey = 0x808080;

// A synthetic result: a hexagonal-ish lattice of phase bumps (rows × cols, one slice), a
// Gaussian probe of n × n with a phase curvature, a 6 × 5 raster of positions in the middle.
preview_inputs synthetic(int64_t rows, int64_t cols, int64_t n) {
  preview_inputs in;
  std::vector<std::complex<float>> obj(std::size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double ph = 0.3 * std::cos(2 * std::numbers::pi * r / 7.0) * std::cos(2 * std::numbers::pi * c / 6.0);
      obj[std::size_t(r * cols + c)] = std::polar(float(0.9 + 0.05 * std::sin(c / 5.0)), float(ph));
    }
  in.object = owned_array::from_vector("object", {kDLComplex, 64, 1}, {1, rows, cols}, obj);
  std::vector<std::complex<float>> probe(std::size_t(n * n));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const double x = double(r - n / 2), y = double(c - n / 2), q = (x * x + y * y) / (n * n / 16.0);
      probe[std::size_t(r * n + c)] = std::polar(float(std::exp(-q)), float(0.7 * q));
    }
  in.probe = owned_array::from_vector("probe", {kDLComplex, 64, 1}, {1, n, n}, probe);
  std::vector<double> pos;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) pos.push_back(double(rows) / 2 - 10 + 4 * i), pos.push_back(double(cols) / 2 - 8 + 4 * j);
  in.positions_px = owned_array::from_vector("positions_px", {kDLFloat, 64, 1}, {30, 2}, pos);
  for (int k = 0; k < 12; ++k) in.loss_history.push_back(0.2 * std::exp(-0.3 * k) + 0.01);
  in.pixel_A = 0.2;
  in.measured_mean.assign(std::size_t(n * n), 1.0);
  in.measured_mean[0] = 400;  // the bright field in FFT order
  in.title = "synthetic";
  in.caption = {"line one", "line two"};
  return in;
}

class Previews : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("tycho_previews_" + std::to_string(::getpid()));
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_;
};

}  // namespace

// Round lengths, whole pixels, and the exact ratio length_px = length_A / pixel_A · scale.
TEST(PreviewLayout, ScaleBarIsARoundLengthOfTheRightPixels) {
  struct example {
    double pixel_A, scale, width, length_A;
    int64_t length_px;
    const char* label;
  };
  // 0.1736 Å pixels at 2.5 screen px each over 300 px: at most 90 px = 6.25 Å -> 5 Å = 72 px.
  for (const example& e : {example{0.1736, 2.5, 300, 5, 72, "5 Å"},
                           example{0.2, 3.5, 350, 5, 88, "5 Å"},       // max 105 px = 6 Å
                           example{1.0, 1.0, 1000, 200, 200, "200 Å"},  // max 300 Å
                           example{0.01, 4.0, 400, 0.2, 80, "0.2 Å"}}) {  // max 0.3 Å
    const scale_bar b = choose_scale_bar(e.pixel_A, e.scale, e.width);
    EXPECT_DOUBLE_EQ(b.length_A, e.length_A) << e.pixel_A;
    EXPECT_EQ(b.length_px, e.length_px) << e.pixel_A;
    EXPECT_EQ(b.label, e.label);
    EXPECT_EQ(b.length_px, std::llround(b.length_A / e.pixel_A * e.scale));
    EXPECT_LE(double(b.length_px), 0.3 * e.width + 0.5);
  }
  EXPECT_THROW(choose_scale_bar(0.0, 1.0, 100), tycho::error);
  EXPECT_THROW(choose_scale_bar(NAN, 1.0, 100), tycho::error);
  EXPECT_THROW(choose_scale_bar(0.1, -1.0, 100), tycho::error);
}

TEST(PreviewLayout, ImageFitsItsAreaCentredAtOneScale) {
  const image_placement p = place_image(100, 200, {10, 20, 400, 400});
  EXPECT_DOUBLE_EQ(p.scale, 2.0);
  EXPECT_DOUBLE_EQ(p.w, 400);
  EXPECT_DOUBLE_EQ(p.h, 200);
  EXPECT_DOUBLE_EQ(p.x, 10);
  EXPECT_DOUBLE_EQ(p.y, 120);
}

// Every file, its size, and the scale bar measured on the written object phase image.
TEST_F(Previews, FilesSizesAndScaleBarLength) {
  const preview_inputs in = synthetic(120, 100, 32);
  const std::string result = (tmp_ / "r.zip").string();
  const auto written = write_previews(result, in);
  const std::vector<std::string> expect = {"r.object_phase.png", "r.object_amplitude.png", "r.probe.png",
                                           "r.diffraction.png", "r.loss.png", "r.sheet.png"};
  ASSERT_EQ(written.size(), expect.size());
  for (std::size_t k = 0; k < expect.size(); ++k) EXPECT_EQ(written[k], (tmp_ / expect[k]).string());

  const sheet_layout sheet = layout_sheet(2);
  const int pw = int(sheet.object_phase.w), ph = int(sheet.object_phase.h);
  EXPECT_EQ(pw, 440);
  EXPECT_EQ(ph, 400);
  for (const char* name : {"r.object_phase.png", "r.object_amplitude.png", "r.probe.png", "r.loss.png"}) {
    const png_image im = read_png((tmp_ / name).string());
    EXPECT_EQ(im.w, pw) << name;
    EXPECT_EQ(im.h, ph) << name;
  }
  const png_image diff = read_png((tmp_ / "r.diffraction.png").string());
  EXPECT_EQ(diff.w, 2 * pw);
  EXPECT_EQ(diff.h, ph);
  const png_image s = read_png((tmp_ / "r.sheet.png").string());
  EXPECT_EQ(s.w, sheet.width);
  EXPECT_EQ(s.h, sheet.height);
  EXPECT_EQ(sheet.width, 1384);

  // The bar: a run of exactly length_px white pixels, framed in black, where the layout puts it.
  const image_panel_layout l = layout_image_panel({0, 0, double(pw), double(ph)}, 120, 100, true);
  const scale_bar bar = choose_scale_bar(in.pixel_A, l.image.scale, l.image.w);
  const preview_box b = scale_bar_box(l.image, bar);
  EXPECT_EQ(bar.length_px, std::llround(bar.length_A / in.pixel_A * l.image.scale));
  const png_image phase = read_png((tmp_ / "r.object_phase.png").string());
  ASSERT_EQ(phase.w, pw);
  const int y = int(b.y) + 3, x0 = int(b.x);
  int run = 0;
  while (x0 + run < phase.w && phase.at(x0 + run, y) == k_white) ++run;
  EXPECT_EQ(run, bar.length_px) << bar.label << " at scale " << l.image.scale;
  EXPECT_EQ(phase.at(x0 - 1, y), k_black);
  EXPECT_EQ(phase.at(x0 + run, y), k_black);
  // The same bar on the sheet, whose panel sits elsewhere but has the same size.
  const image_panel_layout ls = layout_image_panel(sheet.object_phase, 120, 100, true);
  const preview_box bs = scale_bar_box(ls.image, choose_scale_bar(in.pixel_A, ls.image.scale, ls.image.w));
  run = 0;
  while (s.at(int(bs.x) + run, int(bs.y) + 3) == k_white) ++run;
  EXPECT_EQ(run, bar.length_px);
}

// Non-finite values are drawn mid grey: a NaN-free object shows none, one NaN patch shows it.
TEST_F(Previews, NanFreeObjectGivesNanFreeImage) {
  preview_inputs in = synthetic(120, 100, 32);
  const image_panel_layout l = layout_image_panel({0, 0, 440, 400}, 120, 100, true);
  auto grey_pixels = [&](const std::string& name) {
    const png_image im = read_png((tmp_ / name).string());
    int64_t grey = 0;
    for (int y = int(l.image.y) + 1; y < int(l.image.y + l.image.h) - 1; ++y)
      for (int x = int(l.image.x) + 1; x < int(l.image.x + l.image.w) - 1; ++x) grey += im.at(x, y) == k_nan_grey;
    return grey;
  };
  write_previews((tmp_ / "clean.zip").string(), in);
  EXPECT_EQ(grey_pixels("clean.object_phase.png"), 0);
  EXPECT_EQ(grey_pixels("clean.object_amplitude.png"), 0);

  auto* z = reinterpret_cast<std::complex<float>*>(in.object.bytes.data());
  for (int r = 10; r < 20; ++r)
    for (int c = 10; c < 20; ++c) z[r * 100 + c] = {NAN, 0.f};
  write_previews((tmp_ / "nan.zip").string(), in);
  EXPECT_GT(grey_pixels("nan.object_phase.png"), 100);  // 10 x 10 object pixels at ~3 screen px each
}

TEST_F(Previews, WrongArraysAreRefusedNamingThem) {
  preview_inputs in = synthetic(40, 40, 16);
  in.positions_px = owned_array::from_vector("positions_px", {kDLFloat, 32, 1}, {1, 2}, std::vector<float>{1, 2});
  try {
    write_previews((tmp_ / "bad.zip").string(), in);
    FAIL() << "float32 positions accepted";
  } catch (const tycho::error& e) {
    EXPECT_NE(std::string(e.what()).find("'positions_px' must be (P, 2) float64"), std::string::npos) << e.what();
  }
  in = synthetic(40, 40, 16);
  in.measured_mean.resize(10);
  EXPECT_THROW(write_previews((tmp_ / "bad.zip").string(), in), tycho::error);
}

TEST(PreviewCaption, KeySettingsFromTheManifest) {
  const std::string manifest = R"({
    "config_toml": "[reconstruct]\nengine = \"cpu\"\nbatch_size = 128\n[reconstruct.object]\noptimizer = \"adam\"\nlearning_rate = 0.005\nschedule = \"cosine\"\n",
    "data": {"description": "file:x.h5", "source": "emd", "scan_shape": [32, 24], "detector_shape": [96, 96]},
    "calibration": {"scan_step_A": [0.5, 0.5], "window_shape": [96, 96], "object_pixel_A": [0.1736, 0.1736],
                    "energy_eV": 80000.0, "wavelength_A": 0.04176, "semiangle_mrad": 25.0, "C10_A": -150.0},
    "history": {"iterations": 3, "loss": [0.3, 0.2, 0.0147], "seconds": [1.0, 1.0, 1.0]}})";
  const auto lines = preview_caption(manifest);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "data: file:x.h5 (emd), scan 32 x 24, step 0.5 x 0.5 Å, detector 96 x 96, window 96 x 96");
  EXPECT_EQ(lines[1], "optics: 80 keV (λ 0.04176 Å), semiangle 25 mrad, C10 -150 Å; object pixel 0.1736 x 0.1736 Å");
  EXPECT_EQ(lines[2], "reconstruction: cpu engine, amplitude loss, batch 128, float32; object: adam, learning rate "
                      "0.005, cosine; probe: adam");
  EXPECT_EQ(lines[3], "iterations 3, final loss 0.0147, 3 s of iterations");
  EXPECT_TRUE(preview_caption("not json").empty());
}
