// The `hdf5` source: any HDF5 dataset of diffraction patterns, its axes in any order (the
// config's `axes` map), positions optionally from another dataset; calibrations and optics come
// from the config ([data] scan_step_A / detector_pixel_invA, [optics]), as for the npy source.
#include <tycho/sdk.hpp>
#include <tycho/sdk/scan_shape.hpp>
#include <tycho/sdk/source.hpp>

#include <tycho/sdk/hdf5/h5_read.hpp>
#include "source_common.hpp"
#include "source_state.hpp"

namespace tycho::cxi {

using sdk::cat;
using sdk::fail;

void open_hdf5(const tycho_config* cfg, source_data& s) {
  sdk::config_view config(cfg);
  const std::string given = config.require_string("path");
  s.component = "hdf5";
  s.file_name = sdk::resolve_path(config.base_dir(), given);
  std::string dataset = config.require_string("dataset");
  if (dataset.empty() || dataset.front() != '/') dataset = "/" + dataset;
  const std::optional<std::vector<std::string>> axes = string_list(config, "axes");
  const std::optional<std::string> positions = config.get_string("positions_dataset");
  const std::optional<std::string> unit = config.get_string("positions_unit");
  const bool centred = config.get_bool("centred").value_or(true);
  const std::string table = config.table_name();
  std::optional<double> to_A;
  if (unit) {
    to_A = length_unit_to_A(*unit);
    if (!to_A)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'positions_unit' in ", table, " = \"", *unit,
           "\": must be a length unit: \"A\" (Å), \"nm\", \"pm\", \"um\", \"mm\" or \"m\"");
    if (!positions)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'positions_unit' in ", table,
           " is given without 'positions_dataset', the dataset whose unit it gives");
  }
  if (positions && !unit)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'positions_dataset' in ", table,
         " needs 'positions_unit' (\"A\", \"nm\", \"pm\", \"um\", \"mm\" or \"m\"): the unit of its values");

  s.file = open_file(s.file_name, given, "hdf5");
  s.dataset_path = dataset;
  s.description = cat(s.file_name, ":", dataset);
  h5::h5_id obj = h5::open_object(s.file.get(), dataset);
  if (!obj)
    fail(TYCHO_ERR_NOT_FOUND, "'", s.description, "' does not exist ([data] dataset names the array of patterns)");
  const std::vector<int64_t> shape = h5::is_dataset(obj.get()) ? h5::dataset_shape(obj.get()) : std::vector<int64_t>{};
  using R = axis_role;
  std::vector<R> roles;
  std::string roles_from = cat("config key 'axes' in ", table);
  if (axes) {
    roles = parse_roles(*axes, roles_from);
  } else if (shape.size() == 3) {
    roles = {R::P, R::Qx, R::Qy};
    roles_from = "the default axes for a 3-D dataset";
  } else {
    roles = {R::Rx, R::Ry, R::Qx, R::Qy};
    roles_from = "the default axes";
  }
  open_patterns(s, roles, roles_from);
  init_info(s, centred);

  const bool listed = roles.size() == 3;
  const std::optional<sdk::scan_shape_t> stack_shape = sdk::config_scan_shape(config);
  if (stack_shape && (!listed || positions))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'scan_shape' in ", table, " is for a stack of frames (axes [P, Qx, Qy]) "
         "without positions; '", s.description, "' ", listed ? "has its positions listed ('positions_dataset')"
                                                              : cat("has its scan axes ", roles_text(roles)));
  if (stack_shape) {
    // A raster stored as a flat stack: the scan's shape from the config; reads stay by frame number.
    const int64_t frames = s.layout.scan[0];
    const sdk::scan_shape_t raster = sdk::resolve_scan_shape(config, frames, std::nullopt, "", s.description, "hdf5");
    s.info.scan_shape[0] = raster[0];
    s.info.scan_shape[1] = raster[1];
  } else if (listed && !positions) {
    fail(TYCHO_ERR_INVALID_ARGUMENT, "'", s.description, "' is a list of ", s.layout.scan[0], " patterns (axes ",
         roles_text(roles), "): give their positions with 'positions_dataset' and 'positions_unit' in ", table,
         ", or the scan's shape with 'scan_shape' = [Rx, Ry] for a raster stored as a stack");
  }
  if (positions) {
    std::string path = positions->empty() || positions->front() != '/' ? "/" + *positions : *positions;
    const std::vector<double> p = read_table(s, path, 2, table_order::from_shape, "",
                                             cat("probe positions (axis 0, axis 1) in ", *unit));
    s.positions_A.resize(p.size());
    for (std::size_t k = 0; k < p.size(); ++k) s.positions_A[k] = p[k] * *to_A;
  }
  sdk::log(TYCHO_LOG_INFO, "hdf5",
           cat("opened '", s.description, "': axes ", roles_text(roles), ", ", s.info.scan_shape[0], " x ",
               s.info.scan_shape[1], " patterns of ", s.layout.detector[0], " x ", s.layout.detector[1], " ",
               sdk::dtype_name(s.info.stored_dtype), positions ? cat(", positions from ", *positions) : std::string()));
}

}  // namespace tycho::cxi
