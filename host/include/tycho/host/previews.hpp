// PNG previews beside a result, for a reader and a slide: object phase and amplitude (viridis,
// colour bar with the value range, scale bar in Å, the scanned field of view outlined), the
// probe (amplitude as brightness, phase as hue, each mode's share of the power), the
// diffraction fit (measured against modelled mean pattern, log scale) and the loss curve; one
// sheet with all of them and the run's key settings, plus each panel alone. Drawn with cairo;
// the layout figures are in tycho/host/preview_layout.hpp.
#pragma once

#include <tycho/core/array.hpp>

#include <string>
#include <vector>

namespace tycho::host {

struct preview_inputs {
  owned_array object;        // (slices, H, W) complex64 or complex128
  owned_array probe;         // (modes, N0, N1), the object's dtype, centred in its window
  owned_array positions_px;  // (P, 2) float64, probe centres in object pixels
  std::vector<double> loss_history;  // per iteration; may be empty
  double pixel_A = 0;                // object pixel size, Å (0: no scale bar)
  // The mean measured pattern, (N0, N1) FFT natural order like the targets; empty when the
  // caller has no data (the diffraction panel then says so). `mask`: (N0, N1) FFT order,
  // 1 = a pixel the loss used; empty: every pixel.
  std::vector<double> measured_mean;
  std::vector<uint8_t> mask;
  std::string title;                 // the sheet's title line
  std::vector<std::string> caption;  // the run's key settings, one line each
};

// Writes beside `result_path` (stem = its name without extension):
//   <stem>.object_phase.png, <stem>.object_amplitude.png (object of all slices together; with
//   several slices also <stem>.object_phase.slice<k>.png), <stem>.probe.png,
//   <stem>.diffraction.png (measured and modelled side by side), <stem>.loss.png and
//   <stem>.sheet.png (everything, with the caption).
// The object's colour range spans the 1st to 99th percentile of the finite values inside the
// scanned field of view, so the unscanned border does not wash it out; non-finite values are
// drawn mid grey. Each file is written atomically. Returns the paths written, sheet last.
// Throws tycho::error naming the result when an array has the wrong shape or dtype, or a file
// cannot be written.
std::vector<std::string> write_previews(const std::string& result_path, const preview_inputs& in);

// The caption lines of a result's manifest (JSON text, as saved): data, optics and sampling,
// reconstruction settings, iterations and final loss. Missing members are left out.
std::vector<std::string> preview_caption(const std::string& manifest_json);

}  // namespace tycho::host
