#include "data/finite_values.hpp"

#include <tycho/core/error.hpp>

#include <cmath>
#include <complex>

namespace tycho::host {

namespace {

template <class T>
void scan(const T* p, int64_t n, int64_t per_element, non_finite_count& c) {
  for (int64_t k = 0; k < n; ++k)
    if (!std::isfinite(p[k])) {
      if (c.count++ == 0) {
        c.first = k / per_element;
        c.first_value = double(p[k]);
      }
      if (per_element == 2 && k % 2 == 0) ++k;  // one count per complex element
    }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t;
  for (std::size_t i = 0; i < shape.size(); ++i) t += (i ? " x " : "") + std::to_string(shape[i]);
  return t.empty() ? "()" : t;
}

}  // namespace

namespace {
non_finite_count count_in(const void* data, DLDataType dtype, int64_t n) {
  non_finite_count c;
  const bool complex = dtype.code == kDLComplex;
  if (dtype.code != kDLFloat && !complex) return c;
  const int64_t per = complex ? 2 : 1;
  const int bits = complex ? dtype.bits / 2 : dtype.bits;
  if (bits == 32)
    scan(static_cast<const float*>(data), n * per, per, c);
  else if (bits == 64)
    scan(static_cast<const double*>(data), n * per, per, c);
  return c;
}
}  // namespace

non_finite_count count_non_finite(const owned_array& a) { return count_in(a.bytes.data(), a.dtype, a.count()); }

non_finite_count count_non_finite(const DLTensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return count_in(static_cast<const char*>(t.data) + t.byte_offset, t.dtype, n);
}

void require_finite(const owned_array& a, const std::string& file, const std::string& why) {
  const non_finite_count c = count_non_finite(a);
  if (c.count == 0) return;
  fail(TYCHO_ERR_BAD_DATA, "'", file, "' (", why, "): array '", a.name, "' (", shape_text(a.shape), ") holds ",
       c.count, " non-finite value", c.count == 1 ? "" : "s", " (first: ", c.first_value, " at element ", c.first,
       "); expected finite numbers: a run from it would compute NaN. tycho never saves one, so the file was changed or "
       "written by another program; start from an earlier file");
}

void require_valid_patterns(const float* patterns, int64_t count, int64_t n0, int64_t n1, int64_t first_pattern,
                            const std::string& file, const std::string& array) {
  const int64_t m = n0 * n1;
  for (int64_t l = 0; l < count; ++l)
    for (int64_t k = 0; k < m; ++k) {
      const float v = patterns[l * m + k];
      if (std::isfinite(v) && v >= 0) continue;
      fail(TYCHO_ERR_BAD_DATA, "'", file, "': array '", array, "', pattern ", first_pattern + l, ", pixel (", k / n1,
           ", ", k % n1, ") is ", v, "; expected finite intensities >= 0 (a prepared file holds its patterns after "
           "bad pixels were refused): the file was changed; prepare the data again with tycho preprocess");
    }
}

void check_intensity_scale(const dataset& d) {
  const double pixels = double(d.n0) * double(d.n1);
  const double per_pixel = d.mean_total_intensity / pixels;
  if (std::isfinite(d.mean_total_intensity) && per_pixel >= k_min_mean_pixel_intensity) return;
  fail(TYCHO_ERR_BAD_DATA, "data '", d.description, "': the mean intensity is ", d.mean_total_intensity,
       " per pattern (", per_pixel, " per detector pixel); expected a finite mean of at least ",
       k_min_mean_pixel_intensity, " per pixel (float32's smallest normal number), or the model's scale "
       "overflows float32 and the run computes NaN: give the data in counts (or any unit of similar size)");
}

}  // namespace tycho::host
