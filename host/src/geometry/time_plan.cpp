#include "geometry/time_plan.hpp"

#include <tycho/core/batch_plan.hpp>
#include <tycho/core/driver.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/core/memory_plan.hpp>
#include <tycho/host/optics.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include <time.h>

#include "runtime/batching_choice.hpp"
#include "settings/position_settings.hpp"
#include "settings/config_read.hpp"
#include "settings/settings_read.hpp"

namespace tycho::host {

namespace {
using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// The calibration's components, destroyed in order (optimizers, engine, loss).
struct calibration_run {
  const tycho_loss_vtable* lvt = nullptr;
  const tycho_engine_vtable* evt = nullptr;
  tycho_loss* loss = nullptr;
  tycho_engine* engine = nullptr;
  std::vector<std::pair<const tycho_optimizer_vtable*, tycho_optimizer*>> optimizers;
  ~calibration_run() {
    for (auto& [vt, o] : optimizers) vt->destroy(o);
    if (engine) evt->destroy(engine);
    if (loss) lvt->destroy(loss);
  }
};
}  // namespace

time_estimate estimate_iteration_time(const config_document& doc, const registry& reg, const run_preview& r,
                                      double budget_s) {
  time_estimate e;
  const memory_problem& p = r.problem;
  if (!r.engine_available) {
    e.why = cat("not estimated: the '", r.engine_name, "' engine cannot run here");
    return e;
  }
  if (memory_on_device(p)) {
    e.why = cat("not estimated: the '", r.engine_name, "' engine computes on a device (estimates are made for host "
                "engines, by running them)");
    return e;
  }
  const toml::table& rec_t = doc.table_at("reconstruct");
  const int64_t n0 = r.window[0], n1 = r.window[1], all = p.patterns, batch = std::max<int64_t>(1, p.batch_size);
  const int64_t h = r.geometry.layout.shape[0], w = r.geometry.layout.shape[1];
  const batching_choice choice = choose_batching(doc, h * w, n0 * n1, batch);
  e.batching = batching_name(choice.kind);
  const std::vector<double>& positions = r.geometry.layout.positions_px;
  if (positions.size() != std::size_t(2 * all)) {
    e.why = "not estimated: the positions are not known before the data is read";
    return e;
  }

  // Two batches of the run's batching (one when the scan has fewer), as the run draws them.
  batch_plan plan(all, batch, uint64_t(read_key<int64_t>(rec_t, "seed", "reconstruct").value_or(0)), choice.kind,
                  positions);
  const int64_t batches = std::min<int64_t>(plan.batches(), 2);
  std::vector<int64_t> members;
  for (int64_t k = 0; k < batches; ++k) {
    int64_t count = 0;
    const int64_t* b = plan.batch(1, k, count);
    members.insert(members.end(), b, b + count);
  }
  const int64_t calib_patterns = int64_t(members.size());
  // The object: the run's (random batches step it whole each batch), else the crop of the
  // batches' windows (compact batches step only there).
  int64_t lo[2] = {0, 0}, ch = h, cw = w;
  if (choice.kind == batching::compact) {
    int64_t hi[2] = {0, 0};
    lo[0] = h;
    lo[1] = w;
    for (int64_t j : members)
      for (int a = 0; a < 2; ++a) {
        const int64_t n = a == 0 ? n0 : n1;
        const int64_t top = int64_t(std::floor(positions[std::size_t(2 * j + a)] - double(n / 2)));
        lo[a] = std::min(lo[a], top);
        hi[a] = std::max(hi[a], top + n);
      }
    lo[0] = std::max<int64_t>(0, lo[0] - 1);
    lo[1] = std::max<int64_t>(0, lo[1] - 1);
    ch = std::min(h, hi[0] + 1) - lo[0];
    cw = std::min(w, hi[1] + 1) - lo[1];
  }
  const int64_t slices = p.slices, modes = p.probe_modes;
  std::vector<double> calib_positions;
  for (int64_t j : members)
    calib_positions.insert(calib_positions.end(), {positions[std::size_t(2 * j)] - double(lo[0]),
                                                   positions[std::size_t(2 * j + 1)] - double(lo[1])});
  // Counts of about the data's dose: values only have to be plausible; uint16 as a run of counts.
  std::mt19937 rng(1);
  std::poisson_distribution<int> counts(3.0);
  std::vector<uint16_t> targets(std::size_t(calib_patterns * n0 * n1));
  for (auto& t : targets) t = uint16_t(counts(rng));
  std::vector<std::complex<float>> object(std::size_t(slices * ch * cw), std::complex<float>(1.f, 0.f));
  std::vector<std::complex<float>> probe = make_probe(r.geometry.optics, r.geometry.sampling, 1.0);
  {
    std::vector<std::complex<float>> modes_probe;
    for (int64_t k = 0; k < modes; ++k)
      for (const auto& v : probe) modes_probe.push_back(v * float(k == 0 ? 1.0 : 0.1));
    probe = std::move(modes_probe);
  }
  int64_t target_shape[3] = {calib_patterns, n0, n1}, pos_shape[2] = {calib_patterns, 2};
  int64_t object_shape[3] = {slices, ch, cw}, probe_shape[3] = {modes, n0, n1};
  DLTensor targets_t{targets.data(), {kDLCPU, 0}, 3, {kDLUInt, 16, 1}, target_shape, nullptr, 0};
  DLTensor positions_t{calib_positions.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, pos_shape, nullptr, 0};
  DLTensor object_t{object.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, object_shape, nullptr, 0};
  DLTensor probe_t{probe.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, probe_shape, nullptr, 0};
  std::vector<std::complex<double>> propagator;
  int64_t propagator_shape[2] = {n0, n1};
  DLTensor propagator_t{};
  if (slices > 1) {
    propagator.assign(std::size_t(n0 * n1), std::complex<double>(1.0, 0.0));  // a unit propagator: the same work
    propagator_t = {propagator.data(), {kDLCPU, 0}, 2, {kDLComplex, 128, 1}, propagator_shape, nullptr, 0};
  }

  calibration_run run;
  tycho_config rec_cfg{&rec_t, "[reconstruct]", doc.base_dir()};
  const component_ref& loss_ref =
      reg.find(TYCHO_COMPONENT_LOSS, *setting_value<std::string>(rec_t, "reconstruct", "loss"));
  run.lvt = loss_ref.as<tycho_loss_vtable>();
  check_status(run.lvt->create(&rec_cfg, &run.loss), "loss create");
  run.evt = reg.find(TYCHO_COMPONENT_ENGINE, r.engine_name).as<tycho_engine_vtable>();
  tycho_engine_setup setup{};
  setup.struct_size = sizeof(setup);
  setup.config = &rec_cfg;
  setup.targets = &targets_t;
  setup.target_scale = 1.0 / (3.0 * double(n0 * n1));
  setup.positions_px = &positions_t;
  setup.object_init = &object_t;
  setup.probe_init = &probe_t;
  setup.loss = {run.lvt, run.loss};
  const tycho_loss_ref loss_binding{sizeof(tycho_loss_ref), run.lvt, run.loss};
  setup.loss_ref = &loss_binding;
  setup.device = {kDLCPU, 0};
  setup.slice_propagator = slices > 1 ? &propagator_t : nullptr;
  setup.slice_thickness_A = slices > 1 ? 1.0 : 0.0;
  setup.position_gradient =
      read_position_correction(doc.table_at("reconstruct.positions")) != position_correction_mode::off ? 1 : 0;
  // The driver below finishes the batches of an engine with deterministic sums, as a run's does
  // (an engine set up without it finishes them itself, and the driver's finish_batch would then
  // find no sums left to finish); the calibration's positions are its whole scan.
  setup.host_finishes_batches = 1;
  check_status(run.evt->create(&setup, &run.engine), "engine create (the time estimate's calibration)");

  std::vector<optimizer_binding> bindings;
  for (const auto& [which, param, grad] : {std::tuple{"object", TYCHO_TENSOR_OBJECT, TYCHO_TENSOR_OBJECT_GRAD},
                                           std::tuple{"probe", TYCHO_TENSOR_PROBE, TYCHO_TENSOR_PROBE_GRAD}}) {
    const std::string table = cat("reconstruct.", which);
    const toml::table& t = doc.table_at(table);
    const auto* vt = reg.find(TYCHO_COMPONENT_OPTIMIZER, *setting_value<std::string>(t, table, "optimizer"))
                         .as<tycho_optimizer_vtable>();
    tycho_config cfg{&t, cat("[", table, "]"), doc.base_dir()};
    DLTensor view{};
    check_status(run.evt->get_tensor(run.engine, param, &view), "engine get_tensor");
    tycho_optimizer* opt = nullptr;
    check_status(vt->create(&cfg, &view, &opt), "optimizer create");
    run.optimizers.push_back({vt, opt});
    bindings.push_back(optimizer_binding{vt, opt, param, grad, 1, learning_rate_schedule{}});
  }
  driver_options options;
  options.batch_size = batch;
  options.batches = choice.kind;
  if (choice.kind == batching::compact) options.positions_px = calib_positions;
  driver drv(engine_binding{run.evt, run.engine}, std::move(bindings), calib_patterns, options);

  // A warm-up iteration (first touches, FFTW's plans), then iterations until the budget.
  drv.run_iteration();
  const auto t0 = clock_type::now();
  const double cpu0 = process_cpu_seconds();
  int64_t iterations = 0;
  do {
    drv.run_iteration();
    ++iterations;
  } while (since(t0) < budget_s && iterations < 20);
  e.calibration_seconds = since(t0);
  const double per_batch = e.calibration_seconds / double(iterations * batches);
  const double cpu_per_batch = (process_cpu_seconds() - cpu0) / double(iterations * batches);
  // The iteration's batches (history.seconds and history.cpu_seconds of a result count the
  // same: the driver's iteration).
  e.seconds_per_iteration = per_batch * double(plan.batches());
  e.cpu_seconds_per_iteration = cpu_per_batch * double(plan.batches());
  e.us_per_position = e.seconds_per_iteration / double(all) * 1e6;
  e.cpu_us_per_position = e.cpu_seconds_per_iteration / double(all) * 1e6;
  e.done = true;
  e.why = cat("an estimate: ", iterations, " iterations of ", batches, " batch", batches > 1 ? "es" : "", " (",
              calib_patterns, " positions, ", choice.kind == batching::compact ? "compact" : "random",
              " batching, object ", ch, " x ", cw, " px) on this machine in ", std::lround(e.calibration_seconds * 1e3),
              " ms, scaled to the run's ", plan.batches(), " batches, at this machine's load now (the CPU time does not "
              "depend on it); constraints, checkpoints and previews not counted, disk reads taken as read ahead");
  return e;
}

std::string duration_text(double seconds) {
  if (seconds < 120) return cat(std::lround(seconds), " s");
  if (seconds < 7200) return cat(std::lround(seconds / 60), " min");
  return cat(std::lround(seconds / 360) / 10.0, " h");
}

}  // namespace tycho::host
