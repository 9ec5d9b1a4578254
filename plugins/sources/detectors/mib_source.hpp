// The `mib` source: a Quantum Detectors Merlin .mib file (mib_format.hpp), its frames in file
// order as the scan's positions, the scan's shape from [data] scan_shape or the .hdr beside it.
#pragma once

#include <tycho/sdk.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "mib_format.hpp"
#include "raw_file.hpp"

namespace tycho::detectors {

class mib_source {
 public:
  explicit mib_source(const sdk::config_view& config);

  const tycho_dataset_info& info() const { return info_; }
  // Patterns as float32; the pixels of a quad's gap ([data] quad_gap_px) are NaN (masked).
  void read(int64_t first, int64_t count, float* dst);
  // uint8 / uint16 counts as stored, when no gap is inserted.
  void read_stored(int64_t first, int64_t count, void* dst);
  bool delivers_stored() const { return gap_ == 0; }

 private:
  template <class T>
  void read_as(int64_t first, int64_t count, T* dst, T gap_value);

  std::unique_ptr<raw_file> file_;
  mib::frame_header first_;
  mib::frame_geometry geometry_;
  int64_t stride_ = 0;  // bytes per frame, header included
  int64_t frames_ = 0;
  int64_t gap_ = 0;     // pixels inserted between a quad's chips, each way
  int64_t rows_ = 0, cols_ = 0;  // delivered pattern, gap included
  std::string description_;
  tycho_dataset_info info_{};
};

extern const tycho_setting k_mib_settings[];
extern const char* const k_mib_keys[];

}  // namespace tycho::detectors
