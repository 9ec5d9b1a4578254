#include "settings/iteration_settings.hpp"

#include <tycho/core/error.hpp>
#include <tycho/host/session.hpp>

#include "settings/config_read.hpp"
#include "settings/settings_read.hpp"

namespace tycho::host {

iteration_settings read_iteration_settings(const toml::table& rec) {
  iteration_settings s;
  const auto node = rec["iterations"];
  if (node.is_integer()) {
    s.by_rule = false;
    s.fixed = *node.value<int64_t>();
    // Bounded as the command line's --iterations is (1e9: far beyond any run, far below overflow).
    if (s.fixed < 0 || s.fixed > k_most_iterations)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] iterations must be from 0 to ", k_most_iterations, ", got ",
           s.fixed);
  } else if (node) {
    const auto text = node.value<std::string>();
    const std::string got = text                       ? "\"" + *text + "\""
                            : node.is_floating_point() ? std::string("a number with a fraction")
                                                       : std::string("a value of another type");
    if (!text || *text != "auto")
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] iterations must be a whole number from 0 to ", k_most_iterations,
           " (a fixed count) or \"auto\" (the stopping rule), got ", got);
  }
  s.max_iterations = *setting_value<int64_t>(rec, "reconstruct", "max_iterations");
  if (s.max_iterations < 1 || s.max_iterations > k_most_iterations)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] max_iterations must be from 1 to ", k_most_iterations, ", got ",
         s.max_iterations);
  s.stop_window = *setting_value<int64_t>(rec, "reconstruct", "stop_window");
  if (s.stop_window < 3 || s.stop_window > 1000)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] stop_window must be from 3 to 1000 iterations, got ",
         s.stop_window);
  s.plateau_halvings = *setting_value<int64_t>(rec, "reconstruct", "plateau_halvings");
  if (s.plateau_halvings < 0 || s.plateau_halvings > 30)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] plateau_halvings must be from 0 to 30, got ", s.plateau_halvings);
  if (const auto given = read_key<int64_t>(rec, "schedule_iterations", "reconstruct")) {
    s.schedule = *given;
    if (s.schedule < 1 || s.schedule > k_most_iterations)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] schedule_iterations must be from 1 to ", k_most_iterations,
           ", got ", s.schedule);
  } else {
    s.schedule = s.by_rule ? k_auto_schedule_iterations : s.fixed;
  }
  return s;
}

}  // namespace tycho::host
