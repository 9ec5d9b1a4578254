// The `dm` source: a Gatan DigitalMicrograph .dm4 / .dm3 file's 4-D data set (scan x scan x
// detector x detector: a STEMx / K3 4D-STEM acquisition) or 3-D stack of frames, one of several
// images when the file holds more (thumbnails left out); calibrations from the image's
// Calibrations and the microscope's voltage.
#pragma once

#include <tycho/sdk.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "dm_format.hpp"
#include "raw_file.hpp"

namespace tycho::detectors {

class dm_source {
 public:
  explicit dm_source(const sdk::config_view& config);
  const tycho_dataset_info& info() const { return info_; }
  void read(int64_t first, int64_t count, float* dst);
  void read_stored(int64_t first, int64_t count, void* dst);

 private:
  template <class T>
  void read_as(int64_t first, int64_t count, T* dst);

  std::unique_ptr<raw_file> file_;
  bool little_ = true;
  uint64_t data_offset_ = 0;
  int64_t frames_ = 0, rows_ = 0, cols_ = 0;
  DLDataType element_{};
  std::string description_;
  tycho_dataset_info info_{};
};

extern const tycho_setting k_dm_settings[];
extern const char* const k_dm_keys[];

}  // namespace tycho::detectors
