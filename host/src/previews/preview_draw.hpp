// Drawing the previews' panels with cairo: images with colour bar, scale bar and field of view,
// the loss curve, text. Layout figures come from tycho/host/preview_layout.hpp.
#pragma once

#include <cairo.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "previews/preview_colormap.hpp"
#include "tycho/host/preview_layout.hpp"

namespace tycho::host {

// A white RGB canvas of w × h pixels; save() writes it as PNG atomically (temporary file, then
// rename) and throws tycho::error (TYCHO_ERR_IO) naming the file when it cannot.
class preview_canvas {
 public:
  preview_canvas(int w, int h);
  cairo_t* cr() const { return cr_.get(); }
  void save(const std::string& path) const;

 private:
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> surface_;
  std::unique_ptr<cairo_t, void (*)(cairo_t*)> cr_;
};

// An image of rows × cols colours, C order.
struct rgb_image {
  int64_t rows = 0, cols = 0;
  std::vector<rgb8> pixels;
};

// What a colour bar shows: the map from t ∈ [0, 1] to colour and the labels at its ends.
struct colour_bar_spec {
  std::function<rgb8(float)> colour;
  std::string low, high, unit;  // "−0.42", "0.61", "rad"
};

// A rectangle in image pixel coordinates (rows r0..r1, columns c0..c1, pixel centres).
struct pixel_rect {
  double r0 = 0, r1 = 0, c0 = 0, c1 = 0;
};

// An image panel: title, the image scaled to fit, and optionally a colour bar, a scale bar (the
// image's pixel size in Å) and the scanned field of view as a dashed outline.
struct image_panel {
  std::string title;
  rgb_image image;
  bool smooth = true;  // bilinear filtering when scaled up; false: nearest (sharp pixels)
  std::optional<colour_bar_spec> bar;
  double pixel_A = 0;  // 0: no scale bar
  std::optional<pixel_rect> field_of_view;
};
void draw_image_panel(cairo_t* cr, const preview_box& panel, const image_panel& p);

// The loss per iteration, log scale when it spans more than a factor 3, with axes and ticks.
void draw_loss_panel(cairo_t* cr, const preview_box& panel, const std::vector<double>& loss);

// A panel that has nothing to show, with the reason in its middle.
void draw_note_panel(cairo_t* cr, const preview_box& panel, const std::string& title, const std::string& note);

enum class text_align { left, centre, right };
// One line of text with its baseline at y, in sans-serif (fontconfig's choice: DejaVu Sans).
void draw_text(cairo_t* cr, double x, double y, const std::string& text, double size, bool bold = false,
               text_align align = text_align::left);

}  // namespace tycho::host
