#include "beam_optics.hpp"

#include <tycho/core/error.hpp>
#include <tycho/host/log.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>

#include "../settings/config_read.hpp"

namespace tycho::host {

namespace {
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

bool covers(const tycho_dataset_info& info, std::size_t end) { return info.struct_size >= end; }

// A positive number in [optics] / [data], or nullopt; refused when given and not > 0.
std::optional<double> positive_key(const toml::table& t, const char* key, const char* table, const char* unit) {
  auto v = read_key<double>(t, key, table);
  if (v && !(*v > 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in [", table, "] must be > 0 (", unit, "), got ", *v);
  return v;
}
}  // namespace

int32_t source_radiation(const tycho_dataset_info& info) {
  if (!covers(info, offsetof(tycho_dataset_info, radiation) + sizeof(info.radiation))) return TYCHO_RADIATION_UNKNOWN;
  return info.radiation == TYCHO_RADIATION_ELECTRON || info.radiation == TYCHO_RADIATION_XRAY ? info.radiation
                                                                                              : TYCHO_RADIATION_UNKNOWN;
}

std::array<double, 3> source_far_field_m(const tycho_dataset_info& info) {
  if (!covers(info, offsetof(tycho_dataset_info, detector_pixel_m) + sizeof(info.detector_pixel_m))) return {nan, nan, nan};
  auto known = [](double v) { return std::isfinite(v) && v > 0 ? v : nan; };
  return {known(info.detector_distance_m), known(info.detector_pixel_m[0]), known(info.detector_pixel_m[1])};
}

sdk::radiation resolve_radiation(const toml::table& optics_t, const tycho_dataset_info& info, const std::string& desc) {
  const int32_t file = source_radiation(info);
  if (auto r = read_key<std::string>(optics_t, "radiation", "optics")) {
    if (*r != "electron" && *r != "xray")
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'radiation' in [optics] is \"", *r,
           "\", expected \"electron\" or \"xray\"");
    const sdk::radiation given = *r == "xray" ? sdk::radiation::xray : sdk::radiation::electron;
    if (file != TYCHO_RADIATION_UNKNOWN && file != int32_t(given))
      log_warning("optics", cat("'", desc, "' says its beam is ", file == TYCHO_RADIATION_XRAY ? "X-rays" : "electrons",
                                    "; [optics] radiation = \"", *r, "\" overrides it"));
    return given;
  }
  if (file == TYCHO_RADIATION_XRAY) return sdk::radiation::xray;
  if (file == TYCHO_RADIATION_UNKNOWN && std::isfinite(source_far_field_m(info)[0]))
    log_warning("optics", cat("'", desc, "' gives its detector in metres but not whether its beam is electrons or ",
                                  "X-rays: the wavelength is that of electrons; set [optics] radiation = \"xray\" for ",
                                  "X-ray data"));
  return sdk::radiation::electron;
}

void resolve_probe_model(const toml::table& optics_t, const tycho_dataset_info& info, const std::string& desc,
                         sdk::probe_optics& o) {
  o.kind = resolve_radiation(optics_t, info, desc);
  const double lambda_A = sdk::wavelength_A(o);
  const std::string model = read_key<std::string>(optics_t, "probe_model", "optics").value_or("aperture");
  if (model != "aperture" && model != "pinhole")
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'probe_model' in [optics] is \"", model,
         "\", expected \"aperture\" (a condenser aperture or a zone plate) or \"pinhole\"");
  o.model = model == "pinhole" ? sdk::probe_model::pinhole : sdk::probe_model::aperture;
  o.central_stop = read_key<double>(optics_t, "central_stop", "optics").value_or(0.0);
  if (!(o.central_stop >= 0 && o.central_stop < 1))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'central_stop' in [optics] must be in [0, 1) (the blocked fraction ",
         "of the pupil's radius), got ", o.central_stop);
  const auto diameter = positive_key(optics_t, "zone_plate_diameter_m", "optics", "m");
  const auto focal = positive_key(optics_t, "focal_length_m", "optics", "m");
  const auto pinhole = positive_key(optics_t, "pinhole_diameter_m", "optics", "m");
  if (bool(diameter) != bool(focal))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[optics] ", diameter ? "zone_plate_diameter_m" : "focal_length_m", " needs ",
         diameter ? "focal_length_m" : "zone_plate_diameter_m", " too (the zone plate's semiangle is D / 2f)");
  if (o.model == sdk::probe_model::pinhole) {
    if (!pinhole)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[optics] probe_model = \"pinhole\" needs pinhole_diameter_m (the pinhole's ",
           "diameter in metres)");
    if (diameter || o.central_stop > 0)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[optics] probe_model = \"pinhole\" takes no zone plate (zone_plate_diameter_m, ",
           "focal_length_m, central_stop)");
    o.pinhole_diameter_A = *pinhole * 1e10;
  } else if (pinhole) {
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[optics] pinhole_diameter_m needs probe_model = \"pinhole\"");
  }
  if (auto s = read_key<double>(optics_t, "semiangle_mrad", "optics")) {
    if (diameter)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[optics] gives both semiangle_mrad and a zone plate (zone_plate_diameter_m, ",
           "focal_length_m), whose semiangle is D / 2f: give one");
    o.semiangle_mrad = *s;
  } else if (diameter) {
    o.semiangle_mrad = 1e3 * *diameter / (2.0 * *focal);
  } else if (o.model == sdk::probe_model::pinhole) {
    o.semiangle_mrad = 1e3 * 1.22 * lambda_A / o.pinhole_diameter_A;  // the Airy disc's first zero
  } else if (std::isfinite(info.semiangle_mrad)) {
    o.semiangle_mrad = info.semiangle_mrad;
  } else {
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the probe semiangle is not known: '", desc, "' does not record it; set ",
         "'semiangle_mrad' in [optics] (or a zone plate's zone_plate_diameter_m and focal_length_m)");
  }
}

std::array<double, 2> resolve_detector_pixel_invA(const toml::table& data_t, const tycho_dataset_info& info,
                                                  const std::string& desc, double wavelength_A) {
  if (auto dk = read_key<double>(data_t, "detector_pixel_invA", "data")) {
    if (data_t.contains("detector_distance_m") || data_t.contains("detector_pixel_size_m"))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[data] gives detector_pixel_invA and a far-field geometry ",
           "(detector_distance_m, detector_pixel_size_m): give one");
    return {*dk, *dk};
  }
  const auto file = source_far_field_m(info);
  const auto distance = positive_key(data_t, "detector_distance_m", "data", "m");
  const auto pixel = positive_key(data_t, "detector_pixel_size_m", "data", "m");
  const double z = distance ? *distance : file[0];
  const double p[2] = {pixel ? *pixel : file[1], pixel ? *pixel : file[2]};
  const bool far_field = std::isfinite(z) && std::isfinite(p[0]) && std::isfinite(p[1]);
  if ((distance || pixel) && !far_field)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[data] ", distance ? "detector_distance_m" : "detector_pixel_size_m", " needs ",
         distance ? "detector_pixel_size_m" : "detector_distance_m", " too: '", desc, "' does not record it");
  if (far_field) {
    // A pixel p at distance z subtends p / z rad, the spatial frequency p / (z λ): Fraunhofer
    // sampling, small angles (docs/xray.md). λ in Å, so dk is in Å⁻¹.
    return {p[0] / (z * wavelength_A), p[1] / (z * wavelength_A)};
  }
  const double dk0 = info.detector_pixel_invA[0];
  if (!std::isfinite(dk0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the detector pixel size (Å⁻¹) is not known: '", desc, "' does not record it; set ",
         "'detector_pixel_invA' in [data], or the far field's detector_distance_m and detector_pixel_size_m");
  return {dk0, std::isfinite(info.detector_pixel_invA[1]) ? info.detector_pixel_invA[1] : dk0};
}

std::string beam_provenance(const toml::table& optics_t, const toml::table& data_t, const tycho_dataset_info& info,
                            const std::string& desc, const std::string& origin, const sdk::probe_optics& o,
                            double wavelength_A, double dk_invA) {
  const std::string in_config = cat(" in ", origin.empty() ? std::string("the config") : origin);
  const std::string in_file = cat("recorded in '", desc, "'");
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  // The radiation, as resolve_radiation decides it.
  const char* what = o.kind == sdk::radiation::xray ? "X-ray photons" : "electrons";
  std::string radiation_from;
  if (optics_t.contains("radiation")) radiation_from = cat("[optics] radiation", in_config);
  else if (source_radiation(info) != TYCHO_RADIATION_UNKNOWN) radiation_from = cat("as '", desc, "' says");
  else radiation_from = cat("the default: neither [optics] radiation nor '", desc, "' says what the beam is");
  const std::string energy_from = optics_t.contains("energy_eV") ? cat("[optics] energy_eV", in_config) : in_file;
  // The semiangle, as resolve_probe_model decides it.
  std::string semiangle_from;
  if (optics_t.contains("semiangle_mrad")) semiangle_from = cat("[optics] semiangle_mrad", in_config);
  else if (optics_t.contains("zone_plate_diameter_m")) semiangle_from = cat("D / 2f of the zone plate", in_config);
  else if (o.model == sdk::probe_model::pinhole) semiangle_from = cat("1.22 λ / d of the pinhole", in_config);
  else semiangle_from = in_file;
  std::string text = cat("λ = ", number(wavelength_A), " Å: ", what, " (", radiation_from, ") of ", number(o.energy_eV),
                         " eV (", energy_from, "); semiangle ", number(o.semiangle_mrad), " mrad (", semiangle_from, ")");
  if (std::isfinite(dk_invA)) {
    // The detector pixel, as resolve_detector_pixel_invA decides it.
    std::string pixel_from;
    if (data_t.contains("detector_pixel_invA")) {
      pixel_from = cat("[data] detector_pixel_invA", in_config);
    } else {
      const auto file = source_far_field_m(info);
      const bool z_key = data_t.contains("detector_distance_m"), p_key = data_t.contains("detector_pixel_size_m");
      if (z_key || p_key || (std::isfinite(file[0]) && std::isfinite(file[1])))
        pixel_from = cat("p / (λ z) with the distance z ", z_key ? cat("[data] detector_distance_m", in_config) : in_file,
                         " and the pixel p ", p_key ? cat("[data] detector_pixel_size_m", in_config) : in_file,
                         ": it scales with λ");
      else
        pixel_from = in_file;
    }
    text += cat("; detector pixel ", number(dk_invA), " Å⁻¹ (", pixel_from, ")");
  }
  return text;
}

void check_beam_settings(const toml::table& optics_t, const toml::table& data_t) {
  // A source that records everything (semiangle, detector distance and pixel, and the radiation
  // the config names, else electrons: with it unknown, a detector in metres would log a warning
  // on every run): what is refused with it is refused whatever the file says.
  tycho_dataset_info any{};
  any.struct_size = sizeof any;
  any.semiangle_mrad = 1.0;
  any.detector_pixel_invA[0] = any.detector_pixel_invA[1] = 1e-3;
  any.detector_distance_m = 1.0;
  any.detector_pixel_m[0] = any.detector_pixel_m[1] = 1e-4;
  any.energy_eV = any.C10_A = nan;
  any.scan_step_A[0] = any.scan_step_A[1] = nan;
  const auto named = read_key<std::string>(optics_t, "radiation", "optics");
  any.radiation = named && *named == "xray" ? TYCHO_RADIATION_XRAY : TYCHO_RADIATION_ELECTRON;
  sdk::probe_optics o;
  o.energy_eV = 1e4;  // any energy: the checks do not depend on it
  resolve_probe_model(optics_t, any, "the data", o);
  resolve_detector_pixel_invA(data_t, any, "the data", 1.0);
}

}  // namespace tycho::host
