// A source opened for reading one rank's block of patterns, chunk by chunk: read_dataset reads
// the whole block through it; the chunked preprocessing (chunked_preprocess.hpp) reads the
// block once per pass, never holding it.
#pragma once

#include <tycho/tycho_components.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tycho/host/dataset.hpp"
#include "tycho/host/registry.hpp"

namespace tycho::host {

class source_reader {
 public:
  // Opens `source` with the [data] table, reads its info and positions (checked as
  // read_dataset's) and sets the block `part` of `parts`; reads no pattern. Throws on errors.
  source_reader(const component_ref& source, const tycho_config* data_table, int64_t part, int64_t parts);
  ~source_reader();  // closes the source
  source_reader(const source_reader&) = delete;
  source_reader& operator=(const source_reader&) = delete;

  // The data's header: info, description, positions, the block (first, patterns); no patterns.
  dataset& header() { return d_; }
  // Whether the source delivers the data as uint8 or uint16 counts in their stored dtype
  // (tycho_dataset_info::reads_stored_dtype, ABI 1.3).
  bool reads_counts() const { return counts_; }
  // Patterns [first, first + count) of the block (numbers local to it) as uint16 counts, FFT
  // order, into `out` (count·N0·N1); only when reads_counts(). Not thread-safe.
  void read_counts(int64_t first, int64_t count, uint16_t* out);

  // The same as float32 (any source), refusing negative values (naming the pattern and pixel)
  // and raising `max_value` to the largest finite value.
  void read_float32(int64_t first, int64_t count, float* out, float& max_value);

 private:
  const tycho_source_vtable* vt_;
  std::unique_ptr<tycho_source, void (*)(tycho_source*)> src_;
  dataset d_;
  bool counts_ = false;
  std::vector<uint8_t> staging_;
  std::vector<uint16_t> shift_;
  std::vector<float> float_shift_;
};

}  // namespace tycho::host
