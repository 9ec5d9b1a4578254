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
  std::vector<float> targets;    // (patterns, N0, N1), FFT natural order
  int64_t patterns = 0, n0 = 0, n1 = 0;  // patterns: those held, [first, first + patterns)
  int64_t first = 0, all_patterns = 0;   // all_patterns: the scan's Rx·Ry
  double total_intensity = 0;       // Σ over the patterns held of Σ_k D
  double mean_total_intensity = 0;  // mean over all patterns of Σ_k D (set by the caller when
                                    // the patterns held are a share)
};

// Opens `source` with the [data] table, reads and checks the patterns of the block
// `part` of `parts` (shard::of's blocks; 0 of 1: every pattern). A share's
// mean_total_intensity is its own mean; the caller combines the shares' totals.
dataset read_dataset(const component_ref& source, const tycho_config* data_table, int64_t part = 0,
                     int64_t parts = 1);

}  // namespace tycho::host
