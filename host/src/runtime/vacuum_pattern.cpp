#include "vacuum_pattern.hpp"

#include <tycho/core/error.hpp>
#include <tycho/sdk/npy.hpp>
#include <tycho/sdk/hdf5/h5_guard.hpp>
#include <tycho/sdk/hdf5/h5_handle.hpp>
#include <tycho/sdk/hdf5/h5_read.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "data/detector_padding.hpp"
#include "data/pattern_steps.hpp"
#include "results/manifest_reader.hpp"
#include "runtime/npy_file.hpp"
#include "settings/config_read.hpp"

namespace tycho::host {

namespace {

namespace fs = std::filesystem;
constexpr double k_pi = 3.14159265358979323846;
const char* const k_table = "reconstruct.probe";
// The most frames read: a vacuum scan of 1024 x 1024 positions. An HDF5 dataset may declare any
// shape without storing it; a larger count would only make the read run for hours.
constexpr int64_t k_most_frames = int64_t(1) << 20;

// The frames of a (..., N0, N1) shape whose last two axes are the detector's; throws otherwise.
int64_t frame_count(const std::vector<int64_t>& shape, std::array<int64_t, 2> detector, const std::string& where) {
  const std::size_t r = shape.size();
  if (r < 2 || shape[r - 2] != detector[0] || shape[r - 1] != detector[1])
    fail(TYCHO_ERR_BAD_DATA, "[reconstruct.probe] vacuum_pattern: ", where, " has shape ", sdk::npy::shape_text(shape),
         ", expected the detector's frames as the data's source delivers them: (", detector[0], ", ", detector[1],
         ") or (..., ", detector[0], ", ", detector[1], "), every leading index a frame (summed)");
  int64_t frames = 1;
  for (std::size_t a = 0; a + 2 < r; ++a) {
    if (shape[a] < 1)
      fail(TYCHO_ERR_BAD_DATA, "[reconstruct.probe] vacuum_pattern: ", where, " has shape ",
           sdk::npy::shape_text(shape), ": no frames");
    if (frames > INT64_MAX / shape[a])
      fail(TYCHO_ERR_BAD_DATA, "[reconstruct.probe] vacuum_pattern: ", where, " has shape ",
           sdk::npy::shape_text(shape), ", whose frame count overflows");
    frames *= shape[a];
  }
  if (frames > k_most_frames)
    fail(TYCHO_ERR_BAD_DATA, "[reconstruct.probe] vacuum_pattern: ", where, " has shape ", sdk::npy::shape_text(shape),
         ": ", frames, " frames, more than the ", k_most_frames, " a vacuum pattern is summed from");
  return frames;
}

bool readable(DLDataType d) {
  return (d.code == kDLFloat && (d.bits == 32 || d.bits == 64)) ||
         ((d.code == kDLUInt || d.code == kDLInt) && (d.bits == 8 || d.bits == 16 || d.bits == 32));
}
const char* const k_dtypes = "float32, float64, uint8, uint16, uint32, int8, int16 or int32";

// Σ over the frames of an .npy, one frame in memory at a time.
std::vector<double> sum_npy(const std::string& path, std::array<int64_t, 2> detector, int64_t& frames) {
  npy_file file(path, "[reconstruct.probe] vacuum_pattern");
  const std::string& where = file.where();
  const sdk::npy::header& h = file.header();
  if (!h.dtype || !readable(*h.dtype) || h.big_endian || h.fortran_order)
    fail(TYCHO_ERR_BAD_DATA, "[reconstruct.probe] vacuum_pattern: ", where, " holds '", h.descr, "'",
         h.fortran_order ? " in Fortran order" : "", ", expected a little-endian C-order array of ", k_dtypes);
  frames = frame_count(h.shape, detector, where);
  const std::size_t m = std::size_t(detector[0] * detector[1]);
  std::vector<unsigned char> bytes(m * (h.dtype->bits / 8));
  std::vector<double> frame(m), sum(m, 0.0);
  for (int64_t f = 0; f < frames; ++f) {
    file.read(bytes.data(), bytes.size());
    sdk::npy::convert_values(*h.dtype, bytes.data(), frame.data(), m);
    for (std::size_t k = 0; k < m; ++k) sum[k] += frame[k];
  }
  return sum;
}

// Σ over the frames of an HDF5 dataset, one frame (a hyperslab) at a time, read as doubles.
std::vector<double> sum_hdf5(const std::string& path, const std::string& given, const std::string& dataset,
                             std::array<int64_t, 2> detector, int64_t& frames) {
  h5::h5_session session;
  h5::h5_id file = h5::open_data_file(path, given, "[reconstruct.probe] vacuum_pattern reads .npy files and HDF5 files");
  const std::string where = "'" + path + ":" + dataset + "'";
  h5::h5_id obj = h5::open_object(file.get(), dataset);
  if (!obj || !h5::is_dataset(obj.get()))
    fail(TYCHO_ERR_NOT_FOUND, "[reconstruct.probe] vacuum_pattern_dataset: ", where, " is not a dataset");
  h5::h5_id ds(H5Dopen2(file.get(), dataset.c_str(), H5P_DEFAULT));
  if (!ds) fail(TYCHO_ERR_IO, "could not open ", where);
  h5::h5_id type(H5Dget_type(ds.get()));
  const std::optional<DLDataType> dtype = type ? h5::dl_dtype(type.get()) : std::nullopt;
  if (!dtype || !readable(*dtype))
    fail(TYCHO_ERR_BAD_DATA, "[reconstruct.probe] vacuum_pattern: ", where, " holds ",
         type ? h5::type_text(type.get()) : "unknown", " values, expected ", k_dtypes);
  const std::vector<int64_t> shape = h5::dataset_shape(ds.get());
  frames = frame_count(shape, detector, where);
  const std::size_t r = shape.size(), m = std::size_t(detector[0] * detector[1]);
  std::vector<hsize_t> start(r, 0), count(r, 1);
  count[r - 2] = hsize_t(detector[0]);
  count[r - 1] = hsize_t(detector[1]);
  h5::h5_id space(H5Dget_space(ds.get()));
  const hsize_t plane[2] = {hsize_t(detector[0]), hsize_t(detector[1])};
  h5::h5_id memory(H5Screate_simple(2, plane, nullptr));
  if (!space || !memory) fail(TYCHO_ERR_IO, "could not read ", where);
  std::vector<double> frame(m), sum(m, 0.0);
  for (int64_t f = 0; f < frames; ++f) {
    // Frame f's index over the leading axes, last fastest.
    int64_t rest = f;
    for (std::size_t a = r - 2; a-- > 0;) {
      start[a] = hsize_t(rest % shape[a]);
      rest /= shape[a];
    }
    if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
        H5Dread(ds.get(), H5T_NATIVE_DOUBLE, memory.get(), space.get(), H5P_DEFAULT, frame.data()) < 0)
      fail(TYCHO_ERR_IO, "could not read frame ", f, " of ", where);
    for (std::size_t k = 0; k < m; ++k) sum[k] += frame[k];
  }
  return sum;
}

// A centred (n0, n1) pattern to FFT natural order (numpy's ifftshift).
std::vector<float> to_fft_order(const std::vector<double>& centred, int64_t n0, int64_t n1) {
  std::vector<float> out(centred.size());
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      out[std::size_t(i * n1 + j)] = float(centred[std::size_t(((i + n0 / 2) % n0) * n1 + (j + n1 / 2) % n1)]);
  return out;
}

// Masked pixels of an FFT-order pattern that the detector measured (`measured` 1; the padding
// stays 0): the mean of their valid 3 × 3 neighbours (0 where none is valid).
void fill_masked(std::vector<float>& p, const std::vector<uint8_t>& mask, const std::vector<uint8_t>& measured,
                 int64_t n0, int64_t n1) {
  if (mask.empty()) return;
  const std::vector<float> in = p;
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j) {
      if (mask[std::size_t(i * n1 + j)] || !measured[std::size_t(i * n1 + j)]) continue;
      double sum = 0;
      int used = 0;
      for (int di = -1; di <= 1; ++di)
        for (int dj = -1; dj <= 1; ++dj) {
          const int64_t a = (i + di + n0) % n0, b = (j + dj + n1) % n1;
          if (mask[std::size_t(a * n1 + b)]) {
            sum += in[std::size_t(a * n1 + b)];
            ++used;
          }
        }
      p[std::size_t(i * n1 + j)] = used ? float(sum / used) : 0.f;
    }
}

}  // namespace

vacuum_pattern_steps vacuum_steps_of_report(const std::string& preprocess_json, const std::string& report_source,
                                            std::array<int64_t, 2> detector, std::array<int64_t, 2> window,
                                            std::vector<uint8_t> mask) {
  vacuum_pattern_steps s;
  s.detector = detector;
  s.window = window;
  s.mask = std::move(mask);
  if (preprocess_json.empty()) return s;
  // A prepared file's report is read from the file: every value checked before it shapes a read,
  // by the manifest's own checked reader (keys named as the manifest has them, "preprocess.*").
  const manifest_reader m("{\"preprocess\": " + preprocess_json + "}", report_source);
  const char* const why = "a preprocessing report whose steps the vacuum pattern can follow";
  if (!m.json().at("preprocess").is_object()) m.refuse("preprocess", &m.json().at("preprocess"), cat(why, ": an object"));
  if (m.find("preprocess.detector_shape_in")) {
    const auto d = m.integers("preprocess.detector_shape_in", 2, 1, k_most_window_px);
    s.detector = {d[0], d[1]};
  }
  if (const nlohmann::json* c = m.find("preprocess.crop_detector"); c != nullptr && !c->is_null()) {
    const auto crop = m.integers("preprocess.crop_detector", 2, 1, k_most_window_px);
    for (int a = 0; a < 2; ++a)
      if (crop[std::size_t(a)] > s.detector[std::size_t(a)])
        m.refuse("preprocess.crop_detector", c, cat(why, ": a crop within the detector (", s.detector[0], ", ",
                                                     s.detector[1], ")"));
    s.crop = {crop[0], crop[1]};
  }
  if (m.find("preprocess.binning")) {
    int64_t smallest = std::min(s.detector[0], s.detector[1]);
    if (s.crop[0] > 0) smallest = std::min(s.crop[0], s.crop[1]);
    s.binning = m.integer("preprocess.binning", 1, smallest);
  }
  if (m.find("preprocess.scan_transpose")) s.transpose = m.boolean("preprocess.scan_transpose");
  if (m.find("preprocess.recentre")) s.recentre = m.boolean("preprocess.recentre");
  return s;
}

std::optional<std::string> vacuum_pattern_path(const toml::table& probe_t, const std::string& base_dir) {
  const auto given = read_key<std::string>(probe_t, "vacuum_pattern", k_table);
  const auto dataset = read_key<std::string>(probe_t, "vacuum_pattern_dataset", k_table);
  if (!given) {
    if (dataset)
      fail(TYCHO_ERR_INVALID_ARGUMENT,
           "[reconstruct.probe] vacuum_pattern_dataset needs vacuum_pattern = the HDF5 file that holds it");
    return std::nullopt;
  }
  const auto initial = read_key<std::string>(probe_t, "initial", k_table);
  if (initial && *initial != "model")
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.probe] vacuum_pattern and initial = \"", *initial,
         "\" both give the starting probe: keep one (vacuum_pattern measures the aperture and takes the phase from ",
         "[optics]; initial takes the whole probe from its file)");
  const std::string path = resolve_path(base_dir, *given);
  if (!fs::is_regular_file(path))
    fail(TYCHO_ERR_NOT_FOUND, "[reconstruct.probe] vacuum_pattern = \"", *given, "\": '", path,
         "' is not a file (expected an .npy array or an HDF5 file of vacuum frames)");
  if (is_npy(path) && dataset)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.probe] vacuum_pattern_dataset names a dataset, but '", path,
         "' is an .npy file");
  if (!is_npy(path) && !dataset)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct.probe] vacuum_pattern = '", path,
         "' is not an .npy file: for an HDF5 file set vacuum_pattern_dataset to the frames' dataset");
  return path;
}

std::optional<vacuum_amplitude> read_vacuum_amplitude(const toml::table& probe_t, const std::string& base_dir,
                                                      const vacuum_pattern_steps& steps, double wavelength_A,
                                                      const double dk_invA[2]) {
  const std::optional<std::string> checked = vacuum_pattern_path(probe_t, base_dir);
  if (!checked) return std::nullopt;
  const std::string& path = *checked;
  const std::string given = *read_key<std::string>(probe_t, "vacuum_pattern", k_table);
  const auto dataset = read_key<std::string>(probe_t, "vacuum_pattern_dataset", k_table);
  vacuum_amplitude out;
  out.file = dataset ? path + ":" + *dataset : path;
  std::vector<double> sum;
  try {
    if (!dataset) {
      sum = sum_npy(path, steps.detector, out.frames);
    } else {
      // A file that crashes libhdf5 is refused, not fatal: the same read in a guard process first.
      int64_t ignored = 0;
      h5::guard_metadata_walk(path, [&] { sum_hdf5(path, given, *dataset, steps.detector, ignored); });
      sum = sum_hdf5(path, given, *dataset, steps.detector, out.frames);
    }
  } catch (const sdk::error& e) {
    // The SDK readers' type (the .npy header, the HDF5 file): the runtime's, same status, the key named.
    throw tycho::error(e.status, cat("[reconstruct.probe] vacuum_pattern: ", e.what()));
  }
  double largest = 0;
  for (double& v : sum) {
    if (!std::isfinite(v))
      fail(TYCHO_ERR_BAD_DATA, "[reconstruct.probe] vacuum_pattern: '", out.file,
           "' holds a non-finite value (or its frames' sum overflows)");
    v = std::max(v, 0.0);
    largest = std::max(largest, v);
  }
  // To [0, 1] before the float32 steps, so that any finite sum stays finite there.
  if (largest > 0)
    for (double& v : sum) v /= largest;
  std::vector<float> fft = to_fft_order(sum, steps.detector[0], steps.detector[1]);

  // The data's steps: crop, binning and transpose (pattern_steps, as the stage ran them), padding.
  preprocess_settings ps;
  ps.crop = steps.crop;
  ps.binning = steps.binning;
  ps.transpose = steps.transpose;
  pattern_steps ops;
  ops.set_shape(ps, steps.detector);
  ops.set_placement(ps, com_fit_result{}, 1);
  pattern_scratch scratch;
  std::vector<float> shaped(std::size_t(ops.out[0] * ops.out[1]));
  ops.transform(fft.data(), 0, shaped.data(), scratch);
  const int64_t n0 = steps.window[0], n1 = steps.window[1];
  if (ops.out[0] > n0 || ops.out[1] > n1)
    fail(TYCHO_ERR_INTERNAL, "vacuum_pattern: the processed pattern (", ops.out[0], " x ", ops.out[1],
         ") exceeds the window (", n0, " x ", n1, ")");
  std::vector<float> window(std::size_t(n0 * n1));
  pad_fft_order_pattern(shaped.data(), ops.out[0], ops.out[1], window.data(), n0, n1);
  if (!steps.mask.empty() && steps.mask.size() != window.size())
    fail(TYCHO_ERR_INTERNAL, "vacuum_pattern: a mask of ", steps.mask.size(), " pixels for a ", n0, " x ", n1, " window");
  fill_masked(window, steps.mask, padding_mask_fft_order(ops.out[0], ops.out[1], n0, n1), n0, n1);

  double total = 0, peak = 0;
  for (float v : window) {
    total += v;
    peak = std::max(peak, double(v));
  }
  if (!(total > 0))
    fail(TYCHO_ERR_BAD_DATA, "[reconstruct.probe] vacuum_pattern: '", out.file,
         "' holds no intensity on the run's detector window (all zero, negative or masked)");
  out.centre_px = pattern_com(window.data(), n0, n1);
  if (steps.recentre) {
    out.moved_px = {int64_t(std::llround(out.centre_px[0])), int64_t(std::llround(out.centre_px[1]))};
    if (out.moved_px[0] != 0 || out.moved_px[1] != 0) {
      // As pattern_steps recentres: frequency f takes the value at f + shift (0 from outside).
      std::vector<float> moved(window.size(), 0.f);
      for (int64_t a = 0; a < n0; ++a)
        for (int64_t b = 0; b < n1; ++b) {
          const int64_t f0 = fft_frequency(a, n0) + out.moved_px[0], f1 = fft_frequency(b, n1) + out.moved_px[1];
          if (has_frequency(f0, n0) && has_frequency(f1, n1))
            moved[std::size_t(a * n1 + b)] = window[std::size_t(fft_index(f0, n0) * n1 + fft_index(f1, n1))];
        }
      window.swap(moved);
    }
  }
  double sum_moved = 0, bright = 0;
  for (float v : window) {
    sum_moved += v;
    if (v > 0.5 * peak) ++bright;
  }
  out.bright_field_px = bright;
  out.bright_field_semiangle_mrad = 1e3 * wavelength_A * std::sqrt(bright * dk_invA[0] * dk_invA[1] / k_pi);
  out.amplitude.resize(window.size());
  for (std::size_t k = 0; k < window.size(); ++k) out.amplitude[k] = std::sqrt(double(window[k]) / sum_moved);
  return out;
}

std::string vacuum_amplitude::describe(double stated_semiangle_mrad, double C10_A) const {
  return cat("initial probe: the aperture from the vacuum pattern '", file, "' (", frames, frames == 1 ? " frame" : " frames",
             "; its bright field a disc of ", bright_field_semiangle_mrad, " mrad, the stated semiangle ",
             stated_semiangle_mrad, " mrad; centre of mass (", centre_px[0], ", ", centre_px[1], ") px",
             moved_px != std::array<int64_t, 2>{0, 0}
                 ? cat(", moved by (", moved_px[0], ", ", moved_px[1], ") px as the patterns were recentred")
                 : std::string(),
             "), the phase from C10 = ", C10_A, " Å");
}

std::string vacuum_amplitude::semiangle_warning(double stated_semiangle_mrad) const {
  const double ratio = bright_field_semiangle_mrad / stated_semiangle_mrad;
  if (ratio >= 0.75 && ratio <= 1.25) return "";
  return cat("the vacuum pattern '", file, "' has a bright field of ", bright_field_semiangle_mrad,
             " mrad against the stated semiangle of ", stated_semiangle_mrad,
             " mrad: check that it is a vacuum pattern of this detector with no hot pixel the data do not mask ",
             "(its centre of mass is (", centre_px[0], ", ", centre_px[1], ") px from the zero frequency); it is used as it is");
}

std::string vacuum_amplitude::to_json(double stated_semiangle_mrad) const {
  nlohmann::ordered_json j;
  j["from"] = "vacuum_pattern";
  j["file"] = file;
  j["frames"] = frames;
  j["centre_px"] = centre_px;
  j["moved_px"] = moved_px;
  j["bright_field_px"] = bright_field_px;
  j["bright_field_semiangle_mrad"] = bright_field_semiangle_mrad;
  j["stated_semiangle_mrad"] = stated_semiangle_mrad;
  return j.dump();
}

}  // namespace tycho::host
