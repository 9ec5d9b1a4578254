#include "settings/position_settings.hpp"

#include <tycho/core/error.hpp>

#include <string>

#include "settings/config_read.hpp"

namespace tycho::host {

position_correction_mode read_position_correction(const toml::table& positions) {
  const toml::node* node = positions.get("correct");
  if (node == nullptr) return position_correction_mode::weighed;  // the default, "auto"
  if (node->is_boolean()) return *node->value<bool>() ? position_correction_mode::on : position_correction_mode::off;
  if (node->is_string() && *node->value<std::string>() == "after_scan_map")
    return position_correction_mode::after_scan_map;
  if (node->is_string() && *node->value<std::string>() == "auto") return position_correction_mode::weighed;
  fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.positions] correct must be true, false, \"after_scan_map\" (each ",
       "position corrected once the scan map's refinement has converged) or \"auto\" (then kept only where the ",
       "corrections exceed their counting noise), got ", config_value_text(*node));
}

}  // namespace tycho::host
