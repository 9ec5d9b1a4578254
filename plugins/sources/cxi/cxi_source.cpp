// The `cxi` source: ptychography files in the CXI layout (cxidb.org, CXI 1.6) as NeXus
// NXcxi_ptycho defines it. What it reads, with the units CXI stores (SI):
//
//   /entry_1/data_1/data (or /entry_1/instrument_1/detector_1/data)  (N, Qx, Qy) frames, any
//       integer or float type; a NeXus raster (Rx, Ry, Qx, Qy) is read as Rx·Ry frames in C order
//   /entry_1/sample_1/geometry_1/translation (or .../geometry_1/translations,
//       .../geometry/translation(s), /entry_1/data_1/translation)  (N, 3) or (3, N), metres
//   /entry_1/instrument_1/source_1/energy  J, a scalar or one (constant) value per frame
//   /entry_1/instrument_1/detector_1/distance, x_pixel_size, y_pixel_size  m
//   /entry_1/instrument_1/detector_1/mask  optional, (Qx, Qy), 0 = good pixel
//
// A `units` attribute on a value, where present, is honoured (m, mm, um, nm, pm, Å; J, eV, keV)
// and any other unit is refused; without one the CXI unit is assumed.
#include <tycho/sdk.hpp>
#include <tycho/sdk/optics.hpp>
#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <array>
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

// The probe position along object axis a is sign[a] · translation[component[a]] (0 = x, 1 = y).
struct position_map {
  std::array<int, 2> component{1, 0};
  std::array<double, 2> sign{-1.0, -1.0};
  std::string text = "[\"-y\", \"-x\"]";
};

position_map read_position_map(const sdk::config_view& cfg) {
  position_map m;
  auto names = string_list(cfg, "probe_position");
  if (!names) return m;
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
    m.sign[a] = sign;
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

// The mask, if the file has one: refused when it marks any pixel bad, since the runtime cannot
// leave pixels out of the loss yet.
void check_mask(const source_data& s) {
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
  if (!values)
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' is ", h5::is_dataset(obj.get()) ? cat("a dataset of shape ", h5::shape_text(shape), " and type ", type ? h5::type_text(type.get()) : "unknown") : std::string("not a dataset"),
         ", expected the detector mask: integers of shape (", qx, ", ", qy, "), 0 = good pixel");
  const auto bad = std::count_if(values->begin(), values->end(), [](double v) { return v != 0; });
  if (bad > 0)
    fail(TYCHO_ERR_UNSUPPORTED, "'", where, "' marks ", bad, " of ", values->size(),
         " detector pixels bad (non-zero); tycho cannot leave detector pixels out of a reconstruction yet "
         "(masking comes in a later version), so it refuses data with bad pixels rather than fit them");
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
  const position_map map = read_position_map(config);
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
      s.positions_A[std::size_t(2 * j + a)] = map.sign[std::size_t(a)] * t[std::size_t(3 * j + map.component[std::size_t(a)])] * to_A;

  // ---- optics and detector
  if (auto e = read_value(s, k_energy_path, &energy_to_eV, 1.0 / k_joule_per_eV, "joules (J; or eV, keV)",
                          "beam energy", "eV")) {
    if (!(*e > 0))
      fail(TYCHO_ERR_BAD_DATA, "'", s.file_name, ":", k_energy_path, "' is ", *e * k_joule_per_eV,
           " J, expected a beam energy > 0 in joules");
    s.info.energy_eV = *e;
  }
  const std::string det = k_detector;
  auto distance = read_value(s, det + "/distance", &length_to_m, 1.0, "metres (m)", "detector distance", "m");
  const char* pixel_name[2] = {map.component[0] == 0 ? "x_pixel_size" : "y_pixel_size",
                               map.component[1] == 0 ? "x_pixel_size" : "y_pixel_size"};
  std::optional<double> pixel[2];
  for (int a = 0; a < 2; ++a) {
    pixel[a] = read_value(s, det + "/" + pixel_name[a], &length_to_m, 1.0, "metres (m)", "detector pixel size", "m");
    if (pixel[a] && !(*pixel[a] > 0))
      fail(TYCHO_ERR_BAD_DATA, "'", s.file_name, ":", det, "/", pixel_name[a], "' is ", *pixel[a],
           " m, expected a pixel size > 0 in metres");
  }
  if (distance && !(*distance > 0))
    fail(TYCHO_ERR_BAD_DATA, "'", s.file_name, ":", det, "/distance' is ", *distance,
         " m, expected a detector distance > 0 in metres");
  // The reciprocal pixel of a far-field detector, small angles: a pixel of size p at distance z
  // subtends p / z radians, and an angle θ is the spatial frequency k = θ / λ, so
  //   dk = p / (z · λ)   [Å⁻¹, with p and z in the same unit and λ in Å].
  // (Fraunhofer sampling: the real-space pixel of an N-pixel window is λ z / (N p) = 1 / (N dk),
  // the relation docs/conventions.md uses; e.g. J. W. Goodman, Introduction to Fourier Optics,
  // ch. 4.) λ is the relativistic electron wavelength of the file's energy (sdk/optics.hpp),
  // the one the runtime uses for the probe.
  if (distance && pixel[0] && pixel[1]) {
    if (std::isfinite(s.info.energy_eV)) {
      const double lambda_A = sdk::wavelength_A(s.info.energy_eV);
      for (int a = 0; a < 2; ++a) s.info.detector_pixel_invA[a] = *pixel[a] / (*distance * lambda_A);
    } else {
      sdk::log(TYCHO_LOG_WARNING, "cxi",
               cat("'", s.file_name, "' records no beam energy (", k_energy_path,
                   "): the detector pixel in Å⁻¹ cannot be computed from its distance and pixel size; give "
                   "[data] detector_pixel_invA and [optics] energy_eV"));
    }
  }
  check_mask(s);
  sdk::log(TYCHO_LOG_INFO, "cxi",
           cat("opened '", s.description, "': ", frames, " frames of ", s.layout.detector[0], " x ",
               s.layout.detector[1], " ", sdk::dtype_name(s.info.stored_dtype), ", positions from ", translations,
               " as probe_position = ", map.text));
}

}  // namespace tycho::cxi
