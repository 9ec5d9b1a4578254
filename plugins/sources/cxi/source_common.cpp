#include "source_common.hpp"

#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include <tycho/sdk/hdf5/h5_read.hpp>

namespace tycho::cxi {

using sdk::cat;
using sdk::fail;

h5::h5_id open_file(const std::string& path, const std::string& given, const char* component) {
  return h5::open_data_file(path, given,
                            std::string(component) == "cxi" ? "the cxi source reads HDF5 files: CXI / NeXus NXcxi_ptycho"
                                                            : cat("the ", component, " source reads HDF5 files"));
}

void open_patterns(source_data& s, const std::vector<axis_role>& roles, const std::string& roles_from) {
  h5::h5_id obj = h5::open_object(s.file.get(), s.dataset_path);
  if (!obj) fail(TYCHO_ERR_NOT_FOUND, "'", s.description, "' does not exist");
  if (!h5::is_dataset(obj.get()))
    fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' is not a dataset, expected the array of diffraction patterns");
  s.dataset = h5::h5_id(H5Dopen2(s.file.get(), s.dataset_path.c_str(), H5P_DEFAULT));
  if (!s.dataset) fail(TYCHO_ERR_IO, "could not open '", s.description, "'");
  s.layout = make_layout(roles, h5::dataset_shape(s.dataset.get()), s.description, roles_from);
  h5::h5_id type(H5Dget_type(s.dataset.get()));
  auto dtype = type ? h5::dl_dtype(type.get()) : std::nullopt;
  if (!dtype)
    fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' has element type ", type ? h5::type_text(type.get()) : "unknown",
         ", expected integers or floats of 8 to 64 bits");
  s.info.stored_dtype = *dtype;
}

void init_info(source_data& s, bool centred) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  tycho_dataset_info& i = s.info;
  i.struct_size = sizeof(tycho_dataset_info);
  std::copy(std::begin(s.layout.scan), std::end(s.layout.scan), i.scan_shape);
  std::copy(std::begin(s.layout.detector), std::end(s.layout.detector), i.detector_shape);
  i.scan_step_A[0] = i.scan_step_A[1] = nan;
  i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = nan;
  i.energy_eV = i.semiangle_mrad = i.C10_A = nan;
  i.detector_distance_m = i.detector_pixel_m[0] = i.detector_pixel_m[1] = nan;
  i.radiation = TYCHO_RADIATION_UNKNOWN;
  i.patterns_centred = centred ? 1 : 0;
  i.description = s.description.c_str();
}

std::optional<double> length_unit_to_A(const std::string& u) {
  if (u == "m" || u == "metre" || u == "meter" || u == "metres" || u == "meters") return 1e10;
  if (u == "mm") return 1e7;
  if (u == "um" || u == "µm" || u == "μm" || u == "micron") return 1e4;
  if (u == "nm") return 10.0;
  if (u == "pm") return 0.01;
  if (u == "A" || u == "Å" || u == "Angstrom" || u == "angstrom" || u == "Angstroms") return 1.0;
  return std::nullopt;
}

std::vector<double> read_table(const source_data& s, const std::string& path, int64_t k, table_order order,
                               const std::string& order_key, const std::string& what) {
  const std::string where = cat(s.file_name, ":", path);
  const int64_t p = s.layout.scan[0] * s.layout.scan[1];
  h5::h5_id obj = h5::open_object(s.file.get(), path);
  if (!obj) fail(TYCHO_ERR_NOT_FOUND, "'", where, "' does not exist (expected the ", what, ")");
  if (!h5::is_dataset(obj.get()))
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' is not a dataset, expected the ", what);
  const std::vector<int64_t> shape = h5::dataset_shape(obj.get());
  const std::string expected = cat("(", p, ", ", k, ") or (", k, ", ", p, ")");
  const std::string pattern_count = cat(" for the ", p, " patterns of '", s.description, "'");
  if (shape.size() != 2)
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' has shape ", h5::shape_text(shape), ", expected the ", what, " as ",
         expected, pattern_count);
  const bool rows = shape[0] == p && shape[1] == k, columns = shape[0] == k && shape[1] == p;
  bool patterns_first = rows;
  switch (order) {
    case table_order::patterns_first:
      if (!rows)
        fail(TYCHO_ERR_BAD_DATA, "'", where, "' has shape ", h5::shape_text(shape), ", but ", order_key,
             " says (", p, ", ", k, ")", pattern_count);
      break;
    case table_order::components_first:
      if (!columns)
        fail(TYCHO_ERR_BAD_DATA, "'", where, "' has shape ", h5::shape_text(shape), ", but ", order_key,
             " says (", k, ", ", p, ")", pattern_count);
      patterns_first = false;
      break;
    case table_order::from_shape:
      if (!rows && !columns)
        fail(TYCHO_ERR_BAD_DATA, "'", where, "' has shape ", h5::shape_text(shape), ", expected the ", what,
             " as ", expected, pattern_count);
      if (rows && columns)
        fail(TYCHO_ERR_BAD_DATA, "'", where, "' has shape ", h5::shape_text(shape), ", which is ambiguous with ", p,
             " patterns: ", order_key.empty() ? std::string("it cannot say whether the patterns run along its first axis or its second")
                                               : cat("set ", order_key, " to say whether the patterns run along the first axis or the second"));
      break;
  }
  auto values = h5::read_numbers(s.file.get(), path);
  if (!values) {
    h5::h5_id type(H5Dget_type(obj.get()));
    fail(TYCHO_ERR_BAD_DATA, "'", where, "' holds ", type ? h5::type_text(type.get()) : "unknown",
         " values, expected numbers (the ", what, ")");
  }
  std::vector<double> table(std::size_t(p * k));
  for (int64_t j = 0; j < p; ++j)
    for (int64_t c = 0; c < k; ++c) {
      const double v = (*values)[std::size_t(patterns_first ? j * k + c : c * p + j)];
      if (!std::isfinite(v))
        fail(TYCHO_ERR_BAD_DATA, "'", where, "': the value for pattern ", j, ", component ", c, " is ", v,
             ", expected finite ", what);
      table[std::size_t(j * k + c)] = v;
    }
  return table;
}

std::optional<std::vector<std::string>> string_list(const sdk::config_view& cfg, const char* key) {
  int probe = 0;
  if (sdk::host()->config_get_bool(cfg.raw(), key, &probe) == TYCHO_ERR_NOT_FOUND) return std::nullopt;
  std::vector<std::string> out;
  for (int64_t i = 0;; ++i) {
    const std::string element = cat(key, "[", i, "]");
    const char* v = nullptr;
    const tycho_status st = sdk::host()->config_get_string(cfg.raw(), element.c_str(), &v);
    if (st == TYCHO_ERR_NOT_FOUND) break;
    if (st != TYCHO_OK || v == nullptr)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in ", cfg.table_name(),
           " must be an array of strings; element ", i, " is not a string");
    out.emplace_back(v);
  }
  if (out.empty())
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key '", key, "' in ", cfg.table_name(),
         " must be a non-empty array of strings");
  return out;
}

}  // namespace tycho::cxi
