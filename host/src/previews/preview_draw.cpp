#include "previews/preview_draw.hpp"

#include <tycho/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

namespace tycho::host {

namespace {
void set_grey(cairo_t* cr, double v) { cairo_set_source_rgb(cr, v, v, v); }

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// A cairo image surface of the colours (RGB24: one uint32 per pixel, 0x00RRGGBB).
std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> image_surface(const rgb_image& im) {
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> s(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, int(im.cols), int(im.rows)), cairo_surface_destroy);
  cairo_surface_flush(s.get());
  unsigned char* data = cairo_image_surface_get_data(s.get());
  const int stride = cairo_image_surface_get_stride(s.get());
  for (int64_t r = 0; r < im.rows; ++r) {
    auto* row = reinterpret_cast<uint32_t*>(data + r * stride);
    for (int64_t c = 0; c < im.cols; ++c) {
      const rgb8 p = im.pixels[std::size_t(r * im.cols + c)];
      row[c] = (uint32_t(p.r) << 16) | (uint32_t(p.g) << 8) | uint32_t(p.b);
    }
  }
  cairo_surface_mark_dirty(s.get());
  return s;
}

void draw_colour_bar(cairo_t* cr, const preview_box& b, const colour_bar_spec& spec) {
  const int steps = std::max(2, int(b.h));
  for (int k = 0; k < steps; ++k) {
    const rgb8 c = spec.colour(1.f - float(k) / float(steps - 1));  // high at the top
    cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0);
    cairo_rectangle(cr, b.x, b.y + b.h * k / steps, b.w, b.h / steps + 0.5);
    cairo_fill(cr);
  }
  set_grey(cr, 0.2);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, b.x + 0.5, b.y + 0.5, b.w - 1, b.h - 1);
  cairo_stroke(cr);
  draw_text(cr, b.x + b.w + 4, b.y + 10, spec.high, 11);
  draw_text(cr, b.x + b.w + 4, b.y + b.h, spec.low, 11);
  if (!spec.unit.empty()) draw_text(cr, b.x + b.w + 4, b.y + b.h / 2 + 4, spec.unit, 11);
}

void draw_scale_bar(cairo_t* cr, const image_placement& im, double pixel_A) {
  const scale_bar bar = choose_scale_bar(pixel_A, im.scale, im.w);
  const preview_box b = scale_bar_box(im, bar);
  // A dark frame around an exactly length_px wide white bar, drawn without antialiasing, so
  // that it reads on any background and measures what the layout says.
  cairo_save(cr);
  cairo_set_antialias(cr, CAIRO_ANTIALIAS_NONE);
  set_grey(cr, 0);
  cairo_rectangle(cr, b.x - 1, b.y - 1, b.w + 2, b.h + 2);
  cairo_fill(cr);
  set_grey(cr, 1);
  cairo_rectangle(cr, b.x, b.y, b.w, b.h);
  cairo_fill(cr);
  cairo_restore(cr);
  // The label above the bar, white with a dark outline.
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
  cairo_set_font_size(cr, 12);
  cairo_move_to(cr, b.x, b.y - 4);
  cairo_text_path(cr, bar.label.c_str());
  set_grey(cr, 0);
  cairo_set_line_width(cr, 2.5);
  cairo_stroke_preserve(cr);
  set_grey(cr, 1);
  cairo_fill(cr);
}

void draw_field_of_view(cairo_t* cr, const image_placement& im, const pixel_rect& fov) {
  const double x0 = im.x + (fov.c0 + 0.5) * im.scale, x1 = im.x + (fov.c1 + 0.5) * im.scale;
  const double y0 = im.y + (fov.r0 + 0.5) * im.scale, y1 = im.y + (fov.r1 + 0.5) * im.scale;
  cairo_save(cr);
  const double dash[] = {6, 4};
  cairo_set_dash(cr, dash, 2, 0);
  cairo_set_line_width(cr, 1.5);
  cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
  cairo_rectangle(cr, x0, y0, x1 - x0, y1 - y0);
  cairo_stroke(cr);
  cairo_restore(cr);
}

// Round tick values (1, 2 or 5 × 10^k steps) covering [lo, hi], about `want` of them.
std::vector<double> linear_ticks(double lo, double hi, int want) {
  std::vector<double> t;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / want, decade = std::pow(10.0, std::floor(std::log10(raw)));
  double step = decade;
  for (double m : {2.0, 5.0, 10.0})
    if (step < raw) step = m * decade;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) t.push_back(v);
  return t;
}
}  // namespace

preview_canvas::preview_canvas(int w, int h)
    : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h), cairo_surface_destroy),
      cr_(cairo_create(surface_.get()), cairo_destroy) {
  if (cairo_surface_status(surface_.get()) != CAIRO_STATUS_SUCCESS)
    fail(TYCHO_ERR_OUT_OF_MEMORY, "cannot make a ", w, " x ", h, " preview canvas: ",
         cairo_status_to_string(cairo_surface_status(surface_.get())));
  set_grey(cr(), 1);
  cairo_paint(cr());
}

void preview_canvas::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  cairo_surface_flush(surface_.get());
  const cairo_status_t st = cairo_surface_write_to_png(surface_.get(), tmp.c_str());
  if (st != CAIRO_STATUS_SUCCESS) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    fail(TYCHO_ERR_IO, "cannot write preview '", path, "': ", cairo_status_to_string(st));
  }
  std::filesystem::rename(tmp, path);
}

void draw_text(cairo_t* cr, double x, double y, const std::string& text, double size, bool bold, text_align align) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, text.c_str(), &e);
  const double dx = align == text_align::left ? 0 : align == text_align::centre ? -e.x_advance / 2 : -e.x_advance;
  set_grey(cr, 0.1);
  cairo_move_to(cr, x + dx, y);
  cairo_show_text(cr, text.c_str());
}

void draw_image_panel(cairo_t* cr, const preview_box& panel, const image_panel& p) {
  const image_panel_layout l = layout_image_panel(panel, p.image.rows, p.image.cols, p.bar.has_value());
  draw_text(cr, l.title.x + 4, l.title.y + 17, p.title, 14, true);
  if (p.image.rows <= 0 || p.image.cols <= 0) return;
  auto surface = image_surface(p.image);
  cairo_save(cr);
  cairo_rectangle(cr, l.image.x, l.image.y, l.image.w, l.image.h);
  cairo_clip(cr);
  cairo_translate(cr, l.image.x, l.image.y);
  cairo_scale(cr, l.image.scale, l.image.scale);
  cairo_set_source_surface(cr, surface.get(), 0, 0);
  cairo_pattern_set_filter(cairo_get_source(cr), p.smooth ? CAIRO_FILTER_BILINEAR : CAIRO_FILTER_NEAREST);
  cairo_pattern_set_extend(cairo_get_source(cr), CAIRO_EXTEND_PAD);  // no dark seam at the edges
  cairo_paint(cr);
  cairo_restore(cr);
  if (p.field_of_view) draw_field_of_view(cr, l.image, *p.field_of_view);
  if (p.pixel_A > 0) draw_scale_bar(cr, l.image, p.pixel_A);
  if (p.bar) draw_colour_bar(cr, l.colour_bar, *p.bar);
}

void draw_note_panel(cairo_t* cr, const preview_box& panel, const std::string& title, const std::string& note) {
  draw_text(cr, panel.x + 4, panel.y + 17, title, 14, true);
  set_grey(cr, 0.93);
  cairo_rectangle(cr, panel.x + 4, panel.y + 28, panel.w - 8, panel.h - 32);
  cairo_fill(cr);
  draw_text(cr, panel.x + panel.w / 2, panel.y + panel.h / 2, note, 12, false, text_align::centre);
}

void draw_loss_panel(cairo_t* cr, const preview_box& panel, const std::vector<double>& loss) {
  draw_text(cr, panel.x + 4, panel.y + 17, "loss per iteration", 14, true);
  std::vector<double> finite;
  for (double v : loss)
    if (std::isfinite(v) && v > 0) finite.push_back(v);
  if (finite.empty()) {
    draw_note_panel(cr, panel, "", "no finite loss recorded");
    return;
  }
  const double lo = *std::min_element(finite.begin(), finite.end());
  const double hi = *std::max_element(finite.begin(), finite.end());
  const bool log_y = hi > 3 * lo;
  auto fy = [&](double v) { return log_y ? std::log10(v) : v; };
  double y_lo = fy(lo), y_hi = fy(hi);
  if (!(y_hi > y_lo)) y_lo -= 0.5 * std::abs(y_lo) + 1e-30, y_hi += 0.5 * std::abs(y_hi) + 1e-30;
  const double pad = 0.05 * (y_hi - y_lo);
  y_lo -= pad, y_hi += pad;
  const double n = double(std::max<std::size_t>(loss.size(), 2));
  // The plot area: room for the tick labels left and below.
  const preview_box a{panel.x + 70, panel.y + 36, panel.w - 90, panel.h - 36 - 48};
  auto sx = [&](double i) { return a.x + (i - 1) / (n - 1) * a.w; };
  auto sy = [&](double v) { return a.y + a.h - (fy(v) - y_lo) / (y_hi - y_lo) * a.h; };

  cairo_set_line_width(cr, 1);
  // Ticks and grid: iterations below, loss to the left (decades, or round values).
  for (double t : linear_ticks(1, n, 5)) {
    set_grey(cr, 0.88);
    cairo_move_to(cr, std::round(sx(t)) + 0.5, a.y);
    cairo_line_to(cr, std::round(sx(t)) + 0.5, a.y + a.h);
    cairo_stroke(cr);
    draw_text(cr, sx(t), a.y + a.h + 16, number_text(t), 11, false, text_align::centre);
  }
  std::vector<double> yt;
  if (log_y) {
    for (double e = std::ceil(y_lo); e <= y_hi; e += 1) yt.push_back(std::pow(10.0, e));
    if (yt.size() < 2)  // less than two decades: 1, 2, 5 steps
      for (double e = std::floor(y_lo); e <= y_hi; e += 1)
        for (double m : {2.0, 5.0})
          if (double v = m * std::pow(10.0, e); std::log10(v) >= y_lo && std::log10(v) <= y_hi) yt.push_back(v);
  } else {
    yt = linear_ticks(y_lo, y_hi, 5);
  }
  for (double t : yt) {
    set_grey(cr, 0.88);
    cairo_move_to(cr, a.x, std::round(sy(t)) + 0.5);
    cairo_line_to(cr, a.x + a.w, std::round(sy(t)) + 0.5);
    cairo_stroke(cr);
    draw_text(cr, a.x - 6, sy(t) + 4, number_text(t), 11, false, text_align::right);
  }
  set_grey(cr, 0.2);
  cairo_rectangle(cr, a.x + 0.5, a.y + 0.5, a.w, a.h);
  cairo_stroke(cr);
  draw_text(cr, a.x + a.w / 2, a.y + a.h + 34, "iteration", 12, false, text_align::centre);
  cairo_save(cr);
  cairo_move_to(cr, panel.x + 14, a.y + a.h / 2);
  cairo_rotate(cr, -M_PI / 2);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, 12);
  cairo_text_extents_t e;
  const char* label = log_y ? "mean loss per pattern (log)" : "mean loss per pattern";
  cairo_text_extents(cr, label, &e);
  cairo_rel_move_to(cr, -e.x_advance / 2, 0);
  cairo_show_text(cr, label);
  cairo_restore(cr);

  // The curve (viridis' dark blue), non-finite values left out as gaps.
  const rgb8 c = viridis(0.25f);
  cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0);
  cairo_set_line_width(cr, 2);
  bool pen_down = false;
  for (std::size_t i = 0; i < loss.size(); ++i) {
    if (!(std::isfinite(loss[i]) && loss[i] > 0)) {
      pen_down = false;
      continue;
    }
    const double x = loss.size() == 1 ? a.x + a.w / 2 : sx(double(i + 1)), y = sy(loss[i]);
    if (pen_down)
      cairo_line_to(cr, x, y);
    else
      cairo_move_to(cr, x, y);
    pen_down = true;
  }
  if (loss.size() == 1) cairo_arc(cr, a.x + a.w / 2, sy(loss[0]), 3, 0, 2 * M_PI);
  cairo_stroke(cr);
  draw_text(cr, a.x + a.w - 4, a.y + 16, "final " + number_text(finite.back()), 12, false, text_align::right);
}

}  // namespace tycho::host
