// Which array of an EMD file holds the 4D-STEM data: the one the config names, or the first
// 4-D dataset called "data" inside an EMD group (emdfile's layout: <root>/<array>/data).
#pragma once

#include <optional>
#include <string>

#include <tycho/sdk/hdf5/h5_handle.hpp>

namespace tycho::emd {

// The absolute HDF5 path of the data set to read. `configured` is the [data] `dataset` key.
// Throws TYCHO_ERR_NOT_FOUND when the configured path does not exist or no candidate is found
// (listing the 4-D datasets the file holds), TYCHO_ERR_BAD_DATA when the path is a group.
// `file_name` is for messages only.
std::string locate_dataset(hid_t file, const std::string& file_name,
                           const std::optional<std::string>& configured);

// "the 4-D datasets in the file are /a, /b" or "the file holds no 4-D dataset".
std::string describe_4d_datasets(hid_t file);

}  // namespace tycho::emd
