#include "empad_source.hpp"

#include <tycho/sdk/checked.hpp>
#include <tycho/sdk/scan_shape.hpp>
#include <tycho/sdk/source.hpp>

#include <expat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "calibration_report.hpp"

namespace tycho::detectors {

using sdk::cat;
using sdk::fail;
namespace fs = std::filesystem;

const char* const k_empad_keys[] = {"path", "scan_shape", "clip_negative", "centred", nullptr};
const tycho_setting k_empad_settings[] = {
    sdk::setting("path", TYCHO_SETTING_STRING, nullptr,
                 "the acquisition's .xml, relative to the config file's folder; the .raw it names lies beside it; "
                 "required"),
    sdk::scan_shape_setting(),
    sdk::setting("clip_negative", TYCHO_SETTING_BOOL, "false",
                 "set negative values (background-subtracted noise) to 0; false: the host refuses them"),
    sdk::setting("centred", TYCHO_SETTING_BOOL, "true", "zero frequency at index N/2 of each frame"),
    sdk::end_of_settings()};

namespace {

constexpr int64_t k_width = 128, k_height = 128, k_raw_height = 130;

// The .xml as "path" -> text and "path@attribute" -> value, element paths joined by '/' from
// the root's children ("iom_measurements/high_voltage"); a scan_parameters element is named with
// its mode ("scan_parameters[acquire]"). The first occurrence of a path wins.
struct xml_reader {
  std::vector<std::string> path;
  std::string text;
  std::map<std::string, std::string> values;
  int depth = 0;

  std::string joined() const {
    std::string s;
    for (std::size_t i = 1; i < path.size(); ++i) s += (i > 1 ? "/" : "") + path[i];
    return s;
  }
  static void start(void* self, const XML_Char* name, const XML_Char** attrs) {
    auto& r = *static_cast<xml_reader*>(self);
    std::string n = name;
    for (const XML_Char** a = attrs; a && a[0]; a += 2)
      if (n == "scan_parameters" && std::strcmp(a[0], "mode") == 0) n += cat("[", a[1], "]");
    r.path.push_back(n);
    r.text.clear();
    for (const XML_Char** a = attrs; a && a[0]; a += 2) r.values.emplace(r.joined() + "@" + a[0], a[1]);
  }
  static void end(void* self, const XML_Char*) {
    auto& r = *static_cast<xml_reader*>(self);
    std::string t = r.text;
    t.erase(0, t.find_first_not_of(" \t\r\n"));
    t.erase(t.find_last_not_of(" \t\r\n") + 1);
    if (!t.empty()) r.values.emplace(r.joined(), t);
    r.text.clear();
    r.path.pop_back();
  }
  static void chars(void* self, const XML_Char* s, int n) {
    auto& r = *static_cast<xml_reader*>(self);
    if (r.text.size() < 4096) r.text.append(s, std::size_t(n));
  }
};

std::map<std::string, std::string> parse_xml(const std::string& file, const std::string& text) {
  xml_reader r;
  XML_Parser p = XML_ParserCreate("UTF-8");
  if (p == nullptr) fail(TYCHO_ERR_OUT_OF_MEMORY, "cannot create an XML parser for '", file, "'");
  XML_SetUserData(p, &r);
  XML_SetElementHandler(p, &xml_reader::start, &xml_reader::end);
  XML_SetCharacterDataHandler(p, &xml_reader::chars);
  const XML_Status st = XML_Parse(p, text.data(), int(text.size()), 1);
  if (st != XML_STATUS_OK) {
    const std::string why = XML_ErrorString(XML_GetErrorCode(p));
    const auto line = XML_GetCurrentLineNumber(p), column = XML_GetCurrentColumnNumber(p);
    XML_ParserFree(p);
    fail(TYCHO_ERR_BAD_DATA, "'", file, "' is not well-formed XML at line ", line, ", column ", column, ": ", why,
         " (expected an EMPAD acquisition's .xml)");
  }
  XML_ParserFree(p);
  return r.values;
}

std::optional<double> number(const std::map<std::string, std::string>& x, const std::string& key) {
  auto it = x.find(key);
  if (it == x.end()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || !std::isfinite(v)) return std::nullopt;
  return v;
}
std::optional<int64_t> whole(const std::map<std::string, std::string>& x, const std::string& key) {
  const auto v = number(x, key);
  if (!v || *v < 1 || *v > 1e12 || *v != std::floor(*v)) return std::nullopt;
  return int64_t(*v);
}

}  // namespace

empad_source::empad_source(const sdk::config_view& config) {
  const std::string given = config.require_string("path");
  const std::string path = sdk::resolve_path(config.base_dir(), given);
  const bool centred = config.get_bool("centred").value_or(true);
  clip_negative_ = config.get_bool("clip_negative").value_or(false);
  {
    raw_file check(path, given, "the empad source reads an EMPAD acquisition's .xml, which names its .raw");
  }
  const auto xml = parse_xml(path, read_text_file(path, 16 << 20, "EMPAD .xml"));
  const auto raw_name = xml.find("raw_file@filename");
  if (raw_name == xml.end() || raw_name->second.empty())
    fail(TYCHO_ERR_BAD_DATA, "'", path, "' has no <raw_file filename=\"...\"/>: not an EMPAD acquisition's .xml");
  if (raw_name->second.find('/') != std::string::npos || raw_name->second.find('\\') != std::string::npos)
    fail(TYCHO_ERR_BAD_DATA, "'", path, "' names the raw file \"", raw_name->second,
         "\", expected a file name beside the .xml (no folders)");
  const std::string raw_path = (fs::path(path).parent_path() / raw_name->second).string();
  raw_ = std::make_unique<raw_file>(raw_path, raw_path, cat("the EMPAD frames '", path, "' names"));
  description_ = raw_path;

  const int64_t frame_bytes = k_width * k_raw_height * 4;
  frames_ = int64_t(raw_->size() / uint64_t(frame_bytes));
  if (frames_ == 0 || raw_->size() % uint64_t(frame_bytes) != 0)
    fail(TYCHO_ERR_BAD_DATA, "'", raw_path, "' is ", raw_->size(), " bytes: ", frames_, " whole EMPAD frames of ",
         frame_bytes, " bytes (128 x 130 float32, the last two rows a footer) and ", raw_->size() % uint64_t(frame_bytes),
         " bytes more: the file is truncated or not EMPAD frames");

  // The scan: a stack (series_count), the older pix_x / pix_y, the acquisition's resolution, or
  // the raw file's name (scan_x<X>_y<Y>.raw).
  std::optional<sdk::scan_shape_t> recorded;
  std::string from;
  const auto sx = whole(xml, "pix_x"), sy = whole(xml, "pix_y");
  const auto rx = whole(xml, "scan_parameters[acquire]/scan_resolution_x");
  const auto ry = whole(xml, "scan_parameters[acquire]/scan_resolution_y");
  const bool stack = xml.count("scan_parameters/series_count") || xml.count("scan_parameters[acquire]/series_count");
  if (!stack && sx && sy) {
    recorded = sdk::scan_shape_t{*sy, *sx};
    from = "its pix_y x pix_x";
  } else if (!stack && rx && ry) {
    recorded = sdk::scan_shape_t{*ry, *rx};
    from = "its scan_resolution_y x scan_resolution_x";
  } else if (!stack) {
    long long x = 0, y = 0;
    char tail = 0;
    if (std::sscanf(raw_name->second.c_str(), "scan_x%lld_y%lld.ra%c", &x, &y, &tail) == 3 && x >= 1 && y >= 1) {
      recorded = sdk::scan_shape_t{y, x};
      from = "its raw file's name (scan_x<X>_y<Y>)";
    }
  }
  const sdk::scan_shape_t scan = sdk::resolve_scan_shape(config, frames_, recorded, from, raw_path, "empad");

  tycho_dataset_info& i = info_;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  i.struct_size = sizeof(tycho_dataset_info);
  i.scan_shape[0] = scan[0];
  i.scan_shape[1] = scan[1];
  i.detector_shape[0] = k_height;
  i.detector_shape[1] = k_width;
  sdk::check_data_shape(i.scan_shape, i.detector_shape, "'" + raw_path + "'");
  i.stored_dtype = sdk::dtype_float32;
  i.scan_step_A[0] = i.scan_step_A[1] = nan;
  i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = nan;
  i.energy_eV = i.semiangle_mrad = i.C10_A = nan;
  i.patterns_centred = centred ? 1 : 0;
  i.description = description_.c_str();

  calibration_report report;
  // The scan step as RosettaSciIO reads it: the field of view (m) over the scale factor and the
  // larger scan dimension, both axes; or the older per-axis field of view.
  const auto fov = number(xml, "iom_measurements/full_scan_field_of_view/x");
  const auto factor = number(xml, "iom_measurements/full_scan_field_of_view/scale_factor");
  if (!stack && fov && factor && *fov > 0 && *factor > 0) {
    i.scan_step_A[0] = i.scan_step_A[1] = *fov / *factor / double(std::max(scan[0], scan[1])) * 1e10;
    report.found(cat("scan step ", i.scan_step_A[0], " Å (full_scan_field_of_view / scale_factor / ",
                     std::max(scan[0], scan[1]), ")"));
  } else if (auto it = xml.find("iom_measurements/optics/get_full_scan_field_of_view"); !stack && it != xml.end()) {
    double fx = 0, fy = 0;
    if (std::sscanf(it->second.c_str(), " [ %lf , %lf ]", &fx, &fy) == 2 && fx > 0 && fy > 0 && std::isfinite(fx) &&
        std::isfinite(fy)) {
      i.scan_step_A[0] = fx / double(scan[0]) * 1e10;
      i.scan_step_A[1] = fy / double(scan[1]) * 1e10;
      report.found(cat("scan step ", i.scan_step_A[0], " x ", i.scan_step_A[1], " Å (get_full_scan_field_of_view)"));
    }
  }
  if (const auto px = number(xml, "iom_measurements/calibrated_pixelsize"); px && *px > 0) {
    i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = *px * 1e8;  // RosettaSciIO: × 1e9 in 1/nm
    report.found(cat("detector pixel ", i.detector_pixel_invA[0], " Å⁻¹ (calibrated_pixelsize)"));
  }
  if (const auto hv = number(xml, "iom_measurements/high_voltage"); hv && *hv > 0) {
    i.energy_eV = *hv;
    report.found(cat("energy ", i.energy_eV, " eV (high_voltage)"));
  }
  if (const auto cl = number(xml, "iom_measurements/nominal_camera_length"))
    report.note(cat("nominal camera length ", *cl, " m (not used: nominal)"));
  if (const auto rot = number(xml, "iom_measurements/scan_rotation"))
    report.note(cat("scan rotation ", *rot, " (not applied: [preprocess] scan_rotation_deg)"));
  sdk::log(TYCHO_LOG_INFO, "empad",
           cat("opened '", raw_path, "' (", path, "): ", scan[0], " x ", scan[1], " frames of 128 x 128 float32 (128 x 130 "
               "stored, 2 footer rows left out)", clip_negative_ ? ", negative values set to 0" : "", "; ", report.text(i)));
}

void empad_source::read(int64_t first, int64_t count, float* dst) {
  const int64_t frame_bytes = k_width * k_raw_height * 4, px = k_width * k_height;
  const int64_t per_piece = std::max<int64_t>(1, (int64_t(16) << 20) / frame_bytes);
  std::vector<unsigned char> staging;
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(per_piece, count - done);
    staging.resize(std::size_t(n * frame_bytes));
    raw_->read_at(uint64_t((first + done) * frame_bytes), staging.size(), staging.data(),
                  cat("frames ", first + done, " to ", first + done + n - 1));
    for (int64_t f = 0; f < n; ++f) {
      float* out = dst + (done + f) * px;
      std::memcpy(out, staging.data() + f * frame_bytes, std::size_t(px * 4));  // little-endian host
      if (clip_negative_)
        for (int64_t k = 0; k < px; ++k) out[k] = out[k] < 0.0f ? 0.0f : out[k];
    }
    done += n;
  }
}

}  // namespace tycho::detectors
