// [reconstruct.probe] vacuum_pattern: the initial probe's aperture measured instead of modelled.
// A vacuum pattern is what the detector records with no specimen in the beam: the probe's
// |F P|², i.e. the condenser aperture as it really is (its size, its soft or uneven edge, a
// partly blocked aperture). Its square root replaces the model's disc A(k) in
// P = F⁻¹[A(k) exp(−i χ(k))] (tycho/sdk/optics.hpp, make_probe); the phase χ still comes from
// the optics (C10). py4DSTEM and quantEM call it vacuum_probe_intensity.
//
// The pattern goes through the data's own steps, so it is given as the detector records it
// (centred: the zero frequency mid-frame), in the frame and size the data's source delivers: the crop, binning and transpose of [preprocess] (as the preprocessing stage applied them,
// read back from its report) and the detector padding; pixels the run masks are filled from
// their valid neighbours. When the run recentres its patterns (`recentre = true`) the vacuum
// pattern is moved by its own centre of mass (whole pixels) the same way; otherwise it stays
// where it was measured, as the data's bright-field disc does.
#pragma once

#include <toml++/toml.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tycho::host {

// How the data's patterns reached the engine's window, which the vacuum pattern follows.
struct vacuum_pattern_steps {
  std::array<int64_t, 2> detector{0, 0};  // the patterns as the source delivers them (before any step)
  std::array<int64_t, 2> crop{0, 0};      // [preprocess] crop_detector (0: none)
  int64_t binning = 1;
  bool transpose = false;  // the detector axes swapped against the scan's (as applied)
  bool recentre = false;   // the patterns were recentred on their centre of mass
  std::array<int64_t, 2> window{0, 0};  // the engine's window (after padding)
  std::vector<uint8_t> mask;            // the engine's mask on the window, FFT order, 1 = valid; empty: all valid
};

// The steps as the preprocessing stage's report (its manifest JSON, "" when it did nothing)
// records them, for a detector delivered as `detector` and a run whose window is `window`. A
// prepared file's report is untrusted: its values are checked (results/manifest_reader.hpp) and a
// report whose steps cannot be applied is refused, naming `report_source` (the file) and the key.
vacuum_pattern_steps vacuum_steps_of_report(const std::string& preprocess_json, const std::string& report_source,
                                            std::array<int64_t, 2> detector, std::array<int64_t, 2> window,
                                            std::vector<uint8_t> mask);

// The settings alone, before any data is read: nullopt when vacuum_pattern is absent; otherwise
// the resolved path of a file that exists (vacuum_pattern_dataset only for an HDF5 file, and
// required there). Refuses vacuum_pattern together with a probe file (`initial`), naming both.
std::optional<std::string> vacuum_pattern_path(const toml::table& probe_t, const std::string& base_dir);

// What was read and found, for the log and the result's manifest ("initial_probe").
struct vacuum_amplitude {
  std::vector<double> amplitude;  // √(vacuum intensity) on the window, FFT order, Σ A² = 1
  std::string file;               // resolved path (":" dataset for HDF5)
  int64_t frames = 0;             // frames summed
  std::array<double, 2> centre_px{0, 0};  // its centre of mass, px from the zero frequency (before any move)
  std::array<int64_t, 2> moved_px{0, 0};  // the whole-pixel move applied (recentre)
  double bright_field_px = 0;             // pixels above half the brightest (the disc's area)
  double bright_field_semiangle_mrad = 0; // the radius of a disc of that area, × λ
  std::string to_json(double stated_semiangle_mrad) const;
  // The log line: the file, frames, bright field against the stated semiangle, centre, move, C10.
  std::string describe(double stated_semiangle_mrad, double C10_A) const;
  // "" or a warning when the bright field's semiangle is not within 25 % of the stated one (a
  // hot pixel the data do not mask, another detector's frame, a misstated aperture): the
  // pattern is used all the same.
  std::string semiangle_warning(double stated_semiangle_mrad) const;
};

// nullopt when [reconstruct.probe] vacuum_pattern is absent. Otherwise the file's pattern: an
// .npy (float32/64, (u)int8/16/32) or an HDF5 dataset (`vacuum_pattern_dataset`) of shape
// (N0, N1) or (..., N0, N1) — every leading index a frame, summed — with (N0, N1) the detector
// as delivered; through `steps`; its amplitude. `wavelength_A` and `dk_invA` (the window's)
// give the bright field's semiangle. Negative sums (a dark subtraction's noise) count as 0.
// Throws naming the key, the file and what was expected: a wrong shape or dtype, a non-finite
// value, a pattern with no intensity.
std::optional<vacuum_amplitude> read_vacuum_amplitude(const toml::table& probe_t, const std::string& base_dir,
                                                      const vacuum_pattern_steps& steps, double wavelength_A,
                                                      const double dk_invA[2]);

}  // namespace tycho::host
