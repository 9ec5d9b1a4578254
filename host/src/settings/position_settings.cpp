#include "settings/position_settings.hpp"

#include <tycho/core/error.hpp>

#include <string>

#include "settings/config_read.hpp"

namespace tycho::host {

position_correction_mode read_position_correction(const toml::table& positions) {
  const toml::node* node = positions.get("correct");
  if (node == nullptr) return position_correction_mode::off;
  if (node->is_boolean()) return *node->value<bool>() ? position_correction_mode::on : position_correction_mode::off;
  if (node->is_string() && *node->value<std::string>() == "after_scan_map")
    return position_correction_mode::after_scan_map;
  fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.positions] correct must be true, false or \"after_scan_map\" (each ",
       "position corrected once the scan map's refinement has converged), got ", config_value_text(*node));
}

}  // namespace tycho::host
