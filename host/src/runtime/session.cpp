#include "tycho/host/session.hpp"

#include "runtime/session_state.hpp"

#include <tycho/core/batch_plan.hpp>
#include <tycho/core/driver.hpp>
#include <tycho/core/device_label.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/core/multislice.hpp>
#include <tycho/host/optics.hpp>
#include <tycho/sdk.hpp>
#include <tycho/sdk/optimizer.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <optional>

#include <unistd.h>

#include "settings/config_read.hpp"
#include "geometry/scan_geometry_estimate.hpp"
#include "runtime/batching_choice.hpp"
#include "runtime/constraint_list.hpp"
#include "runtime/initial_probe.hpp"
#include "runtime/vacuum_pattern.hpp"
#include "runtime/positions_from.hpp"
#include "results/result_file.hpp"
#include "tycho/host/dataset.hpp"
#include "data/bad_pixels.hpp"
#include "data/chunked_preprocess.hpp"
#include "data/finite_values.hpp"
#include "data/detector_padding.hpp"
#include "geometry/beam_optics.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/prepared.hpp"
#include "tycho/host/preprocess.hpp"
#include "tycho/host/progress.hpp"
#include "tycho/host/run_plan.hpp"
#include "data/target_residency.hpp"
#include "data/target_stream.hpp"
#include "tycho/host/settings.hpp"
#include "settings/settings_read.hpp"
#include "settings/iteration_settings.hpp"

namespace tycho::host {

using namespace session_detail;

double session_detail::seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::round(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3) / 1e3;
}

namespace {

// The mean of the patterns held, (N0, N1) in the targets' order; non-finite pixels count 0.
// The targets as float32 or as uint16 counts (the same values, summed in the same order).
std::vector<double> mean_pattern(const dataset& d) {
  const std::size_t n = std::size_t(d.n0 * d.n1);
  std::vector<double> mean(n, 0.0);
  const bool counts = d.targets.empty() && !d.counts.empty();
  if (d.patterns <= 0 || (counts ? d.counts.size() : d.targets.size()) < n * std::size_t(d.patterns)) return mean;
  for (int64_t p = 0; p < d.patterns; ++p)
    for (std::size_t k = 0; k < n; ++k)
      if (counts) {
        mean[k] += d.counts[std::size_t(p) * n + k];
      } else if (const float v = d.targets[std::size_t(p) * n + k]; std::isfinite(v)) {
        mean[k] += v;
      }
  for (double& v : mean) v /= double(d.patterns);
  return mean;
}

// The MiB the targets held take (uint16 counts or float32), rounded, for the log.
long long targets_mib(const dataset& d) {
  return std::llround(double(d.counts.empty() ? d.targets.size() * 4 : d.counts.size() * 2) / (1 << 20));
}

// Whether float32 data that hold whole counts are packed into uint16 targets ([preprocess]
// integer_targets; by default only for an engine on a device, whose copy it halves: packing on
// the host briefly holds both arrays, which raises a host engine's peak).
bool packs_integer_targets(const config_document& config, DLDevice device) {
  return read_key<bool>(config.table_at("preprocess"), "integer_targets", "preprocess")
      .value_or(device.device_type != kDLCPU);
}

// What the scan map holds where it does not refine the scale, and why (the log).
std::string held_scale_log(scan_refinement_options::held_scale hold, int64_t slices, double lattice_scale) {
  using held = scan_refinement_options::held_scale;
  if (hold != held::isotropic)
    return cat("the scan map holds the step along scan axis ", hold == held::axis0 ? 0 : 1,
               " (the fast axis, [data] fast_axis) as stated: a drift stretches and shears the slow axis's step and "
               "not the fast one's; the isotropic scale and C10 follow the map's ratio of the steps");
  if (slices > 1)
    return "the scan map holds the scan's isotropic scale at the stated step ([reconstruct.positions] "
           "refine_scan_scale = false)";
  if (std::isfinite(lattice_scale))
    return cat("the scan map holds the scan's isotropic scale at the crystal lattice's, ", lattice_scale,
               " of the stated step ([preprocess] scan_scale)");
  return "the scan map holds the scan's isotropic scale at the stated step: with one slice the data do not fix it; "
         "a scan whose error is a drift is better held by its fast axis's step ([data] fast_axis)";
}

}  // namespace

// 1. The config (merged with a prepared file's), the resumed state, the ranks.
void session::state::open_config(state& s, const std::string& resume_from, parallel_context* parallel, start& st) {
  const registry& reg = *s.reg;
  // A prepared file (`tycho preprocess`) starts a fresh run from its data: its [data], [optics]
  // and [preprocess] replace the config's (tycho/host/prepared.hpp).
  if (!resume_from.empty() && (st.prepared = try_load_prepared(reg, resume_from)))
    merge_prepared_config(s.config, *st.prepared);
  validate_config(s.config, reg);
  // Devices, launcher and reducer: refused before the data is read when they cannot be honoured.
  if (parallel == nullptr) {
    s.owned_parallel = parallel_context::create(s.config, reg, detect_launch(process_environment()));
    parallel = s.owned_parallel.get();
  }
  s.par = parallel;
  // Resuming: the schedules span the resumed run's total (its recorded
  // history.schedule_iterations), whatever [reconstruct] iterations says; the config records it.
  // A run of iterations = "auto" continues with its rule's keys instead.
  if (!resume_from.empty() && !st.prepared) {
    st.resume.emplace(load_resume(resume_from, reg));
    if (st.resume->by_rule) {
      s.config.set_from_text("reconstruct.iterations=\"auto\"");
      s.config.set_from_text(cat("reconstruct.max_iterations=", st.resume->max_iterations));
      s.config.set_from_text(cat("reconstruct.stop_window=", st.resume->stop_window));
      s.config.set_from_text(cat("reconstruct.plateau_halvings=", st.resume->plateau_halvings));
    } else {
      s.config.set_from_text(cat("reconstruct.iterations=", st.resume->count));
    }
    if (st.resume->total >= 1) s.config.set_from_text(cat("reconstruct.schedule_iterations=", st.resume->total));
  }
  st.settings = read_reconstruct_settings(s.config);
  const reconstruct_settings& settings = st.settings;
  s.iterations = settings.iterations;
  s.length = settings.length;
  s.slice_thickness_A = settings.slices > 1 ? settings.slice_thickness_A : 0.0;
  s.par->check_same_config(s.config.to_toml());
  // A resumed run must resume the same state on every rank (the file is not part of the config).
  if (s.par->world_size() > 1) {
    std::string from = "a fresh start";
    if (st.resume) {
      uint64_t h = k_fnv1a_start;
      for (const auto& a : st.resume->record.arrays) h = fnv1a(a.bytes, h);
      from = cat("a saved state of content hash ", h);  // by content: each rank may have its own copy
    }
    s.par->require_same(from, "the state the run starts from (--from, compared by content)");
  }
  const int32_t world = s.par->world_size();
  if (world > 1 && s.par->is_root() && settings.driver.batch_size % world != 0)
    log_warning("session", cat("[reconstruct] batch_size = ", settings.driver.batch_size, " is not a multiple of the ",
                               world, " ranks: ", s.par->sharding() == shard::mode::replicated
                                   ? "the first ranks compute one pattern more of each batch"
                                   : "shares differ by one more pattern"));
}

// 2. The data: read through the source and preprocessed, or a prepared file's; then the
// intensity scale of the whole scan and the detector padding.
void session::state::read_data(state& s, start& st) {
  const registry& reg = *s.reg;
  const int32_t world = s.par->world_size();
  const toml::table& data_t = s.config.table_at("data");
  std::string source_name = *setting_value<std::string>(data_t, "data", "source");
  const component_ref& source = reg.find(TYCHO_COMPONENT_SOURCE, source_name);
  tycho_config data_cfg{&data_t, "[data]", s.config.base_dir()};
  // Each rank reads its block of the patterns (all of them when sharding = "replicated").
  const bool replicated = s.par->sharding() == shard::mode::replicated;
  // The preprocessing stage's fits add every rank's sums (each rank holds all patterns when replicated).
  const rank_sum sum_across_ranks = [&](double* v, int n) {
    if (world > 1 && !replicated) s.par->sum(v, n);
  };
  auto t0 = std::chrono::steady_clock::now();
  if (st.prepared) {
    s.data = prepared_dataset(*st.prepared, s.config, reg, replicated ? 0 : s.par->rank(), replicated ? 1 : world,
                              sum_across_ranks, s.preprocess_json, s.patterns_member);
  } else if (stage_changes_patterns(s.config)) {
    chunked_read chunked = read_preprocessed_in_chunks(
        source, &data_cfg, replicated ? 0 : s.par->rank(), replicated ? 1 : world, s.config, sum_across_ranks,
        bad_pixel_gather(*s.par), keeps_integer_targets(s.config));
    // A stage that changes the patterns runs on chunks of the source's patterns (the stored
    // counts when it delivers them): the targets are formed chunk by chunk, never holding the scan.
    s.data = std::move(chunked.data);
    s.preprocess_json = chunked.report.to_json();
    if (s.par->is_root()) log_bad_pixels(s.data, chunked.bad_pixel_warning);
    log_info("session", cat("read and preprocessed ", s.data.patterns, " patterns in chunks of ", chunked.read_as,
                            " (", chunked.passes, " passes) into ", targets_mib(s.data),
                            s.data.counts.empty() ? " MiB of float32" : " MiB of uint16 counts", " in ",
                            seconds_since(t0), " s"));
  } else {
    // Integer counts read as such (in the source's stored dtype, chunk by chunk: no float32 copy
    // of the scan) when they become uint16 targets anyway and the preprocessing stage, which
    // computes in float32, leaves the patterns as they are (bad pixels are masked on counts; a
    // stage that only measures the centre of mass measures it on the counts).
    const preprocess_settings stage = read_preprocess_settings(s.config.table_at("preprocess"), s.config.origin());
    const bool as_counts = keeps_integer_targets(s.config) && (!stage.active() || stage.only_measures());
    s.data = read_dataset(source, &data_cfg, replicated ? 0 : s.par->rank(), replicated ? 1 : world, as_counts);
    log_info("session", cat("read ", s.data.patterns, " patterns (", targets_mib(s.data),
                            s.data.counts.empty()
                                ? std::string(" MiB as float32")
                                : cat(" MiB as uint16 counts, read as the stored ", sdk::dtype_name(s.data.info.stored_dtype)),
                            ") in ", seconds_since(t0), " s"));
    t0 = std::chrono::steady_clock::now();
    report_stage("preprocessing", 0, 1);
    mask_bad_pixels(s.data, s.config.table_at("preprocess"), s.config.origin(), *s.par);  // bad values, dead, hot, given
    const preprocess_settings given = read_preprocess_settings(s.config.table_at("preprocess"), s.config.origin());
    refuse_moving_masked_pixels(s.data, given);
    s.preprocess_json = preprocess_dataset(s.data, s.config, sum_across_ranks).to_json();
    report_stage("preprocessing", 1, 1);
    log_info("session", cat("preprocessed in ", seconds_since(t0), " s"));
  }
  if (world > 1) {
    // The intensity scale is the mean over the whole scan, so that every rank's model and the
    // loss are those of a run of one rank.
    s.data.mean_total_intensity = s.par->sum(replicated ? (s.par->is_root() ? s.data.total_intensity : 0.0)
                                                        : s.data.total_intensity) /
                                  double(s.data.all_patterns);
    if (!(s.data.mean_total_intensity > 0))
      fail(TYCHO_ERR_BAD_DATA, "data '", s.data.description, "' holds no intensity (all patterns are zero)");
  }
  check_intensity_scale(s.data);  // data a float32 run can compute with (e.g. not scaled to 1e-40)
  // Before any geometry: the window (and so dx, positions, object, probe) is the padded one.
  s.padding = apply_detector_padding(s.data, s.config.table_at("preprocess"), s.config.origin());
  s.measured_mean = s.data.streamed ? s.data.streamed_mean : mean_pattern(s.data);
}

// 3. Optics and geometry (the config overrides the file), the memory check, the initial probe.
void session::state::resolve_geometry(state& s, start& st) {
  const auto& info = s.data.info;
  {
    run_geometry g = resolve_run_geometry(s.config, info, s.data.description, s.data.n0, s.data.n1, s.data.positions_A,
                                          scan_map_of_report(s.preprocess_json, s.data.description));
    s.optics = g.optics;
    s.wavelength_A = g.wavelength_A;
    s.sampling = g.sampling;
    s.geometry = g.geometry;
    s.layout = std::move(g.layout);
  }
  // The defocus the bright field's parallax measured (the preprocessing's report), unless the
  // stated one is to be kept.
  if (starts_from_measured_C10(st.settings.C10_mode) && !st.resume) {
    const parallax_C10_report parallax = parallax_C10_of_report(s.preprocess_json);
    const double measured = parallax.estimate_A;
    if (std::isfinite(measured)) {
      // The parallax measures the defocus at the specimen's middle; the run's C10 is the
      // entrance surface's (docs/scan-geometry.md): say both where they differ.
      const bool moved = std::isfinite(parallax.at_nominal_step_A) && parallax.at_nominal_step_A != measured;
      log_info("session",
               cat("starting from C10 = ", measured, " Å, the defocus the bright field's parallax measured",
                   moved ? cat(" (", parallax.at_nominal_step_A, " Å at the specimen's middle, moved to its entrance ",
                               "surface by half the slices' depth)")
                         : std::string(),
                   s.optics.C10_A != 0
                       ? cat(" (stated ", s.optics.C10_A, " Å; [optics] refine_C10 = false keeps the stated one)")
                       : std::string(" (none stated in [optics] C10_A or the file)")));
      s.optics.C10_A = measured;
    } else if (s.optics.C10_A != 0 && std::isfinite(parallax.at_nominal_step_A) &&
               parallax.relative_error <= parallax_C10_error_max && std::isfinite(parallax.sd_A) &&
               std::isfinite(parallax.at_entrance_A)) {
      log_info("session", cat("keeping the stated C10 = ", s.optics.C10_A, " Å: the bright field's parallax measured ",
                              parallax.at_entrance_A, " ± ", parallax.sd_A,
                              " Å at the entrance surface, which agrees with it (the uncertainty: the parallax's ",
                              "standard error and, with several slices, the unknown depth of the specimen's contrast)"));
    } else if (s.optics.C10_A != 0 && std::isfinite(parallax.at_nominal_step_A) &&
               parallax.relative_error > parallax_C10_error_max) {
      log_info("session", cat("keeping the stated C10 = ", s.optics.C10_A, " Å: the bright field's parallax measured ",
                              parallax.at_nominal_step_A, " Å at the nominal step with a standard error of ",
                              std::round(parallax.relative_error * 1000) / 10,
                              " %, more than the ", parallax_C10_error_max * 100,
                              " % it needs to replace a stated C10"));
    }
  } else if (st.resume) {
    // The C10 the resumed run started from (stated, or the parallax's), as its result records it:
    // the manifest's calibration, the probe fit's search and the twin's advice keep it. A value
    // beyond 10⁶ Å (0.1 mm, a defocus no probe window holds) is not a run's: the stated one stays.
    if (const nlohmann::json* c = st.resume->file.manifest.find("calibration.C10_A"); c && c->is_number())
      if (std::abs(c->get<double>()) <= 1e6) s.optics.C10_A = c->get<double>();
  }
  // [data] positions_from: a fresh run starts at a result's saved positions instead of the
  // source's (a resumed run continues from its own file's positions, so the key is left aside).
  if (auto from = read_key<std::string>(s.config.table_at("data"), "positions_from", "data")) {
    const std::string path = resolve_path(s.config.base_dir(), *from);
    if (st.resume) {
      log_info("session", cat("[data] positions_from '", path, "' is not used: --from resumes with its own positions"));
    } else {
      std::vector<double> saved = positions_from_result(*s.reg, path, s.geometry, s.layout);
      double sum = 0;  // how far they lie from the source's, for the log
      for (std::size_t k = 0; k < saved.size(); ++k)
        sum += std::pow((saved[k] - s.layout.positions_px[k]) * s.geometry.pixel_A[k % 2], 2);
      log_info("session", cat("starting from the ", saved.size() / 2, " positions saved in '", path,
                              "', ", std::sqrt(sum / double(std::max<std::size_t>(saved.size() / 2, 1))),
                              " Å RMS from the source's"));
      s.nominal_positions_px = std::move(s.layout.positions_px);
      s.layout.positions_px = std::move(saved);
    }
  }
  // [data] shuffle_positions: a control whose positions place nothing (the geometry search's
  // structureless baseline): the same positions, given to the patterns in a seeded random order.
  if (read_key<bool>(s.config.table_at("data"), "shuffle_positions", "data").value_or(false)) {
    if (st.resume) {
      log_info("session", "[data] shuffle_positions is not used: --from resumes with its own positions");
    } else {
      shuffle_position_pairs(s.layout.positions_px, uint64_t(st.settings.driver.seed));
      log_info("session", cat("[data] shuffle_positions: the ", s.layout.positions_px.size() / 2,
                              " patterns are given the scan's positions in a random order (seed ",
                              st.settings.driver.seed, "): a control whose positions place nothing"));
    }
  }
  // ---- memory: the planner's count for this engine against this machine's memory, before
  // anything that size is allocated (a wrong scan step or pixel size makes a huge object)
  memory_problem need = run_memory_problem(s.config, *s.reg, info, s.data.n0, s.data.n1, s.layout);
  need.patterns = s.data.patterns;  // this rank's share
  if (!s.data.counts.empty() || s.data.streamed_counts) need.target_bytes = 2;  // uint16 counts, read as such
  {
    // Where the targets live: in memory, or read per batch from the prepared file's patterns.
    const bool on_device = s.par->device().device_type != kDLCPU;
    const host_capacity capacity = host_memory_capacity(s.config);
    const residency_choice where =
        choose_residency(read_target_residency(s.config), need, capacity, s.data.streamed,
                         st.prepared ? "the prepared file does not embed its patterns (prepare it with tycho preprocess "
                                    "--save-raw-data)"
                                  : "only a prepared file's patterns are read per batch: run tycho preprocess "
                                    "--save-raw-data -o prepared.zip, then reconstruct --from prepared.zip",
                         on_device);
    s.residency = where.name;
    need.targets_streamed = where.streamed;
    log_info("session", cat("targets: ", where.name, " (", where.why, ")"));
    check_host_memory(need,
                      cat("the object is ", s.layout.shape[0], " x ", s.layout.shape[1], " px: check [data] scan_step_A (",
                          s.geometry.step_A[0], " Å), the pixel size (", s.geometry.pixel_A[0], " Å from a ", s.data.n0,
                          " x ", s.data.n1, " window) and [preprocess] object_padding_px (", s.geometry.padding_px, ")"),
                      capacity.bytes);
    if (s.data.streamed && !where.streamed) {
      // In memory after all: every pattern read once from the prepared file, as the batches would.
      pattern_layout layout{info.detector_shape[0], info.detector_shape[1], s.data.n0, s.data.n1};
      target_stream all(std::move(s.patterns_member), s.data.first, s.data.patterns, layout, nullptr);
      const std::size_t values = std::size_t(s.data.patterns * s.data.n0 * s.data.n1);
      if (s.data.streamed_counts) {  // uint16 counts as stored: the targets' own precision
        s.data.counts.resize(values);
        all.read_range(0, s.data.patterns, s.data.counts.data());
      } else {
        s.data.targets.resize(values);
        all.read_range(0, s.data.patterns, s.data.targets.data());
      }
      s.data.streamed = false;
    }
  }
  // ---- initial probe, normalised so Σ|P|² = 1: the model intensity is in units of the mean
  // measured total (targets are scaled by 1 / mean total below), whatever the dose.
  // [reconstruct.probe] vacuum_pattern: the measured aperture in place of the model's disc. A
  // resumed run continues from its result's probe: neither the vacuum pattern nor a probe file
  // is read then.
  const double dk_window[2] = {s.sampling.dk_invA[0], s.sampling.dk_invA[1]};
  const auto vacuum =
      st.resume ? std::nullopt
                : read_vacuum_amplitude(
                      s.config.table_at("reconstruct.probe"), s.config.base_dir(),
                      vacuum_steps_of_report(s.preprocess_json,
                                             st.prepared ? st.prepared->path : std::string("the preprocessing report"),
                                             s.padding.detector, s.padding.window, s.padding.mask),
                      s.wavelength_A, dk_window);
  // The model's probe carries the entrance surface's C10 moved by half a slice
  // (state::model_C10_shift_A).
  probe_optics model_optics = s.optics;
  model_optics.C10_A += s.model_C10_shift_A();
  st.probe = make_probe(model_optics, s.sampling, 1.0, vacuum ? &vacuum->amplitude : nullptr);
  if (vacuum) {
    s.initial_probe_json = vacuum->to_json(s.optics.semiangle_mrad);
    log_info("session", vacuum->describe(s.optics.semiangle_mrad, s.optics.C10_A));
    if (const std::string w = vacuum->semiangle_warning(s.optics.semiangle_mrad); !w.empty()) log_warning("session", w);
  }
  double edge = probe_edge_fraction(st.probe, s.data.n0, s.data.n1, 0.05);
  if (edge > 0.1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the probe does not fit the window: ", edge * 100,
         " % of its intensity lies within 5 % of the window's edge (window ", s.data.n0 * s.geometry.pixel_A[0],
         " Å wide, C10 = ", s.optics.C10_A, " Å",
         vacuum ? cat(") with the aperture of [reconstruct.probe] vacuum_pattern '", vacuum->file,
                      "', whose bright field is a disc of ", vacuum->bright_field_semiangle_mrad,
                      " mrad (the stated semiangle ", s.optics.semiangle_mrad,
                      " mrad): a narrow bright field makes a wide probe; check that the file is a vacuum pattern of "
                      "this detector")
               : cat(", semiangle ", s.optics.semiangle_mrad,
                     " mrad); reduce the defocus or use a larger detector window. Used: ",
                     beam_provenance(s.config.table_at("optics"), s.config.table_at("data"), info, s.data.description,
                                     s.config.origin(), s.optics, s.wavelength_A,
                                     s.sampling.dk_invA[0] / double(read_preprocess_settings(s.config.table_at("preprocess"),
                                                                                            s.config.origin())
                                                                        .binning))));
  // [reconstruct.probe] initial: a probe from a file (an .npy, a CXI file's illumination) instead.
  if (auto from_file = st.resume ? std::nullopt
                                  : initial_probe_from_file(s.config.table_at("reconstruct.probe"), s.config.base_dir(),
                                                            s.data.n0, s.data.n1))
    st.probe = std::move(*from_file);
}

// 4. The loss and the engine, set up with the targets, the positions and the initial arrays.
void session::state::create_engine(state& s, start& st) {
  const registry& reg = *s.reg;
  const int32_t world = s.par->world_size();
  const reconstruct_settings& settings = st.settings;
  const std::optional<resume_data>& resume = st.resume;
  const auto& info = s.data.info;
  std::vector<cfloat>& probe = st.probe;
  // correct = "auto": the data's own measure of the positions' information, while this rank
  // still holds the patterns (the engine takes them below).
  if (settings.driver.positions.enabled && settings.driver.positions.weigh_against_noise)
    s.data_information_px2 = data_position_information(s);
  const toml::table& rec_t = s.config.table_at("reconstruct");
  st.engine_name = *setting_value<std::string>(rec_t, "reconstruct", "engine");
  st.loss_name = *setting_value<std::string>(rec_t, "reconstruct", "loss");
  s.engine_ref = &reg.find(TYCHO_COMPONENT_ENGINE, st.engine_name);
  s.loss_ref = &reg.find(TYCHO_COMPONENT_LOSS, st.loss_name);
  s.reconstruct_cfg = tycho_config{&rec_t, "[reconstruct]", s.config.base_dir()};
  check_status(s.loss_ref->as<tycho_loss_vtable>()->create(&s.reconstruct_cfg, &s.loss), "loss create");

  std::vector<cfloat> object;
  int64_t object_shape[3] = {settings.slices, s.layout.shape[0], s.layout.shape[1]};
  int64_t probe_shape[3] = {settings.probe_modes, s.data.n0, s.data.n1};
  if (settings.probe_modes > 1) {
    // Mixed state: the optics' probe as mode 0, higher-order modes with mode_power of the power.
    const std::vector<std::complex<double>> coherent(probe.begin(), probe.end());
    const auto modes = initial_probe_modes(coherent, s.data.n0, s.data.n1, settings.probe_modes, settings.mode_power);
    probe.assign(modes.begin(), modes.end());
  }
  // Multislice: the propagator over one slice, from the optics (tycho/core/multislice.hpp).
  std::vector<std::complex<double>> propagator;
  int64_t propagator_shape[2] = {s.data.n0, s.data.n1};
  if (settings.slices > 1)
    propagator = fresnel_propagator(s.data.n0, s.data.n1, s.sampling.dk_invA[0], s.sampling.dk_invA[1],
                                    s.wavelength_A, settings.slice_thickness_A);
  DLTensor propagator_t{propagator.data(), {kDLCPU, 0}, 2, {kDLComplex, 128, 1}, propagator_shape, nullptr, 0};
  int64_t target_shape[3] = {s.data.patterns, s.data.n0, s.data.n1};
  int64_t pos_shape[2] = {s.data.patterns, 2};  // the positions of the patterns this rank holds
  void* object_data = nullptr;
  void* probe_data = probe.data();
  void* positions_data = s.layout.positions_px.data();
  if (resume) {
    // The engine starts from the saved object, probe and positions instead of ones and the
    // optics' probe.
    check_resume_shapes(*resume, {info.scan_shape[0], info.scan_shape[1]}, {s.data.n0, s.data.n1},
                        {object_shape, object_shape + 3}, {probe_shape, probe_shape + 3}, s.data.all_patterns,
                        settings.float64);
    object_data = const_cast<unsigned char*>(resume->record.array("object", resume->path).bytes.data());
    probe_data = const_cast<unsigned char*>(resume->record.array("probe", resume->path).bytes.data());
    positions_data = const_cast<unsigned char*>(resume->record.array("positions_px", resume->path).bytes.data());
  } else {
    object.assign(static_cast<std::size_t>(settings.slices * s.layout.shape[0] * s.layout.shape[1]), cfloat(1.f, 0.f));
    object_data = object.data();
  }
  {
    const auto* all = static_cast<const double*>(positions_data);
    s.all_positions_px.assign(all, all + 2 * s.data.all_patterns);
    positions_data = s.all_positions_px.data() + 2 * s.data.first;
  }
  // Integer counts are handed to the engine as uint16 (exact, half the memory) when the values are
  // whole numbers in [0, 65535]. By default only for an engine on a device, whose copy of the
  // targets it halves: packing on the host briefly holds both arrays, which raises the host's
  // peak for a host engine that reads the targets in place ([preprocess] integer_targets = true
  // still asks for it, for the lower memory after the start).
  // Counts read as such (read_data) are the uint16 targets already.
  if (!s.data.counts.empty()) s.targets_u16 = std::move(s.data.counts);
  const bool integer_targets =
      !s.data.streamed &&
      (!s.targets_u16.empty() ||
       (packs_integer_targets(s.config, s.par->device()) && pack_integer_targets(s.data, s.targets_u16)));
  s.batches = choose_batching(s.config, s.layout.shape[0] * s.layout.shape[1], s.data.n0 * s.data.n1,
                              settings.driver.batch_size);
  if (s.data.streamed) {
    // Read per batch: the driver's batches (its plan, copied), predicted, are read ahead on the
    // stream's thread.
    const int64_t all = s.data.all_patterns, first_epoch = (resume ? resume->done : 0) + 1;
    const shard share = shard::of(all, s.par->rank(), world, s.par->sharding());
    auto plan = std::make_shared<batch_plan>(all, settings.driver.batch_size, settings.driver.seed, s.batches.kind,
                                             s.data_positions_px());
    batch_schedule schedule = [=](int64_t k, std::vector<int64_t>& local) {
      const int64_t epoch = first_epoch + k / plan->batches();
      int64_t count = 0;
      const int64_t* batch = plan->batch(epoch, k % plan->batches(), count);
      if (world > 1) {
        share.select(batch, count, local);
      } else {
        local.assign(batch, batch + count);
      }
      return true;
    };
    pattern_layout layout{info.detector_shape[0], info.detector_shape[1], s.data.n0, s.data.n1};
    s.stream = std::make_unique<target_stream>(std::move(s.patterns_member), s.data.first, s.data.patterns, layout,
                                               std::move(schedule));
  }
  DLTensor targets{integer_targets ? static_cast<void*>(s.targets_u16.data()) : static_cast<void*>(s.data.targets.data()),
                   {kDLCPU, 0}, 3, integer_targets ? DLDataType{kDLUInt, 16, 1} : DLDataType{kDLFloat, 32, 1},
                   target_shape, nullptr, 0};
  s.targets_dtype = cat(integer_targets || (s.stream && s.data.streamed_counts) ? "uint16" : "float32",
                        s.stream ? " read per batch from disk" : "");
  DLTensor positions{positions_data, {kDLCPU, 0}, 2, k_float64, pos_shape, nullptr, 0};
  // complex64 (ones and the optics' probe), or a resumed file's arrays in their own dtype.
  const DLDataType init_dtype = resume ? resume->record.array("object", resume->path).dtype : k_complex64;
  DLTensor object_t{object_data, {kDLCPU, 0}, 3, init_dtype, object_shape, nullptr, 0};
  DLTensor probe_t{probe_data, {kDLCPU, 0}, 3, init_dtype, probe_shape, nullptr, 0};
  tycho_engine_setup setup{};
  setup.struct_size = sizeof(setup);
  setup.config = &s.reconstruct_cfg;
  setup.targets = s.stream ? nullptr : &targets;
  setup.target_reader = s.stream ? s.stream->reader() : nullptr;
  int64_t mask_shape[2] = {s.data.n0, s.data.n1};
  DLTensor mask_t{s.padding.mask.data(), {kDLCPU, 0}, 2, {kDLUInt, 8, 1}, mask_shape, nullptr, 0};
  setup.mask = s.padding.mask.empty() ? nullptr : &mask_t;
  setup.target_scale = 1.0 / s.data.mean_total_intensity;
  setup.positions_px = &positions;
  setup.object_init = &object_t;
  setup.probe_init = &probe_t;
  setup.loss = tycho_loss_binding{s.loss_ref->as<tycho_loss_vtable>(), s.loss};
  const tycho_loss_ref loss_ref{sizeof(tycho_loss_ref), setup.loss.vtable, setup.loss.instance};
  setup.loss_ref = &loss_ref;
  setup.device = s.par->device();
  setup.slice_propagator = settings.slices > 1 ? &propagator_t : nullptr;
  setup.slice_thickness_A = settings.slices > 1 ? settings.slice_thickness_A : 0.0;
  // The scan map's refinement needs the positions' gradient every few iterations: from an engine
  // that can turn it off in between (else it costs on every batch) and, on several ranks, with
  // each position's gradient on one rank.
  s.refine_scan_map = false;
  if (!settings.scan.enabled && !s.config.table_at("reconstruct.positions").contains("refine_scan_map"))
    log_info("session", "the scan map is not refined: a positions_affine constraint holds the positions' linear part "
                        "([reconstruct.positions] refine_scan_map = true refines it as well)");
  if (settings.scan.enabled) {
    const tycho_engine_vtable* evt = s.engine_ref->as<tycho_engine_vtable>();
    const bool switchable = evt->struct_size >= offsetof(tycho_engine_vtable, set_position_gradient) +
                                                    sizeof(evt->set_position_gradient) &&
                            evt->set_position_gradient != nullptr;
    if (world > 1 && s.par->sharding() != shard::mode::patterns)
      log_info("session", "the scan map is not refined: [parallel] sharding = \"replicated\" splits each position's "
                          "gradient over the ranks ([reconstruct.positions] refine_scan_map)");
    // correct = true computes the positions' gradient on every iteration, so the map can ride on
    // it; "auto" and "after_scan_map" need the map first, which needs the engine to switch it.
    else if (!switchable && !(settings.driver.positions.enabled && !settings.driver.positions.after_scan_map &&
                              !settings.driver.positions.weigh_against_noise))
      log_info("session", cat("the scan map is not refined: the ", st.engine_name, " engine cannot compute the ",
                              "positions' gradient on some iterations only; [reconstruct.positions] correct = true ",
                              "refines it with position correction"));
    else
      s.refine_scan_map = true;
  }
  if (s.refine_scan_map && settings.slices > 1 && s.par->is_root() && settings.C10_mode == C10_refinement::auto_ &&
      !settings.scan.free[4])
    log_info("session", cat("the scan map's refinement holds C10 at ", s.optics.C10_A, " Å: with ", settings.slices,
                            " slices and the scan's scale held, the object's depth trades off against the probe's ",
                            "defocus ([optics] refine_C10 = true refines it)"));
  if (s.refine_scan_map && !settings.scan.free[1] && s.par->is_root())
    log_info("session", held_scale_log(settings.scan.hold, settings.slices, lattice_scale_of_report(s.preprocess_json)));
  if (s.refine_scan_map && settings.driver.probe_waits_for_scan_map && s.par->is_root())
    log_info("session", cat("the scan map's refinement moves the scan's scale",
                            settings.scan.free[4] ? " and the probe's C10" : "",
                            settings.slices > 1 ? cat(" (", settings.slices, " slices)") : std::string(),
                            "; the probe is refined from the iteration after the map converges: a freed scale is as "
                            "good as the defocus it is paired with, and a probe refined from the start drifts to one "
                            "that pairs with a scan 0.5-2 % small ([reconstruct.positions] refine_scan_scale = false "
                            "holds the scale)"));
  // correct = "after_scan_map" corrects each position once the map's refinement has converged,
  // and "auto" weighs what the positions' own steps add beyond the map: without the map, neither.
  const position_correction& pc = settings.driver.positions;
  if (pc.enabled && (pc.after_scan_map || pc.weigh_against_noise) && !s.refine_scan_map) {
    st.settings.driver.positions.enabled = false;
    if (s.par->is_root())
      log_info("positions", cat("not corrected one by one: [reconstruct.positions] correct = \"",
                                pc.weigh_against_noise ? "auto\" weighs the positions' own corrections beyond the "
                                                         "scan map's refinement"
                                                       : "after_scan_map\" starts once the scan map's refinement has "
                                                         "converged",
                                ", and this run does not refine the map (correct = true corrects them from "
                                "first_iteration)"));
  }
  s.positions_follow_map = pc.enabled && pc.after_scan_map;
  s.positions_weighed_map = pc.enabled && pc.weigh_against_noise;
  s.probe_follows_map = s.refine_scan_map && settings.driver.probe_waits_for_scan_map;
  setup.position_gradient = settings.driver.positions.enabled || s.refine_scan_map ? 1 : 0;
  setup.host_finishes_batches = 1;  // the driver sums an engine's fixed-point sums and finishes its batches
  int64_t scan_shape[2] = {s.data.all_patterns, 2};
  DLTensor scan_positions{s.all_positions_px.data(), {kDLCPU, 0}, 2, k_float64, scan_shape, nullptr, 0};
  setup.scan_positions_px = &scan_positions;  // every rank's: an engine lays out its sums alike on every rank
  setup.scan_first = s.data.first;
  check_status(s.engine_ref->as<tycho_engine_vtable>()->create(&setup, &s.engine), "engine create");
  // An engine that does not read [reconstruct] precision must not run a float64 config in float32.
  if (const std::string held = precision_of(s.engine_tensor(TYCHO_TENSOR_OBJECT).dtype);
      held != (settings.float64 ? "float64" : "float32"))
    fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] precision = \"", settings.float64 ? "float64" : "float32",
         "\": the ", st.engine_name, " engine holds its object in ", held, "; it does not compute in that precision");
}

// 5. The object and probe optimizers, the constraints, and the driver that runs the iterations.
void session::state::create_optimizers(state& s, start& st) {
  const registry& reg = *s.reg;
  const reconstruct_settings& settings = st.settings;
  const int32_t world = s.par->world_size();
  auto make_optimizer = [&](const char* which, tycho_config& cfg, const component_ref*& ref,
                            tycho_optimizer*& opt, tycho_tensor_id param, tycho_tensor_id grad) {
    std::string table_name = cat("reconstruct.", which);
    const toml::table& t = s.config.table_at(table_name);
    std::string name = *setting_value<std::string>(t, table_name, "optimizer");
    ref = &reg.find(TYCHO_COMPONENT_OPTIMIZER, name);
    cfg = tycho_config{&t, cat("[", table_name, "]"), s.config.base_dir()};
    DLTensor p = s.engine_tensor(param);
    check_status(ref->as<tycho_optimizer_vtable>()->create(&cfg, &p, &opt), "optimizer create");
    const parameter_settings& ps = param == TYCHO_TENSOR_OBJECT ? settings.object : settings.probe;
    return optimizer_binding{ref->as<tycho_optimizer_vtable>(), opt, param, grad, ps.first_iteration,
                             ps.schedule};
  };
  std::vector<optimizer_binding> opts;
  opts.push_back(make_optimizer("object", s.object_cfg, s.object_opt_ref, s.object_opt,
                                TYCHO_TENSOR_OBJECT, TYCHO_TENSOR_OBJECT_GRAD));
  opts.push_back(make_optimizer("probe", s.probe_cfg, s.probe_opt_ref, s.probe_opt,
                                TYCHO_TENSOR_PROBE, TYCHO_TENSOR_PROBE_GRAD));

  // ---- constraints (ABI 1.3): the shorthands' built-in ones, then the configured list
  s.constraints.read(s.config, reg, settings.constraints);
  {
    tycho_constraint_setup cs{};
    cs.struct_size = sizeof(cs);
    cs.device = s.par->device();
    cs.pixel_A[0] = s.geometry.pixel_A[0];
    cs.pixel_A[1] = s.geometry.pixel_A[1];
    cs.wavelength_A = s.wavelength_A;
    cs.semiangle_mrad = s.optics.semiangle_mrad;
    cs.slice_thickness_A = s.slice_thickness_A;  // the engine's (0 with one slice)
    // The targets are scaled by 1 / their mean total intensity (the engine's target_scale), so
    // the measured patterns' mean total intensity is 1 in the model's units.
    cs.measured_power = s.data.mean_total_intensity * (1.0 / s.data.mean_total_intensity);
    int64_t pos_shape[2] = {s.data.patterns, 2};  // this rank's patterns
    std::vector<double>& data_positions = s.nominal_positions_px.empty() ? s.layout.positions_px : s.nominal_positions_px;
    DLTensor nominal{data_positions.data() + 2 * s.data.first, {kDLCPU, 0}, 2, k_float64, pos_shape, nullptr, 0};
    cs.nominal_positions = &nominal;
    cs.iterations = settings.iterations;
    s.constraints.create(cs, settings.driver.positions.enabled);
  }
  driver_options dopt = settings.driver;
  dopt.held_out = held_out_patterns(s.data.all_patterns, settings.validation_fraction, dopt.seed,
                                    settings.validation_fold, "[reconstruct] validation_fraction");
  s.validation_fold = settings.validation_fold;
  dopt.constraints = s.constraints.bindings();
  dopt.batches = s.batches.kind;
  if (s.batches.kind == batching::compact) {
    dopt.positions_px = s.all_positions_px;
    dopt.block_positions_px = s.data_positions_px();
  }
  // The cap on a position's move per iteration, in the object's pixels.
  dopt.positions.step.max_step_px = settings.max_position_step_A / std::max(s.geometry.pixel_A[0], s.geometry.pixel_A[1]);
  // correct = "auto" weighs the positions' corrections against their counting noise: the targets
  // are counts (1 count per unit) where the data are.
  dopt.positions.counts_per_target_unit = s.data.has_counts() ? 1.0 : 0.0;
  dopt.positions.data_information_px2 = s.data_information_px2;
  s.drv = std::make_unique<driver>(engine_binding{s.engine_ref->as<tycho_engine_vtable>(), s.engine},
                                   std::move(opts), s.data.all_patterns, dopt,
                                   shard::of(s.data.all_patterns, s.par->rank(), world, s.par->sharding()),
                                   world > 1 ? s.par : nullptr);
  if (s.refine_scan_map) s.drv->set_scan_refinement(make_scan_refinement(s, settings.scan));
}

// The scan map's refinement for this rank's positions: their nominal positions (the raster, or the
// source's list) centred on the whole scan's mean, and the map the preprocessing laid them out with.
scan_refinement session::state::make_scan_refinement(state& s, const scan_refinement_options& o) {
  const int64_t all = s.data.all_patterns;
  std::vector<double> n = !s.data.positions_A.empty()
                              ? s.data.positions_A
                              : raster_positions_A(s.data.info.scan_shape[0], s.data.info.scan_shape[1],
                                                   s.geometry.step_A[0], s.geometry.step_A[1]);
  double mean[2] = {0, 0}, r2 = 0;
  for (int64_t j = 0; j < all; ++j)
    for (int a = 0; a < 2; ++a) mean[a] += n[std::size_t(2 * j + a)] / double(all);
  for (int64_t j = 0; j < all; ++j)
    for (int a = 0; a < 2; ++a) {
      n[std::size_t(2 * j + a)] -= mean[a];
      r2 += n[std::size_t(2 * j + a)] * n[std::size_t(2 * j + a)] / double(all);
    }
  std::vector<double> mine(n.begin() + 2 * s.data.first, n.begin() + 2 * (s.data.first + s.data.patterns));
  scan_refinement_options with_probe = o;
  with_probe.C10_A = s.optics.C10_A + s.model_C10_shift_A();  // the model's (state::model_C10_shift_A)
  with_probe.C10_model_shift_A = s.model_C10_shift_A();
  with_probe.wavelength_A = s.wavelength_A;
  with_probe.dk_invA = {s.sampling.dk_invA[0], s.sampling.dk_invA[1]};
  // C10's scale: the shift λ ΔC10 k of the bright field's image at the aperture's edge, k = α / λ,
  // so λ k = α (rad).
  with_probe.C10_displacement_per_A = s.optics.semiangle_mrad * 1e-3;
  // Counted electrons (the amplitude and Poisson losses agree to second order): each real
  // degree of freedom fits σ² = s / 4 = 1 / (4 T) of the noise (Var √D ≈ ¼ per pixel, scaled by
  // the mean total T), two per object pixel. Other data carry no noise model the penalty could use.
  if (s.data.has_counts())
    with_probe.noise_per_A2 = 2.0 / (4.0 * s.data.mean_total_intensity) / (s.geometry.pixel_A[0] * s.geometry.pixel_A[1]);
  with_probe.window_A = std::sqrt(double(s.data.n0) * s.geometry.pixel_A[0] * double(s.data.n1) * s.geometry.pixel_A[1]);
  return scan_refinement(with_probe, std::move(mine), std::sqrt(r2), {s.geometry.pixel_A[0], s.geometry.pixel_A[1]},
                         scan_map_of_report(s.preprocess_json, s.data.description));
}

// 6. Resumed: optimizer state, iteration count and history continue where the file ended.
void session::state::restore_resumed(state& s, start& st) {
  if (!st.resume) return;
  const resume_data& r = *st.resume;
  restore_optimizer(r, "object", *s.object_opt_ref, s.object_opt);
  restore_optimizer(r, "probe", *s.probe_opt_ref, s.probe_opt);
  if (s.drv->object_in_tiles()) restore_tile_steps(r, *s.drv, s.optimizer_steps(s.object_opt_ref, s.object_opt));
  s.drv->set_iterations_done(r.done);
  // The scan map's refinement continues from the file's state (a file without one, written with
  // the refinement off, starts it afresh from the map its preprocessing measures).
  if (s.refine_scan_map) {
    if (const nlohmann::json* state = r.file.manifest.find("scan_map_refined.state"))
      s.drv->restore_scan_refinement(
          r.file.manifest.numbers("scan_map_refined.state",
                                  state->is_array() && state->size() == scan_refinement::older_state_size
                                      ? scan_refinement::older_state_size
                                      : scan_refinement::state_size,
                                  false, false, "the scan map's refinement state"),
          cat("'", r.path, "'"));
    else
      log_info("session", cat("'", r.path, "' holds no scan map refinement state: the refinement starts afresh"));
  }
  restore_position_correction(s, r);
  const owned_array& h = r.record.array("loss_history", r.path);
  s.loss_history.assign(h.as<double>(), h.as<double>() + h.count());
  std::vector<double> secs;  // the seconds of each iteration done, for the manifest (0 when not recorded)
  if (const nlohmann::json* v = r.file.manifest.find("history.seconds"); v && v->is_array())
    for (const auto& e : *v) secs.push_back(e.is_number() && std::isfinite(e.get<double>()) ? e.get<double>() : 0.0);
  secs.resize(std::size_t(r.done), 0.0);
  s.seconds_history = std::move(secs);
  std::vector<double> cpu;  // as the seconds; a file from before the key: 0
  if (const nlohmann::json* v = r.file.manifest.find("history.cpu_seconds"); v && v->is_array())
    for (const auto& e : *v) cpu.push_back(e.is_number() && std::isfinite(e.get<double>()) ? e.get<double>() : 0.0);
  cpu.resize(std::size_t(r.done), 0.0);
  s.cpu_seconds_history = std::move(cpu);
  log_info("session", cat("resuming '", r.path, "' after iteration ", r.done, " of ", r.total));
}

// 7. The output format; what every rank runs (its device, precision, patterns), logged; the
// state the first iteration starts from.
void session::state::describe_run(state& s, start& st) {
  const registry& reg = *s.reg;
  const int32_t world = s.par->world_size();
  const auto& info = s.data.info;
  const std::string& desc = s.data.description;
  const toml::table& out_t = s.config.table_at("output");
  std::string format = *setting_value<std::string>(out_t, "output", "format");
  s.format_ref = &reg.find(TYCHO_COMPONENT_FORMAT, format);

  // ---- what every rank runs: its device, the precision its engine holds, its patterns
  const DLTensor object_view = s.engine_tensor(TYCHO_TENSOR_OBJECT);
  const std::string precision = precision_of(object_view.dtype);
  const std::string device_text = device_label(s.par->device());
  if (world > 1) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const nlohmann::ordered_json mine = {{"rank", s.par->rank()},
                                         {"host", host},
                                         {"device", device_text},
                                         {"precision", precision},
                                         {"patterns", {s.data.first, s.data.first + s.data.patterns}}};
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const std::string& text : s.par->all_texts(mine.dump())) {
      ranks.push_back(nlohmann::ordered_json::parse(text));
      const auto& r = ranks.back();
      log_info("session", cat("rank ", r["rank"].get<int>(), " of ", world, " on ", r["host"].get<std::string>(), ": ",
                              st.engine_name, " engine on ", r["device"].get<std::string>(), ", ",
                              r["precision"].get<std::string>(), ", patterns [", r["patterns"][0].get<int64_t>(), ", ",
                              r["patterns"][1].get<int64_t>(), ")"));
    }
    s.parallel_json = nlohmann::ordered_json{{"world_size", world},
                                             {"launcher", s.par->launcher()},
                                             {"reducer", s.par->reducer_name()},
                                             {"sharding", s.par->sharding() == shard::mode::replicated ? "replicated" : "patterns"},
                                             {"ranks", ranks}}
                          .dump();
  }
  log_info("session", cat("data ", desc, ": scan ", info.scan_shape[0], " x ", info.scan_shape[1],
                          ", detector ", s.data.n0, " x ", s.data.n1, ", mean ", s.data.mean_total_intensity,
                          " per pattern; object ", s.layout.shape[0], " x ", s.layout.shape[1], " px of ",
                          s.geometry.pixel_A[0], " Å; engine ", st.engine_name, ", loss ", st.loss_name,
                          ", batch ", st.settings.driver.batch_size, ", ", precision, " on ", device_text, ", targets ",
                          s.targets_dtype,
                          world > 1 ? cat(", ", world, " ranks (", s.par->reducer_name(), ")") : std::string()));
  log_info("session", cat("batches: ", batching_name(s.batches.kind), " (", s.batches.why, ")",
                          s.batches.kind == batching::random ? std::string()
                          : s.drv->object_in_tiles()
                              ? cat("; the object stepped in ", s.drv->tiles()->tile(), " x ", s.drv->tiles()->tile(),
                                    " px tiles under each batch's windows")
                              : std::string("; the whole object stepped each batch (the engine keeps it on a device, "
                                            "or the object's optimizer takes no boxes)")));
  // The state the first iteration starts from: what a run that stops in it keeps.
  s.kept = s.capture();
  if (const std::string bad = state::non_finite_array(s.kept); !bad.empty())
    fail(TYCHO_ERR_BAD_DATA, "the initial ", bad, " holds non-finite values: check [optics] (C10 = ", s.optics.C10_A,
         " Å, semiangle ", s.optics.semiangle_mrad, " mrad, energy ", s.optics.energy_eV, " eV)");
}

session::session(config_document config, registry& reg, const std::string& resume_from,
                 parallel_context* parallel)
    : s_(std::make_unique<state>(std::move(config))) {
  s_->reg = &reg;
  state::start st;
  state::open_config(*s_, resume_from, parallel, st);  // 1. config, resumed state, ranks
  {
    log_recording first_read(s_->first_read_log);
    state::read_data(*s_, st);                          // 2. data, preprocessing, intensity scale
  }
  state::search_geometry(*s_, st);                      //    the scan's geometry by trials, where asked
  state::resolve_geometry(*s_, st);                     // 3. optics, geometry, memory check, probe
  state::create_engine(*s_, st);                        // 4. loss and engine
  state::create_optimizers(*s_, st);                    // 5. optimizers, constraints, driver
  state::restore_resumed(*s_, st);                      // 6. a resumed run's state and history
  state::prepare_stopping(*s_, st);                     //    iterations = "auto": the stopping rule
  state::describe_run(*s_, st);                         // 7. output format, ranks, log, kept state
}

session::~session() = default;

}  // namespace tycho::host
