// The [data] keys of the `simulate` source: their defaults, reading and checks. Every bad value
// is an error that names the key (docs/config-reference.md, `source = "simulate"`).
#pragma once

#include <tycho/sdk.hpp>

#include <cstdint>
#include <string>

namespace tycho::simulate {

struct settings {
  // Geometry. The defaults are the shipped MoS2 set's (80 keV, 25 mrad, C10 = −150 Å, 0.5 Å
  // step, 96 × 96 detector of 0.06 Å⁻¹, 32 × 24 scan), so `source = "simulate"` alone works.
  int64_t scan[2] = {32, 24};       // scan_shape = [Rx, Ry]
  double step_A = 0.5;              // scan_step_A, both axes
  int64_t detector[2] = {96, 96};   // detector_shape = [Qx, Qy]
  double pixel_invA = 0.06;         // detector_pixel_invA, both axes
  double energy_eV = 80e3;
  double semiangle_mrad = 25.0;
  double C10_A = -150.0;
  int64_t padding_px = 16;          // object_padding_px: the runtime's [preprocess] default

  // Object: "random" (smooth random phase) or "npy" (object_phase_npy).
  std::string object = "random";
  std::string npy_path;             // resolved against the config file's folder
  double phase_max_rad = 0.5;
  double feature_size_A = 1.0;      // σ of the Gaussian filter of the random field, Å

  // Counts.
  double dose_e_per_A2 = 0.0;       // 0: noise-free fractions of the beam
  bool noise = true;
  uint64_t seed = 0;
  int threads = 0;                  // 0: all hardware threads

  bool noisy() const { return noise && dose_e_per_A2 > 0; }
  // Mean electrons per pattern: the dose over one scan step cell.
  double counts_per_pattern() const { return dose_e_per_A2 * step_A * step_A; }
};

// Reads and checks the [data] table.
settings read_settings(const sdk::config_view& cfg);

// The keys above, NULL-terminated, for the component's config_keys.
extern const char* const k_config_keys[];
// Their typed declarations (type, default, range, unit, doc), ended by a NULL key.
extern const tycho_setting k_settings[];

}  // namespace tycho::simulate
