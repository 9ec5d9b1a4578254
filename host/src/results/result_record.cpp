#include "tycho/host/result_record.hpp"
#include "settings/config_defaults.hpp"

#include <tycho/core/driver.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/tycho_version.h>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <ctime>
#include <filesystem>
#include <memory>

namespace tycho::host {

namespace {
std::string utc_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}
std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}
}  // namespace

std::string provenance_json(const std::vector<component_provenance>& components) {
  nlohmann::ordered_json comps = nlohmann::ordered_json::array();
  for (const auto& c : components)
    comps.push_back({{"role", c.role}, {"kind", c.kind}, {"name", c.name}, {"version", c.version},
                     {"plugin", c.plugin_path}});
  const nlohmann::ordered_json j = {{"tycho_version", TYCHO_VERSION_STRING},
                                    {"abi_version", std::to_string(TYCHO_ABI_VERSION_MAJOR) + "." +
                                                        std::to_string(TYCHO_ABI_VERSION_MINOR)},
                                    {"host", host_name()},
                                    {"time_utc", utc_now()},
                                    {"components", comps}};
  return j.dump();
}

std::string to_json(const result_manifest& m) {
  nlohmann::ordered_json j;
  j["format"] = "tycho-result";
  j["format_version"] = k_result_format_version;
  j["config_toml"] = m.config_toml;
  j["data"] = {{"description", m.data_description}, {"source", m.source},
               {"scan_shape", m.scan_shape}, {"detector_shape", m.detector_shape},
               {"mean_total_intensity", m.mean_total_intensity}};
  if (!m.bad_pixels_json.empty()) j["data"]["bad_pixels"] = nlohmann::ordered_json::parse(m.bad_pixels_json);
  j["calibration"] = {{"scan_step_A", m.scan_step_A},
                      {"detector_pixel_invA", m.detector_pixel_invA},
                      {"object_pixel_A", m.object_pixel_A},
                      {"window_shape", m.window_shape},
                      {"detector_padding", m.detector_padding},
                      {"scan_origin_A", m.scan_origin_A},
                      {"energy_eV", m.energy_eV},
                      {"radiation", m.radiation},
                      {"wavelength_A", m.wavelength_A},
                      {"semiangle_mrad", m.semiangle_mrad},
                      {"C10_A", m.C10_A},
                      {"object_padding_px", m.object_padding_px}};
  if (m.slice_thickness_A > 0) j["calibration"]["slice_thickness_A"] = m.slice_thickness_A;
  j["arrays"] = {
      {"object", "(slices, H, W) " + m.complex_dtype + ": transmission function"},
      {"probe", "(modes, N0, N1) " + m.complex_dtype + ": real-space probe, centred in its window; Σ|P|² in units of data.mean_total_intensity (the initial probe has 1)"},
      {"positions_px", "(P, 2) float64: probe centres in object pixels, C order over the scan"},
      {"positions_A", "(P, 2) float64: probe centres in Å from the object's corner"},
      {"loss_history", "(iterations,) float64: mean loss per pattern"},
      {"mask", "(N0, N1) uint8: 1 where the loss used the detector pixel, 0 where it was masked (detector padding, "
               "bad pixels); centred like the probe's window"}};
  for (const auto& o : m.optimizer_states)
    for (const auto& a : o.arrays)
      j["arrays"]["optimizer." + o.parameter + "." + a] =
          o.array_description + ": " + o.optimizer + " state '" + a + "' of the " + o.parameter;
  if (m.tile_px > 0)
    j["arrays"]["object_tile_steps"] =
        "(rows, cols) int64: optimizer steps each " + std::to_string(m.tile_px) + " x " + std::to_string(m.tile_px) +
        " px tile of the object has taken (compact batches step only the tiles under each batch's windows)";
  j["batching"] = {{"kind", m.batching}, {"tile_px", m.tile_px}};
  j["history"] = {{"iterations", m.loss_history.size()},
                  {"schedule_iterations", m.schedule_iterations},
                  {"loss", m.loss_history},
                  {"seconds", m.seconds_history},
                  {"cpu_seconds", m.cpu_seconds_history}};
  if (!m.stopping_json.empty()) j["history"]["stopping"] = nlohmann::ordered_json::parse(m.stopping_json);
  nlohmann::ordered_json opts = nlohmann::ordered_json::object();
  for (const auto& o : m.optimizer_states)
    opts[o.parameter] = {{"optimizer", o.optimizer}, {"steps", o.steps}, {"arrays", o.arrays}};
  j["optimizer_state"] = opts;
  if (!m.parallel_json.empty()) j["parallel"] = nlohmann::ordered_json::parse(m.parallel_json);
  if (!m.preprocess_json.empty()) j["preprocess"] = nlohmann::ordered_json::parse(m.preprocess_json);
  if (!m.scan_map_json.empty()) j["scan_map_refined"] = nlohmann::ordered_json::parse(m.scan_map_json);
  if (!m.position_correction_json.empty())
    j["position_correction"] = nlohmann::ordered_json::parse(m.position_correction_json);
  if (!m.validation_json.empty()) j["validation"] = nlohmann::ordered_json::parse(m.validation_json);
  if (!m.positions_precision_json.empty())
    j["positions_precision"] = nlohmann::ordered_json::parse(m.positions_precision_json);
  if (!m.probe_fit_json.empty()) j["probe_fit"] = nlohmann::ordered_json::parse(m.probe_fit_json);
  if (!m.phase_check_json.empty()) j["phase_check"] = nlohmann::ordered_json::parse(m.phase_check_json);
  if (!m.initial_probe_json.empty()) j["initial_probe"] = nlohmann::ordered_json::parse(m.initial_probe_json);
  j["provenance"] = nlohmann::ordered_json::parse(provenance_json(m.components));
  return j.dump(2);
}

bool format_takes_produced_arrays(const component_ref& format) {
  const auto* vt = format.as<tycho_format_vtable>();
  return vt->struct_size >= offsetof(tycho_format_vtable, flags) + sizeof(vt->flags) &&
         (vt->flags & TYCHO_FORMAT_PRODUCED_ARRAYS) != 0;
}

namespace {
struct late_manifest {
  const std::function<std::string()>* make;
  std::string text;
  static const char* call(void* context) {
    auto* m = static_cast<late_manifest*>(context);
    try {
      m->text = (*m->make)();
      return m->text.c_str();
    } catch (const error& e) {
      set_last_error(e.status, e.what());
    } catch (const std::exception& e) {
      set_last_error(TYCHO_ERR_INTERNAL, e.what());
    }
    return nullptr;
  }
};
}  // namespace

void save_produced_record(const component_ref& format, std::vector<owned_array>& arrays,
                          const std::vector<tycho_array_producer>& producers, const std::function<std::string()>& manifest,
                          const std::string& path, tycho_save_mode mode) {
  if (!format_takes_produced_arrays(format) || producers.size() != arrays.size())
    fail(TYCHO_ERR_INTERNAL, "format '", format.name, "' cannot be handed produced arrays");
  std::vector<tycho_named_array> named;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    named.push_back({arrays[i].name.c_str(), arrays[i].view()});
    if (producers[i].produce != nullptr) named.back().tensor.data = nullptr;  // its bytes come from the producer
  }
  late_manifest m{&manifest, {}};
  tycho_record rec{};
  rec.struct_size = sizeof(tycho_record);
  rec.n_arrays = int64_t(named.size());
  rec.arrays = named.data();
  rec.producers = producers.data();
  rec.manifest = &late_manifest::call;
  rec.manifest_context = &m;
  check_status(format.as<tycho_format_vtable>()->save(&rec, path.c_str(), mode), "format save");
}

void save_record(const component_ref& format, std::vector<owned_array>& arrays,
                 const std::string& manifest_json, const std::string& path, tycho_save_mode mode) {
  std::vector<tycho_named_array> named;
  for (auto& a : arrays) named.push_back({a.name.c_str(), a.view()});
  tycho_record rec{sizeof(tycho_record), int64_t(named.size()), named.data(), manifest_json.c_str(), nullptr};
  check_status(format.as<tycho_format_vtable>()->save(&rec, path.c_str(), mode), "format save");
}

loaded_record load_record(const component_ref& format, const std::string& path) {
  tycho_record* rec = nullptr;
  check_status(format.as<tycho_format_vtable>()->load(path.c_str(), &rec), "format load");
  std::unique_ptr<tycho_record, void (*)(tycho_record*)> guard(rec, [](tycho_record* r) {
    if (r && r->release) r->release(r);
  });
  loaded_record out;
  for (int64_t i = 0; i < rec->n_arrays; ++i)
    out.arrays.push_back(owned_array::copy_of(rec->arrays[i].name, rec->arrays[i].tensor));
  if (rec->manifest_json) out.manifest_json = rec->manifest_json;
  return out;
}

const owned_array& loaded_record::array(const std::string& name, const std::string& path) const {
  for (const auto& a : arrays)
    if (a.name == name) return a;
  fail(TYCHO_ERR_BAD_DATA, "'", path, "' has no array '", name, "'");
}

const component_ref& format_for_path(const registry& reg, const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (const auto& c : reg.components())
    if (c.kind == TYCHO_COMPONENT_FORMAT && ext == c.as<tycho_format_vtable>()->extension) return c;
  return reg.find(TYCHO_COMPONENT_FORMAT, defaults::format);
}

}  // namespace tycho::host
