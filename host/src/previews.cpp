#include "tycho/host/previews.hpp"

#include <tycho/core/error.hpp>

#include <png.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <filesystem>

namespace tycho::host {

void write_png_grey(const std::string& path, const std::vector<float>& values, int64_t rows,
                    int64_t cols, float lo, float hi) {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(TYCHO_ERR_IO, "cannot write preview '", tmp, "'");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    std::remove(tmp.c_str());
    fail(TYCHO_ERR_IO, "libpng failed writing preview '", path, "'");
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, png_uint_32(cols), png_uint_32(rows), 8, PNG_COLOR_TYPE_GRAY,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  std::vector<png_byte> row(static_cast<std::size_t>(cols));
  float scale = hi > lo ? 255.f / (hi - lo) : 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = (values[std::size_t(r * cols + c)] - lo) * scale;
      row[std::size_t(c)] = png_byte(std::clamp(v, 0.f, 255.f) + 0.5f);
    }
    png_write_row(png, row.data());
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  if (std::fclose(f) != 0) fail(TYCHO_ERR_IO, "cannot write preview '", tmp, "'");
  std::filesystem::rename(tmp, path);
}

namespace {
// The p-th quantile of `v` restricted to a box.
float quantile(std::vector<float> v, double p) {
  if (v.empty()) return 0.f;
  auto k = std::size_t(p * double(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
  return v[k];
}

// The first n values of a complex64 or complex128 array, as complex64.
std::vector<std::complex<float>> complex_values(const owned_array& a, int64_t n, const std::string& path) {
  const bool c128 = a.dtype.code == kDLComplex && a.dtype.bits == 128;
  if (a.dtype.code != kDLComplex || !(a.dtype.bits == 64 || c128) || a.count() < n)
    fail(TYCHO_ERR_BAD_DATA, "previews for '", path, "': '", a.name, "' must be complex64 or complex128");
  if (!c128) return {a.as<std::complex<float>>(), a.as<std::complex<float>>() + n};
  std::vector<std::complex<float>> v(static_cast<std::size_t>(n));
  const auto* z = a.as<std::complex<double>>();
  for (int64_t k = 0; k < n; ++k) v[std::size_t(k)] = std::complex<float>(z[k]);
  return v;
}
}  // namespace

std::vector<std::string> write_previews(const std::string& result_path, const owned_array& object,
                                        const owned_array& probe, const owned_array& positions_px) {
  namespace fs = std::filesystem;
  fs::path p(result_path);
  std::string stem = (p.parent_path() / p.stem()).string();
  std::vector<std::string> written;

  const int64_t h = object.shape[1], w = object.shape[2];
  // complex64, or complex128 from a float64 run: the images are 8-bit either way.
  const std::vector<std::complex<float>> obj = complex_values(object, h * w, result_path);
  const auto* pos = positions_px.as<double>();
  double r0 = 1e300, r1 = -1e300, c0 = 1e300, c1 = -1e300;
  for (int64_t k = 0; k < positions_px.shape[0]; ++k) {
    r0 = std::min(r0, pos[2 * k]);
    r1 = std::max(r1, pos[2 * k]);
    c0 = std::min(c0, pos[2 * k + 1]);
    c1 = std::max(c1, pos[2 * k + 1]);
  }
  std::vector<float> phase(std::size_t(h * w)), amp(std::size_t(h * w)), fov_phase, fov_amp;
  for (int64_t r = 0; r < h; ++r)
    for (int64_t c = 0; c < w; ++c) {
      auto z = obj[std::size_t(r * w + c)];
      phase[std::size_t(r * w + c)] = std::arg(z);
      amp[std::size_t(r * w + c)] = std::abs(z);
      if (r >= r0 && r <= r1 && c >= c0 && c <= c1) {
        fov_phase.push_back(std::arg(z));
        fov_amp.push_back(std::abs(z));
      }
    }
  written.push_back(stem + ".object_phase.png");
  write_png_grey(written.back(), phase, h, w, quantile(fov_phase, 0.01), quantile(fov_phase, 0.99));
  written.push_back(stem + ".object_amplitude.png");
  write_png_grey(written.back(), amp, h, w, quantile(fov_amp, 0.01), quantile(fov_amp, 0.99));

  const int64_t n0 = probe.shape[1], n1 = probe.shape[2];
  const std::vector<std::complex<float>> pr = complex_values(probe, n0 * n1, result_path);
  std::vector<float> pa(std::size_t(n0 * n1));
  float peak = 0;
  for (int64_t k = 0; k < n0 * n1; ++k) peak = std::max(peak, pa[std::size_t(k)] = std::abs(pr[std::size_t(k)]));
  written.push_back(stem + ".probe.png");
  write_png_grey(written.back(), pa, n0, n1, 0.f, peak);
  return written;
}

}  // namespace tycho::host
