// Calibrations of an EMD 1.0 data set, converted to tycho's units (Å, Å⁻¹, eV, mrad).
#pragma once

#include <tycho/tycho_components.h>

#include <string>

#include <tycho/sdk/hdf5/h5_handle.hpp>

namespace tycho::emd {

// Fills scan_step_A, detector_pixel_invA, energy_eV, semiangle_mrad and C10_A of `info`
// (NaN where the file does not say, or says in a unit that cannot be converted).
// Looks in <group>/metadatabundle/{calibration,microscope} for the nearest ancestor group of
// the dataset that has them (emdfile puts them under the root group), values stored either as
// attributes or as scalar datasets; falls back to the dim0..dim3 vectors beside the array for
// the pixel sizes. `file_name` is for messages only.
void read_calibrations(hid_t file, const std::string& file_name, const std::string& dataset_path,
                       tycho_dataset_info& info);

}  // namespace tycho::emd
