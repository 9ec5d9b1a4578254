// The mean diffraction pattern of the reconstructed model, for the previews' diffraction fit.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace tycho::host {

// Mean over up to `max_positions` scan positions (evenly spread over the scan) of Σ_modes
// |DFT[P_m · O_patch]|², (N0, N1) in FFT natural order like the measured targets. The object is
// the product of its slices' transmissions, the patch's corner floor(position − N/2) (the cpu
// engine's), without its sub-pixel shift: a picture of the fit for the eye, not the engine's
// loss (tycho::dft2 on FFTW, unitary). object: (slices, H, W); probe: (modes, N0, N1); positions_px: (P, 2), probe centres in
// object pixels. Positions whose patch leaves the object are skipped; none left: all zeros.
std::vector<double> modelled_mean_pattern(const std::vector<std::complex<float>>& object, int64_t slices, int64_t h,
                                          int64_t w, const std::vector<std::complex<float>>& probe, int64_t modes,
                                          int64_t n0, int64_t n1, const double* positions_px, int64_t positions,
                                          int64_t max_positions = 48);

}  // namespace tycho::host
