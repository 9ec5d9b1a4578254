// Small typed reads from an HDF5 file: objects by path, shapes, element types, scalar numbers
// and strings stored either as attributes or as scalar datasets (EMD writers use both).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "h5_handle.hpp"

namespace tycho::h5 {

// The object at `path` (relative to `loc`), or an invalid id when it does not exist.
// Opens a source's data file read-only. `path` is the resolved path, `given` the one the config
// wrote (a relative one gets a hint about where it resolved), `reads` what the source reads, for
// the message when the file is not HDF5 (e.g. "the emd source reads EMD 1.0 / py4DSTEM .h5 / .emd
// files"). Errors (tycho::sdk::error) name the file.
h5_id open_data_file(const std::string& path, const std::string& given, const std::string& reads);

h5_id open_object(hid_t loc, const std::string& path);
bool is_dataset(hid_t obj);
bool is_group(hid_t obj);

// The dims of a dataset's simple dataspace (empty for a scalar).
std::vector<int64_t> dataset_shape(hid_t dataset);
// "(a, b, c)"
std::string shape_text(const std::vector<int64_t>& shape);

// The DLPack type of an HDF5 integer (8–64 bits) or float (16–64 bits) type; nullopt otherwise.
std::optional<DLDataType> dl_dtype(hid_t type);
// A word for an HDF5 type in messages: "uint16", "float32", "string", "compound", ...
std::string type_text(hid_t type);

// A dataset found in a file: its absolute path and shape.
struct dataset_entry {
  std::string path;
  std::vector<int64_t> shape;
};
// Every dataset reachable through hard links from the root, sorted by path.
std::vector<dataset_entry> list_datasets(hid_t file);

// `name` read as one number from an attribute of `group` or, failing that, from a scalar (or
// one-element) dataset inside it. nullopt when absent or not a number.
std::optional<double> read_number(hid_t group, const std::string& name);
// The same for a string (variable- or fixed-length).
std::optional<std::string> read_string(hid_t group, const std::string& name);
// The attribute `name` of `obj` as a string; nullopt when absent or not a string.
std::optional<std::string> read_string_attribute(hid_t obj, const std::string& name);
// A numeric dataset of any shape as doubles, in C order; nullopt when absent or not numeric.
std::optional<std::vector<double>> read_numbers(hid_t loc, const std::string& path);
// The first min(count, n) values of the 1-D numeric dataset `path` (an axis vector of which only
// the start is needed), as double; nullopt when it is absent, not numeric or not 1-D. Reads only
// those values, whatever length the file declares.
std::optional<std::vector<double>> read_first_numbers(hid_t loc, const std::string& path, int64_t count);

}  // namespace tycho::h5
