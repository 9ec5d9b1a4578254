// What a session gives back: its result arrays, the manifest, the saved file, and what it holds.

#include "runtime/session_state.hpp"

#include <tycho/core/probe_fit.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <complex>

#include "data/bad_pixels.hpp"
#include "tycho/host/result_record.hpp"
#include "tycho/host/settings.hpp"
#include "settings/settings_read.hpp"

namespace tycho::host {

using namespace session_detail;

// The defocus the reconstructed probe's first mode shows, against the stated one (probe_fit.hpp):
// searched within ±max(60 %, 100 Å) of the stated C10. The model's probe carries the entrance
// surface's C10 moved by half a slice (state::model_C10_shift_A): searched there, reported as the
// entrance surface's.
std::string session::state::probe_fit_json(const state& s) {
  const owned_array probe = s.stopped ? s.kept.probe : s.read_engine_tensor("probe", TYCHO_TENSOR_PROBE);
  if (probe.shape.size() != 3) return "";
  const double shift = s.model_C10_shift_A();
  const double c = s.optics.C10_A + shift, half = std::max(0.6 * std::abs(c), 100.0);
  const double dk[2] = {s.sampling.dk_invA[0], s.sampling.dk_invA[1]};
  const int64_t n0 = probe.shape[1], n1 = probe.shape[2];
  const probe_defocus_fit f =
      probe.dtype.bits == 128
          ? fit_probe_defocus(probe.as<std::complex<double>>(), n0, n1, dk, s.wavelength_A, s.optics.semiangle_mrad, c,
                              c - half, c + half)
          : fit_probe_defocus(probe.as<std::complex<float>>(), n0, n1, dk, s.wavelength_A, s.optics.semiangle_mrad, c,
                              c - half, c + half);
  if (!f.done) return "";
  nlohmann::ordered_json j;
  j["C10_A"] = f.C10_A - shift;
  j["initial_C10_A"] = s.optics.C10_A;  // the run's start: stated, or the parallax's
  j["peak_gain"] = f.peak_gain;
  return j.dump();
}

// The object's local phase (σ = 2 Å, the scale `tycho evaluate` scores at) over the box of the
// probe's centres (its central 256 × 256 px at most): skewed positive on a specimen seen by
// electrons, negative on its twin (a C10 of the wrong sign, or an overfocused probe with none
// stated).
phase_skewness session::state::phase_check(const state& s) {
  if (s.optics.kind != sdk::radiation::electron || s.all_positions_px.size() < 2) return {};
  // The engine's own host memory where it has it (a copy of the object would raise the run's
  // peak memory, which `tycho plan` predicts); a device's object is copied.
  owned_array copy;
  const void* data = nullptr;
  int64_t shape[3] = {0, 0, 0};
  DLDataType dtype{};
  if (s.stopped) {
    data = s.kept.object.bytes.data();
    dtype = s.kept.object.dtype;
    if (s.kept.object.shape.size() != 3) return {};
    for (int a = 0; a < 3; ++a) shape[a] = s.kept.object.shape[std::size_t(a)];
  } else {
    const DLTensor view = s.engine_tensor(TYCHO_TENSOR_OBJECT);
    if (view.ndim != 3) return {};
    for (int a = 0; a < 3; ++a) shape[a] = view.shape[a];
    dtype = view.dtype;
    if (view.device.device_type == kDLCPU && view.strides == nullptr) {
      data = static_cast<const char*>(view.data) + view.byte_offset;
    } else {
      copy = s.read_engine_tensor("object", TYCHO_TENSOR_OBJECT);
      data = copy.bytes.data();
    }
  }
  double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
  for (std::size_t k = 0; k + 1 < s.all_positions_px.size(); k += 2)
    for (int a = 0; a < 2; ++a) {
      lo[a] = std::min(lo[a], s.all_positions_px[k + std::size_t(a)]);
      hi[a] = std::max(hi[a], s.all_positions_px[k + std::size_t(a)]);
    }
  if (!std::isfinite(lo[0]) || !std::isfinite(lo[1]) || !std::isfinite(hi[0]) || !std::isfinite(hi[1])) return {};
  // At most the central 256 × 256 px of the field: the statistic needs a few hundred independent
  // pixels, and the test's cost (O(N σ²)) and memory stay those of a small scan on a 1024² one,
  // which saves (and checkpoints) call it for.
  int64_t box[4];
  for (int a = 0; a < 2; ++a) {
    const double half = std::min(0.5 * (hi[a] - lo[a]), 128.0), centre = 0.5 * (lo[a] + hi[a]);
    box[2 * a] = int64_t(std::ceil(centre - half));
    box[2 * a + 1] = int64_t(std::floor(centre + half)) + 1;
  }
  const double pixel_A = std::sqrt(s.geometry.pixel_A[0] * s.geometry.pixel_A[1]);
  const double sigma_px = 2.0 / pixel_A;
  // Binned to pixels of at most 0.35 Å (atoms stay several pixels wide): the MoS2 example's
  // 0.17 Å pixels in pairs.
  const int64_t bin = std::max<int64_t>(1, int64_t(std::floor(0.35 / pixel_A)));
  return dtype.bits == 128
             ? local_phase_skewness(static_cast<const std::complex<double>*>(data), shape[0], shape[1], shape[2], box,
                                    sigma_px, bin)
             : local_phase_skewness(static_cast<const std::complex<float>*>(data), shape[0], shape[1], shape[2], box,
                                    sigma_px, bin);
}

// Beyond 3 standard errors either way the test decides (a one-sided 0.13 % chance under a
// symmetric phase); within, "undecided".
const char* session::state::phase_verdict(const phase_skewness& r) {
  return r.skewness > 3 * r.standard_error ? "specimen" : r.skewness < -3 * r.standard_error ? "twin" : "undecided";
}

std::string session::state::phase_check_json(const state& s) {
  const phase_skewness r = phase_check(s);
  if (!r.done) return "";
  nlohmann::ordered_json j;
  j["skewness"] = r.skewness;
  j["standard_error"] = r.standard_error;
  j["effective_pixels"] = r.effective_pixels;
  j["verdict"] = phase_verdict(r);
  return j.dump();
}

owned_array session::get(const std::string& name) const {
  const state& s = *s_;
  if (name == "object") return s.stopped ? s.kept.object : s.read_engine_tensor(name, TYCHO_TENSOR_OBJECT);
  if (name == "probe") return s.stopped ? s.kept.probe : s.read_engine_tensor(name, TYCHO_TENSOR_PROBE);
  // Every pattern's position: a rank's engine holds only those of its share.
  auto all_positions = [&](const std::string& n) {
    if (s.par->world_size() == 1) return s.read_engine_tensor(n, TYCHO_TENSOR_POSITIONS);
    // Corrected positions are gathered by the driver after each step; else they are the start's.
    const std::vector<double>& gathered = s.drv->gathered_positions();
    return owned_array::from_vector(n, k_float64, {s.data.all_patterns, 2},
                                    gathered.empty() ? s.all_positions_px : gathered);
  };
  if (name == "positions_px") return all_positions(name);
  if (name == "positions_A") {
    auto a = all_positions(name);
    auto* p = reinterpret_cast<double*>(a.bytes.data());
    for (int64_t k = 0; k < a.count(); ++k) p[k] *= s.geometry.pixel_A[k % 2];
    return a;
  }
  if (name == "loss_history")
    return owned_array::from_vector(name, k_float64, {int64_t(s.loss_history.size())}, s.loss_history);
  // Not a saved member (the manifest's `validation` keeps it): where patterns are held out.
  if (name == "held_out_loss" && s.drv->patterns_in_batches() < s.drv->patterns_total())
    return owned_array::from_vector(name, k_float64, {1}, std::vector<double>{s.held_out_loss});
  if (name == "mask") return result_mask(s.padding);
  if (name == "object_tile_steps" && s.drv->object_in_tiles()) {
    const object_tiles& t = *s.drv->tiles();
    return owned_array::from_vector(name, DLDataType{kDLInt, 64, 1}, {t.rows(), t.cols()},
                                    s.stopped ? s.kept.tile_steps : t.steps());
  }
  if (name.rfind("optimizer.", 0) == 0 && s.stopped)  // a run stopped mid-way: its last finite state
    for (const auto& a : s.kept.optimizer_arrays)
      if (a.name == name) return a;
  if (name.rfind("optimizer.", 0) == 0)
    for (const auto& state_name : optimizer_state_names())
      if (state_name == name) return optimizer_state(name);
  std::string available;
  for (const auto& n : array_names()) available += (available.empty() ? "" : ", ") + n;
  fail(TYCHO_ERR_NOT_FOUND, "no result array '", name, "' (available: ", available, ")");
}

std::vector<std::string> session::array_names() const {
  // The order of the saved file's members (mask last, as files before the name list had it).
  std::vector<std::string> names = {"object", "probe", "positions_px", "positions_A", "loss_history"};
  for (auto& n : optimizer_state_names()) names.push_back(std::move(n));
  if (s_->drv->object_in_tiles()) names.push_back("object_tile_steps");
  names.push_back("mask");
  return names;
}

// "optimizer.<object|probe>.<array>" for every state array of the optimizers that keep one.
std::vector<std::string> session::optimizer_state_names() const {
  std::vector<std::string> names;
  s_->for_each_optimizer_array([&](const std::string& name, const DLTensor&) {
    names.push_back(name);
    return false;
  });
  return names;
}

owned_array session::optimizer_state(const std::string& full_name) const {
  std::optional<owned_array> found;
  s_->for_each_optimizer_array([&](const std::string& name, const DLTensor& view) {
    if (name == full_name) found = owned_array::copy_of(name, view);
    return found.has_value();
  });
  if (found) return std::move(*found);
  fail(TYCHO_ERR_NOT_FOUND, "no optimizer state array '", full_name, "'");
}

int64_t session::configured_iterations() const { return s_->length.most(); }
std::string session::precision() const { return precision_of(s_->engine_tensor(TYCHO_TENSOR_OBJECT).dtype); }
int64_t session::iterations_done() const { return s_->drv->iterations_done(); }
const std::vector<double>& session::loss_history() const { return s_->loss_history; }
double session::held_out_loss() const { return s_->held_out_loss; }
const std::vector<double>& session::measured_mean_pattern() const { return s_->measured_mean; }
const std::vector<uint8_t>& session::detector_mask() const { return s_->padding.mask; }
double session::object_pixel_A(int axis) const { return s_->geometry.pixel_A[axis]; }
parallel_context& session::parallel() const { return *s_->par; }

std::string session::output_path() const { return configured_output_path(s_->config); }

std::string session::configured_output_path(const config_document& config) {
  const toml::table& out_t = config.table_at("output");
  // Relative to the current folder (where the user runs tycho), unlike input paths, which
  // resolve against the config file's folder so a config travels with its data.
  return *setting_value<std::string>(out_t, "output", "path");
}

bool session::previews_enabled() const {
  return *setting_value<bool>(s_->config.table_at("output"), "output", "previews");
}

std::string session::manifest_json() const {
  const state& s = *s_;
  result_manifest m;
  m.config_toml = s.config.to_toml();
  m.data_description = s.data.description;
  m.source = s.data.source_name;
  m.scan_shape = {s.data.info.scan_shape[0], s.data.info.scan_shape[1]};
  m.detector_shape = {s.padding.detector[0], s.padding.detector[1]};
  m.window_shape = {s.data.n0, s.data.n1};
  for (const auto& ba : s.padding.before_after) m.detector_padding.push_back({ba[0], ba[1]});
  m.scan_step_A = {s.geometry.step_A[0], s.geometry.step_A[1]};
  m.detector_pixel_invA = {s.sampling.dk_invA[0], s.sampling.dk_invA[1]};
  m.object_pixel_A = {s.geometry.pixel_A[0], s.geometry.pixel_A[1]};
  m.scan_origin_A = {s.geometry.scan_origin_A[0], s.geometry.scan_origin_A[1]};
  m.energy_eV = s.optics.energy_eV;
  m.wavelength_A = s.wavelength_A;
  m.radiation = s.optics.kind == sdk::radiation::xray ? "xray" : "electron";
  m.semiangle_mrad = s.optics.semiangle_mrad;
  m.C10_A = s.optics.C10_A;
  m.mean_total_intensity = s.data.mean_total_intensity;
  m.bad_pixels_json = bad_pixels_json(s.data);
  m.object_padding_px = s.geometry.padding_px;
  m.loss_history = s.loss_history;
  m.seconds_history = s.seconds_history;
  m.cpu_seconds_history = s.cpu_seconds_history;
  m.schedule_iterations = s.iterations;
  m.stopping_json = s.stopping_json();
  m.parallel_json = s.parallel_json;
  m.preprocess_json = s.preprocess_json;
  if (const scan_refinement* r = s.drv ? s.drv->scan_refinement_state() : nullptr) {
    const auto q = r->parameters();
    nlohmann::ordered_json j;
    j["linear"] = {{r->map().L[0][0], r->map().L[0][1]}, {r->map().L[1][0], r->map().L[1][1]}};
    j["rotation_deg"] = q.rotation_rad * 180 / 3.14159265358979323846;
    j["step_scale"] = {q.scale0, q.scale1};
    j["shear"] = q.shear;
    if (!r->options().free[1]) j["scale_held"] = r->held_scale_text();
    if (r->refines_C10()) j["C10_A"] = r->physical_C10_A();
    j["steps"] = r->steps_taken();
    j["converged"] = r->converged();
    j["state"] = r->state();  // for --from: the refinement continues bit for bit
    m.scan_map_json = j.dump();
  }
  m.probe_fit_json = state::probe_fit_json(s);
  m.phase_check_json = state::phase_check_json(s);
  m.initial_probe_json = s.initial_probe_json;
  m.positions_precision_json = s.positions_precision_json;
  m.validation_json = s.validation_json;
  m.position_correction_json = state::position_correction_json(s);
  m.batching = batching_name(s.batches.kind);
  if (s.drv->object_in_tiles()) m.tile_px = s.drv->tiles()->tile();
  m.complex_dtype = precision() == "float64" ? "complex128" : "complex64";
  m.slice_thickness_A = s.slice_thickness_A;
  for (const auto& [which, ref, opt] : {std::tuple{"object", s.object_opt_ref, s.object_opt},
                                        std::tuple{"probe", s.probe_opt_ref, s.probe_opt}}) {
    const auto* vt = ref->as<tycho_optimizer_vtable>();
    if (!has_state_functions(vt)) continue;
    optimizer_state_record o;
    o.parameter = which;
    o.optimizer = ref->name;
    o.steps = !s.stopped ? vt->step_count(opt) : std::string(which) == "object" ? s.kept.object_steps
                                                                                 : s.kept.probe_steps;
    o.array_description = cat("the shape and dtype of ", which);
    for (int64_t i = 0, n = vt->state_count(opt); i < n; ++i) {
      const char* name = nullptr;
      check_status(vt->state_array(opt, i, &name, nullptr), "optimizer state_array");
      o.arrays.emplace_back(name ? name : "");
    }
    m.optimizer_states.push_back(std::move(o));
  }
  const component_ref* source = &s.reg->find(TYCHO_COMPONENT_SOURCE, s.data.source_name);
  const std::pair<const char*, const component_ref*> used[] = {
      {"source", source},
      {"engine", s.engine_ref},
      {"loss", s.loss_ref},
      {"object optimizer", s.object_opt_ref},
      {"probe optimizer", s.probe_opt_ref},
      {"format", s.format_ref}};
  for (const auto& [role, c] : used)
    m.components.push_back({role, kind_name(c->kind), c->name, c->version, c->plugin_path});
  for (const component_ref* c : s.constraints.components())
    m.components.push_back({"constraint", kind_name(c->kind), c->name, c->version, c->plugin_path});
  return to_json(m);
}

uint64_t session::result_bytes() const {
  const state& s = *s_;
  uint64_t bytes = s.kept.object.bytes.size() + s.kept.probe.bytes.size();
  for (const auto& a : s.kept.optimizer_arrays) bytes += a.bytes.size();
  bytes += s.kept.tile_steps.size() * sizeof(int64_t);
  bytes += uint64_t(s.data.all_patterns) * 2 * 2 * sizeof(double);  // positions_px and positions_A
  bytes += uint64_t(s.data.n0) * uint64_t(s.data.n1);                // mask
  // loss and seconds, binary and JSON: the most this run takes
  bytes += uint64_t(std::max<int64_t>(s.length.most(), s.drv->iterations_done()) + 1) * 3 * sizeof(double);
  return bytes + (uint64_t(64) << 10);                              // manifest and zip headers
}

void session::save(const std::string& path, tycho_save_mode mode) const {
  // Every array get() knows: the result, the optimizers' state (for `tycho reconstruct --from`,
  // optimizer.<parameter>.<array>) and the mask of what the loss left out, centred.
  std::vector<owned_array> arrays;
  for (const auto& name : array_names()) arrays.push_back(get(name));  // the kept state after a stop
  save_record(*s_->format_ref, arrays, manifest_json(), path, mode);
}

}  // namespace tycho::host
