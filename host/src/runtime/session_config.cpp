// The config before any data is read: its keys and values checked (validate_config), the
// [reconstruct] settings, and what `tycho plan` resolves from it as the session does (the run's
// geometry, its memory problem, preview_run).

#include "runtime/session_state.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/host/optics.hpp>
#include <tycho/sdk.hpp>
#include <tycho/sdk/optimizer.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>

#include "settings/position_settings.hpp"
#include "settings/optics_settings.hpp"
#include "settings/scan_map_settings.hpp"
#include "settings/config_read.hpp"
#include "runtime/constraint_list.hpp"
#include "runtime/initial_probe.hpp"
#include "runtime/vacuum_pattern.hpp"
#include "runtime/positions_from.hpp"
#include "data/detector_padding.hpp"
#include "geometry/beam_optics.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/output_file.hpp"
#include "tycho/host/preprocess.hpp"
#include "tycho/host/run_plan.hpp"
#include "tycho/host/settings.hpp"
#include "settings/settings_read.hpp"
#include "settings/iteration_settings.hpp"

namespace tycho::host {

using namespace session_detail;

namespace {

// Keys the runtime itself reads in each table (declared in host_settings.cpp); components add
// their own.
const std::vector<std::string> k_top_tables = {"data", "optics", "preprocess", "reconstruct",
                                               "output", "parallel"};
std::vector<std::string> host_keys(const std::string& table) { return setting_keys(host_settings(table)); }
// [reconstruct]'s keys and its sub-tables, in the order messages list them.
std::vector<std::string> reconstruct_keys() {
  std::vector<std::string> keys = host_keys("reconstruct");
  keys.insert(keys.end() - 1, {"object", "probe", "positions", "constraints"});  // before "devices"
  return keys;
}

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// A calibration: the config wins over the file; absent in both is an error naming the key.
double calibration(const toml::table& t, const char* key, const std::string& table, double from_file,
                   const std::string& data_desc, const char* what) {
  if (auto v = read_key<double>(t, key, table)) return *v;
  if (std::isfinite(from_file)) return from_file;
  fail(TYCHO_ERR_INVALID_ARGUMENT, "the ", what, " is not known: '", data_desc,
       "' does not record it; set '", key, "' in [", table, "]");
}

const std::string& origin_name(const config_document& doc) { return doc.origin(); }

parameter_settings read_parameter_settings(const config_document& doc, const char* which,
                                           int64_t iterations) {
  std::string table_name = cat("reconstruct.", which);
  const toml::table& t = doc.table_at(table_name);
  parameter_settings p;
  p.first_iteration = *setting_value<int64_t>(t, table_name, "first_iteration");
  p.schedule.kind = learning_rate_schedule::parse(
      *setting_value<std::string>(t, table_name, "schedule"),
      cat("[", table_name, "] schedule"));
  p.schedule.final_fraction = *setting_value<double>(t, table_name, "final_learning_rate_fraction");
  if (!(p.schedule.final_fraction > 0 && p.schedule.final_fraction <= 1))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[", table_name, "] final_learning_rate_fraction must be in (0, 1], got ",
         p.schedule.final_fraction);
  p.schedule.total_iterations = iterations;
  return p;
}

}  // namespace

reconstruct_settings session_detail::read_reconstruct_settings(const config_document& doc) {
  const toml::table& rec_t = doc.table_at("reconstruct");
  reconstruct_settings r;
  r.length = read_iteration_settings(rec_t);
  r.iterations = r.length.schedule;
  int64_t modes = *setting_value<int64_t>(rec_t, "reconstruct", "probe_modes");
  int64_t slices = *setting_value<int64_t>(rec_t, "reconstruct", "slices");
  std::string precision = *setting_value<std::string>(rec_t, "reconstruct", "precision");
  if (precision != "float32" && precision != "float64")
    fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] precision = \"", precision, "\": must be \"float32\" or \"float64\"");
  r.float64 = precision == "float64";
  if (modes < 1 || modes > 64)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] probe_modes = ", modes, ": must be in [1, 64]");
  if (slices < 1 || slices > 4096)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] slices = ", slices, ": must be in [1, 4096]");
  r.slices = slices;
  r.probe_modes = modes;
  if (auto dz = read_key<double>(rec_t, "slice_thickness_A", "reconstruct")) {
    if (!(*dz > 0) || !std::isfinite(*dz) || *dz > 1e6)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] slice_thickness_A = ", *dz, ": must be a thickness in Å, > 0");
    r.slice_thickness_A = *dz;
  } else if (slices > 1) {
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] slices = ", slices,
         " needs slice_thickness_A (Å between consecutive slices; e.g. the specimen's thickness / slices)");
  }
  {
    const toml::table& probe_t = doc.table_at("reconstruct.probe");
    r.mode_power = *setting_value<double>(probe_t, "reconstruct.probe", "mode_power");
    if (!(r.mode_power >= 0 && r.mode_power < 1))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.probe] mode_power = ", r.mode_power, ": must be in [0, 1)");
    r.constraints.orthogonalize_modes = *setting_value<bool>(probe_t, "reconstruct.probe", "orthogonalize_modes");
    r.constraints.probe_modes = modes;
  }
  {
    const char* table = "reconstruct.positions";
    const toml::table& pos_t = doc.table_at(table);
    position_correction& pc = r.driver.positions;
    const position_correction_mode correction = read_position_correction(pos_t);
    pc.enabled = correction != position_correction_mode::off;
    pc.after_scan_map = correction == position_correction_mode::after_scan_map;  // "auto": below, with the map
    pc.weigh_against_noise = correction == position_correction_mode::weighed;
    pc.first_iteration = *setting_value<int64_t>(pos_t, table, "first_iteration");
    if (pc.first_iteration < 1)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[", table, "] first_iteration must be >= 1, got ", pc.first_iteration);
    pc.step.rate = *setting_value<double>(pos_t, table, "learning_rate");
    if (!(pc.step.rate > 0) || !std::isfinite(pc.step.rate) || pc.step.rate > 1e3)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[", table, "] learning_rate = ", pc.step.rate, ": must be in (0, 1000]");
    r.max_position_step_A = *setting_value<double>(pos_t, table, "max_step_A");
    if (!(r.max_position_step_A > 0) || !std::isfinite(r.max_position_step_A))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[", table, "] max_step_A = ", r.max_position_step_A, ": must be > 0 (Å)");
    pc.step.remove_mean_shift = *setting_value<bool>(pos_t, table, "remove_mean_shift");
    pc.schedule.kind = learning_rate_schedule::parse(*setting_value<std::string>(pos_t, table, "schedule"),
                                                     cat("[", table, "] schedule"));
    pc.schedule.final_fraction = *setting_value<double>(pos_t, table, "final_learning_rate_fraction");
    if (!(pc.schedule.final_fraction > 0 && pc.schedule.final_fraction <= 1))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[", table, "] final_learning_rate_fraction must be in (0, 1], got ",
           pc.schedule.final_fraction);
    pc.schedule.total_iterations = r.iterations;
    scan_refinement_options& so = r.scan;
    // The default refines the map, unless a positions_affine constraint owns the positions'
    // linear part (the two would pull the same few parameters against each other).
    so.enabled = pos_t.contains("refine_scan_map") ? *setting_value<bool>(pos_t, table, "refine_scan_map")
                                                   : !lists_constraint(doc, "positions_affine");
    so.first_iteration = *setting_value<int64_t>(pos_t, table, "scan_map_first_iteration");
    so.every = *setting_value<int64_t>(pos_t, table, "scan_map_every");
    so.max_move_A = *setting_value<double>(pos_t, table, "scan_map_max_move_A");
    // A rotation the user gives is kept; the rest is refined.
    const toml::table& pre_t = doc.table_at("preprocess");
    so.free[0] = !(pre_t["scan_rotation_deg"].is_integer() || pre_t["scan_rotation_deg"].is_floating_point());
    r.C10_mode = read_C10_refinement(doc.table_at("optics"));
    so.free[1] = read_scan_scale_refinement(pos_t, r.slices);
    so.free[4] = map_refines_C10(r.C10_mode, r.slices, so.free[1]);
    // A held scale needs a prior the one slice's data cannot give: the stated step along the fast
    // axis, where the acquisition order is known (a drift acts along the slow one), else on
    // average over both axes (scan-geometry.md, "The isotropic scale with one slice").
    if (const auto fast = read_key<int64_t>(doc.table_at("data"), "fast_axis", "data"); fast && !so.free[1])
      so.hold = *fast == 0 ? scan_refinement_options::held_scale::axis0 : scan_refinement_options::held_scale::axis1;
    // A freed scale is as good as the defocus it is paired with: the probe, refined alongside,
    // drifts to one that pairs with a scan 0.5-2 % small, so it waits (core/driver.hpp).
    r.driver.probe_waits_for_scan_map = so.enabled && so.free[1];
    // correct = "auto": where the map holds the isotropic scale (one slice), each position is
    // corrected beside the map from first_iteration, before the object sets around the jitter
    // (on the validation matrix's one-slice entries +0.002 to +0.015 Pearson against waiting for
    // the map, except hBN -0.002 and MoS2 fast5 -0.001); where the map frees the scale, the
    // positions' own steps would trade off against it (Ge [110], 6 % drift: Pearson 0.98 -> 0.24),
    // so they wait for the map to converge.
    if (correction == position_correction_mode::weighed) pc.after_scan_map = so.free[1];
  }
  r.driver.batch_size = *setting_value<int64_t>(rec_t, "reconstruct", "batch_size");
  if (r.driver.batch_size <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] batch_size must be > 0, got ", r.driver.batch_size);
  r.driver.seed = uint64_t(*setting_value<int64_t>(rec_t, "reconstruct", "seed"));
  r.validation_fraction = *setting_value<double>(rec_t, "reconstruct", "validation_fraction");
  r.validation_fold = *setting_value<int64_t>(rec_t, "reconstruct", "validation_fold");
  r.constraints.amplitude_max =
      *setting_value<double>(doc.table_at("reconstruct.object"), "reconstruct.object", "amplitude_max");
  {
    const std::string kind = *setting_value<std::string>(doc.table_at("reconstruct.object"), "reconstruct.object", "kind");
    if (kind != "complex" && kind != "phase" && kind != "potential")
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.object] kind = \"", kind,
           "\": must be \"complex\", \"phase\" or \"potential\"");
    r.constraints.pure_phase = kind == "phase";
    r.constraints.potential = kind == "potential";
  }
  {
    const std::string depth =
        *setting_value<std::string>(doc.table_at("reconstruct.object"), "reconstruct.object", "depth_regulariser");
    if (depth != "missing_cone" && depth != "none")
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.object] depth_regulariser = \"", depth,
           "\": must be \"missing_cone\" or \"none\"");
    r.constraints.depth_regulariser = r.slices > 1 && depth == "missing_cone";
  }
  r.object = read_parameter_settings(doc, "object", r.iterations);
  r.probe = read_parameter_settings(doc, "probe", r.iterations);
  r.constraints.probe_first_iteration = r.probe.first_iteration;
  const toml::table& optics_t = doc.table_at("optics");
  if (optics_t.contains("defocus_A") && optics_t.contains("C10_A"))
    fail(TYCHO_ERR_INVALID_ARGUMENT, doc.origin(), ": give either C10_A or defocus_A (= −C10) in [optics], not both");
  return r;
}

namespace {

// Beam energies tycho computes with: 1 eV to 100 MeV (electron microscopes run at 1 keV to a few
// MeV). Beyond, the wavelength and the aperture's reach leave double's sane range: 1e300 eV was
// refused by a message about the aperture, 1e-300 eV by one about the defocus.
constexpr double k_least_energy_eV = 1.0, k_most_energy_eV = 1e8;
void check_beam_energy(double eV, const std::string& what) {
  if (!(eV >= k_least_energy_eV && eV <= k_most_energy_eV))
    fail(TYCHO_ERR_INVALID_ARGUMENT, what, " = ", eV, " eV: expected a beam energy from ", k_least_energy_eV,
         " eV to ", k_most_energy_eV, " eV (100 MeV)");
}
// Scan steps (and origins) in Å: 1e-6 Å to 1e9 Å (10 cm) bound every real scan; a step of
// 1e-300 Å put every position on one pixel.
constexpr double k_least_scan_step_A = 1e-6, k_most_scan_step_A = 1e9;
// The smallest scan step in object pixels: below it the positions of a scan coincide.
constexpr double k_least_scan_step_px = 1e-3;

// The runtime's own values that no later stage may find wrong after work has begun (a result
// replaced, the data read): every key's declared type (output.previews = "yes" was refused
// only after the run), finite numbers in arrays, and the settings whose range is known without
// the data. Values that come from the data file are checked where the data is read
// (resolve_run_geometry).
void check_setting_ranges(const config_document& doc) {
  for (const auto& table : host_setting_tables())
    if (table != "reconstruct.constraints")  // a list of tables: validate_constraints
      check_setting_types(doc.table_at(table), table, host_settings(table), "the runtime");
  const toml::table& optics_t = doc.table_at("optics");
  if (auto e = read_key<double>(optics_t, "energy_eV", "optics")) check_beam_energy(*e, "[optics] energy_eV");
  if (auto step = read_key<double>(doc.table_at("data"), "scan_step_A", "data"))
    if (!(*step >= k_least_scan_step_A && *step <= k_most_scan_step_A))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[data] scan_step_A = ", *step, " Å: expected a scan step from ",
           k_least_scan_step_A, " to ", k_most_scan_step_A, " Å");
  if (auto fast = read_key<int64_t>(doc.table_at("data"), "fast_axis", "data"); fast && *fast != 0 && *fast != 1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[data] fast_axis = ", *fast,
         ": expected 0 (Rx) or 1 (Ry), the scan axis the beam swept first");
  if (auto origin = doc.table_at("preprocess")["scan_origin_A"].as_array())
    for (const auto& v : *origin)
      if (const double x = v.is_integer() ? double(*v.value<int64_t>()) : v.value_or(0.0); !(std::abs(x) <= k_most_scan_step_A))
        fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] scan_origin_A holds ", x, " Å: expected values within ±",
             k_most_scan_step_A, " Å");
  // [preprocess]: padding, crop, binning, rotation (their readers' checks and messages).
  read_detector_padding(doc.table_at("preprocess"), doc.origin());
  read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
  // [output] path: a NUL cut the written name short of the one reported.
  check_file_name_text(*setting_value<std::string>(doc.table_at("output"), "output", "path"), "[output] path");
  configured_checkpoint_every(doc);
  // [optics] radiation, probe model and zone plate, [data]'s far-field detector: what the config alone decides.
  check_beam_settings(doc.table_at("optics"), doc.table_at("data"));
  // [reconstruct.probe] initial: a file that exists (it is read once the window is known).
  initial_probe_path(doc.table_at("reconstruct.probe"), doc.base_dir());
  // [reconstruct.probe] vacuum_pattern: the same, and not together with initial.
  vacuum_pattern_path(doc.table_at("reconstruct.probe"), doc.base_dir());
}

}  // namespace

// Checks every table's keys and that every named component exists, before any data is read:
// a typo must not cost the minutes it takes to load a large scan.
// `tycho plan` (engine_may_be_absent) accepts an engine that cannot run here when a plan-only
// component describes it (TYCHO_COMPONENT_PLAN_ONLY); its keys are those it declares.
void session_detail::validate_config(const config_document& doc, const registry& reg, bool engine_may_be_absent) {
  const std::string& origin = doc.origin();
  check_keys(doc.root(), "top level", k_top_tables, origin);
  const toml::table& data_t = doc.table_at("data");
  const auto& source = reg.find(TYCHO_COMPONENT_SOURCE,
                                *setting_value<std::string>(data_t, "data", "source"));
  check_keys(data_t, "data", with(host_keys("data"), source.config_keys), origin);
  check_setting_values(data_t, "data", source.settings, cat("source '", source.name, "'"));
  check_keys(doc.table_at("optics"), "optics", host_keys("optics"), origin);
  check_keys(doc.table_at("preprocess"), "preprocess", host_keys("preprocess"), origin);
  const toml::table& rec_t = doc.table_at("reconstruct");
  const std::string engine_name = *setting_value<std::string>(rec_t, "reconstruct", "engine");
  std::vector<std::string> engine_keys;
  const auto engines = reg.names(TYCHO_COMPONENT_ENGINE);
  const component_ref* described = reg.find_description(TYCHO_COMPONENT_ENGINE, engine_name);
  if (engine_may_be_absent && described != nullptr &&
      std::find(engines.begin(), engines.end(), engine_name) == engines.end()) {
    engine_keys = described->config_keys;  // a plan-only engine: its keys, as it declares them
  } else {
    engine_keys = reg.find(TYCHO_COMPONENT_ENGINE, engine_name).config_keys;
  }
  const auto& loss = reg.find(TYCHO_COMPONENT_LOSS,
                              *setting_value<std::string>(rec_t, "reconstruct", "loss"));
  check_keys(rec_t, "reconstruct",
             with(with(reconstruct_keys(), engine_keys), loss.config_keys), origin);
  if (described != nullptr)
    check_setting_values(rec_t, "reconstruct", described->settings, cat("engine '", described->name, "'"));
  check_setting_values(rec_t, "reconstruct", loss.settings, cat("loss '", loss.name, "'"));
  check_keys(doc.table_at("reconstruct.positions"), "reconstruct.positions", host_keys("reconstruct.positions"), origin);
  validate_constraints(doc, reg);
  for (const char* which : {"object", "probe"}) {
    std::string name = cat("reconstruct.", which);
    const toml::table& t = doc.table_at(name);
    const auto& opt = reg.find(TYCHO_COMPONENT_OPTIMIZER,
                               *setting_value<std::string>(t, name, "optimizer"));
    check_keys(t, name, with(host_keys(name), opt.config_keys), origin);
    check_setting_values(t, name, opt.settings, cat("optimizer '", opt.name, "'"));
  }
  const toml::table& par_t = doc.table_at("parallel");
  std::vector<std::string> parallel_keys = host_keys("parallel");
  if (auto reducer = read_key<std::string>(par_t, "reducer", "parallel"); reducer && *reducer != "auto" && *reducer != "none") {
    const component_ref& red = reg.find(TYCHO_COMPONENT_REDUCER, *reducer);
    parallel_keys = with(parallel_keys, red.config_keys);
    check_setting_values(par_t, "parallel", red.settings, cat("reducer '", red.name, "'"));
  }
  check_keys(par_t, "parallel", parallel_keys, origin);
  const toml::table& out_t = doc.table_at("output");
  check_keys(out_t, "output", host_keys("output"), origin);
  reg.find(TYCHO_COMPONENT_FORMAT, *setting_value<std::string>(out_t, "output", "format"));
  check_setting_ranges(doc);
}

std::string precision_of(DLDataType dtype) {
  if ((dtype.code == kDLComplex && dtype.bits == 128) || (dtype.code == kDLFloat && dtype.bits == 64)) return "float64";
  if ((dtype.code == kDLComplex && dtype.bits == 64) || (dtype.code == kDLFloat && dtype.bits == 32)) return "float32";
  return dtype_name_of(dtype);
}

scan_map scan_map_of_report(const std::string& preprocess_json, const std::string& where) {
  scan_map m;
  if (preprocess_json.empty()) return m;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(preprocess_json);
  } catch (const nlohmann::json::exception&) {
    fail(TYCHO_ERR_BAD_DATA, where, ": the preprocessing report is not valid JSON");
  }
  if (!j.is_object() || !j.contains("scan_map")) return m;
  const auto& lin = j["scan_map"].value("linear", nlohmann::json());
  bool ok = lin.is_array() && lin.size() == 2;
  for (int a = 0; ok && a < 2; ++a) {
    ok = lin[a].is_array() && lin[a].size() == 2 && lin[a][0].is_number() && lin[a][1].is_number();
    if (ok) m.L[a] = {lin[a][0].get<double>(), lin[a][1].get<double>()};
  }
  ok = ok && std::isfinite(m.L[0][0]) && std::isfinite(m.L[0][1]) && std::isfinite(m.L[1][0]) &&
       std::isfinite(m.L[1][1]) && m.det() > 1e-6 && m.det() < 1e6;
  if (!ok)
    fail(TYCHO_ERR_BAD_DATA, where, ": preprocess.scan_map.linear must be a 2 x 2 array of finite numbers with a ",
         "positive determinant (the scan's linear map)");
  return m;
}

namespace {
// A member object of a preprocessing report's "scan_map" ("parallax", "lattice"), or null where
// the report, its map or the member is missing or malformed.
nlohmann::json scan_map_member(const std::string& preprocess_json, const char* member) {
  if (preprocess_json.empty()) return nullptr;
  const nlohmann::json j = nlohmann::json::parse(preprocess_json, nullptr, false);
  if (!j.is_object() || !j.contains("scan_map") || !j["scan_map"].is_object()) return nullptr;
  nlohmann::json m = j["scan_map"].value(member, nlohmann::json());
  return m.is_object() ? m : nlohmann::json();
}
}  // namespace

double lattice_scale_of_report(const std::string& preprocess_json) {
  const nlohmann::json l = scan_map_member(preprocess_json, "lattice");
  if (l.is_null() || !l.value("used", false) || !l.contains("scale") || !l["scale"].is_number()) return std::nan("");
  const double s = l["scale"].get<double>();
  return std::isfinite(s) && s > 0 ? s : std::nan("");
}

parallax_C10_report parallax_C10_of_report(const std::string& preprocess_json) {
  parallax_C10_report r{std::nan(""), std::nan(""), std::nan(""), std::nan(""), std::nan("")};
  const nlohmann::json p = scan_map_member(preprocess_json, "parallax");
  if (p.is_null()) return r;
  // A number within `limit` in magnitude, else NaN (a crafted report's huge values start nothing).
  auto number = [&](const char* key, double limit) {
    if (!p.contains(key) || !p[key].is_number()) return std::nan("");
    const double v = p[key].get<double>();
    return std::isfinite(v) && std::abs(v) < limit ? v : std::nan("");
  };
  r.estimate_A = number("C10_estimate_A", 1e7);
  r.at_nominal_step_A = number("C10_at_nominal_step_A", 1e7);
  r.relative_error = number("relative_error", 1e3);
  r.sd_A = number("C10_sd_A", 1e7);
  r.at_entrance_A = number("C10_at_entrance_A", 1e7);
  return r;
}

run_geometry resolve_run_geometry(const config_document& doc, const tycho_dataset_info& info,
                                  const std::string& desc, int64_t n0, int64_t n1,
                                  const std::vector<double>& listed_positions_A, const scan_map& map) {
  // The scan map moves every position: listed ones directly, a raster's as listed ones that keep
  // the scan step (so the object is laid out over where the probe was: layout_mapped_raster).
  std::vector<double> mapped;
  if (!map.is_identity()) {
    mapped = listed_positions_A;
    map.apply_in_place(mapped);
  }
  const std::vector<double>& positions_A = map.is_identity() ? listed_positions_A : mapped;
  run_geometry r;
  const toml::table& data_t = doc.table_at("data");
  const toml::table& optics_t = doc.table_at("optics");
  r.optics.energy_eV = calibration(optics_t, "energy_eV", "optics", info.energy_eV, desc, "beam energy");
  resolve_probe_model(optics_t, info, desc, r.optics);  // radiation, zone plate or pinhole, semiangle (X-ray)
  if (auto defocus = read_key<double>(optics_t, "defocus_A", "optics")) {
    r.optics.C10_A = -*defocus;
  } else if (auto c10 = read_key<double>(optics_t, "C10_A", "optics")) {
    r.optics.C10_A = *c10;
  } else if (std::isfinite(info.C10_A)) {
    r.optics.C10_A = info.C10_A;
  } else {
    r.optics.C10_A = 0.0;
    log_warning("session", cat("'", desc, "' does not record the defocus and [optics] gives neither C10_A ",
                               "nor defocus_A: C10 = 0 (in focus) unless the bright field's parallax measures it ",
                               "(scan_rotation_deg = \"auto\"; underfocus assumed)"));
  }
  check_beam_energy(r.optics.energy_eV, optics_t.contains("energy_eV") ? "[optics] energy_eV" : cat("the beam energy recorded in '", desc, "'"));
  if (!(r.optics.semiangle_mrad > 0)) fail(TYCHO_ERR_INVALID_ARGUMENT, "[optics] semiangle_mrad must be > 0");
  r.wavelength_A = wavelength_A(r.optics);  // of electrons or photons ([optics] radiation)

  const auto detector_pixel = resolve_detector_pixel_invA(data_t, info, desc, r.wavelength_A);  // or the far field's
  double dk = detector_pixel[0];
  // Positions listed by the source replace the raster: no scan step then (recorded as NaN).
  const bool listed = !listed_positions_A.empty();
  if (listed && data_t.contains("scan_step_A"))
    log_warning("session", cat("'", desc, "' lists its scan positions: [data] scan_step_A is not used"));
  double step = listed ? std::nan("") : calibration(data_t, "scan_step_A", "data", info.scan_step_A[0], desc, "scan step (Å)");
  double dk1 = detector_pixel[1];
  double step1 = listed || data_t.contains("scan_step_A") || !std::isfinite(info.scan_step_A[1]) ? step : info.scan_step_A[1];
  if (!(dk > 0 && dk1 > 0 && (listed || (step > 0 && step1 > 0))))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "scan step and detector pixel must be > 0 (got ", step, " Å, ", dk, " Å⁻¹)");
  // [preprocess] binning = b: b x b detector pixels make one (info.detector_shape is the binned one).
  const double binning = double(read_preprocess_settings(doc.table_at("preprocess"), doc.origin()).binning);
  dk *= binning;
  dk1 *= binning;
  r.sampling = window_sampling{{n0, n1}, {dk, dk1}};

  // The aperture must lie inside the measured detector (not a padded window: padding adds no
  // measurements), or the data cannot hold the probe's spectrum.
  double k_aperture = r.optics.semiangle_mrad * 1e-3 / r.wavelength_A;
  double k_nyquist =
      0.5 * double(std::min(info.detector_shape[0], info.detector_shape[1])) * std::min(dk, dk1);
  if (k_aperture >= k_nyquist)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the probe does not fit the window: a ", r.optics.semiangle_mrad,
         " mrad aperture reaches ", k_aperture, " Å⁻¹ (semiangle / λ) but the detector only spans ±", k_nyquist,
         " Å⁻¹; check [optics] semiangle_mrad, the energy and radiation (they set λ) and the detector pixel size. "
         "Used: ", beam_provenance(optics_t, data_t, info, desc, doc.origin(), r.optics, r.wavelength_A, detector_pixel[0]));

  const toml::table& pre_t = doc.table_at("preprocess");
  r.geometry.scan_shape[0] = info.scan_shape[0];
  r.geometry.scan_shape[1] = info.scan_shape[1];
  r.geometry.step_A[0] = step;
  r.geometry.step_A[1] = step1;
  r.geometry.pixel_A[0] = r.sampling.dx_A(0);
  r.geometry.pixel_A[1] = r.sampling.dx_A(1);
  r.geometry.window[0] = n0;
  r.geometry.window[1] = n1;
  r.geometry.padding_px = *setting_value<int64_t>(pre_t, "preprocess", "object_padding_px");
  if (r.geometry.padding_px < 0) fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] object_padding_px must be >= 0");
  if (auto origin_node = pre_t["scan_origin_A"]) {
    const toml::array* arr = origin_node.as_array();
    if (!arr || arr->size() != 2 || !(*arr)[0].value<double>() || !(*arr)[1].value<double>())
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin_name(doc), ": [preprocess] scan_origin_A must be two numbers [x, y] in Å");
    r.geometry.scan_origin_A[0] = *(*arr)[0].value<double>();
    r.geometry.scan_origin_A[1] = *(*arr)[1].value<double>();
  }
  // Degenerate scans: a step that puts the positions of a raster on one point, or listed
  // positions that all coincide (a CXI file whose translations are all zero), are refused rather
  // than reconstructed from one spot.
  if (!listed) {
    for (int a = 0; a < 2; ++a) {
      if (info.scan_shape[a] < 2) continue;  // one position along the axis: the step does not matter
      const double s_A = r.geometry.step_A[a], s_px = s_A / r.geometry.pixel_A[a];
      if (!(s_A >= k_least_scan_step_A && s_A <= k_most_scan_step_A) || !(s_px >= k_least_scan_step_px))
        fail(TYCHO_ERR_INVALID_ARGUMENT,
             data_t.contains("scan_step_A") ? std::string("[data] scan_step_A") : cat("the scan step recorded in '", desc, "'"),
             " = ", s_A, " Å along scan axis ", a, " is ", s_px, " object pixels of ", r.geometry.pixel_A[a],
             " Å: expected a step from ", k_least_scan_step_A, " to ", k_most_scan_step_A, " Å and at least ",
             k_least_scan_step_px, " px (", k_least_scan_step_px * r.geometry.pixel_A[a],
             " Å), or the scan's positions coincide");
    }
  } else if (positions_A.size() >= 4) {
    double spread_px[2];
    for (int a = 0; a < 2; ++a) {
      double lo = INFINITY, hi = -INFINITY;
      for (std::size_t k = std::size_t(a); k < positions_A.size(); k += 2) {
        lo = std::min(lo, positions_A[k]);
        hi = std::max(hi, positions_A[k]);
      }
      spread_px[a] = (hi - lo) / r.geometry.pixel_A[a];
    }
    if (std::isfinite(spread_px[0]) && std::isfinite(spread_px[1]) &&  // non-finite: layout_object names it
        spread_px[0] < k_least_scan_step_px && spread_px[1] < k_least_scan_step_px)
      fail(TYCHO_ERR_BAD_DATA, "data '", desc, "' lists ", positions_A.size() / 2,
           " scan positions that all lie on one point (within ", spread_px[0], " x ", spread_px[1],
           " object pixels): expected a scan of positions that differ; check the file's positions (translations)");
  }
  // The layout holds every pattern's position (16 bytes each): bounded by this machine's memory
  // before it is allocated, since the scan shape is the data file's word.
  const uint64_t position_bytes = uint64_t(info.scan_shape[0]) * uint64_t(info.scan_shape[1]) * 16u;
  if (const uint64_t have = physical_memory_bytes(); have > 0 && position_bytes > have)
    fail(TYCHO_ERR_OUT_OF_MEMORY, "data '", desc, "': the positions of its ", info.scan_shape[0], " x ",
         info.scan_shape[1], " patterns alone need ", human_bytes(position_bytes), ", more than this machine's ",
         human_bytes(have), " of memory (check the file's shape)");
  try {
    r.layout = listed ? layout_object(r.geometry, positions_A) : layout_mapped_raster(r.geometry, map);
  } catch (const error& e) {  // the layout names neither the data nor where its positions come from
    fail(e.status, "data '", desc, "'", listed ? " (the positions it lists)" : "", ": ", e.what());
  }
  return r;
}

namespace {
// The reported model of an engine: its plan_memory (ABI 1.1) over the [reconstruct] table.
std::shared_ptr<const memory_reporter> engine_memory_reporter(const component_ref& engine, const config_document& doc) {
  const auto* vt = engine.as<tycho_engine_vtable>();
  if (vt->struct_size < offsetof(tycho_engine_vtable, plan_memory) + sizeof(vt->plan_memory) ||
      vt->plan_memory == nullptr)
    fail(TYCHO_ERR_UNSUPPORTED, "engine '", engine.name, "' (", engine.plugin_path,
         ") does not describe its memory (tycho_engine_vtable::plan_memory, ABI 1.1), so its run cannot be planned");
  auto cfg = std::make_shared<tycho_config>(tycho_config{&doc.table_at("reconstruct"), "[reconstruct]", doc.base_dir()});
  auto r = std::make_shared<memory_reporter>();
  r->name = engine.name;
  auto report = [vt, cfg, name = engine.name](const memory_problem& p) {
    const tycho_memory_problem problem = to_abi(p);
    auto out = std::make_unique<tycho_memory_report>();
    *out = tycho_memory_report{};
    out->struct_size = sizeof(tycho_memory_report);
    check_status(vt->plan_memory(cfg.get(), &problem, out.get()), cat("engine '", name, "' plan_memory"));
    return out;
  };
  // The flags come with every report; ask once for the problem's shape of search.
  r->terms = [report, name = engine.name](const memory_problem& p) { return from_abi(*report(p), name); };
  memory_problem probe;
  probe.patterns = probe.window[0] = probe.window[1] = probe.object_shape[0] = probe.object_shape[1] = 1;
  const uint32_t flags = report(probe)->flags;
  r->on_device = (flags & TYCHO_MEMORY_ON_DEVICE) != 0;
  r->batch_scales = (flags & TYCHO_MEMORY_BATCH_SCALES) != 0;
  r->threads_scale = (flags & TYCHO_MEMORY_THREADS_SCALE) != 0;
  return r;
}

// State arrays per element of a parameter (the optimizer's state_arrays, ABI 1.1); an
// optimizer that does not say is counted with two (as many as Adam keeps).
int64_t optimizer_state_arrays(const config_document& doc, const registry& reg, const char* which) {
  const std::string table = cat("reconstruct.", which);
  const component_ref& opt =
      reg.find(TYCHO_COMPONENT_OPTIMIZER, *setting_value<std::string>(doc.table_at(table), table, "optimizer"));
  const auto* vt = opt.as<tycho_optimizer_vtable>();
  if (vt->struct_size < offsetof(tycho_optimizer_vtable, state_arrays) + sizeof(vt->state_arrays) ||
      vt->state_arrays == nullptr)
    return 2;
  const tycho_config cfg{&doc.table_at(table), cat("[", table, "]"), doc.base_dir()};
  const int64_t n = vt->state_arrays(&cfg);
  if (n < 0 || n > 64)
    fail(TYCHO_ERR_BAD_DATA, "optimizer '", opt.name, "' says it keeps ", n, " state arrays per element (0 to 64 expected)");
  return n;
}
}  // namespace

memory_problem run_memory_problem(const config_document& doc, const registry& reg, const tycho_dataset_info& info,
                                  int64_t n0, int64_t n1, const object_layout& layout) {
  const reconstruct_settings settings = read_reconstruct_settings(doc);
  const toml::table& rec_t = doc.table_at("reconstruct");
  const std::string engine = *setting_value<std::string>(rec_t, "reconstruct", "engine");
  const component_ref* described = reg.find_description(TYCHO_COMPONENT_ENGINE, engine);
  if (described == nullptr) reg.find(TYCHO_COMPONENT_ENGINE, engine);  // throws: unknown engine
  memory_problem p;
  p.model = memory_model::reported;
  p.reporter = engine_memory_reporter(*described, doc);
  p.patterns = info.scan_shape[0] * info.scan_shape[1];
  p.window[0] = n0;
  p.window[1] = n1;
  p.target_bytes = 4;  // float32: what the host hands every engine
  p.complex_bytes = settings.float64 ? 16 : 8;  // complex128 or complex64
  p.object_shape[0] = layout.shape[0];
  p.object_shape[1] = layout.shape[1];
  p.slices = settings.slices;
  p.probe_modes = settings.probe_modes;
  p.batch_size = settings.driver.batch_size;
  if (const toml::array* devices = rec_t["devices"].as_array(); devices && !devices->empty())
    p.devices = int64_t(devices->size());
  int64_t threads = 0;
  if (rec_t["threads"].is_integer()) threads = *rec_t["threads"].value<int64_t>();
  p.threads = threads > 0 ? threads : default_engine_threads();
  p.object_optimizer_arrays = optimizer_state_arrays(doc, reg, "object");
  p.probe_optimizer_arrays = optimizer_state_arrays(doc, reg, "probe");
  return p;
}

run_preview preview_run(const config_document& doc, const registry& reg) {
  validate_config(doc, reg, /*engine_may_be_absent=*/true);
  read_reconstruct_settings(doc);
  run_preview r;
  const toml::table& data_t = doc.table_at("data");
  const component_ref& source =
      reg.find(TYCHO_COMPONENT_SOURCE, *setting_value<std::string>(data_t, "data", "source"));
  tycho_config data_cfg{&data_t, "[data]", doc.base_dir()};
  {
    const auto* vt = source.as<tycho_source_vtable>();
    tycho_source* src = nullptr;
    check_status(vt->open(&data_cfg, &src), "source open");
    std::unique_ptr<tycho_source, void (*)(tycho_source*)> guard(src, vt->close);
    r.info.struct_size = sizeof(tycho_dataset_info);
    check_status(vt->info(src, &r.info), "source info");
    r.description = r.info.description ? r.info.description : source.name;
    r.info.description = nullptr;  // owned by the source, which closes here
    r.positions_A = read_source_positions(vt, src, r.info, r.description);
  }
  if (r.info.scan_shape[0] <= 0 || r.info.scan_shape[1] <= 0 || r.info.detector_shape[0] <= 0 ||
      r.info.detector_shape[1] <= 0)
    fail(TYCHO_ERR_BAD_DATA, "data '", r.description, "' is empty (scan ", r.info.scan_shape[0], " x ",
         r.info.scan_shape[1], ", detector ", r.info.detector_shape[0], " x ", r.info.detector_shape[1], ")");
  // The detector after [preprocess] crop_detector, binning and quarter turns.
  const auto detector = preprocessed_detector_shape(read_preprocess_settings(doc.table_at("preprocess"), doc.origin()),
                                                    r.info.detector_shape[0], r.info.detector_shape[1], true);
  r.info.detector_shape[0] = detector[0];
  r.info.detector_shape[1] = detector[1];
  const int64_t n0 = detector[0], n1 = detector[1];
  auto window = padded_window(read_detector_padding(doc.table_at("preprocess"), doc.origin()), n0, n1);
  r.window[0] = window[0];
  r.window[1] = window[1];
  r.geometry = resolve_run_geometry(doc, r.info, r.description, window[0], window[1], r.positions_A);
  r.problem = run_memory_problem(doc, reg, r.info, window[0], window[1], r.geometry.layout);
  r.engine_name = *setting_value<std::string>(doc.table_at("reconstruct"), "reconstruct", "engine");
  const auto engines = reg.names(TYCHO_COMPONENT_ENGINE);
  r.engine_available = std::find(engines.begin(), engines.end(), r.engine_name) != engines.end();
  return r;
}

}  // namespace tycho::host
