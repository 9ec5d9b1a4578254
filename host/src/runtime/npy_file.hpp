// An .npy file a config key names (the probe files of [reconstruct.probe]: `initial`,
// `vacuum_pattern`), opened for reading: its header parsed and checked against the file's size
// (tycho/sdk/npy.hpp), then its data read in order. Errors name the key and the file.
#pragma once

#include <tycho/sdk/npy.hpp>

#include <cstddef>
#include <fstream>
#include <string>

namespace tycho::host {

// Whether `path` starts with the .npy magic string (otherwise the readers try HDF5).
bool is_npy(const std::string& path);

class npy_file {
 public:
  // Opens `path` and reads its header; `key` ("[reconstruct.probe] initial") starts the errors.
  npy_file(const std::string& path, const std::string& key);
  const sdk::npy::header& header() const { return header_; }
  // "'<path>'", for messages.
  const std::string& where() const { return where_; }
  // The next `bytes` of the data; throws TYCHO_ERR_BAD_DATA naming the file when it ends first.
  void read(void* dst, std::size_t bytes);

 private:
  std::ifstream in_;
  std::string path_, key_, where_;
  sdk::npy::header header_;
};

}  // namespace tycho::host
