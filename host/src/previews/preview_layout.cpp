#include "tycho/host/preview_layout.hpp"

#include <tycho/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tycho::host {

namespace {
constexpr double k_margin = 16;       // around the sheet and between panels
constexpr double k_panel_w = 440, k_panel_h = 400;
constexpr double k_title_h = 24;      // a panel's title line
constexpr double k_bar_w = 14;        // the colour bar
constexpr double k_bar_labels_w = 70;  // its value labels, to its right
constexpr double k_sheet_title_h = 34;
constexpr double k_caption_line_h = 18;

// "5", "20", "0.5": a round length without trailing zeros.
std::string round_number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

image_placement place_image(int64_t rows, int64_t cols, const preview_box& area) {
  image_placement p;
  if (rows <= 0 || cols <= 0 || area.w <= 0 || area.h <= 0) return p;
  p.scale = std::min(area.w / double(cols), area.h / double(rows));
  p.w = double(cols) * p.scale;
  p.h = double(rows) * p.scale;
  // Whole pixels, so the image's edges (and the outline of the field of view) are sharp.
  p.x = std::round(area.x + (area.w - p.w) / 2);
  p.y = std::round(area.y + (area.h - p.h) / 2);
  return p;
}

scale_bar choose_scale_bar(double pixel_A, double scale, double image_width_px, double max_fraction) {
  if (!(std::isfinite(pixel_A) && pixel_A > 0) || !(std::isfinite(scale) && scale > 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "scale bar: the pixel size (", pixel_A, " Å) and the display scale (", scale,
         " screen px per pixel) must be finite and positive");
  // The widest length the bar may take, in Å; then the largest 1, 2 or 5 × 10^k below it.
  const double max_A = std::max(image_width_px * max_fraction, 1.0) / scale * pixel_A;
  double decade = std::pow(10.0, std::floor(std::log10(max_A)));
  double length = decade;
  for (double m : {2.0, 5.0})
    if (m * decade <= max_A) length = m * decade;
  scale_bar b;
  b.length_A = length;
  b.length_px = std::llround(length / pixel_A * scale);
  b.label = round_number_text(length) + " Å";
  return b;
}

sheet_layout layout_sheet(int caption_lines) {
  sheet_layout s;
  const double col[3] = {k_margin, 2 * k_margin + k_panel_w, 3 * k_margin + 2 * k_panel_w};
  const double row0 = k_sheet_title_h + k_margin, row1 = row0 + k_panel_h + k_margin;
  s.width = int(4 * k_margin + 3 * k_panel_w);
  s.title = {k_margin, 6, s.width - 2 * k_margin, k_sheet_title_h - 6};
  s.object_phase = {col[0], row0, k_panel_w, k_panel_h};
  s.object_amplitude = {col[1], row0, k_panel_w, k_panel_h};
  s.probe = {col[2], row0, k_panel_w, k_panel_h};
  s.diffraction_measured = {col[0], row1, k_panel_w, k_panel_h};
  s.diffraction_model = {col[1], row1, k_panel_w, k_panel_h};
  s.loss = {col[2], row1, k_panel_w, k_panel_h};
  const double caption_y = row1 + k_panel_h + k_margin;
  s.caption = {k_margin, caption_y, s.width - 2 * k_margin, std::max(caption_lines, 1) * k_caption_line_h};
  s.height = int(caption_y + s.caption.h + k_margin);
  return s;
}

image_panel_layout layout_image_panel(const preview_box& panel, int64_t rows, int64_t cols, bool colour_bar) {
  image_panel_layout l;
  l.title = {panel.x, panel.y, panel.w, k_title_h};
  const double right = colour_bar ? k_bar_w + k_bar_labels_w + 8 : 0;
  l.image_area = {panel.x + 4, panel.y + k_title_h + 4, panel.w - 8 - right, panel.h - k_title_h - 8};
  l.image = place_image(rows, cols, l.image_area);
  if (colour_bar)
    l.colour_bar = {std::round(l.image.x + l.image.w + 8), l.image.y, k_bar_w, l.image.h};
  return l;
}

}  // namespace tycho::host

namespace tycho::host {

preview_box scale_bar_box(const image_placement& image, const scale_bar& bar) {
  return {std::round(image.x + 12), std::round(image.y + image.h - 16), double(bar.length_px), 6};
}

}  // namespace tycho::host
