// The `empad` source: an EMPAD (Electron Microscope Pixel Array Detector) acquisition, its .xml
// description and the .raw file it names: frames of 128 x 130 float32 (little-endian), the last
// two rows of each a footer of metadata, not pixels, so 128 x 128 patterns are delivered.
#pragma once

#include <tycho/sdk.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "raw_file.hpp"

namespace tycho::detectors {

class empad_source {
 public:
  explicit empad_source(const sdk::config_view& config);
  const tycho_dataset_info& info() const { return info_; }
  void read(int64_t first, int64_t count, float* dst);

 private:
  std::unique_ptr<raw_file> raw_;
  int64_t frames_ = 0;
  bool clip_negative_ = false;
  std::string description_;
  tycho_dataset_info info_{};
};

extern const tycho_setting k_empad_settings[];
extern const char* const k_empad_keys[];

}  // namespace tycho::detectors
