// Geometry of the PNG previews (host/src/previews/previews.cpp): where an image lands in its panel and
// how long its scale bar is. Pure computation, no drawing, so that tests check the figures a
// reader measures on the sheet. All lengths are in screen pixels of the PNG unless named _A (Å).
#pragma once

#include <cstdint>
#include <string>

namespace tycho::host {

// A rectangle on the PNG: top-left corner (x, y), width, height.
struct preview_box {
  double x = 0, y = 0, w = 0, h = 0;
};

// An image of rows × cols pixels drawn at `scale` screen pixels per image pixel, top-left at
// (x, y): the largest uniform scale that fits `area`, centred in it.
struct image_placement {
  double x = 0, y = 0, scale = 0;
  double w = 0, h = 0;  // cols · scale, rows · scale
};
image_placement place_image(int64_t rows, int64_t cols, const preview_box& area);

// A scale bar of a "round" length (1, 2 or 5 × 10^k Å), the longest not above `max_fraction` of
// the image's width on screen. length_px = round(length_A / pixel_A · scale): whole pixels, so
// the bar drawn is exactly that many pixels long. Throws tycho::error (TYCHO_ERR_INVALID_ARGUMENT)
// when pixel_A or scale is not finite and positive.
struct scale_bar {
  double length_A = 0;
  int64_t length_px = 0;
  std::string label;  // "5 Å", "20 Å", "0.5 Å"
};
scale_bar choose_scale_bar(double pixel_A, double scale, double image_width_px, double max_fraction = 0.3);

// The sheet: a title line, two rows of three panels (object phase, object amplitude, probe;
// measured diffraction, modelled diffraction, loss curve) and a caption under them.
struct sheet_layout {
  int width = 0, height = 0;
  preview_box title, object_phase, object_amplitude, probe, diffraction_measured, diffraction_model, loss,
      caption;
};
sheet_layout layout_sheet(int caption_lines);

// One image panel (a single PNG or a sheet cell): a title line, the image, a colour bar to its
// right with its value range, the scale bar in the image's lower-left corner.
struct image_panel_layout {
  preview_box title, image_area, colour_bar;
  image_placement image;
};
image_panel_layout layout_image_panel(const preview_box& panel, int64_t rows, int64_t cols, bool colour_bar);

}  // namespace tycho::host

namespace tycho::host {

// The scale bar's filled rectangle: in the image's lower-left corner, length_px wide, 6 px
// high, on whole pixels (drawn white, without antialiasing).
preview_box scale_bar_box(const image_placement& image, const scale_bar& bar);

}  // namespace tycho::host
