// What a detector source found in its files, for the line it logs at open: each calibration the
// runtime needs (scan step, detector pixel, energy, semiangle, defocus) either found, with where
// it came from, or named as missing, so a user knows which [data] / [optics] keys to give.
#pragma once

#include <tycho/tycho_components.h>

#include <string>
#include <vector>

namespace tycho::detectors {

class calibration_report {
 public:
  // A calibration found: "scan step 1.39 Å (test_00.h5: STEM Metadata/Pixel Size)".
  void found(const std::string& what) { found_.push_back(what); }
  // Something the file records that tycho does not use (exposure, counter depth), for the log.
  void note(const std::string& what) { notes_.push_back(what); }
  // "calibrations found: ...; not in the file: ... (give them in [data] / [optics]); also: ..."
  // The missing ones are the NaN fields of `info`.
  std::string text(const tycho_dataset_info& info) const;

 private:
  std::vector<std::string> found_, notes_;
};

}  // namespace tycho::detectors
