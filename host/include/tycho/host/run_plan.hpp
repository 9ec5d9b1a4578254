// A run resolved without reading its patterns (the source's info() only): the geometry, the
// memory problem the planner (tycho/core/memory_plan.hpp) sizes, the host-memory check the
// session makes before creating the engine, and the `tycho plan` command.
#pragma once

#include <tycho/core/config.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/core/memory_plan.hpp>
#include <tycho/core/scan_map.hpp>
#include <tycho/host/optics.hpp>
#include <tycho/tycho_components.h>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "tycho/host/registry.hpp"

namespace tycho::host {

// Optics and geometry of a run: what the config says, else what the data file records.
struct run_geometry {
  probe_optics optics;
  double wavelength_A = 0;
  window_sampling sampling{};
  scan_geometry geometry{};
  object_layout layout;
};

// Resolves optics, sampling, scan geometry and object layout from the config and the source's
// info() for an (n0, n1) window (after any detector padding); `description` names the data in
// errors. `positions_A`: the (P, 2) positions the source listed (read_positions), laid out
// instead of the raster (no scan step needed then); empty for a raster. `map`: the scan's linear
// map the preprocessing decided (tycho/core/scan_map.hpp), applied to the listed positions or
// to the raster (i·step0, k·step1), whose step is kept; identity: the positions as they are. The
// session and `tycho plan` both use it. (Defined in session.cpp.)
run_geometry resolve_run_geometry(const config_document& doc, const tycho_dataset_info& info,
                                  const std::string& description, int64_t n0, int64_t n1,
                                  const std::vector<double>& positions_A = {}, const scan_map& map = {});

// The scan map a preprocessing report (its JSON, "" when none) recorded ("scan_map": "linear"),
// identity when it holds none. Throws naming `where` when the map is malformed or not invertible.
scan_map scan_map_of_report(const std::string& preprocess_json, const std::string& where);
// What the report's parallax measured of C10 ("scan_map.parallax"), each NaN when not recorded:
// the entrance's C10 a run may start from (C10_estimate_A: recorded when precise enough, or when
// none was stated), the C10 at the nominal step at the specimen's middle (C10_at_nominal_step_A),
// the parallax's relative standard error, and the entrance C10's standard uncertainty (C10_sd_A:
// that error and the unknown depth of the contrast) and value (C10_at_entrance_A).
struct parallax_C10_report {
  double estimate_A, at_nominal_step_A, relative_error, sd_A, at_entrance_A;
};
parallax_C10_report parallax_C10_of_report(const std::string& preprocess_json);
// The isotropic scale a crystal's lattice gave the report's map ("scan_map.lattice", used with
// [preprocess] scan_scale = "lattice"), NaN when none was used.
double lattice_scale_of_report(const std::string& preprocess_json);

// The memory problem of a run: the engine named in [reconstruct] reports its own terms (the
// reported model: tycho_engine_vtable::plan_memory; a plan-only engine will do), the
// optimizers their state arrays (tycho_optimizer_vtable::state_arrays; 2 when they do not say);
// batch, modes, slices, threads ([reconstruct] threads, else the OpenMP default), devices
// ([reconstruct] devices, a list). Throws naming the engine when it cannot describe itself.
// (session.cpp)
memory_problem run_memory_problem(const config_document& doc, const registry& reg, const tycho_dataset_info& info,
                                  int64_t n0, int64_t n1, const object_layout& layout);

// What `tycho plan` shows: everything resolved as reconstruct resolves it (config checks,
// calibrations, detector padding, geometry), with the source opened for info() only.
struct run_preview {
  std::string description;        // the data, as the source names it
  std::string engine_name;
  bool engine_available = false;  // false: planned with the model of an engine not loaded here
  tycho_dataset_info info{};      // info.description is cleared (owned by the closed source)
  int64_t window[2] = {0, 0};     // the engine's window (after padding)
  std::vector<double> positions_A;  // listed by the source (read_positions); empty: a raster
  run_geometry geometry;
  memory_problem problem;
};
// (Defined in session.cpp.) An engine that cannot run here is accepted when a plan-only
// component describes it (TYCHO_COMPONENT_PLAN_ONLY: a GPU engine in a build without its
// toolkit); its config keys are checked against that description.
run_preview preview_run(const config_document& doc, const registry& reg);

// This machine's physical memory, bytes.
uint64_t physical_memory_bytes();
// The memory this machine can give a new process without swapping: /proc/meminfo's MemAvailable
// (swap is not counted), bytes; 0 when unknown.
uint64_t available_memory_bytes();
// Threads the cpu engine uses when [reconstruct] threads is not given: OMP_NUM_THREADS, else
// the CPUs this process may run on (what OpenMP's default team uses).
int64_t default_engine_threads();
// Total memory of CUDA device `ordinal` through the driver library (libcuda.so.1, loaded at
// run time); 0 when there is no driver or no such device.
uint64_t cuda_device_memory_bytes(int ordinal);

// Refuses a run whose host-side plan does not fit this machine's physical memory, with the
// planner's message (the largest term, the remedies) and `hint`. A device engine's own plan is
// not checked here (its device memory is not known to the host): its host side is.
// `capacity`: the host memory to compare with (0: this machine's physical memory).
void check_host_memory(const memory_problem& problem, const std::string& hint, uint64_t capacity = 0);

struct plan_options {
  int64_t devices = 0;             // > 0: overrides [reconstruct] devices
  double memory_GiB = -1;          // >= 0: the memory to compare with (device, or host for cpu)
  bool estimate_time = true;       // the time per iteration, from a short calibration run (time_plan.hpp)
};

// `tycho plan`: resolves the run (preview_run), prints the table and the verdict to `out`.
// Returns 0 when it fits, 2 when it does not (or the device memory is unknown).
int run_plan_command(const config_document& doc, const registry& reg, const plan_options& options,
                     std::ostream& out);

}  // namespace tycho::host
