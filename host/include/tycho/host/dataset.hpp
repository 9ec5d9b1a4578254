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
  // (all_patterns, 2) probe positions in Å listed by the source (read_positions), for every
  // pattern whichever this rank holds; empty when the source knows only a raster.
  std::vector<double> positions_A;
};

// The source's read_positions for `info`'s scan: (P, 2) positions in Å, or empty when the
// source's vtable lacks the function or it answers TYCHO_ERR_UNSUPPORTED (a raster).
// `description` names the data in errors (a non-finite position is refused).
std::vector<double> read_source_positions(const tycho_source_vtable* vt, tycho_source* src,
                                          const tycho_dataset_info& info,
                                          const std::string& description);

// Opens `source` with the [data] table, reads and checks the patterns of the block
// `part` of `parts` (shard::of's blocks; 0 of 1: every pattern). A share's
// mean_total_intensity is its own mean; the caller combines the shares' totals.
dataset read_dataset(const component_ref& source, const tycho_config* data_table, int64_t part = 0,
                     int64_t parts = 1);

}  // namespace tycho::host
