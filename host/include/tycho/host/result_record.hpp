// The result file's content: the manifest (format version, resolved config, calibrations,
// provenance, history) and saving/loading records through a format component.
#pragma once

#include <tycho/core/array.hpp>
#include <tycho/tycho_components.h>

#include <functional>
#include <string>
#include <vector>

#include "tycho/host/registry.hpp"

namespace tycho::host {

// Version of the manifest's layout (docs/file-format.md).
constexpr int k_result_format_version = 1;

struct component_provenance {
  std::string role;  // "source", "engine", "loss", "object optimizer", "probe optimizer", "format"
  std::string kind, name, version, plugin_path;
};

// The state of one parameter's optimizer, saved so that `tycho reconstruct --from` resumes bit
// for bit: its arrays are saved as "optimizer.<parameter>.<array>".
struct optimizer_state_record {
  std::string parameter;              // "object" or "probe"
  std::string optimizer;              // the optimizer component's name
  int64_t steps = 0;                  // steps taken
  std::vector<std::string> arrays;    // e.g. {"m", "v"}
  std::string array_description;      // shape and dtype, for the manifest's "arrays"
};

struct result_manifest {
  std::string config_toml;  // the configuration as run
  std::string data_description, source;
  std::vector<int64_t> scan_shape, detector_shape;
  std::vector<int64_t> window_shape;                   // (N0', N1'): the detector after padding
  std::vector<std::vector<int64_t>> detector_padding;  // per axis [before, after], centred order
  std::vector<double> scan_step_A, detector_pixel_invA, object_pixel_A, scan_origin_A;
  double energy_eV = 0, wavelength_A = 0, semiangle_mrad = 0, C10_A = 0;
  std::string radiation = "electron";  // [optics] radiation as resolved: "electron" or "xray"
  double mean_total_intensity = 0;
  int64_t object_padding_px = 0;
  // Δz between consecutive object slices, Å: written as calibration.slice_thickness_A when > 0
  // (a multislice run), which `tycho evaluate` reads for the slices' depths.
  double slice_thickness_A = 0;
  std::vector<double> loss_history, seconds_history;
  std::vector<double> cpu_seconds_history;  // the process's CPU time per iteration, s
  int64_t schedule_iterations = 0;    // the run's total: the learning-rate schedules span it
  std::string stopping_json;          // history.stopping: how long the run went on and why it stopped
  std::string complex_dtype = "complex64";  // of object and probe: "complex128" in a float64 run
  std::vector<optimizer_state_record> optimizer_states;
  std::vector<component_provenance> components;
  // What was masked as bad pixels (host/src/data/bad_pixels.hpp): a JSON object, the manifest's
  // "data.bad_pixels"; empty: the key is left out.
  std::string bad_pixels_json;
  // How the run was spread: launcher, reducer, sharding, world size and one JSON object per
  // rank (device, precision, patterns held); empty for a run of one rank.
  std::string parallel_json;
  // What the preprocessing stage did (tycho/host/preprocess.hpp); empty when it did nothing.
  std::string preprocess_json;
  // The scan map as the run refined it (tycho/core/scan_refinement.hpp), the manifest's
  // "scan_map_refined"; empty when it was not refined.
  std::string scan_map_json;
  std::string position_correction_json;  // "position_correction": the steps' measured curvature scale ("" before any)
  std::string validation_json;  // "validation": the held-out patterns' loss ([reconstruct] validation_fraction; "" when none)
  std::string positions_precision_json;  // "positions_precision": the positions' Cramér–Rao bound ("" when not measured)
  // The defocus the reconstructed probe shows (tycho/core/probe_fit.hpp), "probe_fit"; empty: none.
  std::string probe_fit_json;
  // The twin test of the object's phase (tycho/core/phase_twin.hpp), "phase_check"; empty: none.
  std::string phase_check_json;
  std::string initial_probe_json;  // [reconstruct.probe] vacuum_pattern: what was read and found
  // Compact batches stepping the object in tiles: the batching ("random" or "compact", the
  // manifest's "batching") and the tiles' side (px) when the result holds object_tile_steps (0: not).
  std::string batching = "random";
  int64_t tile_px = 0;
};

// The manifest's "provenance" object as JSON text: tycho and ABI versions, this machine's host
// name, the time now (UTC) and the components (also what a prepared file records).
std::string provenance_json(const std::vector<component_provenance>& components);

std::string to_json(const result_manifest& m);

// Saves arrays + manifest through `format` (atomically: the format writes a temporary file
// and renames it).
void save_record(const component_ref& format, std::vector<owned_array>& arrays,
                 const std::string& manifest_json, const std::string& path, tycho_save_mode mode);

// Whether `format` takes arrays produced while it writes (TYCHO_FORMAT_PRODUCED_ARRAYS, ABI 1.3).
bool format_takes_produced_arrays(const component_ref& format);
// Saves arrays + manifest through `format`, array i's bytes produced while it writes where
// producers[i].produce is set (arrays[i] then gives shape and dtype only), the manifest made by
// `manifest` once every produced array is complete. Only for a format that takes them.
void save_produced_record(const component_ref& format, std::vector<owned_array>& arrays,
                          const std::vector<tycho_array_producer>& producers, const std::function<std::string()>& manifest,
                          const std::string& path, tycho_save_mode mode);

struct loaded_record {
  std::vector<owned_array> arrays;
  std::string manifest_json;  // "" when the file has none
  const owned_array& array(const std::string& name, const std::string& path) const;
};
loaded_record load_record(const component_ref& format, const std::string& path);

// The format component whose extension matches `path`, else the default format.
const component_ref& format_for_path(const registry& reg, const std::string& path);

}  // namespace tycho::host
