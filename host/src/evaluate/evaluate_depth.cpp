#include "evaluate/evaluate_depth.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace tycho::host {

namespace {
std::optional<double> positive(double v) { return v > 0 && std::isfinite(v) ? std::optional<double>(v) : std::nullopt; }
}  // namespace

std::optional<double> result_slice_thickness(const nlohmann::json& manifest) {
  // Read defensively: a result written before multislice has neither key, and a malformed value
  // means "not recorded" here (the caller then asks for --slice-thickness-A).
  if (manifest.contains("calibration") && manifest["calibration"].is_object()) {
    const auto& v = manifest["calibration"].value("slice_thickness_A", nlohmann::json());
    if (v.is_number()) return positive(v.get<double>());
    if (v.is_array() && !v.empty() && v[0].is_number()) return positive(v[0].get<double>());
  }
  if (manifest.contains("config_toml") && manifest["config_toml"].is_string()) {
    try {
      const toml::table config = toml::parse(manifest["config_toml"].get<std::string>());
      if (auto v = config["reconstruct"]["slice_thickness_A"].value<double>()) return positive(*v);
    } catch (const toml::parse_error&) {
    }
  }
  return std::nullopt;
}

std::vector<depth_group> group_by_depth(int64_t slices, double dz_A, const std::vector<truth_slab>& slabs) {
  std::vector<depth_group> groups;
  if (slices < 1 || !(dz_A > 0) || slabs.empty()) return groups;
  double mean_slab = 0;
  for (const auto& s : slabs) mean_slab += s.z1_A - s.z0_A;
  mean_slab /= double(slabs.size());
  if (dz_A >= mean_slab) {
    for (int64_t r = 0; r < slices; ++r) {
      depth_group g{double(r) * dz_A, double(r + 1) * dz_A, {r}, {}};
      for (std::size_t k = 0; k < slabs.size(); ++k) {
        const double centre = 0.5 * (slabs[k].z0_A + slabs[k].z1_A);
        if (centre >= g.z0_A && centre < g.z1_A) g.truth_slabs.push_back(int64_t(k));
      }
      if (!g.truth_slabs.empty()) groups.push_back(std::move(g));
    }
  } else {
    for (std::size_t k = 0; k < slabs.size(); ++k) {
      depth_group g{slabs[k].z0_A, slabs[k].z1_A, {}, {int64_t(k)}};
      for (int64_t r = 0; r < slices; ++r) {
        const double centre = (double(r) + 0.5) * dz_A;
        if (centre >= g.z0_A && centre < g.z1_A) g.result_slices.push_back(r);
      }
      if (!g.result_slices.empty()) groups.push_back(std::move(g));
    }
  }
  return groups;
}

int64_t slice_at_depth(int64_t slices, double dz_A, double depth_A) {
  if (slices <= 1 || !(dz_A > 0)) return 0;
  const double s = std::floor(depth_A / dz_A);
  return s < 0 ? 0 : s >= double(slices - 1) ? slices - 1 : int64_t(s);
}

}  // namespace tycho::host
