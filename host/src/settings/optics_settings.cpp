#include "settings/optics_settings.hpp"

#include <tycho/core/error.hpp>

#include <string>

#include "settings/config_read.hpp"

namespace tycho::host {

C10_refinement read_C10_refinement(const toml::table& optics) {
  const toml::node* node = optics.get("refine_C10");
  if (node == nullptr) return C10_refinement::auto_;
  if (node->is_boolean()) return *node->value<bool>() ? C10_refinement::on : C10_refinement::off;
  if (node->is_string() && *node->value<std::string>() == "auto") return C10_refinement::auto_;
  fail(TYCHO_ERR_INVALID_ARGUMENT, "[optics] refine_C10 must be true, false or \"auto\" (start from the parallax's C10; ",
       "refine it with the scan map with one slice, and with several where the map refines the scale), got ", config_value_text(*node));
}

}  // namespace tycho::host
