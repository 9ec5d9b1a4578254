// The "tiled" benchmark data set: the MoS2 counts patterns repeated over a larger scan, written
// as an EMD 1.0 file. Its physics is wrong (the scan positions do not match the patterns); it
// exists only to time the engine on many positions.
#pragma once

#include <cstdint>
#include <string>

namespace tycho::bench {

// Writes `dst`: /datacube_root/datacube/data, uint16 (rx, ry, Qx, Qy), where pattern (i, j) is
// pattern (i % Rx, j % Ry) of the source's /datacube_root/datacube/data, with the MoS2
// calibrations (R 0.5 Å, Q 0.06 Å⁻¹, 80 keV, 25 mrad, C10 = −150 Å). Written to `dst`.part and
// renamed at the end, so an existing `dst` is always complete. Throws std::runtime_error.
void write_tiled_emd(const std::string& source, const std::string& dst, int64_t rx, int64_t ry);

}  // namespace tycho::bench
