// core's object layout from listed positions (layout_object with positions in Å): a raster given
// as a list is laid out bit for bit as the raster itself; other lists span their bounding box.
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/core/geometry.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

tycho::scan_geometry mos2_geometry() {
  tycho::scan_geometry g{};
  g.scan_shape[0] = 32;
  g.scan_shape[1] = 24;
  g.step_A[0] = g.step_A[1] = 0.5;
  g.pixel_A[0] = g.pixel_A[1] = 1.0 / (96 * 0.06);
  g.window[0] = g.window[1] = 96;
  g.padding_px = 16;
  g.scan_origin_A[0] = 17.0;
  g.scan_origin_A[1] = 19.0;
  return g;
}

// The raster's positions in Å, as a source that lists them would give them: (i·step0, j·step1).
std::vector<double> raster_positions_A(const tycho::scan_geometry& g) {
  std::vector<double> p;
  for (int64_t i = 0; i < g.scan_shape[0]; ++i)
    for (int64_t j = 0; j < g.scan_shape[1]; ++j) {
      p.push_back(double(i) * g.step_A[0]);
      p.push_back(double(j) * g.step_A[1]);
    }
  return p;
}

void expect_bit_identical(const tycho::scan_geometry& g) {
  const tycho::object_layout raster = tycho::layout_object(g);
  const tycho::object_layout listed = tycho::layout_object(g, raster_positions_A(g));
  EXPECT_EQ(listed.shape[0], raster.shape[0]);
  EXPECT_EQ(listed.shape[1], raster.shape[1]);
  ASSERT_EQ(listed.positions_px.size(), raster.positions_px.size());
  EXPECT_EQ(std::memcmp(listed.positions_px.data(), raster.positions_px.data(),
                        raster.positions_px.size() * sizeof(double)),
            0)
      << "first position: listed (" << listed.positions_px[0] << ", " << listed.positions_px[1]
      << "), raster (" << raster.positions_px[0] << ", " << raster.positions_px[1] << ")";
}

TEST(Geometry, ListedRasterIsBitIdenticalToRaster) {
  tycho::scan_geometry g = mos2_geometry();
  expect_bit_identical(g);
  const tycho::object_layout raster = tycho::layout_object(g);
  EXPECT_EQ(raster.shape[0], 220);  // conventions.md's MoS2 figures
  EXPECT_EQ(raster.shape[1], 197);
}

TEST(Geometry, ListedRasterIsBitIdenticalForOtherGeometries) {
  // Non-square windows and pixels, odd windows, steps that are not multiples of the pixel,
  // negative and sub-pixel origins, no padding, a single row or column.
  struct variant {
    int64_t scan[2];
    double step[2], pixel[2];
    int64_t window[2], padding;
    double origin[2];
  };
  const variant variants[] = {
      {{7, 5}, {0.37, 1.3}, {0.173, 0.2111}, {97, 64}, 0, {-3.21, 0.0}},
      {{1, 9}, {0.5, 0.41}, {0.1, 0.1}, {33, 35}, 5, {0.05, -0.999}},
      {{11, 1}, {2.7, 2.7}, {0.31, 0.29}, {48, 50}, 8, {123.456, 7.0}},
      {{1, 1}, {0.5, 0.5}, {0.17, 0.17}, {96, 96}, 16, {17.0, 19.0}},
  };
  for (const variant& v : variants) {
    tycho::scan_geometry g{};
    for (int a = 0; a < 2; ++a) {
      g.scan_shape[a] = v.scan[a];
      g.step_A[a] = v.step[a];
      g.pixel_A[a] = v.pixel[a];
      g.window[a] = v.window[a];
      g.scan_origin_A[a] = v.origin[a];
    }
    g.padding_px = v.padding;
    SCOPED_TRACE(testing::Message() << "scan " << v.scan[0] << " x " << v.scan[1] << ", window "
                                    << v.window[0] << " x " << v.window[1]);
    expect_bit_identical(g);
  }
}

TEST(Geometry, ListedPositionsSpanTheirBoundingBoxInAnyOrder) {
  tycho::scan_geometry g = mos2_geometry();
  g.scan_origin_A[0] = g.scan_origin_A[1] = 0.0;
  const double px = g.pixel_A[0];
  // Three positions in no particular order, with negative coordinates: the smallest along each
  // axis lands at padding + N/2 (the origin's sub-pixel part is 0 here, and -10 Å is not a whole
  // number of pixels, so the corner's sub-pixel part frac(-10/px) shifts everything).
  const std::vector<double> p = {3.0, -2.0, -10.0, 4.0, 0.0, 1.0};
  const tycho::object_layout l = tycho::layout_object(g, p);
  ASSERT_EQ(l.positions_px.size(), 6u);
  const double f0 = -10.0 / px - std::floor(-10.0 / px), f1 = -2.0 / px - std::floor(-2.0 / px);
  EXPECT_DOUBLE_EQ(l.positions_px[2], 16 + 48 + f0);  // pattern 1 holds the smallest axis-0 value
  EXPECT_DOUBLE_EQ(l.positions_px[1], 16 + 48 + f1);  // pattern 0 the smallest axis-1 value
  EXPECT_DOUBLE_EQ(l.positions_px[0], 16 + 48 + f0 + 13.0 / px);
  EXPECT_DOUBLE_EQ(l.positions_px[3], 16 + 48 + f1 + 6.0 / px);
  EXPECT_DOUBLE_EQ(l.positions_px[4], 16 + 48 + f0 + 10.0 / px);
  EXPECT_DOUBLE_EQ(l.positions_px[5], 16 + 48 + f1 + 3.0 / px);
  EXPECT_EQ(l.shape[0], int64_t(std::ceil(13.0 / px + 1.0)) + 96 + 32 + 1);
  EXPECT_EQ(l.shape[1], int64_t(std::ceil(6.0 / px + 1.0)) + 96 + 32 + 1);
  // Every window, with its sub-pixel spare, lies inside the object with the padding around it.
  for (std::size_t k = 0; k < 3; ++k)
    for (int a = 0; a < 2; ++a) {
      const double corner = l.positions_px[2 * k + std::size_t(a)] - 48;
      EXPECT_GE(corner, 16.0);
      EXPECT_LE(corner + 96 + 1, double(l.shape[a] - 16));
    }
}

TEST(Geometry, ListedPositionsKeepTheReferenceFramesPixels) {
  // Moving every position and the origin's opposite by the same amount changes nothing; moving
  // the origin by a whole number of pixels changes nothing either: only its sub-pixel part counts.
  tycho::scan_geometry g = mos2_geometry();
  const std::vector<double> p = {0.3, 0.1, 1.7, 2.9, 5.2, 0.4};
  const auto a = tycho::layout_object(g, p);
  g.scan_origin_A[0] += 7 * g.pixel_A[0];
  const auto b = tycho::layout_object(g, p);
  for (std::size_t k = 0; k < 6; ++k) EXPECT_NEAR(a.positions_px[k], b.positions_px[k], 1e-9) << k;
  // A reference point at a whole pixel of the frame (origin + position = m · px) lands on a
  // whole object pixel.
  g = mos2_geometry();
  g.scan_origin_A[0] = 0.0;
  const std::vector<double> q = {10 * g.pixel_A[0] + 0.02, 0.0, 13 * g.pixel_A[0], 0.5};
  const auto c = tycho::layout_object(g, q);
  EXPECT_NEAR(c.positions_px[2] - std::round(c.positions_px[2]), 0.0, 1e-9);
}

TEST(Geometry, ListedPositionsRefuseNonFiniteAndEmpty) {
  const tycho::scan_geometry g = mos2_geometry();
  EXPECT_THROW(tycho::layout_object(g, std::vector<double>{}), tycho::error);
  EXPECT_THROW(tycho::layout_object(g, std::vector<double>{0.0, 1.0, 2.0}), tycho::error);
  try {
    tycho::layout_object(g, std::vector<double>{0.0, 1.0, NAN, 2.0});
    ADD_FAILURE() << "a NaN position was accepted";
  } catch (const tycho::error& e) {
    EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
  }
}

}  // namespace
