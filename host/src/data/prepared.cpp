#include "tycho/host/prepared.hpp"

#include "data/bad_pixels.hpp"
#include "data/chunked_preprocess.hpp"
#include "data/finite_values.hpp"
#include "data/prepare_stream.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/launch.hpp>
#include <tycho/core/sharding.hpp>
#include <tycho/sdk.hpp>
#include <tycho/sdk/checked.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <zip.h>

#include <algorithm>
#include <array>
#include <type_traits>
#include <cmath>
#include <filesystem>
#include <limits>
#include <ostream>
#include <sstream>

#include "settings/config_read.hpp"
#include "data/detector_padding.hpp"
#include "results/manifest_checks.hpp"
#include "results/manifest_reader.hpp"
#include "results/zip_archive.hpp"
#include "data/sha256.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/result_record.hpp"
#include "tycho/host/run_plan.hpp"
#include "settings/settings_read.hpp"
#include "tycho/host/stop_signals.hpp"
#include "data/target_stream.hpp"
#include "geometry/beam_optics.hpp"

namespace tycho::host {

namespace fs = std::filesystem;

struct prepared_file::detail {
  manifest_reader manifest;  // every read checked, naming the file and key
  loaded_record record;  // empty when read from a zip's manifest alone (patterns_in_zip)
  std::string config_toml;
  bool patterns_in_zip = false;  // embedded patterns read in place (target_stream.hpp), not loaded
};

prepared_file::prepared_file() : d(std::make_unique<detail>()) {}
prepared_file::prepared_file(prepared_file&&) noexcept = default;
prepared_file& prepared_file::operator=(prepared_file&&) noexcept = default;
prepared_file::~prepared_file() = default;

namespace {

// A prepared file does not carry a bad-pixel mask yet, so data with bad pixels (bad values,
// given, the detector's mask, found dead or hot; mask_bad_pixels) cannot be prepared: refused,
// naming the data and the causes, rather than saved with the bad pixels indistinguishable from
// measured zeros.
// `log_note`: `tycho preprocess`, which logs what the search decided first.
void refuse_masked_pixels(const dataset& d, bool log_note = false) {
  const bad_pixel_summary& b = d.bad_pixels;
  if (log_note && !b.note.empty()) log_info("preprocess", b.note);
  if (b.masked_pixels > 0)
    fail(TYCHO_ERR_UNSUPPORTED, "data '", d.description, "' has ", b.masked_pixels, " bad detector pixels (",
         b.value_pixels, " with NaN, inf or saturated values, ", b.given.size(), " given in [preprocess] bad_pixels, ",
         b.detector_mask_pixels, " marked by the detector's own mask, ", b.found.size(),
         " found dead or hot in the data): prepared files do not carry a bad-pixel mask yet; "
         "reconstruct from the config, where they are masked");
}
void refuse_bad_pixels(dataset& d, const config_document& doc, bool log_note = false) {
  mask_bad_pixels(d, read_bad_pixel_settings(doc.table_at("preprocess"), doc.origin(), d.info.stored_dtype));
  refuse_masked_pixels(d, log_note);
}

const char* k_format = "tycho-prepared";
const char* k_tables_from_file[] = {"data", "optics", "preprocess"};

// JSON has no NaN: unknown calibrations are null.
nlohmann::ordered_json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

// `doc`'s [table] key, when it is a string, made an absolute path (resolved against the config's
// folder, as a run resolves it); returns it, or "" where the key is absent or not a string.
std::string absolutise_path_key(config_document& doc, const char* table, const char* key) {
  toml::table* t = doc.root().at_path(table).as_table();
  if (!t) return "";
  auto node = (*t)[key];
  if (!node.is_string()) return "";
  const std::string p = fs::absolute(resolve_path(doc.base_dir(), *node.value<std::string>())).lexically_normal().string();
  t->insert_or_assign(key, p);
  return p;
}

// The files `doc` names, made absolute, so that the recorded config finds them from anywhere (a
// run from the prepared file alone resolves relative paths against the prepared file's folder,
// where the config that named them meant its own): [data] path and positions_from,
// [reconstruct.probe] initial and vacuum_pattern. Returns the [data] path's file ("" when the
// source reads no file).
std::string absolutise_file_paths(config_document& doc) {
  absolutise_path_key(doc, "data", "positions_from");
  absolutise_path_key(doc, "reconstruct.probe", "initial");
  absolutise_path_key(doc, "reconstruct.probe", "vacuum_pattern");
  return absolutise_path_key(doc, "data", "path");
}

// The table as TOML text, for comparisons; `save_raw_data` left out (it does not change the data).
std::string table_text(const toml::table* t) {
  if (!t) return "";
  toml::table copy = *t;
  copy.erase("save_raw_data");
  if (copy.empty()) return "";
  std::ostringstream os;
  os << copy;
  return os.str();
}

// The dataset's info as the source gave it, after the stage (the prepared file's record of it).
tycho_dataset_info recorded_info(const prepared_file& p) {
  const manifest_reader& m = p.d->manifest;
  tycho_dataset_info info{};
  info.struct_size = sizeof info;
  const auto scan = m.integers("data.scan_shape", 2, 1, int64_t(1) << 31);
  const auto det = m.integers("preprocess_detector.shape", 2, 1, k_most_window_px);
  info.scan_shape[0] = scan[0];
  info.scan_shape[1] = scan[1];
  info.detector_shape[0] = det[0];
  info.detector_shape[1] = det[1];
  try {  // the patterns' size, before anything is sized from it
    sdk::check_data_shape(info.scan_shape, info.detector_shape, cat("'", p.path, "': the prepared patterns"));
  } catch (const sdk::error& e) {
    fail(e.status, e.what());
  }
  info.stored_dtype = {kDLFloat, 32, 1};
  const auto step = m.numbers("source_calibration.scan_step_A", 2, true, true, "the scan step in Å, or null");
  const auto dk = m.numbers("source_calibration.detector_pixel_invA", 2, true, true, "the detector pixel in Å⁻¹, or null");
  for (int a = 0; a < 2; ++a) {
    info.scan_step_A[a] = step[std::size_t(a)];
    info.detector_pixel_invA[a] = dk[std::size_t(a)];
  }
  info.energy_eV = m.number_or_null("source_calibration.energy_eV", "eV");
  info.semiangle_mrad = m.number_or_null("source_calibration.semiangle_mrad", "mrad");
  info.C10_A = m.number_or_null("source_calibration.C10_A", "Å");
  // A far-field detector in metres and the radiation (absent from files written before them: NaN, unknown).
  info.detector_distance_m = m.number_or_null("source_calibration.detector_distance_m", "m");
  if (info.detector_distance_m <= 0)  // NaN (unknown) passes
    m.refuse("source_calibration.detector_distance_m", m.find("source_calibration.detector_distance_m"),
             "a distance > 0 in m, or null");
  info.detector_pixel_m[0] = info.detector_pixel_m[1] = std::numeric_limits<double>::quiet_NaN();
  if (m.find("source_calibration.detector_pixel_m")) {
    const auto px = m.numbers("source_calibration.detector_pixel_m", 2, true, true, "the detector pixel in m, or null");
    info.detector_pixel_m[0] = px[0];
    info.detector_pixel_m[1] = px[1];
  }
  info.radiation = TYCHO_RADIATION_UNKNOWN;
  if (const nlohmann::json* r = m.find("source_calibration.radiation"); r && !r->is_null()) {
    const std::string kind = m.string("source_calibration.radiation");
    if (kind != "xray" && kind != "electron") m.refuse("source_calibration.radiation", r, "\"electron\", \"xray\" or null");
    info.radiation = kind == "xray" ? TYCHO_RADIATION_XRAY : TYCHO_RADIATION_ELECTRON;
  }
  info.patterns_centred = m.boolean("data.patterns_centred") ? 1 : 0;
  return info;
}

}  // namespace

namespace {
std::optional<prepared_file> load_prepared(const registry& reg, const std::string& path) {
  // A prepared file from its manifest (checked: version, data.embedded, config_toml).
  const auto from_manifest = [&](manifest_reader m) {
    prepared_file p;
    p.path = path;
    check_format_version(m.json(), k_prepared_format_version, path, "prepared file",
                         "prepare it again with this tycho (tycho preprocess)");
    p.embedded = m.boolean("data.embedded");
    p.d->config_toml = m.string("config_toml");
    p.d->manifest = std::move(m);
    return p;
  };
  const auto is_prepared = [](const manifest_reader& m) {
    const nlohmann::json* format = m.find("format");
    return format != nullptr && format->is_string() && format->get<std::string>() == k_format;
  };
  const component_ref& format = format_for_path(reg, path);
  if (zip_archive::looks_like_zip(path)) {
    // The manifest alone (the patterns are read in place later, prepared_dataset, so a scan
    // larger than memory can be streamed: target_residency). A file that is not a readable zip,
    // holds a member twice or a manifest that is not JSON is corrupt, whatever it was meant to be.
    zip_archive z(path);
    const zip_archive::entry* e = z.find("manifest.json");
    if (e == nullptr) return std::nullopt;  // read as a result, which names what it lacks
    manifest_reader m(z.read_text(*e, uint64_t(64) << 20), path);
    if (!is_prepared(m)) return std::nullopt;
    prepared_file p = from_manifest(std::move(m));
    p.d->patterns_in_zip = true;
    if (p.embedded) stored_npy_member(path, "patterns.npy");  // refuses a file without them
    return p;
  }
  // Another format: read whole.
  loaded_record rec;
  try {
    rec = load_record(format, path);
  } catch (const error&) {
    return std::nullopt;
  }
  if (rec.manifest_json.empty()) return std::nullopt;
  manifest_reader m(rec.manifest_json, path);
  if (!is_prepared(m)) return std::nullopt;
  prepared_file p = from_manifest(std::move(m));
  p.d->record = std::move(rec);
  if (p.embedded) p.d->record.array("patterns", path);  // refuses a file without them
  return p;
}
}  // namespace

std::optional<prepared_file> try_load_prepared(const registry& reg, const std::string& path) {
  if (!fs::is_regular_file(path)) return std::nullopt;
  try {
    return load_prepared(reg, path);
  } catch (const error& e) {  // named as the --from file, as a result's errors are (result_file.hpp)
    const std::string text = e.what();
    fail(e.status, "--from", text.rfind(cat("'", path, "'"), 0) == 0 ? " " : ": ", text);
  }
}

config_document prepared_config(const prepared_file& p) {
  // Stored after expansion: a literal "${" (from "$${" or an environment value) stays literal.
  return config_document::parse_expanded(p.d->config_toml, p.path,
                                fs::absolute(p.path).parent_path().string());
}

void merge_prepared_config(config_document& doc, const prepared_file& p) {
  const config_document prepared = prepared_config(p);
  // CONFIG's own [data] paths, absolute, for the comparison with the recorded (absolute) ones.
  config_document mine = doc.clone();
  absolutise_file_paths(mine);
  for (const char* name : k_tables_from_file) {
    const toml::table* theirs = prepared.root()[name].as_table();
    const std::string own_text = table_text(mine.root()[name].as_table());
    if (!own_text.empty() && own_text != table_text(theirs))
      log_warning("session", cat(doc.origin(), ": [", name, "] differs from the one in the prepared file '", p.path,
                                 "', which made the data; the prepared file's [", name, "] applies"));
    if (theirs)
      doc.root().insert_or_assign(name, *theirs);
    else
      doc.root().erase(name);
  }
}

namespace {
// The dataset a prepared file records (info, description, source, sizes), without its patterns.
dataset recorded_dataset(const prepared_file& p) {
  dataset d;
  d.info = recorded_info(p);
  d.description = cat(p.d->manifest.string("data.description"), " (prepared in '", p.path, "')");
  d.source_name = p.d->manifest.string("data.source");
  d.all_patterns = d.info.scan_shape[0] * d.info.scan_shape[1];
  d.n0 = d.info.detector_shape[0];
  d.n1 = d.info.detector_shape[1];
  if (p.d->manifest.find("data.counted")) d.counted = p.d->manifest.boolean("data.counted");
  // Positions the source listed (data.positions_A, (P, 2) Å), checked as read_source_positions checks them.
  if (const nlohmann::json* pos = p.d->manifest.find("data.positions_A")) {
    const std::string expected = cat(d.all_patterns, " positions [x, y] of finite numbers in Å");
    if (!pos->is_array() || int64_t(pos->size()) != d.all_patterns) p.d->manifest.refuse("data.positions_A", pos, expected);
    d.positions_A.reserve(std::size_t(2 * d.all_patterns));
    for (const auto& xy : *pos) {
      if (!xy.is_array() || xy.size() != 2 || !xy[0].is_number() || !xy[1].is_number() ||
          !std::isfinite(xy[0].get<double>()) || !std::isfinite(xy[1].get<double>()))
        p.d->manifest.refuse("data.positions_A", pos, expected);
      d.positions_A.push_back(xy[0].get<double>());
      d.positions_A.push_back(xy[1].get<double>());
    }
  }
  return d;
}

// Embedded patterns in a zip: this rank's block checked, summed and averaged in one pass over the
// member in chunks of ~4 MiB, none kept (dataset::streamed); `member` receives the open member
// (the session keeps the targets there, or reads them into memory, target_residency). float32
// patterns, or counts (what a prepared file stores when they are exact counts: uint16, or uint8
// when every count fits), read as uint16 (`Stored`: the member's dtype; T: float, or uint16 counts).
template <class Stored, class T>
void stream_totals(const prepared_file& p, dataset& d, stored_npy_member& member, std::array<int64_t, 2> window) {
  const int64_t n = d.n0 * d.n1, w = window[0] * window[1];
  const int64_t chunk = std::max<int64_t>(1, (int64_t(4) << 20) / (n * int64_t(sizeof(Stored))));  // ~4 MiB
  std::vector<Stored> stored(static_cast<std::size_t>(std::min(chunk, std::max<int64_t>(d.patterns, 1)) * n));
  std::vector<T> shifted(static_cast<std::size_t>(n)), padded(static_cast<std::size_t>(w));
  d.streamed_mean.assign(std::size_t(w), 0.0);
  double total = 0;
  for (int64_t first = 0; first < d.patterns; first += chunk) {
    const int64_t count = std::min(chunk, d.patterns - first);
    member.read(uint64_t(d.first + first) * uint64_t(n), uint64_t(count * n), stored.data());
    if constexpr (std::is_same_v<T, float>)
      require_valid_patterns(stored.data(), count, d.n0, d.n1, d.first + first, p.path, "patterns");
    for (int64_t l = 0; l < count; ++l) {
      // As prepared_dataset's in-memory path, recompute_totals and mean_pattern, value for value
      // (uint8 counts widened by the shift).
      ifftshift_pattern(stored.data() + l * n, shifted.data(), d.n0, d.n1);
      total += pattern_total(shifted.data(), d.n0, d.n1, d.info.patterns_centred != 0);
      const T* out = shifted.data();
      if (w != n) {
        pad_fft_order_pattern(shifted.data(), d.n0, d.n1, padded.data(), window[0], window[1]);
        out = padded.data();
      }
      for (int64_t k = 0; k < w; ++k)
        if constexpr (std::is_same_v<T, float>) {
          if (std::isfinite(out[k])) d.streamed_mean[std::size_t(k)] += out[k];
        } else {
          d.streamed_mean[std::size_t(k)] += out[k];
        }
    }
  }
  for (double& v : d.streamed_mean) v /= double(std::max<int64_t>(d.patterns, 1));
  d.total_intensity = total;
  d.mean_total_intensity = d.patterns > 0 ? total / double(d.patterns) : 0.0;
}

dataset streamed_prepared_dataset(const prepared_file& p, const config_document& merged, int64_t part, int64_t parts,
                                  std::string& preprocess_json, std::unique_ptr<stored_npy_member>& member) {
  const nlohmann::json& m = p.d->manifest.json();
  dataset d = recorded_dataset(p);
  // The start-up pass reads the member in order (the whole of it on one rank: its CRC checked at
  // the end); the run's per-batch reads get a raw handle.
  auto checked = std::make_unique<stored_npy_member>(p.path, "patterns.npy", true);
  member = std::make_unique<stored_npy_member>(p.path, "patterns.npy");
  if (member->shape() != std::vector<int64_t>{d.info.scan_shape[0], d.info.scan_shape[1], d.n0, d.n1})
    fail(TYCHO_ERR_BAD_DATA, "'", p.path, "': patterns.npy is not of shape (", d.info.scan_shape[0], ", ",
         d.info.scan_shape[1], ", ", d.n0, ", ", d.n1, ") as its manifest says");
  block_of(d.all_patterns, parts, part, d.first, d.patterns);
  d.streamed = true;
  d.streamed_counts = member->counts();
  if (d.streamed_counts) d.info.stored_dtype = {kDLUInt, 16, 1};
  // The window the engine gets (detector padding), for the mean pattern in its layout.
  const auto window = padded_window(read_detector_padding(merged.table_at("preprocess"), merged.origin()), d.n0, d.n1);
  if (!member->counts())
    stream_totals<float, float>(p, d, *checked, window);
  else if (member->dtype().bits == 8)
    stream_totals<uint8_t, uint16_t>(p, d, *checked, window);
  else
    stream_totals<uint16_t, uint16_t>(p, d, *checked, window);
  checked->check_crc_at_end();
  preprocess_json = m.contains("preprocess") && !m["preprocess"].is_null() ? m["preprocess"].dump() : "";
  return d;
}
}  // namespace

dataset prepared_dataset(const prepared_file& p, const config_document& merged, const registry& reg, int64_t part,
                         int64_t parts, const rank_sum& sum_across_ranks, std::string& preprocess_json,
                         std::unique_ptr<stored_npy_member>& member) {
  const nlohmann::json& m = p.d->manifest.json();
  {
    if (!p.embedded) {
      // Re-read the source and re-run the stage: the file records which bytes it read.
      auto text = [&](const char* key) {  // null (no file) as ""
        const nlohmann::json* v = p.d->manifest.find(cat("data.", key));
        if (v == nullptr || v->is_null()) return std::string();
        if (!v->is_string()) p.d->manifest.refuse(cat("data.", key), v, "a string or null");
        return v->get<std::string>();
      };
      const std::string source = text("source_file"), want = text("source_sha256");
      if (!source.empty()) {
        if (!fs::is_regular_file(source))
          fail(TYCHO_ERR_NOT_FOUND, "the prepared file '", p.path, "' does not embed its patterns, and its source '",
               source, "' is gone; prepare the data again with save_raw_data = true (tycho preprocess ",
               "--save-raw-data) where the source is, to carry them along");
        const std::string now = sha256_file(source);
        if (now != want)
          fail(TYCHO_ERR_BAD_DATA, "the source '", source, "' of the prepared file '", p.path,
               "' has changed since it was prepared (SHA-256 ", want, " then, ", now,
               " now); prepare the data again with tycho preprocess");
      }
      const toml::table& data_t = merged.table_at("data");
      const component_ref& src =
          reg.find(TYCHO_COMPONENT_SOURCE, *setting_value<std::string>(data_t, "data", "source"));
      tycho_config data_cfg{&data_t, "[data]", merged.base_dir()};
      // As a run from the config: on chunks of the stored counts when the stage changes them.
      if (stage_changes_patterns(merged)) {
        chunked_read chunked =
            read_preprocessed_in_chunks(src, &data_cfg, part, parts, merged, sum_across_ranks, {},
                                        keeps_integer_targets(merged));
        refuse_masked_pixels(chunked.data);
        preprocess_json = chunked.report.to_json();
        return std::move(chunked.data);
      }
      const preprocess_settings stage = read_preprocess_settings(merged.table_at("preprocess"), merged.origin());
      dataset d = read_dataset(src, &data_cfg, part, parts,
                               keeps_integer_targets(merged) && (!stage.active() || stage.only_measures()));
      refuse_bad_pixels(d, merged);
      preprocess_json = preprocess_dataset(d, merged, sum_across_ranks).to_json();
      return d;
    }
    if (p.d->patterns_in_zip) return streamed_prepared_dataset(p, merged, part, parts, preprocess_json, member);
    // Embedded: this rank's block of the centred (Rx, Ry, N0, N1) float32 patterns, or counts
    // (uint16, or uint8 when every count fits; kept as uint16 counts: the targets' own precision).
    dataset d = recorded_dataset(p);
    const owned_array& a = p.d->record.array("patterns", p.path);
    const bool f32 = a.dtype.code == kDLFloat && a.dtype.bits == 32;
    const bool u16 = a.dtype.code == kDLUInt && a.dtype.bits == 16;
    const bool u8 = a.dtype.code == kDLUInt && a.dtype.bits == 8;
    if (!(f32 || u16 || u8) || a.shape != std::vector<int64_t>{d.info.scan_shape[0], d.info.scan_shape[1], d.n0, d.n1})
      fail(TYCHO_ERR_BAD_DATA, "'", p.path, "': patterns.npy is not float32, uint16 or uint8 of shape (",
           d.info.scan_shape[0], ", ", d.info.scan_shape[1], ", ", d.n0, ", ", d.n1, ") as its manifest says");
    block_of(d.all_patterns, parts, part, d.first, d.patterns);
    const int64_t n = d.n0 * d.n1;
    if (u16 || u8) {
      d.info.stored_dtype = {kDLUInt, 16, 1};
      d.counts.resize(std::size_t(d.patterns * n));
      for (int64_t l = 0; l < d.patterns; ++l) {  // uint8 counts widened by the shift
        uint16_t* out = d.counts.data() + l * n;
        if (u8)
          ifftshift_pattern(a.as<uint8_t>() + (d.first + l) * n, out, d.n0, d.n1);
        else
          ifftshift_pattern(a.as<uint16_t>() + (d.first + l) * n, out, d.n0, d.n1);
      }
    } else {
      d.targets.resize(std::size_t(d.patterns * n));
      const float* all = a.as<float>();
      require_valid_patterns(all + d.first * n, d.patterns, d.n0, d.n1, d.first, p.path, "patterns");
      for (int64_t l = 0; l < d.patterns; ++l)
        ifftshift_pattern(all + (d.first + l) * n, d.targets.data() + l * n, d.n0, d.n1);
    }
    recompute_totals(d);
    preprocess_json = m.contains("preprocess") && !m["preprocess"].is_null() ? m["preprocess"].dump() : "";
    return d;
  }
}

int preprocess_command(config_document doc, const registry& reg, const std::string& output, bool save_raw_data,
                       std::ostream& out, tycho_save_mode mode, prepare_mode how) {
  if (detect_launch(process_environment()).multi_process())
    fail(TYCHO_ERR_INVALID_ARGUMENT, "tycho preprocess runs as one process (it reads every pattern and writes one ",
         "file): start it without mpirun, srun or torchrun");
  if (save_raw_data) doc.set_from_text("preprocess.save_raw_data=true");
  const std::string source_file = absolutise_file_paths(doc);

  // The whole config is checked as a run checks it (keys, components, calibrations, the window),
  // before any pattern is read.
  preview_run(doc, reg);
  const preprocess_settings settings = read_preprocess_settings(doc.table_at("preprocess"), doc.origin());
  if (settings.geometry_search == preprocess_settings::search_mode::always)
    log_warning("preprocess", "[preprocess] scan_geometry_search = true: the trial reconstructions run in a "
                              "reconstruction's session, not here: the prepared file keeps the preprocessing's "
                              "geometry (a run --from it does not search)");
  const toml::table& data_t = doc.table_at("data");
  const std::string source_name = *setting_value<std::string>(data_t, "data", "source");
  const component_ref& source = reg.find(TYCHO_COMPONENT_SOURCE, source_name);
  tycho_config data_cfg{&data_t, "[data]", doc.base_dir()};
  const component_ref& format = format_for_path(reg, output);
  // Embedded patterns stream from the source into the file (prepare_stream.hpp) where the format
  // takes produced arrays: the host never holds the scan. A file that does not embed them is made
  // from the same passes, the last one only counted (its totals). Else (or asked for) the scan in
  // memory.
  const bool streamed =
      how == prepare_mode::streamed && (!settings.save_raw_data || format_takes_produced_arrays(format));
  std::unique_ptr<streamed_patterns> stream;
  dataset held;                      // in memory: the preprocessed patterns (counts when they stay counts)
  const dataset* d = &held;          // the data after the stage (streamed: its header)
  preprocess_report rep;
  tycho_dataset_info source_info{};  // what the source recorded, before the stage touched the detector
  if (streamed) {
    stream = std::make_unique<streamed_patterns>(source, &data_cfg, doc, [](const dataset& h) { refuse_masked_pixels(h, true); });
    d = &stream->header();
    rep = stream->report();
    source_info = stream->source_info();
    log_info("preprocess", cat("read ", d->patterns, " patterns in chunks of ", stream->read_as(), " (",
                               stream->passes() - 1, stream->passes() == 2 ? " pass" : " passes",
                               " before the file); ",
                               settings.save_raw_data ? cat("writing them as ", stream->counts() ? cat(sdk::dtype_name(stream->dtype()), " counts") : std::string("float32"),
                                                            " as they are preprocessed and read again")
                                                      : "preprocessing them again for their totals"));
    if (!settings.save_raw_data) stream->drain();  // the manifest's totals; nothing kept
  } else if (stage_changes_patterns(doc)) {
    // A stage that changes the patterns runs on chunks of the source (chunked_preprocess.hpp).
    chunked_read chunked =
        read_preprocessed_in_chunks(source, &data_cfg, 0, 1, doc, sum_on_one_rank, {}, keeps_integer_targets(doc));
    refuse_masked_pixels(chunked.data, true);
    log_info("preprocess", cat("read and preprocessed ", chunked.data.patterns, " patterns in chunks of ",
                               chunked.read_as, " (", chunked.passes, " passes)"));
    held = std::move(chunked.data);
    rep = std::move(chunked.report);
    source_info = chunked.source_info;
  } else {
    held = read_dataset(source, &data_cfg, 0, 1, keeps_integer_targets(doc));
    refuse_bad_pixels(held, doc, true);
    source_info = held.info;
    rep = preprocess_dataset(held, doc, sum_on_one_rank);
  }
  const std::array<int64_t, 2> measured{source_info.detector_shape[0], source_info.detector_shape[1]};

  const detector_padding_request pad_request = read_detector_padding(doc.table_at("preprocess"), doc.origin());
  const auto window = padded_window(pad_request, d->n0, d->n1);
  const run_geometry g = resolve_run_geometry(doc, d->info, d->description, window[0], window[1], d->positions_A);
  const std::string checksum = source_file.empty() ? "" : sha256_file(source_file);
  const uintmax_t source_bytes = source_file.empty() ? 0 : fs::file_size(source_file);

  const int64_t rx = d->info.scan_shape[0], ry = d->info.scan_shape[1];
  // The patterns at the source's precision when they are whole counts (uint16, or uint8 when no
  // count can pass 255: stored_count_bytes), else float32.
  const bool counts = streamed ? stream->counts() : !held.counts.empty();
  const DLDataType stored = streamed ? stream->dtype()
                            : counts ? DLDataType{kDLUInt, uint8_t(8 * stored_count_bytes(held.max_value, settings.binning)), 1}
                                     : DLDataType{kDLFloat, 32, 1};
  const std::string stored_name = counts ? cat(sdk::dtype_name(stored), " counts") : std::string("float32");
  std::vector<owned_array> arrays;
  std::vector<tycho_array_producer> producers;
  if (settings.save_raw_data) {
    owned_array a;
    a.name = "patterns";
    a.dtype = stored;
    a.shape = {rx, ry, d->n0, d->n1};
    const int64_t n = d->n0 * d->n1;
    if (streamed) {
      producers.push_back(stream->producer());
    } else if (counts) {
      const int bytes = stored.bits / 8;
      a.bytes.resize(std::size_t(held.patterns * n * bytes));
      std::vector<uint16_t> centred(static_cast<std::size_t>(n));
      for (int64_t l = 0; l < held.patterns; ++l) {
        fftshift_pattern(held.counts.data() + l * n, centred.data(), held.n0, held.n1);
        store_counts(centred.data(), n, bytes, a.bytes.data() + std::size_t(l * n * bytes), held.first + l, held.max_value);
      }
    } else {
      a.bytes.resize(std::size_t(held.patterns * n) * sizeof(float));
      auto* dst = reinterpret_cast<float*>(a.bytes.data());
      for (int64_t l = 0; l < held.patterns; ++l) fftshift_pattern(held.targets.data() + l * n, dst + l * n, held.n0, held.n1);
    }
    arrays.push_back(std::move(a));
  }
  if (!rep.com.empty()) {
    arrays.push_back(owned_array::from_vector("com", {kDLFloat, 64, 1}, {rx, ry, 2}, rep.com));
    if (streamed && settings.save_raw_data) producers.push_back({nullptr, nullptr});
  }

  // The manifest (made after the patterns when they are streamed: their totals are known then).
  const auto manifest = [&]() {
    nlohmann::ordered_json j;
    j["format"] = k_format;
    j["format_version"] = k_prepared_format_version;
    j["config_toml"] = doc.to_toml();
    j["data"] = {{"description", d->description},
                 {"source", source_name},
                 {"scan_shape", {rx, ry}},
                 {"detector_shape", measured},
                 {"patterns_centred", d->info.patterns_centred != 0},
                 {"mean_total_intensity", d->mean_total_intensity},
                 {"embedded", settings.save_raw_data},
                 {"source_file", source_file.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(source_file)},
                 {"source_bytes", source_bytes},
                 {"source_sha256", checksum.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(checksum)}};
    // Whether the source held integer counts (the patterns may be stored here as float32).
    j["data"]["counted"] = source_info.stored_dtype.code == kDLUInt || source_info.stored_dtype.code == kDLInt;
    if (!d->positions_A.empty()) {  // listed by the source (a CXI file's translations): a run from the file needs them
      nlohmann::ordered_json pos = nlohmann::ordered_json::array();
      for (std::size_t k = 0; k + 1 < d->positions_A.size(); k += 2) pos.push_back({d->positions_A[k], d->positions_A[k + 1]});
      j["data"]["positions_A"] = std::move(pos);
    }
    j["source_calibration"] = {
        {"scan_step_A", {number_or_null(source_info.scan_step_A[0]), number_or_null(source_info.scan_step_A[1])}},
        {"detector_pixel_invA",
         {number_or_null(d->info.detector_pixel_invA[0]), number_or_null(d->info.detector_pixel_invA[1])}},
        {"energy_eV", number_or_null(source_info.energy_eV)},
        {"semiangle_mrad", number_or_null(source_info.semiangle_mrad)},
        {"C10_A", number_or_null(source_info.C10_A)},
        {"detector_distance_m", number_or_null(source_far_field_m(d->info)[0])},
        {"detector_pixel_m", {number_or_null(source_far_field_m(d->info)[1]), number_or_null(source_far_field_m(d->info)[2])}},
        {"radiation", source_radiation(source_info) == TYCHO_RADIATION_XRAY       ? nlohmann::ordered_json("xray")
                      : source_radiation(source_info) == TYCHO_RADIATION_ELECTRON ? nlohmann::ordered_json("electron")
                                                                                  : nlohmann::ordered_json(nullptr)}};
    j["preprocess_detector"] = {{"shape", {d->n0, d->n1}}};
    j["calibration"] = {{"scan_step_A", {g.geometry.step_A[0], g.geometry.step_A[1]}},
                        {"detector_pixel_invA", {g.sampling.dk_invA[0], g.sampling.dk_invA[1]}},
                        {"object_pixel_A", {g.geometry.pixel_A[0], g.geometry.pixel_A[1]}},
                        {"window_shape", window},
                        {"detector_padding", {centred_padding(d->n0, window[0]), centred_padding(d->n1, window[1])}},
                        {"scan_origin_A", {g.geometry.scan_origin_A[0], g.geometry.scan_origin_A[1]}},
                        {"energy_eV", g.optics.energy_eV},
                        {"wavelength_A", g.wavelength_A},
                        {"semiangle_mrad", g.optics.semiangle_mrad},
                        {"C10_A", g.optics.C10_A},
                        {"object_padding_px", g.geometry.padding_px}};
    const std::string pre = rep.to_json();
    j["preprocess"] = pre.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json::parse(pre);
    j["arrays"] = nlohmann::ordered_json::object();
    if (settings.save_raw_data)
      j["arrays"]["patterns"] = cat(
          "(Rx, Ry, N0, N1) ", sdk::dtype_name(stored),
          ": the preprocessed patterns, centred (zero frequency at index N/2), before detector padding",
          counts ? " (whole counts, kept at the source's precision)" : "");
    if (!rep.com.empty())
      j["arrays"]["com"] = "(Rx, Ry, 2) float64: measured centre of mass of each pattern, px from the detector centre, "
                           "after crop and binning (NaN: no intensity)";
    std::vector<component_provenance> used;
    for (const auto& [role, c] : {std::pair<const char*, const component_ref*>{"source", &source}, {"format", &format}})
      used.push_back({role, kind_name(c->kind), c->name, c->version, c->plugin_path});
    j["provenance"] = nlohmann::ordered_json::parse(provenance_json(used));
    return j.dump(2);
  };
  {
    const defer_stop_signals finish_the_save_first;
    if (streamed && settings.save_raw_data) {
      save_produced_record(format, arrays, producers, [&] {
        if (!stream->complete()) fail(TYCHO_ERR_INTERNAL, "preprocess: the manifest was asked for before the patterns");
        return manifest();
      }, output, mode);
    } else {
      save_record(format, arrays, manifest(), output, mode);
    }
  }
  log_info("preprocess", cat("prepared ", rx, " x ", ry, " patterns of ", d->n0, " x ", d->n1, " px",
                             settings.save_raw_data ? cat(" (embedded as ", stored_name,
                                                          streamed ? ", streamed from the source)" : ")")
                                                    : cat(" (not embedded: the file records '", source_file,
                                                          "', SHA-256 ", checksum, ")")));
  out << "wrote " << output << "\n";
  return 0;
}

}  // namespace tycho::host
