#include "results/result_file.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/sdk/checked.hpp>
#include <tycho/sdk/npy.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "data/detector_padding.hpp"
#include "data/finite_values.hpp"
#include "results/manifest_checks.hpp"
#include "results/zip_archive.hpp"
#include "tycho/host/run_plan.hpp"

namespace tycho::host {

namespace {

constexpr int64_t k_most_scan_axis = int64_t(1) << 31;   // positions per scan axis
constexpr int64_t k_most_object_px = int64_t(1) << 31;   // object pixels per axis (core's object_side)
constexpr int64_t k_most_slices = 4096;                  // [reconstruct] slices
constexpr int64_t k_most_probe_modes = 64;               // [reconstruct] probe_modes
constexpr uint64_t k_most_manifest_bytes = uint64_t(64) << 20;
constexpr DLDataType k_f64{kDLFloat, 64, 1}, k_u8{kDLUInt, 8, 1}, k_i64{kDLInt, 64, 1};
constexpr DLDataType k_c64{kDLComplex, 64, 1}, k_c128{kDLComplex, 128, 1};

bool same(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

std::string shape_text(const std::vector<int64_t>& s) { return sdk::npy::shape_text(s); }

// What one array of a result must be: its dtype(s) and, per axis, a fixed size or a range.
struct array_rule {
  std::vector<DLDataType> dtypes;
  std::vector<std::array<int64_t, 2>> axes;  // [lo, hi] per axis
  std::string expected;                      // for the message
};

bool fits(const array_rule& r, DLDataType dtype, const std::vector<int64_t>& shape) {
  if (std::none_of(r.dtypes.begin(), r.dtypes.end(), [&](DLDataType t) { return same(t, dtype); })) return false;
  if (shape.size() != r.axes.size()) return false;
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < r.axes[i][0] || shape[i] > r.axes[i][1]) return false;
  return true;
}

std::array<int64_t, 2> exactly(int64_t n) { return {n, n}; }
int64_t ceil_tiles(int64_t px, int64_t tile) { return px / tile + (px % tile != 0 ? 1 : 0); }  // no overflow

// The rules of every array the manifest names, from the manifest alone (the object's dtype,
// once known, fixes the probe's and the states').
class member_rules {
 public:
  explicit member_rules(const result_file& r) : r_(r) {
    const int64_t p = r.patterns(), n0 = r.window_shape[0], n1 = r.window_shape[1];
    std::array<int64_t, 2> h{1, k_most_object_px}, w{1, k_most_object_px};
    std::string hw = "H, W up to 2^31 (listed positions)";
    if (r.raster) {
      scan_geometry g{};
      g.scan_shape[0] = r.scan_shape[0];
      g.scan_shape[1] = r.scan_shape[1];
      for (int a = 0; a < 2; ++a) {
        g.step_A[a] = r.scan_step_A[std::size_t(a)];
        g.pixel_A[a] = r.object_pixel_A[std::size_t(a)];
        g.window[a] = r.window_shape[std::size_t(a)];
        g.scan_origin_A[a] = r.scan_origin_A[std::size_t(a)];
      }
      g.padding_px = r.object_padding_px;
      try {
        // As the run laid it out: under the scan map (scan_rotation_deg, the parallax's estimate).
        const object_layout layout = layout_mapped_raster(g, r.map);
        h = exactly(layout.shape[0]);
        w = exactly(layout.shape[1]);
      } catch (const error& e) {
        fail(TYCHO_ERR_BAD_DATA, "'", r.path, "': member 'manifest.json' describes a scan whose object cannot be laid ",
             "out (", e.what(), "): the file is corrupt or crafted");
      }
      hw = cat("(H, W) = (", h[0], ", ", w[0], ") from the manifest's scan (", r.scan_shape[0], " x ", r.scan_shape[1],
               " positions, step ", r.scan_step_A[0], " Å, pixel ", r.object_pixel_A[0], " Å, window ", n0, " x ", n1,
               ", padding ", r.object_padding_px, " px",
               r.map.is_identity() ? std::string() : std::string(", under its preprocess.scan_map"), ")");
    }
    rules_["object"] = {{k_c64, k_c128}, {{1, k_most_slices}, h, w},
                        cat("(slices, H, W) complex64 or complex128 with slices from 1 to ", k_most_slices, " and ",
                            hw)};
    rules_["probe"] = {{k_c64, k_c128}, {{1, k_most_probe_modes}, exactly(n0), exactly(n1)},
                       cat("(modes, ", n0, ", ", n1, ") of the object's dtype, modes from 1 to ", k_most_probe_modes,
                           " (calibration.window_shape)")};
    for (const char* name : {"positions_px", "positions_A"})
      rules_[name] = {{k_f64}, {exactly(p), exactly(2)},
                      cat("(", p, ", 2) float64 (the ", r.scan_shape[0], " x ", r.scan_shape[1],
                          " positions of data.scan_shape)")};
    rules_["loss_history"] = {{k_f64}, {exactly(r.iterations)},
                              cat("(", r.iterations, ",) float64 (history.iterations)")};
    rules_["mask"] = {{k_u8}, {exactly(n0), exactly(n1)}, cat("(", n0, ", ", n1, ") uint8 (calibration.window_shape)")};
    if (const int64_t t = r.tile_px; t > 0) {  // compact batches: each tile's steps, (rows, cols) of the object
      const auto tiles = [&](std::array<int64_t, 2> px) {
        return std::array<int64_t, 2>{ceil_tiles(px[0], t), ceil_tiles(px[1], t)};
      };
      rules_["object_tile_steps"] = {{k_i64}, {tiles(h), tiles(w)},
                                     cat("(rows, cols) int64, the ", t, " x ", t, " px tiles (batching.tile_px) of ",
                                         r.raster ? cat("the object ", h[0], " x ", w[0]) : std::string("the object"))};
    }
  }

  // The rule of member `name`; a state array takes its parameter's shape (`object_shape`,
  // `probe_shape`, as read); nullptr for a name no result holds.
  const array_rule* rule(const std::string& name, const std::vector<int64_t>& object_shape,
                         const std::vector<int64_t>& probe_shape, DLDataType dtype) {
    if (auto it = rules_.find(name); it != rules_.end()) {
      if (name == "probe") it->second.dtypes = {dtype};
      return &it->second;
    }
    for (const auto& [which, opt, shape] :
         {std::tuple{"object", &r_.object_optimizer, &object_shape},
          std::tuple{"probe", &r_.probe_optimizer, &probe_shape}}) {
      const std::string prefix = cat("optimizer.", which, ".");
      if (name.rfind(prefix, 0) != 0 || !*opt) continue;
      const std::string state = name.substr(prefix.size());
      if (std::find((*opt)->arrays.begin(), (*opt)->arrays.end(), state) == (*opt)->arrays.end()) return nullptr;
      state_rule_ = {{dtype}, {}, cat(shape_text(*shape), " ", sdk::npy::dtype_text(dtype), ", as the ", which,
                                      " (optimizer_state.", which, ".arrays lists '", state, "')")};
      for (int64_t d : *shape) state_rule_.axes.push_back(exactly(d));
      return &state_rule_;
    }
    return nullptr;
  }

  std::string known_names() const {
    return cat("object, probe, positions_px, positions_A, loss_history, mask",
               r_.tile_px > 0 ? ", object_tile_steps" : "",
               " and the optimizer states optimizer_state lists (optimizer.<parameter>.<array>)");
  }

 private:
  const result_file& r_;
  std::map<std::string, array_rule> rules_;
  array_rule state_rule_;
};

// Refuses an array (or a member's header) that breaks its rule, naming the file and member.
void check_array(const result_file& r, member_rules& rules, const std::string& name, DLDataType dtype,
                 const std::vector<int64_t>& shape, const std::vector<int64_t>& object_shape,
                 const std::vector<int64_t>& probe_shape, DLDataType object_dtype) {
  const array_rule* rule = rules.rule(name, object_shape, probe_shape, object_dtype);
  if (rule == nullptr)
    fail(TYCHO_ERR_BAD_DATA, "'", r.path, "': member '", sdk::printable(name),
         ".npy' is not an array of a tycho result; expected only ", rules.known_names());
  if (!fits(*rule, dtype, shape))
    fail(TYCHO_ERR_BAD_DATA, "'", r.path, "': array '", name, "' is ", shape_text(shape), " ",
         sdk::npy::dtype_text(dtype), "; expected ", rule->expected);
}

// The manifest's keys that size and bound what follows.
void read_manifest(result_file& r) {
  const manifest_reader& m = r.manifest;
  const nlohmann::json* format = m.find("format");
  if (format != nullptr && format->is_string() && format->get<std::string>() == "tycho-prepared")
    fail(TYCHO_ERR_BAD_DATA, "'", r.path, "' is a prepared file (written by tycho preprocess), not a result of tycho "
         "reconstruct: give a result file (reconstruct --from takes a prepared file without a CONFIG)");
  if (format == nullptr || !format->is_string() || format->get<std::string>() != "tycho-result")
    m.refuse("format", format, "\"tycho-result\" (a tycho result)");
  check_format_version(m.json(), k_result_format_version, r.path, "tycho result",
                       "read it with the tycho that wrote it");
  r.iterations = m.integer("history.iterations", 0, k_most_schedule_iterations);
  if (m.find("history.schedule_iterations"))
    r.schedule_iterations = m.integer("history.schedule_iterations", 0, k_most_schedule_iterations);
  const auto scan = m.integers("data.scan_shape", 2, 1, k_most_scan_axis);
  const auto window = m.integers("calibration.window_shape", 2, 1, k_most_window_px);
  r.scan_shape = {scan[0], scan[1]};
  r.window_shape = {window[0], window[1]};
  // The (P, 2) positions held twice (px and Å), bounded by this machine's memory before any
  // position is read or laid out.
  const int64_t position_bytes = sdk::checked_size_or_fail({scan[0], scan[1], 2, 2, 8},
                                                           cat("'", r.path, "': the positions of data.scan_shape"));
  if (const uint64_t have = physical_memory_bytes(); have > 0 && uint64_t(position_bytes) > have)
    fail(TYCHO_ERR_BAD_DATA, "'", r.path, "': member 'manifest.json' has data.scan_shape = [", scan[0], ", ", scan[1],
         "], whose positions alone need ", human_bytes(uint64_t(position_bytes)), ", more than this machine's ",
         human_bytes(have), ": the file is corrupt or crafted");
  const auto pixel = m.numbers("calibration.object_pixel_A", 2, true, false, "the object's pixel size in Å");
  const auto step =
      m.numbers("calibration.scan_step_A", 2, true, true, "the scan step in Å, null for listed positions");
  const auto origin = m.numbers("calibration.scan_origin_A", 2, false, false, "Å");
  r.object_padding_px = m.integer("calibration.object_padding_px", 0, k_most_object_px);
  for (int a = 0; a < 2; ++a) {
    r.object_pixel_A[std::size_t(a)] = pixel[std::size_t(a)];
    r.scan_step_A[std::size_t(a)] = step[std::size_t(a)];
    r.scan_origin_A[std::size_t(a)] = origin[std::size_t(a)];
  }
  // The scan map the run laid its object out under (a turned raster's object is larger).
  if (const nlohmann::json* pre = m.find("preprocess"); pre != nullptr && pre->is_object())
    r.map = scan_map_of_report(pre->dump(), cat("'", r.path, "': member 'manifest.json'"));
  // Compact batches (issue 30): the tiles whose steps object_tile_steps holds.
  if (m.find("batching.tile_px")) r.tile_px = m.integer("batching.tile_px", 0, k_most_object_px);
  r.raster = std::isfinite(step[0]) && std::isfinite(step[1]);
  if (r.raster != (std::isfinite(step[0]) || std::isfinite(step[1])))
    m.refuse("calibration.scan_step_A", m.find("calibration.scan_step_A"),
             "2 steps in Å, or [null, null] for listed positions");

  // Each optimizer's step count: at most one step per mini-batch of one pattern per iteration
  // (and 2^53, which the optimizers count on from without overflow).
  if (const nlohmann::json* states = m.find("optimizer_state")) {
    if (!states->is_object())
      m.refuse("optimizer_state", states, "an object with the state of each parameter's optimizer");
    const auto most = sdk::checked_mul(r.iterations, r.patterns());
    const int64_t most_steps = std::min<int64_t>(most ? *most : INT64_MAX, int64_t(1) << 53);
    for (const auto& [which, slot] :
         {std::pair{"object", &r.object_optimizer}, std::pair{"probe", &r.probe_optimizer}}) {
      if (!states->contains(which)) continue;
      const std::string key = cat("optimizer_state.", which);
      saved_optimizer o;
      o.optimizer = m.string(key + ".optimizer");
      o.steps = m.integer(key + ".steps", 0, most_steps);
      const nlohmann::json& arrays = m.at(key + ".arrays", "a list of state array names");
      if (!arrays.is_array()) m.refuse(key + ".arrays", &arrays, "a list of state array names");
      for (const auto& a : arrays) {
        if (!a.is_string()) m.refuse(key + ".arrays", &arrays, "a list of state array names");
        o.arrays.push_back(a.get<std::string>());
      }
      *slot = std::move(o);
    }
  }
}

const char* const k_required[] = {"object", "probe", "positions_px", "loss_history"};

// Zip: the members' declared sizes and headers against the manifest's rules, before the format
// plugin inflates any array.
void check_zip_members(result_file& r, zip_archive& z, member_rules& rules) {
  struct header_of {
    std::string name;
    sdk::npy::stored_header h;
  };
  std::vector<header_of> headers;
  uint64_t declared = 0;
  for (const auto& e : z.entries()) {
    if (e.name.size() <= 4 || e.name.compare(e.name.size() - 4, 4, ".npy") != 0) continue;  // never inflated
    headers.push_back({e.name.substr(0, e.name.size() - 4), z.npy_header(e)});
    declared += e.size;
  }
  std::vector<int64_t> object_shape, probe_shape;
  DLDataType dtype = k_c64;
  for (const auto& h : headers) {
    if (h.name == "object") object_shape = h.h.shape, dtype = h.h.dtype;
    if (h.name == "probe") probe_shape = h.h.shape;
  }
  for (const char* name : k_required)
    if (std::none_of(headers.begin(), headers.end(), [&](const header_of& h) { return h.name == name; }))
      fail(TYCHO_ERR_BAD_DATA, "'", r.path, "' has no member '", name, ".npy'; expected every array of a tycho result");
  for (const auto& h : headers) check_array(r, rules, h.name, h.h.dtype, h.h.shape, object_shape, probe_shape, dtype);
  if (const uint64_t have = physical_memory_bytes(); have > 0 && declared > have)
    fail(TYCHO_ERR_OUT_OF_MEMORY, "'", r.path, "': its arrays declare ", human_bytes(declared),
         ", more than this machine's ", human_bytes(have), " of memory");
}

// Every probe window must lie inside the object, as the run keeps it (core/src/driver.cpp: a
// position stays within [N/2, H - N + N/2)): an object cropped smaller than its positions imply,
// or positions far outside it, are refused.
void check_positions_inside(const result_file& r) {
  const owned_array& obj = r.array("object");
  const owned_array& pos = r.array("positions_px");
  const double* p = pos.as<double>();
  for (int64_t k = 0; k < pos.shape[0]; ++k)
    for (int a = 0; a < 2; ++a) {
      const int64_t n = r.window_shape[std::size_t(a)], side = obj.shape[std::size_t(1 + a)];
      const double lo = double(n / 2), hi = double(side - n + n / 2);
      const double x = p[2 * k + a];
      if (!(x >= lo - 1e-6 && x <= hi + 1e-6))
        fail(TYCHO_ERR_BAD_DATA, "'", r.path, "': array 'positions_px' holds position ", k, " at ", x,
             " px along axis ", a, ", where its ", n, " px window does not lie inside the object's ", side,
             " px (expected ", lo, " to ", hi, "): the object and the positions do not match (a cropped object?)");
    }
}

}  // namespace

bool result_file::has(const std::string& name) const {
  return std::any_of(record.arrays.begin(), record.arrays.end(), [&](const owned_array& a) { return a.name == name; });
}

std::string dtype_name_of(DLDataType t) { return sdk::npy::dtype_text(t); }

namespace {
result_file read_checked(const registry& reg, const std::string& path, const std::string& use) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail(TYCHO_ERR_NOT_FOUND, "'", path, "': no such file",
         std::filesystem::exists(path, ec) ? " (not a regular file)" : "");
  const component_ref& format = format_for_path(reg, path);
  result_file r;
  r.path = path;
  // A zip archive (the built-in format's, or any format's that writes one) is looked into first.
  const bool zip = zip_archive::looks_like_zip(path);
  if (zip) {
    zip_archive z(path);
    const zip_archive::entry* m = z.find("manifest.json");
    if (m == nullptr) fail(TYCHO_ERR_BAD_DATA, "'", path, "' has no member 'manifest.json': not a tycho result");
    r.manifest = manifest_reader(z.read_text(*m, k_most_manifest_bytes), path);
    read_manifest(r);
    member_rules rules(r);
    check_zip_members(r, z, rules);
  }
  try {
    r.record = load_record(format, path);
  } catch (const error& e) {
    fail(e.status, "'", path, "' is not a tycho result: ", e.what());
  }
  if (!zip) {
    if (r.record.manifest_json.empty())
      fail(TYCHO_ERR_BAD_DATA, "'", path, "' has no manifest.json: not a tycho result");
    r.manifest = manifest_reader(r.record.manifest_json, path);
    read_manifest(r);
  }
  // The arrays as loaded (whatever the format): the same rules, finite values, the positions.
  member_rules rules(r);
  for (const char* name : k_required) r.array(name);  // refuses a missing one, naming it
  const owned_array& obj = r.array("object");
  const owned_array& prb = r.array("probe");
  for (const auto& a : r.record.arrays) {
    check_array(r, rules, a.name, a.dtype, a.shape, obj.shape, prb.shape, obj.dtype);
    require_finite(a, path, use);
  }
  check_positions_inside(r);
  return r;
}
}  // namespace

result_file read_result_file(const registry& reg, const std::string& path, const std::string& role,
                             const std::string& use) {
  try {
    return read_checked(reg, path, use);
  } catch (const error& e) {
    const std::string text = e.what(), quoted = cat("'", path, "'");
    if (role.empty()) throw;
    fail(e.status, role, text.rfind(quoted, 0) == 0 ? " " : ": ", text);
  }
}

}  // namespace tycho::host
