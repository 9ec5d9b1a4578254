#include "evaluate/truth_file.hpp"

#include <tycho/core/error.hpp>
#include <tycho/sdk/checked.hpp>
#include <tycho/sdk/npy.hpp>
#include <zip.h>

#include <algorithm>
#include <cmath>
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
  sdk::npy::header h;
  try {
    // Nothing is allocated from a declared size its stored bytes cannot produce (a crafted
    // member declaring gigabytes in a few bytes).
    sdk::check_member_size(st.size, st.comp_size, st.comp_method, where);
    h = sdk::npy::read_header(read, st.size, where);
  } catch (const sdk::error& e) {  // the SDK's error type: rethrown as the host's, so the CLI names it
    fail(e.status, e.what());
  }
  if (!h.dtype || h.big_endian)
    fail(TYCHO_ERR_BAD_DATA, where, " has dtype '", sdk::printable(h.descr), "'; expected a little-endian number");
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
// Refuses a member holding NaN or inf (a figure computed from it would be NaN, or silently
// ignore the pixel), naming the first.
template <class T>
void expect_finite(const T* v, std::size_t n, const std::string& where, const char* expected) {
  for (std::size_t k = 0; k < n; ++k)
    if (!std::isfinite(v[k]))
      fail(TYCHO_ERR_BAD_DATA, where, " holds ", double(v[k]), " at element ", k, "; expected finite ", expected);
}

// One finite value > 0 (a pixel size, a thickness).
double positive_scalar(const std::vector<double>& v, const std::string& where, const char* unit) {
  if (v.size() != 1 || !std::isfinite(v[0]) || !(v[0] > 0))
    fail(TYCHO_ERR_BAD_DATA, where, v.size() == 1 ? cat(" is ", v[0]) : cat(" holds ", v.size(), " values"),
         "; expected one finite value > 0 (", unit, ")");
  return v[0];
}

// A float32 or float64 phase of rank `rank` as float32 values.
truth_phase phase_values(const owned_array& a, const std::string& where, size_t rank, const char* expected) {
  if (a.shape.size() != rank || a.dtype.code != kDLFloat || (a.dtype.bits != 32 && a.dtype.bits != 64))
    fail(TYCHO_ERR_BAD_DATA, where, " is ", sdk::npy::shape_text(a.shape), " ", a.dtype.code == kDLFloat ? "float" : "non-float",
         int(a.dtype.bits), "; expected ", expected);
  truth_phase p;
  p.name = a.name;
  p.h = a.shape[rank - 2];
  p.w = a.shape[rank - 1];
  p.values.resize(std::size_t(a.count()));
  for (std::size_t k = 0; k < p.values.size(); ++k)
    p.values[k] = a.dtype.bits == 64 ? float(a.as<double>()[k]) : a.as<float>()[k];
  expect_finite(p.values.data(), p.values.size(), where, "phases in radians");
  return p;
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
  auto missing = [&](const std::string& name) {
    fail(TYCHO_ERR_NOT_FOUND, "truth file '", path, "' has no array '", name, "' (it has ", joined(members),
         "); expected phase (or phase_total), pixel_size_A and scan_origin_A");
  };
  auto required = [&](const std::string& name) {
    auto a = read_member(za.get(), path, name);
    if (!a) missing(name);
    return std::move(*a);
  };
  auto optional = [&](const std::string& name) { return read_member(za.get(), path, name); };
  auto where = [&](const std::string& name) { return "'" + path + "': '" + name + "'"; };
  std::vector<std::string> used = {"phase", "pixel_size_A", "scan_origin_A", "scan_step_A", "scan_shape"};
  auto use = [&](const std::string& name) { used.push_back(name); };

  truth_file t;
  // A thick specimen's truth (si110, bilayer) has only phase_total: its main figures use it.
  auto total = optional("phase_total");
  if (auto a = optional("phase")) t.phase = std::move(*a);
  else if (total) t.phase = *total;
  else missing("phase");
  if (t.phase.shape.size() != 2 || t.phase.dtype.code != kDLFloat || (t.phase.dtype.bits != 32 && t.phase.dtype.bits != 64))
    fail(TYCHO_ERR_BAD_DATA, where(t.phase.name), " is ", sdk::npy::shape_text(t.phase.shape),
         "; expected a 2-D float32 or float64 phase in radians");
  if (t.phase.shape[0] < 1 || t.phase.shape[1] < 1)
    fail(TYCHO_ERR_BAD_DATA, where(t.phase.name), " is ", sdk::npy::shape_text(t.phase.shape),
         "; expected a phase of at least 1 x 1 pixels");
  if (t.phase.dtype.bits == 64)
    expect_finite(t.phase.as<double>(), std::size_t(t.phase.count()), where(t.phase.name), "phases in radians");
  else
    expect_finite(t.phase.as<float>(), std::size_t(t.phase.count()), where(t.phase.name), "phases in radians");
  t.pixel_size_A = positive_scalar(as_doubles(required("pixel_size_A"), where("pixel_size_A")), where("pixel_size_A"), "Å");
  const auto origin = as_doubles(required("scan_origin_A"), where("scan_origin_A"));
  // Within 2^31 pixels: the comparison turns the origin into a whole pixel offset (int64).
  const double max_origin_A = 2147483648.0 * t.pixel_size_A;
  if (origin.size() != 2 || !(std::abs(origin[0]) < max_origin_A) || !(std::abs(origin[1]) < max_origin_A))
    fail(TYCHO_ERR_BAD_DATA, where("scan_origin_A"), " is ",
         origin.size() == 2 ? cat("[", origin[0], ", ", origin[1], "]") : cat("(", origin.size(), " values)"),
         "; expected 2 finite values in Å, within 2^31 pixels (", max_origin_A, " Å) of the cell");
  t.scan_origin_A[0] = origin[0];
  t.scan_origin_A[1] = origin[1];
  if (auto a = optional("scan_step_A")) {
    const auto v = as_doubles(*a, where("scan_step_A"));
    for (double x : v)
      if (!std::isfinite(x) || !(x > 0))
        fail(TYCHO_ERR_BAD_DATA, where("scan_step_A"), " holds ", x, "; expected a finite step > 0 in Å");
    if (v.size() == 1 || (v.size() == 2 && v[0] == v[1])) t.scan_step_A = v[0];
  }
  if (auto a = optional("scan_shape")) {
    const auto v = as_doubles(*a, where("scan_shape"));
    // Whole numbers from 1 to 2^31 each, so that their product (the positions) fits int64.
    if (v.size() != 2 || !(v[0] >= 1 && v[0] <= 2147483648.0 && v[0] == std::floor(v[0])) ||
        !(v[1] >= 1 && v[1] <= 2147483648.0 && v[1] == std::floor(v[1])))
      fail(TYCHO_ERR_BAD_DATA, where("scan_shape"), " is ",
           v.size() == 2 ? cat("[", v[0], ", ", v[1], "]") : cat("(", v.size(), " values)"),
           "; expected 2 whole numbers of positions from 1 to 2^31 (the scan's rows and columns)");
    t.scan_shape = std::vector<int64_t>{int64_t(v[0]), int64_t(v[1])};
  }

  // Every further phase is compared pixel for pixel with the same cell: its (H, W) must be the
  // main phase's.
  const std::vector<int64_t> cell = t.phase.shape;
  const std::string cell_text = sdk::npy::shape_text(cell);
  auto same_cell = [&](const truth_phase& p, const std::string& expected) {
    if (p.h != cell[0] || p.w != cell[1])
      fail(TYCHO_ERR_BAD_DATA, where(p.name), " is ", p.h, " x ", p.w, " pixels; expected ", expected, " (",
           t.phase.name, " is ", cell_text, ")");
  };
  if (total) {
    use("phase_total");
    t.phase_total = phase_values(*total, where("phase_total"), 2, "a 2-D float32 or float64 phase in radians");
    same_cell(*t.phase_total, "the cell of " + t.phase.name);
  }

  if (auto a = optional("phase_slices")) {
    use("phase_slices");
    const truth_phase all = phase_values(*a, where("phase_slices"), 3, "(slabs, H, W) float32 or float64");
    same_cell(all, "(slabs, " + std::to_string(cell[0]) + ", " + std::to_string(cell[1]) + ")");
    const int64_t g = a->shape[0];
    // The slabs' depths: their edges, else a common thickness, else the total thickness shared.
    std::vector<double> edges;
    if (auto e = optional("slice_z_edges_A")) {
      use("slice_z_edges_A");
      edges = as_doubles(*e, where("slice_z_edges_A"));
      if (e->shape.size() != 2 || e->shape[0] != g || e->shape[1] != 2)
        fail(TYCHO_ERR_BAD_DATA, where("slice_z_edges_A"), " is ", sdk::npy::shape_text(e->shape), "; expected (", g,
             ", 2): the [start, end) depth in Å of each of the ", g, " slabs of phase_slices");
    } else {
      std::optional<double> dz;
      if (auto d = optional("slice_thickness_A")) {
        use("slice_thickness_A");
        dz = positive_scalar(as_doubles(*d, where("slice_thickness_A")), where("slice_thickness_A"), "Å");
      } else if (auto total_depth = optional("thickness_A")) {
        use("thickness_A");
        if (g > 0) dz = positive_scalar(as_doubles(*total_depth, where("thickness_A")), where("thickness_A"), "Å") / double(g);
      }
      if (dz && *dz > 0 && std::isfinite(*dz))
        for (int64_t k = 0; k < g; ++k) edges.insert(edges.end(), {double(k) * *dz, double(k + 1) * *dz});
    }
    for (std::size_t k = 0; k + 1 < edges.size(); k += 2)
      if (!(std::isfinite(edges[k]) && std::isfinite(edges[k + 1]) && edges[k + 1] > edges[k]))
        fail(TYCHO_ERR_BAD_DATA, where("slice_z_edges_A"), ": slab ", k / 2, " spans [", edges[k], ", ",
             edges[k + 1], ") Å; expected finite depths, start < end");
    if (edges.empty()) {
      t.warnings.push_back("the truth's phase_slices has no depths (slice_z_edges_A, slice_thickness_A or "
                           "thickness_A): the per-depth figures are left out");
    } else {
      const std::size_t n = std::size_t(all.h * all.w);
      for (int64_t k = 0; k < g; ++k) {
        truth_slab s;
        s.phase = {"phase_slices[" + std::to_string(k) + "]", all.h, all.w,
                   std::vector<float>(all.values.begin() + std::ptrdiff_t(k * n), all.values.begin() + std::ptrdiff_t((k + 1) * n))};
        s.z0_A = edges[2 * std::size_t(k)];
        s.z1_A = edges[2 * std::size_t(k) + 1];
        t.slabs.push_back(std::move(s));
      }
    }
  }

  auto top = optional("phase_top"), bottom = optional("phase_bottom");
  if (top || bottom) {
    use("phase_top");
    use("phase_bottom");
    auto depths_member = optional("layer_depths_A");
    if (!top || !bottom || !depths_member) {
      t.warnings.push_back(std::string("the truth has ") + (top ? "phase_top" : "phase_bottom") +
                           " but not all of phase_top, phase_bottom and layer_depths_A: the per-layer figures are "
                           "left out");
    } else {
      use("layer_depths_A");
      const auto depths = as_doubles(*depths_member, where("layer_depths_A"));
      if (depths.size() != 2 || !std::isfinite(depths[0]) || !std::isfinite(depths[1]))
        fail(TYCHO_ERR_BAD_DATA, where("layer_depths_A"), " is ", sdk::npy::shape_text(depths_member->shape),
             "; expected 2 finite depths in Å (of phase_top and phase_bottom)");
      const char* names[2] = {"top", "bottom"};
      const owned_array* arrays[2] = {&*top, &*bottom};
      for (int k = 0; k < 2; ++k) {
        truth_layer l;
        l.name = names[k];
        l.phase = phase_values(*arrays[k], where(arrays[k]->name), 2, "a 2-D float32 or float64 phase in radians");
        same_cell(l.phase, "the cell of " + t.phase.name);
        l.depth_A = depths[std::size_t(k)];
        t.layers.push_back(std::move(l));
      }
    }
  }

  for (const char* name : {"positions_true_A", "positions_nominal_A"}) {
    auto a = optional(name);
    if (!a) continue;
    use(name);
    if (a->shape.size() != 2 || a->shape[1] != 2)
      fail(TYCHO_ERR_BAD_DATA, where(name), " is ", sdk::npy::shape_text(a->shape), "; expected (P, 2) positions in Å");
    if (a->shape[0] < 1) fail(TYCHO_ERR_BAD_DATA, where(name), " holds no positions; expected (P, 2) positions in Å");
    auto v = as_doubles(*a, where(name));
    for (double x : v)
      if (!std::isfinite(x)) fail(TYCHO_ERR_BAD_DATA, where(name), " holds a value that is not finite");
    (std::string(name) == "positions_true_A" ? t.positions_true_A : t.positions_nominal_A) = std::move(v);
  }
  if (!t.positions_nominal_A.empty() && !t.positions_true_A.empty() &&
      t.positions_nominal_A.size() != t.positions_true_A.size())
    fail(TYCHO_ERR_BAD_DATA, where("positions_nominal_A"), " holds ", t.positions_nominal_A.size() / 2,
         " positions, positions_true_A ", t.positions_true_A.size() / 2, "; expected the same (P, 2) shape");

  for (const auto& m : members) {
    const std::string name = m.size() > 4 && m.ends_with(".npy") ? m.substr(0, m.size() - 4) : m;
    if (std::find(used.begin(), used.end(), name) == used.end()) t.ignored.push_back(name);
  }
  return t;
}

}  // namespace tycho::host
