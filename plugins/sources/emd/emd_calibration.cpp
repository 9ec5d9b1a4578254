#include "emd_calibration.hpp"

#include <tycho/sdk.hpp>

#include <cmath>
#include <limits>
#include <optional>

#include <tycho/sdk/hdf5/h5_read.hpp>

namespace tycho::emd {
using namespace tycho::h5;  // the SDK's HDF5 helpers (tycho/sdk/hdf5)

namespace {

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

// The ancestor groups of `path`, nearest first, ending with "/".
std::vector<std::string> ancestors(const std::string& path) {
  std::vector<std::string> out;
  std::string p = path;
  while (p != "/") {
    auto slash = p.find_last_of('/');
    p = slash == 0 ? "/" : p.substr(0, slash);
    out.push_back(p);
  }
  return out;
}

// <ancestor>/metadatabundle/<name> for the nearest ancestor of the dataset that has it.
struct metadata_group {
  h5_id group;
  std::string path;
};
metadata_group find_metadata(hid_t file, const std::string& dataset_path,
                             const std::string& name) {
  for (const auto& a : ancestors(dataset_path)) {
    std::string p = (a == "/" ? "" : a) + "/metadatabundle/" + name;
    h5_id g = open_object(file, p);
    if (g && is_group(g.get())) return {std::move(g), p};
  }
  return {};
}

// Factor from a length unit to Å; nullopt for "pixels" and units tycho does not know.
std::optional<double> length_to_A(const std::string& u) {
  if (u == "A" || u == "Å" || u == "Angstrom" || u == "angstrom" || u == "Angstroms") return 1.0;
  if (u == "nm") return 10.0;
  if (u == "pm") return 0.01;
  if (u == "um" || u == "µm") return 1e4;
  if (u == "m") return 1e10;
  return std::nullopt;
}

// Factor from a reciprocal-length unit to Å⁻¹; nullopt for "pixels", "mrad" and the unknown.
std::optional<double> reciprocal_to_invA(const std::string& u) {
  if (u == "A^-1" || u == "1/A" || u == "A-1" || u == "Å^-1" || u == "1/Å" || u == "Å-1")
    return 1.0;
  if (u == "nm^-1" || u == "1/nm" || u == "nm-1") return 0.1;
  return std::nullopt;
}

using unit_fn = std::optional<double> (*)(const std::string&);

// A pixel size `value` in `units` converted by `to_tycho`; NaN with a warning when the unit
// is known to need more than a factor (mrad) or is not known at all. "pixels" and a missing
// unit are emdfile's "uncalibrated" and stay NaN silently.
double convert(double value, const std::optional<std::string>& units, unit_fn to_tycho,
               const std::string& where, const char* quantity) {
  if (!units || *units == "pixels" || *units == "pixel" || units->empty()) return k_nan;
  if (auto f = to_tycho(*units)) return value * *f;
  if (*units == "mrad")
    sdk::log(TYCHO_LOG_WARNING, "emd",
             sdk::cat("'", where, "' gives the ", quantity,
                      " in mrad, which needs the beam energy to become Å⁻¹; left unknown: "
                      "set it in the config"));
  else
    sdk::log(TYCHO_LOG_WARNING, "emd",
             sdk::cat("'", where, "' has unit '", *units, "', which tycho cannot convert; the ",
                      quantity, " is left unknown: set it in the config"));
  return k_nan;
}

// The step of the axis vector <array group>/dim<axis> (emdfile stores its first two values).
double step_from_dim(hid_t file, const std::string& file_name, const std::string& dataset_path,
                     int axis, unit_fn to_tycho, const char* quantity) {
  std::string group = dataset_path.substr(0, dataset_path.find_last_of('/'));
  std::string path = group + "/dim" + std::to_string(axis);
  // Only its first two values: the file declares its length (a crafted one, hundreds of millions).
  auto values = read_first_numbers(file, path, 2);
  if (!values || values->size() < 2) return k_nan;
  h5_id dim = open_object(file, path);
  return convert((*values)[1] - (*values)[0], read_string_attribute(dim.get(), "units"),
                 to_tycho, file_name + ":" + path, quantity);
}

// One pixel size from a calibration group (<prefix>_pixel_size, <prefix>_pixel_units), or
// from the dim vectors of `axes` when the group lacks it.
void pixel_size(hid_t file, const std::string& file_name, const std::string& dataset_path,
                const metadata_group& cal, const char* prefix, const int (&axes)[2],
                unit_fn to_tycho, const char* quantity, double (&out)[2]) {
  std::string size_key = std::string(prefix) + "_pixel_size";
  std::optional<double> size = cal.group ? read_number(cal.group.get(), size_key) : std::nullopt;
  if (size) {
    auto units = read_string(cal.group.get(), std::string(prefix) + "_pixel_units");
    double v = convert(*size, units, to_tycho, file_name + ":" + cal.path + "/" + size_key,
                       quantity);
    out[0] = out[1] = v;
    return;
  }
  for (int i = 0; i < 2; ++i)
    out[i] = step_from_dim(file, file_name, dataset_path, axes[i], to_tycho, quantity);
}

// A microscope value: the microscope group first, then the calibration group (older py4DSTEM
// files keep the beam energy and semiangle there).
double optics_value(const metadata_group& mic, const metadata_group& cal,
                    const std::string& key) {
  for (const metadata_group* g : {&mic, &cal})
    if (g->group)
      if (auto v = read_number(g->group.get(), key)) return *v;
  return k_nan;
}

}  // namespace

void read_calibrations(hid_t file, const std::string& file_name, const std::string& dataset_path,
                       tycho_dataset_info& info) {
  metadata_group cal = find_metadata(file, dataset_path, "calibration");
  metadata_group mic = find_metadata(file, dataset_path, "microscope");
  sdk::log(TYCHO_LOG_DEBUG, "emd",
           sdk::cat("'", file_name, "': calibration from ", cal.group ? cal.path : "(none)",
                    ", microscope from ", mic.group ? mic.path : "(none)"));

  pixel_size(file, file_name, dataset_path, cal, "R", {0, 1}, &length_to_A, "scan step",
             info.scan_step_A);
  pixel_size(file, file_name, dataset_path, cal, "Q", {2, 3}, &reciprocal_to_invA,
             "detector pixel", info.detector_pixel_invA);
  info.energy_eV = optics_value(mic, cal, "beam_energy_eV");
  info.semiangle_mrad = optics_value(mic, cal, "convergence_semiangle_mrad");
  info.C10_A = optics_value(mic, cal, "C10_A");
}

}  // namespace tycho::emd
