#include "dm_source.hpp"

#include <tycho/sdk/checked.hpp>
#include <tycho/sdk/scan_shape.hpp>
#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "calibration_report.hpp"

namespace tycho::detectors {

using sdk::cat;
using sdk::fail;

const char* const k_dm_keys[] = {"path", "image", "scan_shape", "centred", nullptr};
const tycho_setting k_dm_settings[] = {
    sdk::setting("path", TYCHO_SETTING_STRING, nullptr, "the .dm4 or .dm3 file, relative to the config file's folder; required"),
    sdk::setting("image", TYCHO_SETTING_INTEGER, nullptr,
                 "which image of the file's ImageList (from 0); default: its only 3-D or 4-D image")
        .at_least(0),
    sdk::scan_shape_setting(),
    sdk::setting("centred", TYCHO_SETTING_BOOL, "true", "zero frequency at index N/2 of each frame"),
    sdk::end_of_settings()};

namespace {

std::optional<DLDataType> dtype_of(int data_type) {
  switch (data_type) {
    case 1: return DLDataType{kDLInt, 16, 1};
    case 2: return DLDataType{kDLFloat, 32, 1};
    case 6: case 14: return DLDataType{kDLUInt, 8, 1};
    case 7: return DLDataType{kDLInt, 32, 1};
    case 9: return DLDataType{kDLInt, 8, 1};
    case 10: return DLDataType{kDLUInt, 16, 1};
    case 11: return DLDataType{kDLUInt, 32, 1};
    case 12: return DLDataType{kDLFloat, 64, 1};
    default: return std::nullopt;
  }
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += cat(i ? ", " : "", d[i]);
  return s + "]";
}

// Å per unit of a real-space length, Å⁻¹ per unit of a reciprocal one; nullopt otherwise.
std::optional<double> length_A(const std::string& u) {
  if (u == "nm") return 10.0;
  if (u == "Å" || u == "A" || u == "Angstrom" || u == "angstrom") return 1.0;
  if (u == "pm") return 0.01;
  if (u == "µm" || u == "um" || u == "μm") return 1e4;
  return std::nullopt;
}
std::optional<double> reciprocal_invA(const std::string& u) {
  if (u == "1/nm" || u == "nm^-1" || u == "nm-1") return 0.1;
  if (u == "1/Å" || u == "1/A" || u == "Å^-1" || u == "A^-1") return 1.0;
  if (u == "1/pm") return 100.0;
  if (u == "1/µm" || u == "1/um") return 1e-4;
  return std::nullopt;
}

}  // namespace

dm_source::dm_source(const sdk::config_view& config) {
  const std::string given = config.require_string("path");
  const std::string path = sdk::resolve_path(config.base_dir(), given);
  const bool centred = config.get_bool("centred").value_or(true);
  const std::optional<int64_t> wanted = config.get_int("image");
  file_ = std::make_unique<raw_file>(path, given, "the dm source reads Gatan DigitalMicrograph .dm4 / .dm3 files");
  const dm::dm_file f = dm::parse(*file_);
  little_ = f.little_endian;
  const std::vector<dm::image> ims = dm::images(f);

  std::string listed;
  std::vector<const dm::image*> candidates;
  for (const auto& im : ims) {
    listed += cat(listed.empty() ? "" : "; ", "image ", im.index, im.thumbnail ? " (thumbnail)" : "", ": dimensions ",
                  dims_text(im.dims), im.format.empty() ? "" : cat(", \"", im.format, "\""));
    if (!im.thumbnail && (im.dims.size() == 3 || im.dims.size() == 4)) candidates.push_back(&im);
  }
  if (listed.empty()) listed = "none";
  const dm::image* chosen = nullptr;
  if (wanted) {
    for (const auto& im : ims)
      if (im.index == *wanted) chosen = &im;
    if (chosen == nullptr)
      fail(TYCHO_ERR_NOT_FOUND, "'", path, "' has no image ", *wanted, " ([data] image); its images: ", listed);
  } else {
    if (candidates.size() != 1)
      fail(candidates.empty() ? TYCHO_ERR_NOT_FOUND : TYCHO_ERR_BAD_DATA, "'", path, "' holds ",
           candidates.empty() ? "no 3-D or 4-D image" : "several 3-D or 4-D images",
           candidates.empty() ? "" : ": set [data] image to one of them", "; its images: ", listed);
    chosen = candidates.front();
  }
  const dm::image& im = *chosen;
  description_ = cat(path, ":ImageList[", im.index, "]");
  const std::string& d = description_;

  const auto dtype = dtype_of(im.data_type);
  if (!dtype)
    fail(TYCHO_ERR_UNSUPPORTED, "'", d, "' has DataType ", im.data_type,
         ", expected counts or intensities: 1 (int16), 2 (float32), 6 (uint8), 7 (int32), 9 (int8), 10 (uint16), "
         "11 (uint32), 12 (float64) or 14 (bool)");
  element_ = *dtype;
  if (im.data_count == 0 || dm::simple_size(uint64_t(im.data_element_type)) != element_.bits / 8)
    fail(TYCHO_ERR_BAD_DATA, "'", d, "': its Data array holds elements of ", dm::simple_size(uint64_t(im.data_element_type)),
         " bytes, but DataType ", im.data_type, " is ", element_.bits / 8, "-byte ", sdk::dtype_name(element_));
  if (im.dims.size() != 3 && im.dims.size() != 4)
    fail(TYCHO_ERR_BAD_DATA, "'", d, "' has dimensions ", dims_text(im.dims),
         ", expected a 4-D data set (detector x, detector y, scan x, scan y) or a 3-D stack of frames");
  if (im.format == "Spectrum image" || im.format == "Spectrum")
    fail(TYCHO_ERR_BAD_DATA, "'", d, "' is a \"", im.format, "\" (a spectrum per position), not diffraction frames");
  if (im.dims.size() == 4 && im.order_swapped != 1 && im.order_swapped != -1)
    fail(TYCHO_ERR_UNSUPPORTED, "'", d, "' is a 4-D data set stored in DigitalMicrograph's older mixed order "
         "(Meta Data: Data Order Swapped = 0, or not 0 or 1), whose frames are not contiguous; save it again in GMS 3.5+ "
         "(Data Order Swapped = 1)");
  for (int64_t dim : im.dims)
    if (dim < 1)
      fail(TYCHO_ERR_BAD_DATA, "'", d, "' has dimensions ", dims_text(im.dims),
           ", expected whole numbers >= 1 (below 2^53)");
  const auto count = sdk::checked_product(im.dims.data(), im.dims.size());
  if (!count || *count < 1 || uint64_t(*count) != im.data_count)
    fail(TYCHO_ERR_BAD_DATA, "'", d, "' has dimensions ", dims_text(im.dims), " (", count ? cat(*count) : "overflowing",
         " values) but its Data array holds ", im.data_count);
  data_offset_ = im.data_offset;
  // DM orders dimensions fastest first: (detector x, detector y[, scan x, scan y]).
  cols_ = im.dims[0];
  rows_ = im.dims[1];
  frames_ = im.dims.size() == 4 ? im.dims[2] * im.dims[3] : im.dims[2];
  std::optional<sdk::scan_shape_t> recorded;
  if (im.dims.size() == 4) recorded = sdk::scan_shape_t{im.dims[3], im.dims[2]};
  const sdk::scan_shape_t scan = sdk::resolve_scan_shape(config, frames_, recorded, "its 4-D dimensions (scan y, scan x)",
                                                         d, "dm");

  tycho_dataset_info& i = info_;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  i.struct_size = sizeof(tycho_dataset_info);
  i.scan_shape[0] = scan[0];
  i.scan_shape[1] = scan[1];
  i.detector_shape[0] = rows_;
  i.detector_shape[1] = cols_;
  sdk::check_data_shape(i.scan_shape, i.detector_shape, "'" + d + "'");
  i.stored_dtype = element_;
  i.scan_step_A[0] = i.scan_step_A[1] = nan;
  i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = nan;
  i.energy_eV = i.semiangle_mrad = i.C10_A = nan;
  i.patterns_centred = centred ? 1 : 0;
  i.description = description_.c_str();

  calibration_report report;
  const auto cal = [&](std::size_t dim) {
    return dim < im.calibrations.size() ? im.calibrations[dim] : dm::image::calibration{};
  };
  // Detector: dims 0 (columns, axis 1) and 1 (rows, axis 0); scan: 2 (x, axis 1) and 3 (y, axis 0).
  const auto rec0 = reciprocal_invA(cal(1).units), rec1 = reciprocal_invA(cal(0).units);
  if (rec0 && rec1 && cal(0).scale > 0 && cal(1).scale > 0 && std::isfinite(cal(0).scale) && std::isfinite(cal(1).scale)) {
    i.detector_pixel_invA[0] = cal(1).scale * *rec0;
    i.detector_pixel_invA[1] = cal(0).scale * *rec1;
    report.found(cat("detector pixel ", i.detector_pixel_invA[0], " x ", i.detector_pixel_invA[1], " Å⁻¹ (Calibrations, ",
                     cal(0).units, ")"));
  } else if (cal(0).present) {
    report.note(cat("detector calibration ", cal(0).scale, " \"", cal(0).units, "\" per pixel (not a reciprocal length)"));
  }
  if (im.dims.size() == 4) {
    const auto len0 = length_A(cal(3).units), len1 = length_A(cal(2).units);
    if (len0 && len1 && cal(2).scale > 0 && cal(3).scale > 0 && std::isfinite(cal(2).scale) && std::isfinite(cal(3).scale)) {
      i.scan_step_A[0] = cal(3).scale * *len0;
      i.scan_step_A[1] = cal(2).scale * *len1;
      report.found(cat("scan step ", i.scan_step_A[0], " x ", i.scan_step_A[1], " Å (Calibrations, ", cal(2).units, ")"));
    } else if (cal(2).present) {
      report.note(cat("scan calibration ", cal(2).scale, " \"", cal(2).units, "\" per position (not a length)"));
    }
  }
  if (im.voltage_V > 0 && std::isfinite(im.voltage_V)) {
    i.energy_eV = im.voltage_V;
    report.found(cat("energy ", i.energy_eV, " eV (ImageTags: Microscope Info: Voltage)"));
  }
  if (!im.format.empty()) report.note(cat("format \"", im.format, "\""));
  sdk::log(TYCHO_LOG_INFO, "dm",
           cat("opened '", d, "' (DM", f.version, ", ", im.dims.size(), "-D, ", im.name.empty() ? "" : cat("\"", im.name, "\", "),
               ims.size(), " image", ims.size() == 1 ? "" : "s", " in the file): ", scan[0], " x ", scan[1], " frames of ",
               rows_, " x ", cols_, " ", sdk::dtype_name(element_), "; ", report.text(i)));
}

template <class T>
void dm_source::read_as(int64_t first, int64_t count, T* dst) {
  const int64_t px = rows_ * cols_;
  const int bytes = element_.bits / 8;
  const int64_t frame_bytes = px * bytes;
  const int64_t per_piece = std::max<int64_t>(1, (int64_t(16) << 20) / frame_bytes);
  std::vector<unsigned char> staging;
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(per_piece, count - done);
    staging.resize(std::size_t(n * frame_bytes));
    file_->read_at(data_offset_ + uint64_t((first + done) * frame_bytes), staging.size(), staging.data(),
                   cat("frames ", first + done, " to ", first + done + n - 1, " of '", description_, "'"));
    T* out = dst + done * px;
    for (int64_t k = 0; k < n * px; ++k) {
      const unsigned char* p = staging.data() + k * bytes;
      uint64_t u = 0;
      for (int b = 0; b < bytes; ++b) u |= uint64_t(p[little_ ? b : bytes - 1 - b]) << (8 * b);
      double v = 0;
      if (element_.code == kDLFloat) {
        if (bytes == 4) {
          float f;
          uint32_t w = uint32_t(u);
          std::memcpy(&f, &w, 4);
          v = f;
        } else {
          std::memcpy(&v, &u, 8);
        }
      } else if (element_.code == kDLInt) {
        v = bytes == 1 ? double(int8_t(u)) : bytes == 2 ? double(int16_t(u)) : double(int32_t(u));
      } else {
        v = double(u);
      }
      out[k] = T(v);
    }
    done += n;
  }
}

void dm_source::read(int64_t first, int64_t count, float* dst) { read_as<float>(first, count, dst); }

void dm_source::read_stored(int64_t first, int64_t count, void* dst) {
  if (element_.code == kDLUInt && element_.bits == 8)
    read_as<uint8_t>(first, count, static_cast<uint8_t*>(dst));
  else if (element_.code == kDLUInt && element_.bits == 16)
    read_as<uint16_t>(first, count, static_cast<uint16_t*>(dst));
  else
    fail(TYCHO_ERR_INTERNAL, "dm source: no stored read of ", sdk::dtype_name(element_));
}

}  // namespace tycho::detectors
