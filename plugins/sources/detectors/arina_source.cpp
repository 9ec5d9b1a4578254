#include "arina_source.hpp"

#include <tycho/sdk/checked.hpp>
#include <tycho/sdk/optics.hpp>
#include <tycho/sdk/scan_shape.hpp>
#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#include <tycho/sdk/hdf5/h5_guard.hpp>
#include <tycho/sdk/hdf5/h5_read.hpp>

#include "calibration_report.hpp"
#include "chunk_codecs.hpp"

namespace tycho::detectors {

using sdk::cat;
using sdk::fail;
namespace fs = std::filesystem;

const char* const k_arina_keys[] = {"path", "metadata", "scan_shape", "apply_mask", "apply_flatfield", "centred", nullptr};
const tycho_setting k_arina_settings[] = {
    sdk::setting("path", TYCHO_SETTING_STRING, nullptr,
                 "the NeXus master file (<name>_master.h5), relative to the config file's folder; its data files "
                 "are found through its links; required"),
    sdk::setting("metadata", TYCHO_SETTING_STRING, nullptr,
                 "the scan's metadata file (group \"STEM Metadata\"); default: <name>.h5 beside the master, when present"),
    sdk::scan_shape_setting(),
    sdk::setting("apply_mask", TYCHO_SETTING_BOOL, "true",
                 "mask the pixels the master's pixel_mask marks (non-zero): handed to the host as the detector's mask, left out of the loss"),
    sdk::setting("apply_flatfield", TYCHO_SETTING_BOOL, "true",
                 "multiply the counts by the master's flatfield factors unless the detector applied them "
                 "(flatfield_correction_applied = 1)"),
    sdk::setting("centred", TYCHO_SETTING_BOOL, "true", "zero frequency at index N/2 of each frame"),
    sdk::end_of_settings()};

namespace {

const char* const k_detector = "/entry/instrument/detector";
constexpr int64_t k_most_chunk_frames = 65536;

struct link_entry {
  std::string name;
  bool external = false;
  std::string target_file, target_path;
};

herr_t collect_link(hid_t group, const char* name, const H5L_info_t* info, void* op) {
  auto& out = *static_cast<std::vector<link_entry>*>(op);
  if (std::strncmp(name, "data", 4) != 0) return 0;
  link_entry e;
  e.name = name;
  if (info->type == H5L_TYPE_EXTERNAL && info->u.val_size > 0 && info->u.val_size <= 65536) {
    std::vector<char> buf(info->u.val_size);
    const char* file = nullptr;
    const char* path = nullptr;
    if (H5Lget_val(group, name, buf.data(), buf.size(), H5P_DEFAULT) >= 0 &&
        H5Lunpack_elink_val(buf.data(), buf.size(), nullptr, &file, &path) >= 0 && file && path) {
      e.external = true;
      e.target_file = std::string(file, strnlen(file, buf.size()));
      e.target_path = std::string(path, strnlen(path, buf.size()));
    }
  }
  out.push_back(std::move(e));
  return out.size() > 100000 ? 1 : 0;  // a master of 100000 data links is not one
}

std::optional<double> number_at(hid_t file, const std::string& path) {
  h5::h5_id obj = h5::open_object(file, path);
  if (!obj || !h5::is_dataset(obj.get())) return std::nullopt;
  const std::size_t slash = path.rfind('/');
  h5::h5_id parent = h5::open_object(file, path.substr(0, slash == 0 ? 1 : slash));
  if (!parent) return std::nullopt;
  return h5::read_number(parent.get(), path.substr(slash + 1));
}

// A (rows, cols) array of the master, the first of `paths` that exists; nullopt when none does.
std::optional<std::vector<double>> image_at(const arina_data& d, const std::vector<std::string>& paths, bool integers,
                                            std::string& found_at, const char* what) {
  for (const std::string& path : paths) {
    h5::h5_id obj = h5::open_object(d.master_file.get(), path);
    if (!obj) continue;
    const std::string where = cat(d.master, ":", path);
    const std::vector<int64_t> shape = h5::is_dataset(obj.get()) ? h5::dataset_shape(obj.get()) : std::vector<int64_t>{};
    h5::h5_id type = h5::is_dataset(obj.get()) ? h5::h5_id(H5Dget_type(obj.get())) : h5::h5_id();
    const H5T_class_t cls = type ? H5Tget_class(type.get()) : H5T_NO_CLASS;
    const bool type_ok = integers ? cls == H5T_INTEGER : (cls == H5T_FLOAT || cls == H5T_INTEGER);
    if (shape != std::vector<int64_t>{d.rows, d.cols} || !type_ok)
      fail(TYCHO_ERR_BAD_DATA, "'", where, "' is ",
           h5::is_dataset(obj.get()) ? cat("a dataset of shape ", h5::shape_text(shape), " and type ",
                                           type ? h5::type_text(type.get()) : "unknown")
                                     : std::string("not a dataset"),
           ", expected the ", what, ": ", integers ? "integers" : "numbers", " of the frames' shape (", d.rows, ", ",
           d.cols, ")");
    auto values = h5::read_numbers(d.master_file.get(), path);
    if (!values) fail(TYCHO_ERR_BAD_DATA, "'", where, "' could not be read as the ", what);
    found_at = path;
    return values;
  }
  return std::nullopt;
}

// The data datasets of /entry/data, in the links' order, and how each is read.
void open_parts(arina_data& d) {
  const std::string group_path = "/entry/data";
  h5::h5_id group = h5::open_object(d.master_file.get(), group_path);
  if (!group || !h5::is_group(group.get()))
    fail(TYCHO_ERR_NOT_FOUND, "'", d.master, ":", group_path,
         "' is not a group: expected the NeXus master's data links (data_000001, ...)");
  std::vector<link_entry> links;
  H5Literate(group.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, &collect_link, &links);
  if (links.empty())
    fail(TYCHO_ERR_NOT_FOUND, "'", d.master, ":", group_path, "' holds no link named data_*: no frames");
  const fs::path master_dir = fs::path(d.master).parent_path();
  for (const link_entry& l : links) {
    arina_part p;
    p.name = l.name;
    const std::string self = cat(d.master, ":", group_path, "/", l.name);
    p.where = l.external ? cat(self, " (-> ", l.target_file, ":", l.target_path, ")") : self;
    p.dataset = h5::h5_id(H5Dopen2(group.get(), l.name.c_str(), H5P_DEFAULT));
    if (!p.dataset) {
      if (l.external) {
        const fs::path target = fs::path(l.target_file).is_absolute() ? fs::path(l.target_file) : master_dir / l.target_file;
        std::error_code ec;
        fail(fs::exists(target, ec) ? TYCHO_ERR_BAD_DATA : TYCHO_ERR_NOT_FOUND, "'", self,
             "' is an external link to '", l.target_file, ":", l.target_path, "', ",
             fs::exists(target, ec) ? cat("but '", target.string(), "' holds no readable dataset there")
                                    : cat("but '", target.string(), "' does not exist (the data file must lie beside the master)"));
      }
      fail(TYCHO_ERR_BAD_DATA, "'", self, "' is not a dataset, expected frames (N, rows, columns)");
    }
    const std::vector<int64_t> shape = h5::dataset_shape(p.dataset.get());
    if (shape.size() != 3 || shape[0] < 1 || shape[1] < 1 || shape[2] < 1)
      fail(TYCHO_ERR_BAD_DATA, "'", p.where, "' has shape ", h5::shape_text(shape),
           ", expected frames (N, rows, columns) with N, rows, columns >= 1");
    h5::h5_id type(H5Dget_type(p.dataset.get()));
    const auto dtype = type ? h5::dl_dtype(type.get()) : std::nullopt;
    if (!dtype || dtype->code == kDLFloat || dtype->bits > 32)
      fail(TYCHO_ERR_BAD_DATA, "'", p.where, "' holds ", type ? h5::type_text(type.get()) : "unknown",
           " values, expected detector counts: integers of 8, 16 or 32 bits");
    if (d.parts.empty()) {
      d.rows = shape[1];
      d.cols = shape[2];
      d.element = *dtype;
      d.big_endian = H5Tget_order(type.get()) == H5T_ORDER_BE;
    } else if (shape[1] != d.rows || shape[2] != d.cols || !sdk::same_dtype(*dtype, d.element)) {
      fail(TYCHO_ERR_BAD_DATA, "'", p.where, "' holds ", h5::shape_text(shape), " ", sdk::dtype_name(*dtype),
           " frames, but '", d.parts.front().where, "' holds (", d.rows, ", ", d.cols, ") ", sdk::dtype_name(d.element),
           ": every data file of a scan must hold frames of one shape and type");
    } else if ((H5Tget_order(type.get()) == H5T_ORDER_BE) != d.big_endian) {
      fail(TYCHO_ERR_BAD_DATA, "'", p.where, "' stores its counts in another byte order than '", d.parts.front().where, "'");
    }
    // A chunk is decoded whole (by libhdf5 too): one beyond 1 GiB is refused before anything
    // that size is allocated.
    {
      h5::h5_id plist(H5Dget_create_plist(p.dataset.get()));
      hsize_t chunk[3] = {0, 0, 0};
      if (plist && H5Pget_layout(plist.get()) == H5D_CHUNKED && H5Pget_chunk(plist.get(), 3, chunk) == 3) {
        const int64_t dims[3] = {int64_t(std::min<hsize_t>(chunk[0], hsize_t(INT64_MAX))),
                                 int64_t(std::min<hsize_t>(chunk[1], hsize_t(INT64_MAX))),
                                 int64_t(std::min<hsize_t>(chunk[2], hsize_t(INT64_MAX)))};
        const auto bytes = sdk::checked_product(dims, 3);
        if (!bytes || *bytes > (int64_t(1) << 30) / (dtype->bits / 8))
          fail(TYCHO_ERR_BAD_DATA, "'", p.where, "' is stored in chunks of (", chunk[0], ", ", chunk[1], ", ", chunk[2],
               ") elements, more than 1 GiB each: the file is corrupt or crafted");
      }
    }
    p.first = d.frames;
    p.frames = shape[0];
    const auto total = sdk::checked_add(d.frames, shape[0]);
    if (!total) fail(TYCHO_ERR_BAD_DATA, "'", p.where, "': the frame count overflows");
    d.frames = *total;

    // Direct decoding: chunks of whole frames, unfiltered or with one filter we decode.
    // libhdf5 trusts an unfiltered chunk's stored size (a crafted one smaller than the chunk made
    // its H5Dread copy past the buffer: the arina fuzzer's finding), so those are read raw and
    // checked here too.
    h5::h5_id dcpl(H5Dget_create_plist(p.dataset.get()));
    const H5D_layout_t layout = dcpl ? H5Pget_layout(dcpl.get()) : H5D_LAYOUT_ERROR;
    if (layout == H5D_COMPACT)
      fail(TYCHO_ERR_BAD_DATA, "'", p.where, "' stores its frames compact (inside its object header), expected chunked "
           "or contiguous storage as detectors write it");
    if (layout == H5D_CONTIGUOUS) {
      // Allocated storage must hold every frame (0: never written, read as fill values: refused).
      const auto frames_bytes = sdk::checked_mul(shape[0], shape[1] * shape[2] * int64_t(dtype->bits / 8));
      const hsize_t stored = H5Dget_storage_size(p.dataset.get());
      if (!frames_bytes || stored != hsize_t(*frames_bytes))
        fail(TYCHO_ERR_BAD_DATA, "'", p.where, "' stores ", stored, " bytes contiguously, expected ",
             frames_bytes ? *frames_bytes : -1, " for its ", h5::shape_text(shape), " ", sdk::dtype_name(*dtype), " frames");
    }
    if (layout == H5D_CHUNKED && H5Pget_nfilters(dcpl.get()) == 0) {
      hsize_t chunk[3] = {0, 0, 0};
      if (H5Pget_chunk(dcpl.get(), 3, chunk) != 3 || int64_t(chunk[1]) != d.rows || int64_t(chunk[2]) != d.cols ||
          chunk[0] < 1 || int64_t(chunk[0]) > k_most_chunk_frames)
        fail(TYCHO_ERR_BAD_DATA, "'", p.where, "' is stored unfiltered in chunks that are not whole frames (",
             h5::shape_text(std::vector<int64_t>(chunk, chunk + 3)), "), expected (k, ", d.rows, ", ", d.cols, ")");
      p.chunk_frames = int64_t(chunk[0]);
      p.how = arina_part::codec::raw;
    }
    if (layout == H5D_CHUNKED && H5Pget_nfilters(dcpl.get()) == 1) {
      hsize_t chunk[3] = {0, 0, 0};
      unsigned flags = 0, cd[8] = {0};
      std::size_t n_cd = 8;
      char name[64];
      const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), 0, &flags, &n_cd, cd, sizeof name, name, nullptr);
      if (H5Pget_chunk(dcpl.get(), 3, chunk) == 3 && int64_t(chunk[1]) == d.rows && int64_t(chunk[2]) == d.cols &&
          chunk[0] >= 1 && int64_t(chunk[0]) <= k_most_chunk_frames) {
        p.chunk_frames = int64_t(chunk[0]);
        // Bitshuffle's parameters as stored: (major, minor, element size, block size, compression:
        // 0 none, 2 LZ4); others (zstd, an odd count) go to libhdf5's pipeline.
        if (id == k_filter_bitshuffle && n_cd >= 5 && n_cd <= 8 && (cd[2] == 0 || cd[2] == dtype->bits / 8u)) {
          if (cd[4] == 0) p.how = arina_part::codec::bitshuffle;
          else if (cd[4] == 2) p.how = arina_part::codec::bitshuffle_lz4;
        } else if (id == k_filter_lz4) {
          p.how = arina_part::codec::lz4;
        }
      }
    }
    if (p.how != arina_part::codec::hdf5) {
      // The file that holds the chunks (the data file an external link names), for reads by
      // offset, and its user block (chunk addresses count from its end).
      h5::h5_id file(H5Iget_file_id(p.dataset.get()));
      const ssize_t n = file ? H5Fget_name(file.get(), nullptr, 0) : -1;
      std::string name(n > 0 ? std::size_t(n) : 0, '\0');
      if (n <= 0 || H5Fget_name(file.get(), name.data(), std::size_t(n) + 1) < 0)
        fail(TYCHO_ERR_IO, "'", p.where, "': the file that holds it cannot be named");
      h5::h5_id fcpl(H5Fget_create_plist(file.get()));
      hsize_t user_block = 0;
      if (fcpl) H5Pget_userblock(fcpl.get(), &user_block);
      p.base_address = uint64_t(user_block);
      p.file = std::make_shared<raw_file>(name, name, "an ARINA data file");
    }
    d.parts.push_back(std::move(p));
  }
}

}  // namespace

void open_arina(const sdk::config_view& config, arina_data& d) {
  const std::string given = config.require_string("path");
  d.master = sdk::resolve_path(config.base_dir(), given);
  const bool centred = config.get_bool("centred").value_or(true);
  const bool apply_mask = config.get_bool("apply_mask").value_or(true);
  const bool apply_flatfield = config.get_bool("apply_flatfield").value_or(true);
  const std::optional<std::string> metadata_key = config.get_string("metadata");
  d.master_file = h5::open_data_file(d.master, given,
                                     "the arina source reads Dectris ARINA / EIGER NeXus master files, <name>_master.h5");
  open_parts(d);
  d.description = cat(d.master, ":/entry/data (", d.parts.size() == 1 ? d.parts.front().name
                                                                      : cat(d.parts.front().name, " to ", d.parts.back().name), ")");
  calibration_report report;
  const hid_t m = d.master_file.get();
  const std::string det = k_detector;

  // The pixel mask and the flat field.
  std::string mask_at, flat_at;
  const auto mask = image_at(d, {det + "/detectorSpecific/pixel_mask", det + "/pixel_mask"}, true, mask_at, "pixel mask");
  const auto flat = image_at(d, {det + "/detectorSpecific/flatfield", det + "/flatfield"}, false, flat_at, "flat field");
  const bool flat_applied = number_at(m, det + "/flatfield_correction_applied").value_or(0) != 0;
  const std::size_t pixels = std::size_t(d.rows * d.cols);
  std::vector<float> gain(pixels, 1.0f);
  std::vector<uint8_t> masked_pixels(pixels, 0);
  bool scaled = false;
  int64_t masked = 0, bad_flat = 0;
  if (flat && apply_flatfield && !flat_applied) {
    for (std::size_t k = 0; k < pixels; ++k) {
      const double f = (*flat)[k];
      if (!std::isfinite(f) || f <= 0) {
        masked_pixels[k] = 1;
        ++bad_flat;
      } else {
        gain[k] = float(f);
        scaled |= gain[k] != 1.0f;
      }
    }
    report.note(scaled ? cat("flat field applied (", flat_at, ")")
                       : cat("flat field ", flat_at, " (all 1)"));
    if (bad_flat > 0) report.note(cat(bad_flat, " pixels masked for a flat-field factor that is not finite and > 0"));
  } else if (flat) {
    report.note(flat_applied ? cat("flat field already applied by the detector (", flat_at, ")")
                             : cat("flat field not applied ([data] apply_flatfield = false)"));
  }
  if (mask && apply_mask) {
    for (std::size_t k = 0; k < pixels; ++k)
      if ((*mask)[k] != 0) {
        masked_pixels[k] = 1;
        ++masked;
      }
    report.note(cat("pixel mask ", mask_at, ": ", masked, " of ", pixels, " pixels masked"));
  } else if (mask) {
    report.note("pixel mask not applied ([data] apply_mask = false)");
  }
  if (scaled) d.gain = std::move(gain);
  // The masked pixels go to the host as the detector's mask (read_detector_mask), which leaves
  // them out of the loss; their values are delivered as 0.
  if (masked > 0 || bad_flat > 0) d.mask = std::move(masked_pixels);

  // The companion scan metadata.
  std::string metadata_path;
  if (metadata_key) {
    metadata_path = sdk::resolve_path(config.base_dir(), *metadata_key);
  } else if (d.master.size() > 10 && d.master.substr(d.master.size() - 10) == "_master.h5") {
    const std::string candidate = d.master.substr(0, d.master.size() - 10) + ".h5";
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) metadata_path = candidate;
  }
  std::optional<double> num_x, num_y, pixel_nm, high_tension_V, camera_length_m, rotation_deg;
  if (!metadata_path.empty()) {
    h5::h5_id meta = h5::open_data_file(metadata_path, metadata_key.value_or(metadata_path),
                                        "the scan's metadata file written beside an ARINA master");
    h5::h5_id stem = h5::open_object(meta.get(), "STEM Metadata");
    if (!stem || !h5::is_group(stem.get())) {
      if (metadata_key)
        fail(TYCHO_ERR_NOT_FOUND, "'", metadata_path, "' has no group \"STEM Metadata\" ([data] metadata names it as the "
             "scan's metadata file)");
      report.note(cat("'", metadata_path, "' has no \"STEM Metadata\": not read"));
    } else {
      num_x = h5::read_number(stem.get(), "NumPixelsX");
      num_y = h5::read_number(stem.get(), "NumPixelsY");
      pixel_nm = h5::read_number(stem.get(), "Pixel Size");
      high_tension_V = h5::read_number(stem.get(), "High Tension");
      camera_length_m = h5::read_number(stem.get(), "Camera Length");
      rotation_deg = h5::read_number(stem.get(), "Rotation");
    }
  }
  const std::string meta_name = fs::path(metadata_path).filename().string();

  // The scan's shape.
  std::optional<sdk::scan_shape_t> recorded;
  if (num_x && num_y && *num_x >= 1 && *num_y >= 1 && *num_x < 1e12 && *num_y < 1e12 && *num_x == std::floor(*num_x) &&
      *num_y == std::floor(*num_y))
    recorded = sdk::scan_shape_t{int64_t(*num_y), int64_t(*num_x)};
  const sdk::scan_shape_t scan = sdk::resolve_scan_shape(config, d.frames, recorded,
                                                         cat(meta_name, "'s NumPixelsY x NumPixelsX"), d.description, "arina");

  tycho_dataset_info& i = d.info;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  i.struct_size = sizeof(tycho_dataset_info);
  i.scan_shape[0] = scan[0];
  i.scan_shape[1] = scan[1];
  i.detector_shape[0] = d.rows;
  i.detector_shape[1] = d.cols;
  sdk::check_data_shape(i.scan_shape, i.detector_shape, "'" + d.description + "'");
  i.stored_dtype = d.element;
  i.scan_step_A[0] = i.scan_step_A[1] = nan;
  i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = nan;
  i.energy_eV = i.semiangle_mrad = i.C10_A = nan;
  i.patterns_centred = centred ? 1 : 0;
  i.description = d.description.c_str();

  // Calibrations.
  const auto positive = [](const std::optional<double>& v) { return v && std::isfinite(*v) && *v > 0; };
  if (positive(pixel_nm)) {
    i.scan_step_A[0] = i.scan_step_A[1] = *pixel_nm * 10.0;
    report.found(cat("scan step ", i.scan_step_A[0], " Å (", meta_name, ": STEM Metadata/Pixel Size, nm)"));
  }
  const auto photon_eV = number_at(m, det + "/detectorSpecific/photon_energy");
  if (positive(high_tension_V)) {
    i.energy_eV = *high_tension_V;
    report.found(cat("energy ", i.energy_eV, " eV (", meta_name, ": STEM Metadata/High Tension, V)"));
  } else if (positive(photon_eV)) {
    i.energy_eV = *photon_eV;
    report.found(cat("energy ", i.energy_eV, " eV (master: detectorSpecific/photon_energy)"));
  }
  const auto x_px = number_at(m, det + "/x_pixel_size"), y_px = number_at(m, det + "/y_pixel_size");
  double distance_m = nan;  // the camera length, else the detector distance
  std::string distance_from = cat(meta_name, ": STEM Metadata/Camera Length");
  if (positive(camera_length_m)) {
    distance_m = *camera_length_m;
  } else if (const auto dd = number_at(m, det + "/detector_distance"); positive(dd)) {
    distance_m = *dd;
    distance_from = "master: detector_distance";
  }
  if (positive(x_px) && positive(y_px) && std::isfinite(distance_m) && std::isfinite(i.energy_eV)) {
    // Small-angle far field: a pixel p at distance L subtends p / L rad; k = θ / λ.
    const double lambda_m = sdk::wavelength_A(i.energy_eV) * 1e-10;
    i.detector_pixel_invA[0] = *y_px / (distance_m * lambda_m) * 1e-10;
    i.detector_pixel_invA[1] = *x_px / (distance_m * lambda_m) * 1e-10;
    report.found(cat("detector pixel ", i.detector_pixel_invA[0], " Å⁻¹ (pixel ", *x_px * 1e6, " µm at ", distance_m,
                     " m, ", distance_from, ", and the energy)"));
  } else if (positive(x_px)) {
    report.note(cat("pixel size ", *x_px * 1e6, " µm (no camera length: the detector pixel in Å⁻¹ is not known)"));
  }
  if (rotation_deg && std::isfinite(*rotation_deg))
    report.note(cat("scan rotation ", *rotation_deg, "° (not applied: [preprocess] scan_rotation_deg)"));
  if (const auto sat = number_at(m, det + "/saturation_value"); positive(sat))
    report.note(cat("saturation value ", *sat, " ([preprocess] saturation_value = ", *sat, " masks saturated pixels)"));
  std::string codecs;
  for (const auto& p : d.parts) {
    const char* c = p.how == arina_part::codec::bitshuffle_lz4 ? "bitshuffle/LZ4"
                    : p.how == arina_part::codec::bitshuffle ? "bitshuffle"
                    : p.how == arina_part::codec::lz4        ? "LZ4"
                    : p.how == arina_part::codec::raw        ? "unfiltered chunks"
                                                             : "HDF5 pipeline";
    if (codecs.find(c) == std::string::npos) codecs += cat(codecs.empty() ? "" : ", ", c);
  }
  d.report = cat(d.parts.size(), " data file", d.parts.size() > 1 ? "s" : "", " (", codecs, "): ", scan[0], " x ",
                 scan[1], " frames of ", d.rows, " x ", d.cols, " ", sdk::dtype_name(d.element), "; ", report.text(i));
}

arina_source::arina_source(const sdk::config_view& config) : arina_source(config, true) {}

arina_source::arina_source(const sdk::config_view& config, bool guarded) {
  // The same open in a guard process first: a file that crashes libhdf5 is refused, not fatal.
  // Frames that only libhdf5's pipeline reads (other filters) are read there too, the first and
  // the last of each data set: a crafted layout crashes the child, not this process.
  if (guarded)
    h5::guard_metadata_walk(config.get_string("path").value_or("(no path)"), [&] {
      arina_source child(config, false);
      std::vector<float> frame(std::size_t(child.d_.rows * child.d_.cols));
      for (const arina_part& p : child.d_.parts)
        if (p.how == arina_part::codec::hdf5) {
          child.read_frames(p.first, 1, frame.data());
          child.read_frames(p.first + p.frames - 1, 1, frame.data());
        }
    });
  open_arina(config, d_);
  sdk::log(TYCHO_LOG_INFO, "arina", cat("opened '", d_.master, "': ", d_.report));
}

const unsigned char* arina_source::frame_bytes(const arina_part& p, int64_t frame) {
  const std::size_t element = d_.element.bits / 8;
  const std::size_t frame_bytes = std::size_t(d_.rows * d_.cols) * element;
  const int64_t local = frame - p.first;
  const int64_t chunk_first = local / p.chunk_frames * p.chunk_frames;
  if (cached_part_ != &p || cached_first_ != chunk_first) {
    const std::size_t chunk_bytes = frame_bytes * std::size_t(p.chunk_frames);
    const std::string where = cat("'", p.where, "', the chunk of frames ", p.first + chunk_first, " to ",
                                  p.first + chunk_first + p.chunk_frames - 1);
    // Where the chunk lies and how many bytes it takes, from the chunk index (libhdf5 reads no
    // data here); the bytes themselves are read by offset and checked against the file's end, so
    // a crafted index or a chunk stored shorter than its frames cannot make anyone read past a
    // buffer (libhdf5's H5Dread and H5Dread_chunk trust an unfiltered chunk's size).
    hsize_t offset[3] = {hsize_t(chunk_first), 0, 0};
    unsigned filter_mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t stored = 0;
    if (H5Dget_chunk_info_by_coord(p.dataset.get(), offset, &filter_mask, &address, &stored) < 0 ||
        address == HADDR_UNDEF || stored == 0)
      fail(TYCHO_ERR_BAD_DATA, where, " is not in the file (never written: an interrupted acquisition?)");
    if (stored > most_chunk_bytes(chunk_bytes))
      fail(TYCHO_ERR_BAD_DATA, where, " is stored in ", stored, " bytes, more than ", chunk_bytes,
           " bytes of frames can compress to: the file is corrupt");
    if (address > UINT64_MAX - p.base_address)
      fail(TYCHO_ERR_BAD_DATA, where, " lies at an address beyond 64 bits: the file is corrupt");
    raw_.resize(std::size_t(stored));
    p.file->read_at(p.base_address + address, stored, raw_.data(), where);
    chunk_.resize(chunk_bytes);
    if (p.how == arina_part::codec::raw || (filter_mask & 1u)) {  // unfiltered, or the filter skipped
      if (raw_.size() != chunk_bytes)
        fail(TYCHO_ERR_BAD_DATA, where, " is stored unfiltered in ", raw_.size(), " bytes, expected ", chunk_bytes);
      std::memcpy(chunk_.data(), raw_.data(), chunk_bytes);
    } else if (p.how == arina_part::codec::lz4) {
      decode_lz4_chunk(raw_.data(), raw_.size(), chunk_.data(), chunk_bytes, where);
    } else {
      decode_bitshuffle_chunk(raw_.data(), raw_.size(), chunk_.data(), chunk_bytes, element,
                              p.how == arina_part::codec::bitshuffle_lz4, where);
    }
    cached_part_ = &p;
    cached_first_ = chunk_first;
  }
  return chunk_.data() + std::size_t(local - chunk_first) * frame_bytes;
}

namespace {
// Element k of `bytes` (the file's integers, `bits` wide, `sign`ed, byte order `be`) as a double.
inline double element_at(const unsigned char* bytes, std::size_t k, int bits, bool is_signed, bool be) {
  const int n = bits / 8;
  const unsigned char* p = bytes + k * std::size_t(n);
  uint32_t v = 0;
  for (int b = 0; b < n; ++b) v |= uint32_t(p[be ? n - 1 - b : b]) << (8 * b);
  if (!is_signed) return double(v);
  if (n == 1) return double(int8_t(v));
  if (n == 2) return double(int16_t(v));
  return double(int32_t(v));
}
}  // namespace

template <class T>
void arina_source::read_frames(int64_t first, int64_t count, T* dst) {
  const int64_t px = d_.rows * d_.cols;
  // A stored value as delivered: 0 where masked, times the flat field's factor where scaled.
  auto value_at = [&](int64_t k, double v) {
    if (!d_.mask.empty() && d_.mask[std::size_t(k)]) return T(0);
    return d_.gain.empty() ? T(v) : T(v * double(d_.gain[std::size_t(k)]));
  };
  const int bits = d_.element.bits;
  const bool is_signed = d_.element.code == kDLInt;
  for (int64_t done = 0; done < count;) {
    const int64_t g = first + done;
    const auto it = std::upper_bound(d_.parts.begin(), d_.parts.end(), g,
                                     [](int64_t f, const arina_part& p) { return f < p.first; }) - 1;
    const arina_part& p = *it;
    if (p.how == arina_part::codec::hdf5) {
      // Through libhdf5's pipeline (its filters, or none): the frames of this part at once, as
      // stored-size native integers, in pieces of at most 16 MiB.
      const int64_t per_piece = std::max<int64_t>(1, (int64_t(16) << 20) / (px * bits / 8));
      const int64_t n = std::min({count - done, p.first + p.frames - g, per_piece});
      raw_.resize(std::size_t(n * px * bits / 8));
      hsize_t start[3] = {hsize_t(g - p.first), 0, 0}, cnt[3] = {hsize_t(n), hsize_t(d_.rows), hsize_t(d_.cols)};
      h5::h5_id file_space(H5Dget_space(p.dataset.get()));
      h5::h5_id mem_space(H5Screate_simple(3, cnt, nullptr));
      const hid_t mem_type = bits == 8 ? (is_signed ? H5T_NATIVE_INT8 : H5T_NATIVE_UINT8)
                             : bits == 16 ? (is_signed ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16)
                                          : (is_signed ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32);
      if (!file_space || !mem_space ||
          H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, cnt, nullptr) < 0 ||
          H5Dread(p.dataset.get(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, raw_.data()) < 0)
        fail(TYCHO_ERR_IO, "reading frames ", g, " to ", g + n - 1, " of '", p.where,
             "' failed: the file may be truncated, or its compression filter is not available (Debian: apt install "
             "bitshuffle hdf5-filter-plugin, found in libhdf5's default plugin folder)");
      for (int64_t f = 0; f < n; ++f) {
        T* out = dst + (done + f) * px;
        const unsigned char* src = raw_.data() + std::size_t(f * px * bits / 8);
        for (int64_t k = 0; k < px; ++k) {
          const double v = element_at(src, std::size_t(k), bits, is_signed, false);
          out[k] = value_at(k, v);
        }
      }
      done += n;
      continue;
    }
    const unsigned char* src = frame_bytes(p, g);
    T* out = dst + done * px;
    for (int64_t k = 0; k < px; ++k) {
      const double v = element_at(src, std::size_t(k), bits, is_signed, d_.big_endian);
      out[k] = value_at(k, v);
    }
    ++done;
  }
}

void arina_source::read(int64_t first, int64_t count, float* dst) { read_frames<float>(first, count, dst); }

void arina_source::read_stored(int64_t first, int64_t count, void* dst) {
  if (d_.element.bits == 8 && d_.element.code == kDLUInt)
    read_frames<uint8_t>(first, count, static_cast<uint8_t*>(dst));
  else if (d_.element.bits == 16 && d_.element.code == kDLUInt)
    read_frames<uint16_t>(first, count, static_cast<uint16_t*>(dst));
  else
    fail(TYCHO_ERR_INTERNAL, "arina source: no stored read of ", sdk::dtype_name(d_.element));
}

}  // namespace tycho::detectors
