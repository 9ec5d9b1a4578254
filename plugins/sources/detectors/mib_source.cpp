#include "mib_source.hpp"

#include <tycho/sdk/checked.hpp>
#include <tycho/sdk/scan_shape.hpp>
#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "calibration_report.hpp"

namespace tycho::detectors {

using sdk::cat;
using sdk::fail;

namespace {

constexpr int64_t k_most_gap = 64;

// A whole number from a .hdr value, nullopt when it is not one (or is absurd).
std::optional<int64_t> hdr_integer(const std::map<std::string, std::string>& hdr, const char* key) {
  auto it = hdr.find(key);
  if (it == hdr.end() || it->second.empty() || it->second.size() > 12) return std::nullopt;
  for (char c : it->second)
    if (c < '0' || c > '9') return std::nullopt;
  return std::stoll(it->second);
}

}  // namespace

const char* const k_mib_keys[] = {"path", "scan_shape", "quad_gap_px", "centred", nullptr};
const tycho_setting k_mib_settings[] = {
    sdk::setting("path", TYCHO_SETTING_STRING, nullptr,
                 "the .mib file, relative to the config file's folder; its .hdr beside it is read when present; required"),
    sdk::scan_shape_setting(),
    sdk::setting("quad_gap_px", TYCHO_SETTING_INTEGER, "0",
                 "pixels of gap inserted between the chips of a 2x2 quad, each way, masked (2: 514 x 514 from 512 x 512)")
        .at_least(0)
        .at_most(double(k_most_gap)),
    sdk::setting("centred", TYCHO_SETTING_BOOL, "true", "zero frequency at index N/2 of each frame"),
    sdk::end_of_settings()};

mib_source::mib_source(const sdk::config_view& config) {
  const std::string given = config.require_string("path");
  const std::string path = sdk::resolve_path(config.base_dir(), given);
  const bool centred = config.get_bool("centred").value_or(true);
  gap_ = config.get_int("quad_gap_px").value_or(0);
  if (gap_ < 0 || gap_ > k_most_gap)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'quad_gap_px' in ", config.table_name(), " = ", gap_,
         ": must be 0 to ", k_most_gap, " pixels");
  file_ = std::make_unique<raw_file>(path, given, "the mib source reads Quantum Detectors Merlin .mib files");
  description_ = path;
  const auto at = [&](int64_t frame) {
    return cat("'", path, "' at offset ", frame * stride_, " (frame ", frame, ")");
  };

  // The first header says how every frame is laid out.
  std::vector<unsigned char> head(std::size_t(std::min<uint64_t>(file_->size(), uint64_t(mib::k_most_header_bytes))));
  if (head.empty()) fail(TYCHO_ERR_BAD_DATA, "'", path, "' is empty, expected Merlin .mib frames");
  file_->read_at(0, head.size(), head.data(), "the first frame's header");
  first_ = mib::parse_header(head.data(), head.size(), cat("'", path, "' at offset 0 (frame 0)"));

  const std::string hdr_path = with_extension(path, ".hdr");
  std::map<std::string, std::string> hdr;
  if (file_exists(hdr_path)) hdr = mib::parse_hdr(read_text_file(hdr_path, 1 << 20, "Merlin .hdr acquisition header"));
  const int hdr_depth = int(std::min<int64_t>(hdr_integer(hdr, "Counter Depth (number)").value_or(0), 1000));
  geometry_ = mib::geometry_of(first_, hdr_depth, cat("'", path, "' at offset 0 (frame 0)"));

  const auto stride = sdk::checked_add(first_.header_bytes, geometry_.data_bytes);
  if (!stride) fail(TYCHO_ERR_BAD_DATA, "'", path, "': the frame size overflows");
  stride_ = *stride;
  frames_ = int64_t(file_->size() / uint64_t(stride_));
  const uint64_t extra = file_->size() % uint64_t(stride_);
  if (frames_ == 0 || extra != 0)
    fail(TYCHO_ERR_BAD_DATA, "'", path, "' is ", file_->size(), " bytes: ", frames_, " whole frames of ", stride_,
         " bytes (a ", first_.header_bytes, "-byte header and ", geometry_.data_bytes, " bytes of ", first_.width,
         " x ", first_.height, " ", first_.pixel_type, " pixels) and ", extra,
         " bytes more: the file is truncated (an interrupted acquisition) or its frames differ in size");
  if (frames_ > 1) {
    // The last frame's header, so a file whose frames drift is refused at open.
    std::vector<unsigned char> last(std::size_t(first_.header_bytes));
    file_->read_at(uint64_t((frames_ - 1) * stride_), last.size(), last.data(), "the last frame's header");
    mib::check_frame_header(last.data(), last.size(), first_, frames_ - 1, at(frames_ - 1));
  }

  // The delivered pattern: the decoded frame, with the quad's gap when asked for.
  rows_ = geometry_.rows;
  cols_ = geometry_.cols;
  if (gap_ > 0) {
    if (first_.layout.rfind("2x2", 0) != 0 || rows_ % 2 != 0 || cols_ % 2 != 0)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'quad_gap_px' in ", config.table_name(),
           " is for a 2x2 quad's frames; '", path, "' holds ", rows_, " x ", cols_, " frames of layout \"",
           first_.layout, "\"");
    rows_ += gap_;
    cols_ += gap_;
  }

  // The scan's shape: the config's, else the .hdr's ScanX / ScanY, else frames per trigger.
  std::optional<sdk::scan_shape_t> recorded;
  std::string recorded_from;
  const auto scan_x = hdr_integer(hdr, "ScanX"), scan_y = hdr_integer(hdr, "ScanY");
  const auto per_trigger = hdr_integer(hdr, "Frames per Trigger (Number)");
  const auto in_acquisition = hdr_integer(hdr, "Frames in Acquisition (Number)");
  if (scan_x && scan_y) {
    recorded = sdk::scan_shape_t{*scan_y, *scan_x};
    recorded_from = cat("its .hdr's ScanY x ScanX");
  } else if (per_trigger && in_acquisition && *per_trigger > 1 && *in_acquisition % *per_trigger == 0) {
    recorded = sdk::scan_shape_t{*in_acquisition / *per_trigger, *per_trigger};
    recorded_from = cat("its .hdr's frames in acquisition / frames per trigger");
  }
  const sdk::scan_shape_t scan = sdk::resolve_scan_shape(config, frames_, recorded, recorded_from, path, "mib");

  tycho_dataset_info& i = info_;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  i.struct_size = sizeof(tycho_dataset_info);
  i.scan_shape[0] = scan[0];
  i.scan_shape[1] = scan[1];
  i.detector_shape[0] = rows_;
  i.detector_shape[1] = cols_;
  sdk::check_data_shape(i.scan_shape, i.detector_shape, "'" + path + "'");
  i.stored_dtype = DLDataType{kDLUInt, uint8_t(geometry_.out_bits), 1};
  i.scan_step_A[0] = i.scan_step_A[1] = nan;
  i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = nan;
  i.energy_eV = i.semiangle_mrad = i.C10_A = nan;
  i.patterns_centred = centred ? 1 : 0;
  i.description = description_.c_str();

  calibration_report report;
  const int depth = geometry_.raw ? geometry_.depth : first_.counter_depth != 0 ? first_.counter_depth : hdr_depth;
  if (depth > 0 && depth < geometry_.out_bits)
    report.note(cat(depth, "-bit counters (pixels saturate at ", (int64_t(1) << depth) - 1,
                    ": [preprocess] saturation_value = ", (int64_t(1) << depth) - 1, " masks them)"));
  if (first_.exposure_s > 0) report.note(cat("exposure ", first_.exposure_s * 1e3, " ms per frame"));
  if (first_.layout.rfind("2x2", 0) == 0 && gap_ == 0)
    report.note("a 2x2 quad read without its chips' gap (quad_gap_px = 2 inserts it, masked)");
  sdk::log(TYCHO_LOG_INFO, "mib",
           cat("opened '", path, "': ", scan[0], " x ", scan[1], " frames of ", rows_, " x ", cols_, " ",
               sdk::dtype_name(i.stored_dtype), " (", first_.pixel_type, geometry_.raw ? cat(" RAW ", geometry_.depth, "-bit") : "",
               ", ", first_.chips, " chip", first_.chips > 1 ? "s" : "", " ", first_.layout, "); ", report.text(i)));
}

template <class T>
void mib_source::read_as(int64_t first, int64_t count, T* dst, T gap_value) {
  const int64_t pattern = rows_ * cols_;
  const int64_t per_piece = std::max<int64_t>(1, (int64_t(16) << 20) / stride_);
  std::vector<unsigned char> staging;
  std::vector<uint32_t> frame(std::size_t(geometry_.rows * geometry_.cols));
  const int64_t half_r = geometry_.rows / 2, half_c = geometry_.cols / 2;
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(per_piece, count - done);
    const int64_t f0 = first + done;
    staging.resize(std::size_t(n * stride_));
    file_->read_at(uint64_t(f0 * stride_), staging.size(), staging.data(), cat("frames ", f0, " to ", f0 + n - 1));
    for (int64_t k = 0; k < n; ++k) {
      const unsigned char* p = staging.data() + k * stride_;
      const int64_t index = f0 + k;
      mib::check_frame_header(p, std::size_t(stride_), first_, index,
                              cat("'", description_, "' at offset ", index * stride_, " (frame ", index, ")"));
      mib::decode_frame(geometry_, p + first_.header_bytes, frame.data());
      T* out = dst + (done + k) * pattern;
      if (gap_ > 0) std::fill(out, out + pattern, gap_value);
      // Rows in reverse, as RosettaSciIO returns them; the gap between the chips' halves.
      for (int64_t r = 0; r < geometry_.rows; ++r) {
        const uint32_t* src = frame.data() + (geometry_.rows - 1 - r) * geometry_.cols;
        T* row = out + (r + (gap_ > 0 && r >= half_r ? gap_ : 0)) * cols_;
        if (gap_ == 0) {
          for (int64_t c = 0; c < geometry_.cols; ++c) row[c] = T(src[c]);
        } else {
          for (int64_t c = 0; c < half_c; ++c) row[c] = T(src[c]);
          for (int64_t c = half_c; c < geometry_.cols; ++c) row[c + gap_] = T(src[c]);
        }
      }
    }
    done += n;
  }
}

void mib_source::read(int64_t first, int64_t count, float* dst) {
  read_as<float>(first, count, dst, std::numeric_limits<float>::quiet_NaN());
}

void mib_source::read_stored(int64_t first, int64_t count, void* dst) {
  if (geometry_.out_bits == 8)
    read_as<uint8_t>(first, count, static_cast<uint8_t*>(dst), 0);
  else if (geometry_.out_bits == 16)
    read_as<uint16_t>(first, count, static_cast<uint16_t*>(dst), 0);
  else
    fail(TYCHO_ERR_INTERNAL, "mib source: no stored read of ", geometry_.out_bits, "-bit counts");
}

}  // namespace tycho::detectors
