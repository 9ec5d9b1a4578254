// Reads a 2-D phase map (radians) from a NumPy .npy file: versions 1.0, 2.0 and 3.0, descr
// '<f4' or '<f8' (float32 / float64, little-endian), C or Fortran order. Errors name the config
// key `object_phase_npy` and the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tycho::simulate {

struct phase_map {
  int64_t shape[2] = {0, 0};  // (rows = axis 0, cols = axis 1)
  std::vector<double> phase;  // C order
};

phase_map read_npy_phase(const std::string& path);

}  // namespace tycho::simulate
