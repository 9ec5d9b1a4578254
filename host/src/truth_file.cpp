#include "truth_file.hpp"

#include <tycho/core/error.hpp>
#include <tycho/sdk/npy.hpp>
#include <zip.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

namespace tycho::host {

namespace {
struct archive_closer {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct member_closer {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

std::vector<std::string> member_names(zip_t* za) {
  std::vector<std::string> names;
  for (zip_int64_t i = 0, n = zip_get_num_entries(za, 0); i < n; ++i)
    if (const char* name = zip_get_name(za, zip_uint64_t(i), 0)) names.emplace_back(name);
  return names;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

// Member `name`.npy as a numeric little-endian C-order array (a 2-D Fortran-order one is
// transposed); nullopt when the archive has no such member.
std::optional<owned_array> read_member(zip_t* za, const std::string& path, const std::string& name) {
  const std::string member = name + ".npy";
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(za, member.c_str(), 0, &st) != 0) return std::nullopt;
  const std::string where = "'" + path + "': member '" + name + "'";
  std::unique_ptr<zip_file_t, member_closer> f(zip_fopen_index(za, st.index, 0));
  if (!f) fail(TYCHO_ERR_IO, where, ": cannot be opened: ", zip_strerror(za));
  auto read = [&](void* dst, std::size_t n) {
    if (zip_fread(f.get(), dst, n) != zip_int64_t(n)) fail(TYCHO_ERR_BAD_DATA, where, ": is truncated");
  };
  const sdk::npy::header h = sdk::npy::read_header(read, st.size, where);
  if (!h.dtype || h.big_endian)
    fail(TYCHO_ERR_BAD_DATA, where, " has dtype '", h.descr, "'; expected a little-endian number");
  owned_array a;
  a.name = name;
  a.dtype = *h.dtype;
  a.shape = h.shape;
  a.bytes.resize(std::size_t(h.data_bytes));
  if (!a.bytes.empty()) read(a.bytes.data(), a.bytes.size());
  if (h.fortran_order && a.shape.size() == 2) {
    const std::size_t e = a.dtype.bits / 8u, r = std::size_t(a.shape[0]), c = std::size_t(a.shape[1]);
    std::vector<unsigned char> t(a.bytes.size());
    for (std::size_t i = 0; i < r; ++i)
      for (std::size_t j = 0; j < c; ++j) std::memcpy(&t[(i * c + j) * e], &a.bytes[(j * r + i) * e], e);
    a.bytes.swap(t);
  } else if (h.fortran_order && a.shape.size() > 2) {
    fail(TYCHO_ERR_BAD_DATA, where, " is in Fortran order with ", a.shape.size(), " dimensions; expected C order");
  }
  return a;
}

// The values of a float32/float64/integer array as doubles.
std::vector<double> as_doubles(const owned_array& a, const std::string& where) {
  std::vector<double> v(std::size_t(a.count()));
  for (std::size_t k = 0; k < v.size(); ++k) {
    const auto& t = a.dtype;
    if (t.code == kDLFloat && t.bits == 64) v[k] = a.as<double>()[k];
    else if (t.code == kDLFloat && t.bits == 32) v[k] = a.as<float>()[k];
    else if (t.code == kDLInt && t.bits == 64) v[k] = double(a.as<int64_t>()[k]);
    else if (t.code == kDLInt && t.bits == 32) v[k] = a.as<int32_t>()[k];
    else fail(TYCHO_ERR_BAD_DATA, where, " must be float64, float32, int64 or int32");
  }
  return v;
}
}  // namespace

truth_file read_truth_file(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) fail(TYCHO_ERR_NOT_FOUND, "truth file '", path, "' does not exist");
  int code = 0;
  std::unique_ptr<zip_t, archive_closer> za(zip_open(path.c_str(), ZIP_RDONLY, &code));
  if (!za) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    const std::string text = zip_error_strerror(&e);
    zip_error_fini(&e);
    fail(TYCHO_ERR_IO, "cannot open truth file '", path, "' as an .npz (zip) archive: ", text);
  }
  const std::vector<std::string> members = member_names(za.get());
  auto required = [&](const std::string& name) {
    auto a = read_member(za.get(), path, name);
    if (!a)
      fail(TYCHO_ERR_NOT_FOUND, "truth file '", path, "' has no array '", name, "' (it has ", joined(members),
           "); expected phase, pixel_size_A and scan_origin_A");
    return std::move(*a);
  };
  auto where = [&](const std::string& name) { return "'" + path + "': '" + name + "'"; };

  truth_file t;
  t.phase = required("phase");
  if (t.phase.shape.size() != 2 || t.phase.dtype.code != kDLFloat || (t.phase.dtype.bits != 32 && t.phase.dtype.bits != 64))
    fail(TYCHO_ERR_BAD_DATA, where("phase"), " is ", sdk::npy::shape_text(t.phase.shape),
         "; expected a 2-D float32 or float64 phase in radians");
  const auto pixel = as_doubles(required("pixel_size_A"), where("pixel_size_A"));
  if (pixel.size() != 1) fail(TYCHO_ERR_BAD_DATA, where("pixel_size_A"), " must hold one value");
  t.pixel_size_A = pixel[0];
  const auto origin = as_doubles(required("scan_origin_A"), where("scan_origin_A"));
  if (origin.size() != 2) fail(TYCHO_ERR_BAD_DATA, where("scan_origin_A"), " must hold 2 values (Å)");
  t.scan_origin_A[0] = origin[0];
  t.scan_origin_A[1] = origin[1];
  if (auto a = read_member(za.get(), path, "scan_step_A")) {
    const auto v = as_doubles(*a, where("scan_step_A"));
    if (v.size() == 1 || (v.size() == 2 && v[0] == v[1])) t.scan_step_A = v[0];
  }
  if (auto a = read_member(za.get(), path, "scan_shape")) {
    const auto v = as_doubles(*a, where("scan_shape"));
    if (v.size() == 2) t.scan_shape = std::vector<int64_t>{int64_t(v[0]), int64_t(v[1])};
  }
  for (const auto& m : members) {
    const std::string name = m.size() > 4 && m.ends_with(".npy") ? m.substr(0, m.size() - 4) : m;
    if (name != "phase" && name != "pixel_size_A" && name != "scan_origin_A" && name != "scan_step_A" &&
        name != "scan_shape")
      t.ignored.push_back(name);
  }
  return t;
}

}  // namespace tycho::host
