// Reading the diffraction data through a source component into the engine's targets:
// finite check, shift from centred to FFT order, the mean total intensity.
#pragma once

#include <tycho/tycho_components.h>

#include <string>
#include <vector>

#include "tycho/host/registry.hpp"

namespace tycho::host {

struct dataset {
  tycho_dataset_info info{};
  std::string description;       // "file:path" from the source
  std::string source_name;
  std::vector<float> targets;    // (P, N0, N1), FFT natural order
  int64_t patterns = 0, n0 = 0, n1 = 0;
  double mean_total_intensity = 0;  // mean over patterns of Σ_k D
};

// Opens `source` with the [data] table, reads every pattern and checks it.
dataset read_dataset(const component_ref& source, const tycho_config* data_table);

}  // namespace tycho::host
