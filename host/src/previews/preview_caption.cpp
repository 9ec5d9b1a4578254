// The previews' caption: the run's key settings, read back from the result's manifest so that
// the sheet says what the file says.
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <cstdio>
#include <string>
#include <vector>

#include "settings/config_defaults.hpp"
#include "tycho/host/previews.hpp"

namespace tycho::host {

namespace {
using json = nlohmann::json;

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// A member at a JSON path, or null.
const json& at(const json& j, std::initializer_list<const char*> path) {
  static const json null;
  const json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return null;
    p = &(*p)[k];
  }
  return *p;
}

std::string pair_text(const json& a, const char* sep, const std::string& unit, bool number = true) {
  if (!a.is_array() || a.size() != 2) return "?";
  auto one = [&](const json& v) { return v.is_number() ? (number ? g(v.get<double>()) : v.dump()) : v.dump(); };
  return one(a[0]) + sep + one(a[1]) + unit;
}

// "adam, learning rate 0.005, cosine" from [reconstruct.<which>] of the resolved config.
std::string optimizer_text(const toml::table& config, const char* which) {
  const auto t = config["reconstruct"][which];
  std::string s = t["optimizer"].value_or(std::string(defaults::optimizer));
  if (auto lr = t["learning_rate"].value<double>()) s += ", learning rate " + g(*lr);
  if (auto sch = t["schedule"].value<std::string>()) s += ", " + *sch;
  return s;
}
}  // namespace

std::vector<std::string> preview_caption(const std::string& manifest_json) {
  std::vector<std::string> lines;
  json m;
  try {
    m = json::parse(manifest_json);
  } catch (const json::exception&) {
    return lines;
  }
  const json& d = at(m, {"data"});
  const json& cal = at(m, {"calibration"});
  if (d.is_object())
    lines.push_back("data: " + d.value("description", std::string("?")) + " (" + d.value("source", std::string("?")) +
                    "), scan " + pair_text(d.value("scan_shape", json()), " x ", "", false) + ", step " +
                    pair_text(cal.value("scan_step_A", json()), " x ", " Å") + ", detector " +
                    pair_text(d.value("detector_shape", json()), " x ", "", false) + ", window " +
                    pair_text(cal.value("window_shape", json()), " x ", "", false));
  if (cal.is_object())
    lines.push_back("optics: " + g(cal.value("energy_eV", 0.0) / 1e3) + " keV (λ " + g(cal.value("wavelength_A", 0.0)) +
                    " Å), semiangle " + g(cal.value("semiangle_mrad", 0.0)) + " mrad, C10 " + g(cal.value("C10_A", 0.0)) +
                    " Å; object pixel " + pair_text(cal.value("object_pixel_A", json()), " x ", " Å"));
  if (m.contains("config_toml") && m["config_toml"].is_string()) {
    try {
      const toml::table config = toml::parse(m["config_toml"].get<std::string>());
      const auto rec = config["reconstruct"];
      lines.push_back("reconstruction: " + rec["engine"].value_or(std::string(defaults::engine)) + " engine, " +
                      rec["loss"].value_or(std::string(defaults::loss)) + " loss, batch " +
                      std::to_string(rec["batch_size"].value_or(int64_t(0))) + ", " +
                      rec["precision"].value_or(std::string("float32")) + "; object: " +
                      optimizer_text(config, "object") + "; probe: " + optimizer_text(config, "probe"));
    } catch (const toml::parse_error&) {
    }
  }
  const json& h = at(m, {"history"});
  if (h.is_object()) {
    std::string s = "iterations " + std::to_string(h.value("iterations", 0));
    const json& loss = at(h, {"loss"});
    if (loss.is_array() && !loss.empty() && loss.back().is_number()) s += ", final loss " + g(loss.back().get<double>());
    double secs = 0;
    for (const auto& v : h.value("seconds", json::array()))
      if (v.is_number()) secs += v.get<double>();
    if (secs > 0) s += ", " + g(secs) + " s of iterations";
    const json& prov = at(m, {"provenance"});
    if (prov.is_object())
      s += "; tycho " + prov.value("tycho_version", std::string("?")) + ", " + prov.value("time_utc", std::string(""));
    lines.push_back(s);
  }
  return lines;
}

}  // namespace tycho::host
