#include "simulate_config.hpp"

#include <tycho/sdk/source.hpp>

#include <array>
#include <cmath>
#include <filesystem>
#include <optional>

namespace tycho::simulate {

using sdk::cat;
using sdk::fail;

const char* const k_config_keys[] = {
    "scan_shape",     "scan_step_A",   "detector_shape",    "detector_pixel_invA",
    "energy_eV",      "semiangle_mrad", "C10_A",            "object_padding_px",
    "object",         "object_phase_npy", "phase_max_rad",  "feature_size_A",
    "dose_e_per_A2",  "noise",         "seed",              "threads",
    nullptr};

// Typed declarations (ABI 1.1) of the keys above, with the defaults of `settings` and the ranges
// read_settings checks; the host checks types and ranges before the source opens.
const char* const k_object_kinds[] = {"random", "npy", nullptr};
const tycho_setting k_settings[] = {
    sdk::setting("scan_shape", TYCHO_SETTING_INTEGER_LIST, "[32, 24]", "(Rx, Ry) raster scan positions, each >= 1"),
    sdk::setting("scan_step_A", TYCHO_SETTING_NUMBER, "0.5", "scan step, both axes (also the runtime's key)", "Å")
        .above(0),
    sdk::setting("detector_shape", TYCHO_SETTING_INTEGER_LIST, "[96, 96]", "(Qx, Qy) detector pixels, each 4 to 4096"),
    sdk::setting("detector_pixel_invA", TYCHO_SETTING_NUMBER, "0.06",
                 "reciprocal pixel, both axes (also the runtime's key)", "Å⁻¹")
        .above(0),
    sdk::setting("energy_eV", TYCHO_SETTING_NUMBER, "80e3", "beam energy", "eV").above(0),
    sdk::setting("semiangle_mrad", TYCHO_SETTING_NUMBER, "25", "aperture semiangle; the aperture must lie inside the detector",
                 "mrad")
        .above(0),
    sdk::setting("C10_A", TYCHO_SETTING_NUMBER, "-150", "defocus aberration C10 (< 0: underfocus); the probe must fit its window",
                 "Å"),
    sdk::setting("object_padding_px", TYCHO_SETTING_INTEGER, "16",
                 "the object grid's padding; keep it equal to [preprocess] object_padding_px", "px")
        .at_least(0)
        .at_most(100000),
    sdk::setting("object", TYCHO_SETTING_STRING, "\"random\"",
                 "random: a smooth random phase object; npy: the phase map of object_phase_npy")
        .one_of(k_object_kinds),
    sdk::setting("object_phase_npy", TYCHO_SETTING_STRING, nullptr,
                 "a 2-D phase map in radians (.npy float32 or float64), relative to the config file's folder"),
    sdk::setting("phase_max_rad", TYCHO_SETTING_NUMBER, "0.5", "random object: its phase spans [0, phase_max_rad]", "rad")
        .at_least(-1000)
        .at_most(1000),
    sdk::setting("feature_size_A", TYCHO_SETTING_NUMBER, "1.0", "random object: σ of the Gaussian filter of white noise",
                 "Å")
        .above(0),
    sdk::setting("dose_e_per_A2", TYCHO_SETTING_NUMBER, "0", "electron dose for Poisson noise; 0: noise-free", "e/Å²")
        .at_least(0),
    sdk::setting("noise", TYCHO_SETTING_BOOL, "true", "false: noise-free patterns whatever the dose"),
    sdk::setting("seed", TYCHO_SETTING_INTEGER, "0", "seeds the random object and the noise").at_least(0),
    sdk::setting("threads", TYCHO_SETTING_INTEGER, "0", "threads computing patterns in a read; 0: all hardware threads")
        .at_least(0)
        .at_most(4096),
    sdk::end_of_settings()};

namespace {

// Whether the key is present at all, whatever its type (a type probe that never throws).
bool present(const sdk::config_view& cfg, const std::string& key) {
  int dummy = 0;
  return sdk::host()->config_get_bool(cfg.raw(), key.c_str(), &dummy) != TYCHO_ERR_NOT_FOUND;
}

// `key = [a, b]`: two integers >= `min`, or nullopt when absent.
std::optional<std::array<int64_t, 2>> int_pair(const sdk::config_view& cfg, const char* key,
                                               const char* names, int64_t min) {
  if (!present(cfg, key)) return std::nullopt;
  const std::string where = cat("config key '", key, "' in ", cfg.table_name());
  int64_t n = 0;
  while (present(cfg, cat(key, "[", n, "]"))) ++n;
  if (n != 2)
    fail(TYCHO_ERR_INVALID_ARGUMENT, where, " must be an array of two integers ", names,
         n > 0 ? cat(", got ", n, " values") : std::string(", got something else"));
  std::array<int64_t, 2> v{};
  for (int i = 0; i < 2; ++i) {
    int64_t x = 0;
    if (sdk::host()->config_get_int(cfg.raw(), cat(key, "[", i, "]").c_str(), &x) != TYCHO_OK)
      fail(TYCHO_ERR_INVALID_ARGUMENT, where, " must be an array of two integers ", names,
           ", element ", i, " is not an integer");
    if (x < min) fail(TYCHO_ERR_INVALID_ARGUMENT, where, " must hold integers >= ", min, ", got ", x);
    v[std::size_t(i)] = x;
  }
  return v;
}

double positive(const sdk::config_view& cfg, const char* key, double fallback, const char* unit) {
  double v = cfg.get_double(key).value_or(fallback);
  if (!(v > 0) || !std::isfinite(v))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in ", cfg.table_name(),
         " must be a finite number > 0 (", unit, "), got ", v);
  return v;
}

double finite(const sdk::config_view& cfg, const char* key, double fallback) {
  double v = cfg.get_double(key).value_or(fallback);
  if (!std::isfinite(v))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in ", cfg.table_name(),
         " must be a finite number, got ", v);
  return v;
}

}  // namespace

settings read_settings(const sdk::config_view& cfg) {
  settings s;
  const std::string table = cfg.table_name();
  if (auto v = int_pair(cfg, "scan_shape", "[Rx, Ry]", 1)) {
    s.scan[0] = (*v)[0];
    s.scan[1] = (*v)[1];
  }
  if (auto v = int_pair(cfg, "detector_shape", "[Qx, Qy]", 4)) {
    s.detector[0] = (*v)[0];
    s.detector[1] = (*v)[1];
  }
  if (s.detector[0] > 4096 || s.detector[1] > 4096)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'detector_shape' in ", table, " must be at most 4096 x 4096, got ",
         s.detector[0], " x ", s.detector[1]);
  s.step_A = positive(cfg, "scan_step_A", s.step_A, "Å");
  s.pixel_invA = positive(cfg, "detector_pixel_invA", s.pixel_invA, "Å⁻¹");
  s.energy_eV = positive(cfg, "energy_eV", s.energy_eV, "eV");
  s.semiangle_mrad = positive(cfg, "semiangle_mrad", s.semiangle_mrad, "mrad");
  s.C10_A = finite(cfg, "C10_A", s.C10_A);
  s.padding_px = cfg.get_int("object_padding_px").value_or(s.padding_px);
  if (s.padding_px < 0 || s.padding_px > 100000)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'object_padding_px' in ", table,
         " must be an integer in [0, 100000], got ", s.padding_px);

  auto object = cfg.get_string("object");
  auto npy = cfg.get_string("object_phase_npy");
  if (object && *object != "random" && *object != "npy")
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'object' in ", table,
         " must be \"random\" or \"npy\" (with object_phase_npy), got \"", *object, "\"");
  if (object && *object == "random" && npy)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config keys 'object' = \"random\" and 'object_phase_npy' in ", table,
         " contradict each other: drop one (object_phase_npy alone selects the phase map)");
  if (object && *object == "npy" && !npy)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'object' = \"npy\" in ", table,
         " needs 'object_phase_npy' (the path of a 2-D float32/float64 .npy phase map, radians)");
  s.object = npy ? "npy" : "random";
  if (npy) {
    if (npy->empty())
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'object_phase_npy' in ", table, " is an empty path");
    s.npy_path = tycho::sdk::resolve_path(cfg.base_dir(), *npy);
  }
  s.phase_max_rad = finite(cfg, "phase_max_rad", s.phase_max_rad);
  if (std::fabs(s.phase_max_rad) > 1000)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'phase_max_rad' in ", table,
         " must lie in [-1000, 1000] rad, got ", s.phase_max_rad);
  s.feature_size_A = positive(cfg, "feature_size_A", s.feature_size_A, "Å");

  s.dose_e_per_A2 = cfg.get_double("dose_e_per_A2").value_or(0.0);
  if (!(s.dose_e_per_A2 >= 0) || !std::isfinite(s.dose_e_per_A2))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'dose_e_per_A2' in ", table,
         " must be a finite number >= 0 (electrons per Å², 0 for noise-free patterns), got ",
         s.dose_e_per_A2);
  if (s.counts_per_pattern() > 1e15)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'dose_e_per_A2' in ", table, " gives ",
         s.counts_per_pattern(), " electrons per pattern; at most 1e15 are supported");
  s.noise = cfg.get_bool("noise").value_or(true);
  int64_t seed = cfg.get_int("seed").value_or(0);
  if (seed < 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'seed' in ", table, " must be >= 0, got ", seed);
  s.seed = uint64_t(seed);
  int64_t threads = cfg.get_int("threads").value_or(0);
  if (threads < 0 || threads > 4096)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'threads' in ", table,
         " must be in [0, 4096] (0: all hardware threads), got ", threads);
  s.threads = int(threads);
  return s;
}

}  // namespace tycho::simulate
