// The time an iteration will take, before the run: `tycho plan`'s estimate. A short calibration
// runs this machine's engine (a host engine: cpu) with the run's [reconstruct] settings on a
// small piece of the run itself (two batches of the run's batching, on the run's window, with
// the run's object where random batches step it whole, else a crop around the batches'
// windows), through the driver and the optimizers, and scales the time per batch to the
// iteration's batches: wall time at the machine's load now, and the process's CPU time, which
// the load does not change (a result's history.seconds and history.cpu_seconds count the same).
// Constraints, checkpoints and previews are not counted; targets read from disk are taken as
// read ahead in the engine's idle time (docs/streaming.md).
#pragma once

#include <tycho/core/config.hpp>

#include <cstdint>
#include <string>

#include "tycho/host/registry.hpp"
#include "tycho/host/run_plan.hpp"

namespace tycho::host {

struct time_estimate {
  bool done = false;           // false: not estimated (why says why)
  std::string why;             // what was measured, or why nothing was
  double seconds_per_iteration = 0;
  double us_per_position = 0;  // per position·iteration
  double cpu_seconds_per_iteration = 0;  // the process's CPU time (all threads): what the load does not change
  double cpu_us_per_position = 0;
  double calibration_seconds = 0;
  std::string batching;        // "random" or "compact"
};

// Estimates the run `r` of `doc`. Host engines only (a device engine, or one not available
// here, is not estimated); at most about `budget_s` seconds of calibration after a warm-up batch.
time_estimate estimate_iteration_time(const config_document& doc, const registry& reg, const run_preview& r,
                                      double budget_s = 1.0);

// A duration for the plan's lines: "42 s" under 2 minutes, "12 min" under 2 hours, else "3.5 h".
std::string duration_text(double seconds);

}  // namespace tycho::host
