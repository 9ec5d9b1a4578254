#include "settings/scan_map_settings.hpp"

#include <tycho/core/error.hpp>

#include <string>

#include "settings/config_read.hpp"

namespace tycho::host {

bool read_scan_scale_refinement(const toml::table& positions, int64_t slices) {
  const toml::node* node = positions.get("refine_scan_scale");
  if (node == nullptr || (node->is_string() && *node->value<std::string>() == "auto")) return slices > 1;
  if (node->is_boolean()) return *node->value<bool>();
  fail(TYCHO_ERR_INVALID_ARGUMENT,
       "[reconstruct.positions] refine_scan_scale must be true, false or \"auto\" (\"auto\" refines the scan's "
       "isotropic scale with several slices and holds it with one), got ",
       config_value_text(*node));
}

}  // namespace tycho::host
