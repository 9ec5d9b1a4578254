// [reconstruct] iterations, max_iterations and stop_window: how long a run goes on, read and
// checked (errors name the key). Host-internal: the session and `tycho plan` read them alike.
#pragma once

#include <toml++/toml.h>

#include <cstdint>

namespace tycho::host {

// The schedules' length with iterations = "auto" when schedule_iterations is not given: the count
// the recipes' schedules were tuned for when it was the default.
inline constexpr int64_t k_auto_schedule_iterations = 100;

struct iteration_settings {
  bool by_rule = true;            // iterations = "auto" (the default): the stopping rule ends the run
  int64_t fixed = 0;              // iterations = N: a fixed count (0 saves the initial state)
  int64_t max_iterations = 1000;  // the rule's cap
  int64_t stop_window = 20;       // the rule's window W (runtime/stopping_rule.hpp)
  int64_t plateau_halvings = 3;   // the learning rates' halvings at the rule's verdicts before it ends the run
  // The iterations a decaying learning-rate schedule spans: schedule_iterations, else the fixed
  // count, else (with "auto") 100.
  int64_t schedule = 100;
  // The most iterations the run takes: the fixed count, or the cap.
  int64_t most() const { return by_rule ? max_iterations : fixed; }
};

// Reads [reconstruct] (the table `rec`). Refuses, naming the key: iterations that is neither a
// whole number from 0 to 1e9 nor "auto"; max_iterations and schedule_iterations outside [1, 1e9];
// stop_window outside [3, 1000]; plateau_halvings outside [0, 30].
iteration_settings read_iteration_settings(const toml::table& rec);

}  // namespace tycho::host
