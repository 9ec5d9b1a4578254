#include "emd_locate.hpp"

#include <tycho/sdk.hpp>

#include <vector>

#include <tycho/sdk/hdf5/h5_read.hpp>

namespace tycho::emd {
using namespace tycho::h5;  // the SDK's HDF5 helpers (tycho/sdk/hdf5)

namespace {

std::string parent_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// emdfile marks every group it writes with an `emd_group_type` attribute.
bool in_emd_group(hid_t file, const std::string& dataset_path) {
  return H5Aexists_by_name(file, parent_of(dataset_path).c_str(), "emd_group_type",
                           H5P_DEFAULT) > 0;
}

std::string join_paths(const std::vector<std::string>& paths) {
  std::string s;
  for (std::size_t i = 0; i < paths.size(); ++i) s += (i ? ", " : "") + paths[i];
  return s;
}

}  // namespace

std::string describe_4d_datasets(hid_t file) {
  std::vector<std::string> paths;
  for (const auto& d : list_datasets(file))
    if (d.shape.size() == 4) paths.push_back(d.path + " " + shape_text(d.shape));
  if (paths.empty()) return "the file holds no 4-D dataset";
  return "the 4-D datasets in the file are " + join_paths(paths);
}

std::string locate_dataset(hid_t file, const std::string& file_name,
                           const std::optional<std::string>& configured) {
  using sdk::fail;
  if (configured) {
    std::string path = configured->empty() || configured->front() != '/' ? "/" + *configured
                                                                          : *configured;
    h5_id obj = open_object(file, path);
    if (!obj)
      fail(TYCHO_ERR_NOT_FOUND, "'", file_name, ":", path,
           "' does not exist (the [data] dataset key names a 4-D array); ",
           describe_4d_datasets(file));
    if (!is_dataset(obj.get()))
      fail(TYCHO_ERR_BAD_DATA, "'", file_name, ":", path,
           "' is not a dataset, expected a 4-D array (Rx, Ry, Qx, Qy); ",
           describe_4d_datasets(file));
    return path;
  }

  // Candidates: datasets named "data" in EMD groups. A 4-D one wins; if there are only arrays
  // of another rank, the first is returned so that the shape check reports what it found.
  std::vector<std::string> four_d, other;
  for (const auto& d : list_datasets(file)) {
    if (base_name(d.path) != "data" || !in_emd_group(file, d.path)) continue;
    (d.shape.size() == 4 ? four_d : other).push_back(d.path);
  }
  if (four_d.size() > 1)
    sdk::log(TYCHO_LOG_INFO, "emd",
             sdk::cat("'", file_name, "' holds several 4-D EMD arrays (", join_paths(four_d),
                      "); reading ", four_d.front(), " (set [data] dataset to choose another)"));
  if (!four_d.empty()) return four_d.front();
  if (!other.empty()) return other.front();
  fail(TYCHO_ERR_NOT_FOUND, "'", file_name,
       "' holds no 4-D dataset named 'data' inside an EMD group (emdfile writes "
       "/<root>/<array>/data); ",
       describe_4d_datasets(file), "; set [data] dataset to the array's path");
}

}  // namespace tycho::emd
