#include "calibration_report.hpp"

#include <cmath>

namespace tycho::detectors {

namespace {
std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s.empty() ? "none" : s;
}
}  // namespace

std::string calibration_report::text(const tycho_dataset_info& i) const {
  std::vector<std::string> missing;
  if (std::isnan(i.scan_step_A[0])) missing.emplace_back("scan step ([data] scan_step_A)");
  if (std::isnan(i.detector_pixel_invA[0])) missing.emplace_back("detector pixel ([data] detector_pixel_invA)");
  if (std::isnan(i.energy_eV)) missing.emplace_back("beam energy ([optics] energy_eV)");
  if (std::isnan(i.semiangle_mrad)) missing.emplace_back("semiangle ([optics] semiangle_mrad)");
  if (std::isnan(i.C10_A)) missing.emplace_back("defocus ([optics] C10_A)");
  std::string s = "calibrations found: " + joined(found_) + "; not in the file: " + joined(missing);
  if (!notes_.empty()) s += "; also recorded: " + joined(notes_);
  return s;
}

}  // namespace tycho::detectors
