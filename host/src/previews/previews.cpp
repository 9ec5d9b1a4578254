#include "tycho/host/previews.hpp"

#include <tycho/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <filesystem>
#include <limits>

#include "previews/preview_draw.hpp"
#include "previews/preview_model.hpp"

namespace tycho::host {

namespace {
using cf = std::complex<float>;

// The p-th quantile of the finite values of `v` (0 when there are none).
float finite_quantile(const std::vector<float>& v, double p) {
  std::vector<float> f;
  f.reserve(v.size());
  for (float x : v)
    if (std::isfinite(x)) f.push_back(x);
  if (f.empty()) return 0.f;
  auto k = std::size_t(p * double(f.size() - 1));
  std::nth_element(f.begin(), f.begin() + std::ptrdiff_t(k), f.end());
  return f[k];
}

// Every value of a complex64 or complex128 array of `expect_dims` dimensions, as complex64.
std::vector<cf> complex_values(const owned_array& a, std::size_t expect_dims, const std::string& path) {
  const bool c128 = a.dtype.code == kDLComplex && a.dtype.bits == 128;
  if (a.dtype.code != kDLComplex || !(a.dtype.bits == 64 || c128) || a.shape.size() != expect_dims)
    fail(TYCHO_ERR_BAD_DATA, "previews for '", path, "': '", a.name, "' must be a ", expect_dims,
         "-dimensional complex64 or complex128 array");
  const int64_t n = a.count();
  if (!c128) return {a.as<cf>(), a.as<cf>() + n};
  std::vector<cf> v(static_cast<std::size_t>(n));
  const auto* z = a.as<std::complex<double>>();
  for (int64_t k = 0; k < n; ++k) v[std::size_t(k)] = cf(z[k]);
  return v;
}

// Values in [lo, hi] through viridis; non-finite ones come out mid grey.
rgb_image viridis_image(const std::vector<float>& v, int64_t rows, int64_t cols, float lo, float hi) {
  rgb_image im{rows, cols, std::vector<rgb8>(v.size())};
  const float span = hi > lo ? hi - lo : 1.f;
  for (std::size_t k = 0; k < v.size(); ++k) im.pixels[k] = v[k] == -INFINITY ? viridis(0.f) : viridis((v[k] - lo) / span);
  return im;
}

colour_bar_spec viridis_bar(float lo, float hi, const std::string& unit) {
  char l[32], h[32];
  std::snprintf(l, sizeof l, "%.3g", double(lo));
  std::snprintf(h, sizeof h, "%.3g", double(hi));
  return {[](float t) { return viridis(t); }, l, h, unit};
}

// The bounding box of the probe centres: the scanned field of view, in object pixels.
pixel_rect scanned_field(const owned_array& positions_px, const std::string& path) {
  if (positions_px.dtype.code != kDLFloat || positions_px.dtype.bits != 64 || positions_px.shape.size() != 2 ||
      positions_px.shape[1] != 2 || positions_px.shape[0] < 1)
    fail(TYCHO_ERR_BAD_DATA, "previews for '", path, "': 'positions_px' must be (P, 2) float64");
  const double* pos = positions_px.as<double>();
  pixel_rect r{1e300, -1e300, 1e300, -1e300};
  for (int64_t k = 0; k < positions_px.shape[0]; ++k) {
    r.r0 = std::min(r.r0, pos[2 * k]);
    r.r1 = std::max(r.r1, pos[2 * k]);
    r.c0 = std::min(r.c0, pos[2 * k + 1]);
    r.c1 = std::max(r.c1, pos[2 * k + 1]);
  }
  return r;
}

// The values of an (h, w) image inside the field of view, for the colour range.
std::vector<float> inside(const std::vector<float>& v, int64_t h, int64_t w, const pixel_rect& fov) {
  std::vector<float> out;
  for (int64_t r = std::max<int64_t>(0, int64_t(std::ceil(fov.r0))); r <= std::min<int64_t>(h - 1, int64_t(fov.r1)); ++r)
    for (int64_t c = std::max<int64_t>(0, int64_t(std::ceil(fov.c0))); c <= std::min<int64_t>(w - 1, int64_t(fov.c1)); ++c)
      out.push_back(v[std::size_t(r * w + c)]);
  return out.empty() ? v : out;
}

image_panel real_image_panel(const std::string& title, const std::vector<float>& v, int64_t h, int64_t w,
                             const pixel_rect& fov, double pixel_A, const std::string& unit) {
  const std::vector<float> in_fov = inside(v, h, w, fov);
  const float lo = finite_quantile(in_fov, 0.01), hi = finite_quantile(in_fov, 0.99);
  image_panel p;
  p.title = title;
  p.image = viridis_image(v, h, w, lo, hi);
  p.bar = viridis_bar(lo, hi, unit);
  p.pixel_A = pixel_A;
  p.field_of_view = fov;
  return p;
}

// The probe's modes side by side (2 px black between them): brightness = amplitude over the
// strongest mode's peak, hue = phase. The title gives each mode's share of Σ|P|².
image_panel probe_panel(const std::vector<cf>& probe, int64_t modes, int64_t n0, int64_t n1, double pixel_A) {
  float peak = 0;
  std::vector<double> power(std::size_t(modes), 0.0);
  for (int64_t m = 0; m < modes; ++m)
    for (int64_t k = 0; k < n0 * n1; ++k) {
      const cf z = probe[std::size_t(m * n0 * n1 + k)];
      if (std::isfinite(std::abs(z))) peak = std::max(peak, std::abs(z)), power[std::size_t(m)] += std::norm(z);
    }
  double total = 0;
  for (double p : power) total += p;
  const int64_t gap = 2, cols = modes * n1 + (modes - 1) * gap;
  image_panel p;
  p.image = {n0, cols, std::vector<rgb8>(std::size_t(n0 * cols))};
  for (int64_t m = 0; m < modes; ++m)
    for (int64_t r = 0; r < n0; ++r)
      for (int64_t c = 0; c < n1; ++c) {
        const cf z = probe[std::size_t((m * n0 + r) * n1 + c)];
        p.image.pixels[std::size_t(r * cols + m * (n1 + gap) + c)] = phase_hue(std::abs(z), std::arg(z), peak);
      }
  p.title = "probe: amplitude, phase as hue";
  if (modes > 1) {
    p.title = "probe modes, power";
    for (int64_t m = 0; m < modes; ++m) {
      char buf[24];
      std::snprintf(buf, sizeof buf, " %.0f%%", total > 0 ? 100 * power[std::size_t(m)] / total : 0.0);
      p.title += buf;
    }
  }
  p.bar = colour_bar_spec{[](float t) { return phase_hue(1.f, float((2 * t - 1) * M_PI), 1.f); }, "-π", "π", "phase"};
  p.pixel_A = pixel_A;
  return p;
}

// A pattern in FFT natural order, normalised to a sum of 1 over the used pixels, as log10 and
// centred (fftshift); unused pixels are NaN (drawn grey), zeros −inf (the colour range's floor).
std::vector<float> log_pattern(const std::vector<double>& fft_order, const std::vector<uint8_t>& mask, int64_t n0,
                               int64_t n1) {
  double sum = 0;
  for (int64_t k = 0; k < n0 * n1; ++k)
    if ((mask.empty() || mask[std::size_t(k)]) && std::isfinite(fft_order[std::size_t(k)])) sum += fft_order[std::size_t(k)];
  std::vector<float> out(std::size_t(n0 * n1), NAN);
  for (int64_t r = 0; r < n0; ++r)
    for (int64_t c = 0; c < n1; ++c) {
      const std::size_t k = std::size_t(r * n1 + c);
      const double v = fft_order[k];
      if ((mask.empty() || mask[k]) && sum > 0)
        out[std::size_t(((r + n0 / 2) % n0) * n1 + (c + n1 / 2) % n1)] =
            v > 0 ? float(std::log10(v / sum)) : -std::numeric_limits<float>::infinity();
    }
  return out;
}

struct diffraction_panels {
  image_panel measured, model;
  std::string missing;  // why the measured pattern is not shown
};

diffraction_panels diffraction(const preview_inputs& in, const std::vector<cf>& object, const std::vector<cf>& probe,
                               const std::string& path) {
  const int64_t slices = in.object.shape[0], h = in.object.shape[1], w = in.object.shape[2];
  const int64_t modes = in.probe.shape[0], n0 = in.probe.shape[1], n1 = in.probe.shape[2];
  const auto model = modelled_mean_pattern(object, slices, h, w, probe, modes, n0, n1, in.positions_px.as<double>(),
                                           in.positions_px.shape[0]);
  if (!in.measured_mean.empty() && in.measured_mean.size() != std::size_t(n0 * n1))
    fail(TYCHO_ERR_BAD_DATA, "previews for '", path, "': the mean measured pattern has ", in.measured_mean.size(),
         " values, the probe's window ", n0, " x ", n1);
  if (!in.mask.empty() && in.mask.size() != std::size_t(n0 * n1))
    fail(TYCHO_ERR_BAD_DATA, "previews for '", path, "': the detector mask has ", in.mask.size(), " values, the window ",
         n0, " x ", n1);
  const std::vector<float> lm = log_pattern(model, in.mask, n0, n1);
  std::vector<float> both = lm;
  std::vector<float> ld;
  if (!in.measured_mean.empty()) {
    ld = log_pattern(in.measured_mean, in.mask, n0, n1);
    both.insert(both.end(), ld.begin(), ld.end());
  }
  // One colour range for both, so that the eye compares like with like: from the measured
  // pattern's 2nd percentile (the model's without data) to the brightest pixel, at most 7
  // decades.
  const float hi = finite_quantile(both, 1.0);
  const float lo = std::max(finite_quantile(ld.empty() ? lm : ld, 0.02), hi - 7.f);
  diffraction_panels d;
  auto panel = [&](const std::string& title, const std::vector<float>& v) {
    image_panel p;
    p.title = title;
    p.image = viridis_image(v, n0, n1, lo, hi);
    p.smooth = false;
    p.bar = viridis_bar(lo, hi, "log10");
    return p;
  };
  d.model = panel("modelled mean pattern (log10)", lm);
  if (ld.empty())
    d.missing = "the mean measured pattern was not given";
  else
    d.measured = panel("measured mean pattern (log10)", ld);
  return d;
}

void draw_diffraction(cairo_t* cr, const preview_box& measured, const preview_box& model, const diffraction_panels& d) {
  if (d.missing.empty())
    draw_image_panel(cr, measured, d.measured);
  else
    draw_note_panel(cr, measured, "measured mean pattern", d.missing);
  draw_image_panel(cr, model, d.model);
}

}  // namespace

std::vector<std::string> write_previews(const std::string& result_path, const preview_inputs& in) {
  namespace fs = std::filesystem;
  const fs::path p(result_path);
  const std::string stem = (p.parent_path() / p.stem()).string();
  std::vector<std::string> written;

  const std::vector<cf> obj = complex_values(in.object, 3, result_path);
  const std::vector<cf> probe = complex_values(in.probe, 3, result_path);
  const int64_t slices = in.object.shape[0], h = in.object.shape[1], w = in.object.shape[2];
  const int64_t modes = in.probe.shape[0], n0 = in.probe.shape[1], n1 = in.probe.shape[2];
  const pixel_rect fov = scanned_field(in.positions_px, result_path);

  // Phase and amplitude of all slices together (their product), and each slice's phase.
  std::vector<float> phase(std::size_t(h * w)), amp(std::size_t(h * w));
  for (int64_t k = 0; k < h * w; ++k) {
    cf z = obj[std::size_t(k)];
    for (int64_t s = 1; s < slices; ++s) z *= obj[std::size_t(s * h * w + k)];
    phase[std::size_t(k)] = std::arg(z);
    amp[std::size_t(k)] = std::abs(z);
  }
  const std::string all = slices > 1 ? " (all slices)" : "";
  const image_panel phase_panel = real_image_panel("object phase" + all, phase, h, w, fov, in.pixel_A, "rad");
  const image_panel amp_panel = real_image_panel("object amplitude" + all, amp, h, w, fov, in.pixel_A, "");
  const image_panel probe_p = probe_panel(probe, modes, n0, n1, in.pixel_A);
  const diffraction_panels diff = diffraction(in, obj, probe, result_path);

  const sheet_layout sheet = layout_sheet(int(in.caption.size()));
  const preview_box single{0, 0, sheet.object_phase.w, sheet.object_phase.h};
  auto write_single = [&](const std::string& name, const image_panel& panel) {
    preview_canvas c(int(single.w), int(single.h));
    draw_image_panel(c.cr(), single, panel);
    written.push_back(stem + name);
    c.save(written.back());
  };
  write_single(".object_phase.png", phase_panel);
  write_single(".object_amplitude.png", amp_panel);
  for (int64_t s = 0; s < slices && slices > 1; ++s) {
    std::vector<float> ph(std::size_t(h * w));
    for (int64_t k = 0; k < h * w; ++k) ph[std::size_t(k)] = std::arg(obj[std::size_t(s * h * w + k)]);
    write_single(".object_phase.slice" + std::to_string(s) + ".png",
                 real_image_panel("object phase, slice " + std::to_string(s), ph, h, w, fov, in.pixel_A, "rad"));
  }
  write_single(".probe.png", probe_p);
  {
    preview_canvas c(int(2 * single.w), int(single.h));
    draw_diffraction(c.cr(), single, {single.w, 0, single.w, single.h}, diff);
    written.push_back(stem + ".diffraction.png");
    c.save(written.back());
  }
  {
    preview_canvas c(int(single.w), int(single.h));
    draw_loss_panel(c.cr(), single, in.loss_history);
    written.push_back(stem + ".loss.png");
    c.save(written.back());
  }

  preview_canvas c(sheet.width, sheet.height);
  draw_text(c.cr(), sheet.title.x, sheet.title.y + 20, in.title.empty() ? p.filename().string() : in.title, 18, true);
  draw_image_panel(c.cr(), sheet.object_phase, phase_panel);
  draw_image_panel(c.cr(), sheet.object_amplitude, amp_panel);
  draw_image_panel(c.cr(), sheet.probe, probe_p);
  draw_diffraction(c.cr(), sheet.diffraction_measured, sheet.diffraction_model, diff);
  draw_loss_panel(c.cr(), sheet.loss, in.loss_history);
  for (std::size_t k = 0; k < in.caption.size(); ++k)
    draw_text(c.cr(), sheet.caption.x, sheet.caption.y + 13 + 18 * double(k), in.caption[k], 12);
  written.push_back(stem + ".sheet.png");
  c.save(written.back());
  return written;
}

}  // namespace tycho::host
