// Colour maps of the previews: viridis for real values, phase as hue for complex ones.
#pragma once

#include <cstdint>

namespace tycho::host {

struct rgb8 {
  uint8_t r = 0, g = 0, b = 0;
};

// Viridis (perceptually uniform, readable in grey and by colour-blind readers) at t in [0, 1];
// t outside is clamped, NaN maps to mid grey so that it stands out of the map.
rgb8 viridis(float t);

// A complex value as colour: hue = phase (0 rad red, 2π/3 green, −2π/3 blue), brightness =
// amplitude / peak, full saturation. Non-finite values are black.
rgb8 phase_hue(float amplitude, float phase_rad, float peak);

}  // namespace tycho::host
