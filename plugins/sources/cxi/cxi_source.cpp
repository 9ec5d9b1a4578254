// The `cxi` source: ptychography files in the CXI layout (cxidb.org, CXI 1.6) as NeXus
// NXcxi_ptycho defines it. What it reads, with the units CXI stores (SI):
//
//   /entry_1/data_1/data (or /entry_1/instrument_1/detector_1/data)  (N, Qx, Qy) frames, any
//       integer or float type; a NeXus raster (Rx, Ry, Qx, Qy) is read as Rx·Ry frames in C order
//   /entry_1/sample_1/geometry_1/translation (or .../geometry_1/translations,
//       .../geometry/translation(s), /entry_1/data_1/translation)  (N, 3) or (3, N), metres
//   /entry_1/instrument_1/source_1/energy  J, a scalar or one (constant) value per frame
//   /entry_1/instrument_1/source_1/probe  optional, NeXus NXsource: "x-ray", "electron", ...
//   /entry_1/instrument_1/source_1/wavelength  optional, m: with the energy, tells photons
//       (λ = hc / E) from electrons
//   /entry_1/instrument_1/detector_1/distance, x_pixel_size, y_pixel_size  m
//   /entry_1/instrument_1/detector_1/basis_vectors  optional, m: the lab-frame (x, y, z) step of
//       one pixel along each frame axis, (2, 3), (3, 2) (vectors as columns) or (N, 2, 3)
//   /entry_1/instrument_1/detector_1/mask  optional, (Qx, Qy) integers, 0 = good pixel: the
//       others are handed to the host (read_detector_mask), which leaves them out of the loss
//
// The distance and pixel size are reported in metres (tycho_dataset_info::detector_distance_m,
// detector_pixel_m): the host turns them into Å⁻¹ with the run's wavelength, which depends on
// the radiation ([optics] radiation, or what this file says) as well as the energy.
//
// A `units` attribute on a value, where present, is honoured (m, mm, um, nm, pm, Å; J, eV, keV)
// and any other unit is refused; without one the CXI unit is assumed.
#include <tycho/sdk.hpp>
#include <tycho/sdk/optics.hpp>
#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <optional>

#include <tycho/sdk/hdf5/h5_read.hpp>
#include "source_common.hpp"
#include "source_state.hpp"

namespace tycho::cxi {
namespace {

using sdk::cat;
using sdk::fail;

constexpr double k_joule_per_eV = 1.602176634e-19;  // the elementary charge (SI, exact)

const char* const k_data_paths[] = {"/entry_1/data_1/data", "/entry_1/instrument_1/detector_1/data"};
const char* const k_translation_paths[] = {
    "/entry_1/sample_1/geometry_1/translation", "/entry_1/sample_1/geometry_1/translations",
    "/entry_1/sample_1/geometry/translation",   "/entry_1/sample_1/geometry/translations",
    "/entry_1/data_1/translation"};
const char* const k_energy_path = "/entry_1/instrument_1/source_1/energy";
const char* const k_detector = "/entry_1/instrument_1/detector_1";

bool exists(hid_t file, const std::string& path) { return bool(h5::open_object(file, path)); }

std::string absolute(const std::string& p) { return !p.empty() && p.front() == '/' ? p : "/" + p; }

std::string list_text(const char* const* paths, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += cat(i == 0 ? "" : i + 1 == n ? " nor " : ", ", paths[i]);
  return s;
}

// The probe position along object axis a is Σ_c m[a][c] · translation[c] (c = x, y, z).
struct position_map {
  std::array<std::array<double, 3>, 2> m{{{0, -1, 0}, {-1, 0, 0}}};
  std::array<int, 2> component{1, 0};  // the translation component each axis's pixel size is named after
  std::string text = "[\"-y\", \"-x\"]";
  bool given = false;  // by the config's probe_position
};

position_map read_position_map(const sdk::config_view& cfg) {
  position_map m;
  auto names = string_list(cfg, "probe_position");
  if (!names) return m;
  m.given = true;
  const std::string key = cat("config key 'probe_position' in ", cfg.table_name());
  if (names->size() != 2)
    fail(TYCHO_ERR_INVALID_ARGUMENT, key, " must be two of \"x\", \"y\", \"-x\", \"-y\" (object axis 0, axis 1), got ",
         names->size(), " values");
  m.text = "[";
  for (std::size_t a = 0; a < 2; ++a) {
    std::string n = (*names)[a];
    m.text += cat(a ? ", " : "", "\"", n, "\"");
    double sign = 1.0;
    if (!n.empty() && (n.front() == '-' || n.front() == '+')) {
      sign = n.front() == '-' ? -1.0 : 1.0;
      n.erase(0, 1);
    }
    if (n != "x" && n != "y")
      fail(TYCHO_ERR_INVALID_ARGUMENT, key, ": \"", (*names)[a],
           "\" is not one of \"x\", \"y\", \"-x\", \"-y\" (the translation's component along that object axis)");
    m.component[a] = n == "x" ? 0 : 1;
    m.m[a] = {0, 0, 0};
    m.m[a][std::size_t(m.component[a])] = sign;
  }
  m.text += "]";
  if (m.component[0] == m.component[1])
    fail(TYCHO_ERR_INVALID_ARGUMENT, key, " = ", m.text, " names the same component twice");
  return m;
}

table_order read_table_order(const sdk::config_view& cfg) {
  auto v = cfg.get_string("translations_shape");
  if (!v) return table_order::from_shape;
  std::string t;
  for (char c : *v)
    if (c != ' ' && c != '(' && c != ')') t += c;
  if (t == "N,3") return table_order::patterns_first;
  if (t == "3,N") return table_order::components_first;
  fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'translations_shape' in ", cfg.table_name(), " = \"", *v,
       "\": must be \"N,3\" (one row per frame) or \"3,N\" (one row per component)");
}

// The unit attribute of `obj`, converted by `factor` (unit → the wanted unit); the CXI unit when
// there is none; refused when it is not one `factor` knows.
double unit_factor(hid_t obj, const std::string& where, std::optional<double> (*factor)(const std::string&),
                   double cxi_factor, const char* expected) {
  auto unit = h5::read_string_attribute(obj, "units");
  if (!unit || unit->empty()) return cxi_factor;
  if (auto f = factor(*unit)) return *f;
  fail(TYCHO_ERR_BAD_DATA, "'", where, "' has units '", *unit, "', expected ", expected);
}

std::optional<double> length_to_m(const std::string& u) {
  if (auto f = length_unit_to_A(u)) return *f * 1e-10;
  return std::nullopt;
}

std::optional<double> energy_to_eV(const std::string& u) {
  if (u == "J" || u == "joule" || u == "joules") return 1.0 / k_joule_per_eV;
  if (u == "eV") return 1.0;
  if (u == "keV") return 1e3;
  return std::nullopt;
}

// One number at `path`: a scalar, a one-element array, or one value per frame that must not vary
// (relative spread at most 1e-6). nullopt when absent. In the unit `factor` converts to.
std::optional<double> read_value(const source_data& s, const std::string& path,
                                 std::optional<double> (*factor)(const std::string&), double cxi_factor,
                                 const char* unit_expected, const char* what, const char* spread_unit) {
  const std::string where = cat(s.file_name, ":", path);
  h5::h5_id obj = h5::open_object(s.file.get(), path);
  if (!obj) return std::nullopt;
  if (!h5::is_dataset(obj.get()))
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' is not a dataset, expected the ", what, " (a number in ", unit_expected,
         ")");
  auto values = h5::read_numbers(s.file.get(), path);
  if (!values) {
    h5::h5_id type(H5Dget_type(obj.get()));
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' holds ", type ? h5::type_text(type.get()) : "unknown",
         " values, expected the ", what, " as a number in ", unit_expected);
  }
  const int64_t frames = s.layout.scan[0] * s.layout.scan[1];
  const auto n = int64_t(values->size());
  if (n != 1 && n != frames)
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' has shape ", h5::shape_text(h5::dataset_shape(obj.get())),
         ", expected the ", what, " as a scalar or one value per frame (", frames, ")");
  const double f = unit_factor(obj.get(), where, factor, cxi_factor, unit_expected);
  const auto [lo, hi] = std::minmax_element(values->begin(), values->end());
  if (!std::isfinite(*lo) || !std::isfinite(*hi))
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' holds a non-finite ", what, ", expected a finite number in ",
         unit_expected);
  double mean = 0;
  for (double v : *values) mean += v / double(n);
  if (*hi - *lo > 1e-6 * std::abs(mean))
    fail(TYCHO_ERR_BAD_DATA, "'", where, "': the ", what, " varies across the ", n, " frames, from ", *lo * f, " to ",
         *hi * f, " ", spread_unit, " (a spread of ", (*hi - *lo) * f, " ", spread_unit,
         "); tycho needs one value for the whole scan");
  return mean * f;
}

// The detector's mask, if the file has one (CXI 1.6: an integer per pixel, 0 = good, any bit
// set = a pixel not to use): handed to the host (read_detector_mask), which leaves those pixels
// out of the loss. A mask of another shape or type is refused.
void read_mask(source_data& s) {
  const std::string path = cat(k_detector, "/mask"), where = cat(s.file_name, ":", path);
  h5::h5_id obj = h5::open_object(s.file.get(), path);
  if (!obj) return;
  const int64_t qx = s.layout.detector[0], qy = s.layout.detector[1];
  std::vector<int64_t> shape = obj && h5::is_dataset(obj.get()) ? h5::dataset_shape(obj.get()) : std::vector<int64_t>{};
  const bool fits = (shape.size() == 2 && shape[0] == qx && shape[1] == qy) ||
                    (shape.size() == 3 && shape[0] == 1 && shape[1] == qx && shape[2] == qy);
  h5::h5_id type = h5::is_dataset(obj.get()) ? h5::h5_id(H5Dget_type(obj.get())) : h5::h5_id();
  const bool integers = type && H5Tget_class(type.get()) == H5T_INTEGER;
  auto values = fits && integers ? h5::read_numbers(s.file.get(), path) : std::nullopt;
  if (!values || int64_t(values->size()) != qx * qy)
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' is ", h5::is_dataset(obj.get()) ? cat("a dataset of shape ", h5::shape_text(shape), " and type ", type ? h5::type_text(type.get()) : "unknown") : std::string("not a dataset"),
         ", expected the detector mask: integers of shape (", qx, ", ", qy, "), 0 = good pixel");
  std::vector<uint8_t> mask(values->size());
  int64_t bad = 0;
  for (std::size_t k = 0; k < values->size(); ++k) bad += mask[k] = (*values)[k] != 0;
  sdk::log(TYCHO_LOG_INFO, "cxi",
           cat("detector mask '", where, "': ", bad, " of ", values->size(), " pixels marked bad (non-zero)",
               bad > 0 ? ", left out of the loss" : ""));
  if (bad > 0) s.detector_mask = std::move(mask);
}


// The detector's basis vectors (CXI 1.6): the lab-frame step, in metres, of one pixel along each
// axis of a frame. A far-field pattern's axis a runs along the lab direction e_a of its basis
// vector, and so does object axis a of the reconstruction; a CXI translation t moves the sample,
// so the probe lies at −t on it, and its position along object axis a is −t · e_a.
struct detector_basis {
  position_map map;
  std::array<double, 2> pixel_m{};
};

std::optional<detector_basis> read_basis(const source_data& s) {
  const std::string path = cat(k_detector, "/basis_vectors"), where = cat(s.file_name, ":", path);
  h5::h5_id obj = h5::open_object(s.file.get(), path);
  if (!obj) return std::nullopt;
  const std::vector<int64_t> shape = h5::is_dataset(obj.get()) ? h5::dataset_shape(obj.get()) : std::vector<int64_t>{};
  const int64_t frames = s.layout.scan[0] * s.layout.scan[1];
  const bool rows = shape == std::vector<int64_t>{2, 3}, columns = shape == std::vector<int64_t>{3, 2},
             per_frame = shape.size() == 3 && shape[0] == frames && shape[1] == 2 && shape[2] == 3;
  auto values = rows || columns || per_frame ? h5::read_numbers(s.file.get(), path) : std::nullopt;
  if (!values)
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' is ", h5::is_dataset(obj.get()) ? cat("of shape ", h5::shape_text(shape)) : std::string("not a dataset"),
         ", expected the detector's basis vectors: numbers of shape (2, 3), (3, 2) or (", frames,
         ", 2, 3), the lab-frame (x, y, z) step of one pixel along each frame axis, in metres");
  const double f = unit_factor(obj.get(), where, &length_to_m, 1.0, "metres (m; or mm, um, nm, pm, A)");
  std::array<std::array<double, 3>, 2> b{};
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c) b[std::size_t(a)][std::size_t(c)] = (*values)[std::size_t(columns ? c * 2 + a : a * 3 + c)] * f;
  if (per_frame)  // one set per frame: it must not vary
    for (int64_t j = 1; j < frames; ++j)
      for (int k = 0; k < 6; ++k)
        if (!(std::abs((*values)[std::size_t(j * 6 + k)] - (*values)[std::size_t(k)]) * f <= 1e-6 * std::abs(b[std::size_t(k / 3)][std::size_t(k % 3)]) + 1e-15))  // NaN too
          fail(TYCHO_ERR_BAD_DATA, "'", where, "': the basis vectors of frame ", j, " differ from frame 0's; tycho needs one detector orientation for the whole scan");
  detector_basis out;
  std::array<std::array<double, 3>, 2> e{};
  for (int a = 0; a < 2; ++a) {
    const auto& v = b[std::size_t(a)];
    const double n = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (!std::isfinite(n) || !(n > 0))
      fail(TYCHO_ERR_BAD_DATA, "'", where, "': the basis vector of frame axis ", a, " is (", v[0], ", ", v[1], ", ", v[2],
           ") m, expected a finite, non-zero pixel step");
    for (int c = 0; c < 3; ++c) e[std::size_t(a)][std::size_t(c)] = v[std::size_t(c)] / n;
    if (std::abs(e[std::size_t(a)][2]) > 1e-3)
      fail(TYCHO_ERR_UNSUPPORTED, "'", where, "': frame axis ", a, " leaves the plane normal to the beam (its basis vector (",
           v[0], ", ", v[1], ", ", v[2], ") m has a z part); tycho reads detectors normal to the beam only");
    out.pixel_m[std::size_t(a)] = n;
  }
  const double dot = e[0][0] * e[1][0] + e[0][1] * e[1][1];
  if (std::abs(dot) > 1e-3)
    fail(TYCHO_ERR_UNSUPPORTED, "'", where, "': the two frame axes are not perpendicular (cosine ", dot,
         "); tycho reads rectangular pixel grids only");
  out.map.text = "(from basis_vectors) [";
  for (int a = 0; a < 2; ++a) {
    for (int c = 0; c < 3; ++c) out.map.m[std::size_t(a)][std::size_t(c)] = -e[std::size_t(a)][std::size_t(c)];
    out.map.component[std::size_t(a)] = std::abs(e[std::size_t(a)][0]) >= std::abs(e[std::size_t(a)][1]) ? 0 : 1;
    out.map.text += cat(a ? ", " : "", "(", out.map.m[std::size_t(a)][0], ", ", out.map.m[std::size_t(a)][1], ") · (x, y)");
  }
  out.map.text += "]";
  return out;
}

// What the file says the beam is: NXsource's `probe` ("x-ray", "electron", ...) where present,
// else its wavelength against its energy (photons: λ = hc / E; electrons: the relativistic λ);
// unknown when neither tells.
int32_t read_radiation(const source_data& s) {
  const std::string src = "/entry_1/instrument_1/source_1";
  h5::h5_id group = h5::open_object(s.file.get(), src);
  if (!group) return TYCHO_RADIATION_UNKNOWN;
  if (auto probe = h5::read_string(group.get(), "probe")) {
    std::string p;
    for (char c : *probe)
      if (c != ' ' && c != '-' && c != '_') p += char(std::tolower(static_cast<unsigned char>(c)));
    if (p == "xray" || p == "photon" || p == "xrays" || p == "photons") return TYCHO_RADIATION_XRAY;
    if (p == "electron" || p == "electrons") return TYCHO_RADIATION_ELECTRON;
    sdk::log(TYCHO_LOG_WARNING, "cxi",
             cat("'", s.file_name, ":", src, "/probe' is \"", *probe, "\": tycho knows electrons and X-rays only; "
                 "set [optics] radiation"));
    return TYCHO_RADIATION_UNKNOWN;
  }
  if (!std::isfinite(s.info.energy_eV)) return TYCHO_RADIATION_UNKNOWN;
  auto lambda_m = read_value(s, src + "/wavelength", &length_to_m, 1.0, "metres (m)", "wavelength", "m");
  if (!lambda_m || !(*lambda_m > 0)) return TYCHO_RADIATION_UNKNOWN;
  const double lambda_A = *lambda_m * 1e10;
  const auto near = [&](double v) { return std::abs(lambda_A - v) <= 1e-3 * v; };
  if (near(sdk::photon_wavelength_A(s.info.energy_eV))) return TYCHO_RADIATION_XRAY;
  if (near(sdk::wavelength_A(s.info.energy_eV))) return TYCHO_RADIATION_ELECTRON;
  sdk::log(TYCHO_LOG_WARNING, "cxi",
           cat("'", s.file_name, ":", src, "/wavelength' (", lambda_A, " Å) is neither the photon (",
               sdk::photon_wavelength_A(s.info.energy_eV), " Å) nor the electron wavelength (",
               sdk::wavelength_A(s.info.energy_eV), " Å) of its energy (", s.info.energy_eV, " eV)"));
  return TYCHO_RADIATION_UNKNOWN;
}

}  // namespace

void open_cxi(const tycho_config* cfg, source_data& s) {
  sdk::config_view config(cfg);
  const std::string given = config.require_string("path");
  s.component = "cxi";
  s.file_name = sdk::resolve_path(config.base_dir(), given);
  const std::optional<std::string> data_key = config.get_string("dataset");
  const std::optional<std::string> translations_key = config.get_string("translations");
  const bool centred = config.get_bool("centred").value_or(true);
  const table_order order = read_table_order(config);
  position_map map = read_position_map(config);
  s.file = open_file(s.file_name, given, "cxi");
  const hid_t file = s.file.get();

  // ---- the frames
  if (data_key) {
    s.dataset_path = absolute(*data_key);
  } else {
    for (const char* p : k_data_paths)
      if (exists(file, p)) {
        s.dataset_path = p;
        break;
      }
    if (s.dataset_path.empty())
      fail(TYCHO_ERR_NOT_FOUND, "'", s.file_name, "' has no diffraction data: neither ",
           list_text(k_data_paths, std::size(k_data_paths)),
           " exists (expected an (N, Qx, Qy) array of frames; set [data] dataset to its path)");
  }
  s.description = cat(s.file_name, ":", s.dataset_path);
  {
    h5::h5_id obj = h5::open_object(file, s.dataset_path);
    const std::vector<int64_t> shape = obj && h5::is_dataset(obj.get()) ? h5::dataset_shape(obj.get()) : std::vector<int64_t>{};
    if (!obj)
      fail(TYCHO_ERR_NOT_FOUND, "'", s.description, "' does not exist ([data] dataset; expected an (N, Qx, Qy) array of frames)");
    if (h5::is_dataset(obj.get()) && shape.size() != 3 && shape.size() != 4)
      fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' has shape ", h5::shape_text(shape),
           ", expected an (N, Qx, Qy) array of frames (or a NeXus raster (Rx, Ry, Qx, Qy))");
    using R = axis_role;
    open_patterns(s, shape.size() == 4 ? std::vector<R>{R::Rx, R::Ry, R::Qx, R::Qy} : std::vector<R>{R::P, R::Qx, R::Qy},
                  "the CXI layout");
  }
  init_info(s, centred);

  // ---- the detector's orientation: its basis vectors, unless the config gives probe_position
  const std::optional<detector_basis> basis = read_basis(s);
  if (basis && !map.given) map = basis->map;

  // ---- the translations → probe positions in Å
  std::string translations;
  if (translations_key) {
    translations = absolute(*translations_key);
  } else {
    for (const char* p : k_translation_paths)
      if (exists(file, p)) {
        translations = p;
        break;
      }
    if (translations.empty())
      fail(TYCHO_ERR_NOT_FOUND, "'", s.file_name, "' has no scan positions: neither ",
           list_text(k_translation_paths, std::size(k_translation_paths)),
           " exists (expected the sample translations, (N, 3) or (3, N) in metres; set [data] translations to their path)");
  }
  const std::vector<double> t =
      read_table(s, translations, 3, order, cat("[data] translations_shape"), "sample translations (x, y, z) in metres");
  const double to_A = unit_factor(h5::open_object(file, translations).get(), cat(s.file_name, ":", translations),
                                  &length_unit_to_A, 1e10, "metres (m; or mm, um, nm, pm, A)");
  const int64_t frames = s.layout.scan[0] * s.layout.scan[1];
  s.positions_A.resize(std::size_t(2 * frames));
  for (int64_t j = 0; j < frames; ++j)
    for (int a = 0; a < 2; ++a)
      s.positions_A[std::size_t(2 * j + a)] =
          (map.m[std::size_t(a)][0] * t[std::size_t(3 * j)] + map.m[std::size_t(a)][1] * t[std::size_t(3 * j + 1)] +
           map.m[std::size_t(a)][2] * t[std::size_t(3 * j + 2)]) * to_A;

  // ---- optics and detector
  if (auto e = read_value(s, k_energy_path, &energy_to_eV, 1.0 / k_joule_per_eV, "joules (J; or eV, keV)",
                          "beam energy", "eV")) {
    if (!(*e > 0))
      fail(TYCHO_ERR_BAD_DATA, "'", s.file_name, ":", k_energy_path, "' is ", *e * k_joule_per_eV,
           " J, expected a beam energy > 0 in joules");
    s.info.energy_eV = *e;
  }
  s.info.radiation = read_radiation(s);
  const std::string det = k_detector;
  auto distance = read_value(s, det + "/distance", &length_to_m, 1.0, "metres (m)", "detector distance", "m");
  if (distance && !(*distance > 0))
    fail(TYCHO_ERR_BAD_DATA, "'", s.file_name, ":", det, "/distance' is ", *distance,
         " m, expected a detector distance > 0 in metres");
  std::optional<double> pixel[2];
  for (int a = 0; a < 2; ++a) {
    if (basis) {
      pixel[a] = basis->pixel_m[std::size_t(a)];
      continue;
    }
    const char* name = map.component[std::size_t(a)] == 0 ? "x_pixel_size" : "y_pixel_size";
    pixel[a] = read_value(s, det + "/" + name, &length_to_m, 1.0, "metres (m)", "detector pixel size", "m");
    if (pixel[a] && !(*pixel[a] > 0))
      fail(TYCHO_ERR_BAD_DATA, "'", s.file_name, ":", det, "/", name, "' is ", *pixel[a],
           " m, expected a pixel size > 0 in metres");
  }
  // Reported in metres: the host computes the reciprocal pixel of a far-field detector,
  // dk = p / (z · λ) Å⁻¹ (small angles: a pixel of size p at distance z subtends p / z rad, and
  // an angle θ is the spatial frequency θ / λ; J. W. Goodman, Introduction to Fourier Optics,
  // ch. 4), with the wavelength of the run's radiation: photons or electrons of this energy.
  if (distance) s.info.detector_distance_m = *distance;
  for (int a = 0; a < 2; ++a)
    if (pixel[a]) s.info.detector_pixel_m[a] = *pixel[a];
  read_mask(s);
  sdk::log(TYCHO_LOG_INFO, "cxi",
           cat("opened '", s.description, "': ", frames, " frames of ", s.layout.detector[0], " x ",
               s.layout.detector[1], " ", sdk::dtype_name(s.info.stored_dtype), ", positions from ", translations,
               " as probe_position = ", map.text,
               basis && !map.given ? " (from the detector's basis_vectors)" : ""));
}

}  // namespace tycho::cxi
