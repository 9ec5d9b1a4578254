// The `tycho` command: reconstruct, preprocess, plan, evaluate, plugins, --version.
#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/tycho_version.h>

#include <tycho/core/launch.hpp>
#include <tycho/sdk/error.hpp>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>
#include <system_error>

#include <unistd.h>

#include "tycho/host/evaluate.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/output_file.hpp"
#include "tycho/host/prepared.hpp"
#include "tycho/host/previews.hpp"
#include "tycho/host/progress.hpp"
#include "tycho/host/registry.hpp"
#include "tycho/host/run_plan.hpp"
#include "tycho/host/session.hpp"
#include "tycho/host/stop_signals.hpp"

namespace th = tycho::host;

namespace {

// This process's rank of a multi-rank run, kept where main's error handler can stop the others.
std::unique_ptr<th::parallel_context> g_parallel;
// The launcher's view of this process, read first, so that errors before the ranks have met
// already say which rank they come from.
tycho::launch_environment g_launch;

std::string rank_prefix();

// Writes to stdout or stderr that never throw: a closed stdout (`tycho ... | head -1`, SIGPIPE
// ignored) must cost the run nothing. After the first failed write to stdout, progress stops.
bool g_stdout_open = true;
template <class... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  if (!g_stdout_open) return;
  const std::string text = fmt::format(format, std::forward<Args>(args)...);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    g_stdout_open = false;
    std::clearerr(stdout);
  }
}
template <class... Args>
void say_err(fmt::format_string<Args...> format, Args&&... args) {
  const std::string text = fmt::format(format, std::forward<Args>(args)...);
  if (std::fwrite(text.data(), 1, text.size(), stderr) != text.size()) std::clearerr(stderr);
}

// What the command gives back when a run stopped mid-way: 2 after a non-finite value, 128 + the
// signal's number after SIGINT or SIGTERM (as a shell reports a process ended by it).
int stopped_exit_code(const tycho::error& e) {
  const int sig = th::stop_signal();
  return e.status == TYCHO_ERR_CANCELLED && sig != 0 ? 128 + sig : 2;
}

// The previews of a finished run (tycho/host/previews.hpp), captioned from its manifest.
std::vector<std::string> write_run_previews(const th::session& session, const std::string& out_path) {
  th::preview_inputs in;
  in.object = session.get("object");
  in.probe = session.get("probe");
  in.positions_px = session.get("positions_px");
  in.loss_history = session.loss_history();
  in.pixel_A = session.object_pixel_A(0);
  in.measured_mean = session.measured_mean_pattern();
  in.mask = session.detector_mask();
  in.title = std::filesystem::path(out_path).filename().string();
  in.caption = th::preview_caption(session.manifest_json());
  return th::write_previews(out_path, in);
}

// How many iterations an invocation runs, and over how many the learning-rate schedules are laid
// out (the run's total, [reconstruct] iterations):
//   fresh run:  --iterations N sets the total to N and runs N; --stop-after M runs only M of the
//               total (the schedules keep the total's length), so that the run can be resumed.
//   --from R:   the total is R's (recorded as history.schedule_iterations); --iterations N (or
//               --stop-after N) runs N more; neither runs what is left of the total. Past the
//               total, the schedules stay at their final value.
//   iterations = "auto" (the stopping rule): a fresh run goes on until the rule ends it, at most
//               max_iterations (--stop-after M: at most M now); --from R continues R's rule the
//               same way (--stop-after M: at most M more), and --iterations N runs N more, a
//               fixed count.
// Runs the iterations this invocation asks for and, on rank 0, saves the result and previews:
//   - every [output] checkpoint_every iterations the result so far is saved to the output path
//     (atomically; resumable with --from);
//   - a non-finite value or SIGINT/SIGTERM stops the run: the state of the last complete,
//     finite iteration is saved there, and the exit status is non-zero (stopped_exit_code).
// Progress goes to `display` (bars on a terminal, plain lines otherwise). Returns the exit status.
int run_and_save(th::session& session, int64_t iterations, int64_t stop_after, const std::string& from,
                 const std::string& out_path, th::progress_display& display, bool overwrite, int64_t checkpoint_every) {
  const int64_t done = session.iterations_done();
  int64_t n = 0;
  const bool by_rule = session.stops_by_rule() && !(!from.empty() && iterations > 0);
  if (by_rule) {
    if (session.rule_has_ended())
      throw tycho::error(TYCHO_ERR_INVALID_ARGUMENT,
                         fmt::format("'{}' already ended by its stopping rule after iteration {} ({}): give "
                                     "--iterations N to run N more",
                                     from, done, session.stopping_summary()));
    n = stop_after > 0 ? stop_after : std::max<int64_t>(session.configured_iterations() - done, 1);
  } else if (from.empty()) {
    n = stop_after > 0 ? stop_after : iterations > 0 ? iterations : session.configured_iterations();
  } else {
    n = iterations > 0 ? iterations : stop_after > 0 ? stop_after : session.configured_iterations() - done;
    if (n <= 0)
      throw tycho::error(TYCHO_ERR_INVALID_ARGUMENT,
                         fmt::format("'{}' already ran {} of its {} iterations: give --iterations N to run N more",
                                     from, done, session.configured_iterations()));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const bool root = session.parallel().is_root();
  // Room for the result (its temporary copy is written before the rename), before the first
  // iteration rather than after the last.
  if (root) th::check_free_space(out_path, session.result_bytes() + (uint64_t(1) << 20), "result");
  // From here a signal stops the run at the next mini-batch and keeps the last complete iteration.
  th::defer_stop_signals defer;
  session.set_stop_check([] { return th::stop_signal() != 0; });
  // A result that exists was refused up front unless overwriting was asked for; once this run has
  // written a checkpoint there, the file is its own.
  bool own_file = false;
  auto save = [&](const char* what) {
    session.save(out_path, overwrite || own_file ? TYCHO_SAVE_OVERWRITE : TYCHO_SAVE_NEW);
    own_file = true;
    say("wrote {}{}\n", out_path, what);
  };
  try {
    auto on_progress = [&](const tycho_progress& p) {
      display.iteration(p, done);
      if (root && checkpoint_every > 0 && p.iteration % checkpoint_every == 0 && p.iteration < p.iterations_total)
        save(fmt::format(" (checkpoint after iteration {})", p.iteration).c_str());
      return true;
    };
    if (by_rule)
      session.run_by_rule(n, on_progress);
    else
      session.run(n, on_progress);
  } catch (const tycho::error& e) {
    display.end_iterations();
    if (!session.stopped()) throw;
    const int code = stopped_exit_code(e);
    if (!root) return code;  // rank 0 saves and reports; stopping the ranks would cut its save short
    save(fmt::format(" (the state after iteration {} of {})", session.iterations_done(),
                     session.configured_iterations()).c_str());
    if (code == 2) {
      say_err("tycho: error: {}{}; saved that state to '{}'\n", rank_prefix(), e.what(), out_path);
    } else {
      say_err("tycho: interrupted by {} during iteration {}: saved the state after iteration {} to '{}'; continue "
              "with: tycho reconstruct CONFIG --from {} -o NEW.zip\n",
              th::stop_signal_name(th::stop_signal()), session.iterations_done() + 1, session.iterations_done(),
              out_path, out_path);
    }
    return code;
  }
  display.end_iterations();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!root) return 0;
  save("");
  // From here the result is saved (an existing one replaced): nothing after it may fail the
  // run. The previews are extras beside it; a failure to draw or write them is a warning.
  std::string sheet;
  if (session.previews_enabled()) {
    try {
      for (const auto& png : write_run_previews(session, out_path)) say("wrote {}\n", sheet = png);
    } catch (const std::exception& e) {
      say_err("[tycho warning] previews: the result '{}' is complete, but its previews were not written: {}\n",
              out_path, e.what());
    }
  }
  const auto& history = session.loss_history();
  // Why the run ended, where a rule or a limit decided it (a fixed count says nothing more).
  const std::string why = session.end_reason() == "fixed_count" ? "" : session.end_reason();
  display.summary(session.iterations_done() - done, seconds, history.empty() ? NAN : history.back(), out_path, sheet,
                  why);
  if (const int sig = th::stop_signal(); sig != 0) {
    say_err("tycho: interrupted by {} after the last iteration: the result '{}' is complete\n",
            th::stop_signal_name(sig), out_path);
    return 128 + sig;
  }
  return 0;
}

int cmd_reconstruct(const std::string& config_path, int64_t iterations, int64_t stop_after,
                    const std::string& from_arg, const std::string& output,
                    const std::vector<std::string>& sets, const std::vector<int64_t>& devices, bool quiet,
                    bool overwrite_flag) {
  auto& reg = th::registry::global();
  // --from a prepared file (`tycho preprocess`) starts a fresh run from its data; without CONFIG
  // the prepared file's own config is the run's.
  std::optional<th::prepared_file> prepared;
  if (!from_arg.empty()) prepared = th::try_load_prepared(reg, from_arg);
  if (config_path.empty() && !prepared) {
    std::error_code ec;
    if (!from_arg.empty() && !std::filesystem::exists(from_arg, ec))
      throw tycho::error(TYCHO_ERR_INVALID_ARGUMENT,
                         fmt::format("--from '{}': no such file (a prepared file from tycho preprocess, or a result "
                                     "to continue with its run's CONFIG)", from_arg));
    throw tycho::error(TYCHO_ERR_INVALID_ARGUMENT,
                       from_arg.empty() ? "give a CONFIG file (or --from a prepared file from tycho preprocess)"
                                        : fmt::format("'{}' is not a prepared file (tycho preprocess): to continue "
                                                      "the run it holds, give that run's CONFIG file too", from_arg));
  }
  auto doc = config_path.empty() ? th::prepared_config(*prepared) : tycho::config_document::load_file(config_path);
  std::optional<tycho::config_document> prepared_doc;
  if (prepared && !config_path.empty()) prepared_doc = th::prepared_config(*prepared);
  // The session gets the path (and loads the prepared file itself); `from` is the result that a
  // resumed run continues: empty for a prepared file, whose run is a fresh one.
  const std::string from = prepared ? std::string() : from_arg;
  prepared.reset();
  for (const auto& s : sets) doc.set_from_text(s);
  // The files this run reads, which its output must never replace: the config, the --from file,
  // the data (named in [data], of the config after --set and of a prepared file).
  const std::vector<std::string> inputs =
      th::run_input_files({&doc, prepared_doc ? &*prepared_doc : nullptr}, {config_path, from_arg});
  prepared_doc.reset();
  if (!devices.empty()) {
    std::string list;
    for (int64_t d : devices) list += (list.empty() ? "" : ", ") + std::to_string(d);
    doc.set_from_text(fmt::format("reconstruct.devices=[{}]", list));
  }
  // A fresh run's --iterations is the run's length: the schedule and the recorded config follow it.
  if (iterations > 0 && from.empty()) doc.set_from_text(fmt::format("reconstruct.iterations={}", iterations));
  if (!from.empty() && iterations > 0 && stop_after > 0)
    throw tycho::error(TYCHO_ERR_INVALID_ARGUMENT,
                       "with --from, --iterations and --stop-after both mean \"run N more\": give one");
  std::string out_path = output.empty() ? th::session::configured_output_path(doc) : output;
  const bool overwrite = overwrite_flag || th::configured_overwrite(doc);
  const int64_t checkpoint_every =
      th::configured_checkpoint_every(doc);
  // Fail now, not after an hour of iterations, if the result cannot be written there or would
  // destroy a file (only rank 0 writes, so only rank 0's folder matters).
  if (g_launch.rank == 0) th::check_output_file(out_path, inputs, overwrite, "result", "result.zip");
  const tycho::launch_environment& launch = g_launch;
  // Several GPUs in one process: one thread per device, each a rank; rank 0 prints plain lines.
  if (const auto local_devices = th::local_rank_devices(doc, reg, launch); !local_devices.empty()) {
    int code = 0;
    th::run_local_ranks(doc, reg, local_devices, [&](th::parallel_context& ctx) {
      th::session session(doc.clone(), reg, from_arg, &ctx);
      th::progress_display display(th::progress_display::choose(quiet || !ctx.is_root(), true, STDOUT_FILENO),
                                   stdout);
      const int c = run_and_save(session, iterations, stop_after, from, out_path, display, overwrite, checkpoint_every);
      if (ctx.is_root()) code = c;
    });
    return code;
  }
  // Under torchrun / srun / mpirun: this rank joins the others; only rank 0 prints progress
  // (plain lines) and writes files. One process alone on a terminal: progress bars.
  th::progress_display display(
      th::progress_display::choose(quiet || launch.rank != 0, launch.multi_process(), STDOUT_FILENO), stdout);
  th::set_stage_watcher([&display](const std::string& stage, int64_t done, int64_t total) {
    display.stage(stage, done, total);
  });
  g_parallel = th::parallel_context::create(doc, reg, launch);
  th::session session(std::move(doc), reg, from_arg, g_parallel.get());
  const int code = run_and_save(session, iterations, stop_after, from, out_path, display, overwrite, checkpoint_every);
  th::set_stage_watcher(nullptr);
  return code;
}

// The memory plan of a run, from the config and the data's header only (no pattern is read).
int cmd_plan(const std::string& config_path, const std::vector<std::string>& sets, const th::plan_options& options) {
  auto doc = tycho::config_document::load_file(config_path);
  for (const auto& s : sets) doc.set_from_text(s);
  int code = th::run_plan_command(doc, th::registry::global(), options, std::cout);
  std::cout.flush();
  return code;
}

// `tycho preprocess`: the preprocessing stage, saved as a prepared file.
int cmd_preprocess(const std::string& config_path, const std::string& output, const std::vector<std::string>& sets,
                   bool save_raw_data, bool quiet, bool overwrite_flag) {
  auto doc = tycho::config_document::load_file(config_path);
  for (const auto& s : sets) doc.set_from_text(s);
  const bool overwrite = overwrite_flag || th::configured_overwrite(doc);
  th::check_output_file(output, th::run_input_files({&doc}, {config_path}), overwrite, "prepared file",
                        "prepared.zip");
  // Reading and preprocessing as bars on a terminal (nothing more otherwise: the log has the times).
  th::progress_display display(th::progress_display::choose(quiet || g_launch.rank != 0, g_launch.multi_process(),
                                                            STDOUT_FILENO),
                               stdout);
  th::set_stage_watcher([&display](const std::string& stage, int64_t done, int64_t total) {
    display.stage(stage, done, total);
  });
  const int code = th::preprocess_command(std::move(doc), th::registry::global(), output, save_raw_data, std::cout,
                                          overwrite ? TYCHO_SAVE_OVERWRITE : TYCHO_SAVE_NEW);
  th::set_stage_watcher(nullptr);
  if (const int sig = th::stop_signal(); sig != 0) {
    say_err("tycho: interrupted by {} while saving: the prepared file '{}' is complete\n", th::stop_signal_name(sig),
            output);
    return 128 + sig;
  }
  return code;
}

int cmd_plugins() {
  auto& reg = th::registry::global();
  fmt::print("tycho {} (ABI {}.{})\nplugin folders:\n", TYCHO_VERSION_STRING,
             TYCHO_ABI_VERSION_MAJOR, TYCHO_ABI_VERSION_MINOR);
  for (const auto& d : th::registry::default_search_dirs())
    fmt::print("  {}{}\n", d, std::filesystem::is_directory(d) ? "" : "  (does not exist)");
  for (const auto& r : reg.reports()) {
    if (r.loaded) {
      fmt::print("{} {} (ABI {}.{}) from {}\n", r.name, r.version, TYCHO_ABI_MAJOR_OF(r.abi_version),
                 TYCHO_ABI_MINOR_OF(r.abi_version), r.path);
      for (const auto& c : reg.components())
        if (c.plugin_path == r.path)
          fmt::print("  {:<10} {:<12} {:<7} {}\n", th::kind_name(c.kind), c.name, c.version, c.description);
      for (const auto& c : reg.plan_only())
        if (c.plugin_path == r.path)
          fmt::print("  {:<10} {:<12} {:<7} (plan only: `tycho plan` can size it, this build cannot run it) {}\n",
                     th::kind_name(c.kind), c.name, c.version, c.description);
    } else {
      fmt::print("REFUSED {}: {}\n", r.path, r.refusal);
    }
  }
  return 0;
}

// `tycho plugins --keys NAME`: the typed declarations of every component named NAME (any kind,
// plan-only ones too), or of the runtime's table NAME ("reconstruct", "[data]").
int cmd_plugin_keys(const std::string& name) {
  auto& reg = th::registry::global();
  bool found = false;
  for (const auto* list : {&reg.components(), &reg.plan_only()})
    for (const auto& c : *list) {
      if (c.name != name) continue;
      found = true;
      fmt::print("{} {} {} ({})\n", th::kind_name(c.kind), c.name, c.version, c.plugin_path);
      if (c.settings.empty() && !c.config_keys.empty()) {
        for (const auto& k : c.config_keys) fmt::print("  {}  (not declared: any type)\n", k);
      } else {
        fmt::print("{}", th::settings_text(c.settings));
      }
    }
  std::string table = name;
  if (table.size() > 2 && table.front() == '[' && table.back() == ']') table = table.substr(1, table.size() - 2);
  for (const auto& t : th::host_setting_tables())
    if (t == table) {
      found = true;
      fmt::print("[{}] (the runtime's keys; the chosen components add theirs)\n{}", t,
                 th::settings_text(th::host_settings(t)));
    }
  if (!found) {
    fmt::print(stderr, "tycho: error: no component or runtime table named '{}' (`tycho plugins` lists them)\n", name);
    return 2;
  }
  return 0;
}

std::string rank_prefix() {
  if (g_parallel && g_parallel->world_size() > 1)
    return fmt::format("rank {}/{}: ", g_parallel->rank(), g_parallel->world_size());
  if (!g_parallel && g_launch.multi_process())
    return fmt::format("rank {}/{}: ", g_launch.rank, g_launch.world_size);
  return "";
}

// After an error on this rank the others would wait in their next collective until the
// watchdog's timeout: stop them now (MPI_Abort / ncclCommAbort; the job exits non-zero).
void stop_other_ranks(int code) {
  std::fflush(stderr);
  if (g_parallel) g_parallel->abort(code);
}

// Command-line numbers, parsed whole with a range: a 20-digit count or "nan" is refused with
// the option's name and the range, never an uncaught std::out_of_range.
CLI::Validator whole_number_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        int64_t x = 0;
        const char* end = v.data() + v.size();
        const auto [ptr, ec] = std::from_chars(v.data(), end, x);
        if (ec == std::errc() && ptr == end && x >= lo && x <= hi) return {};
        return fmt::format("expected a whole number from {} to {}, got '{}'", lo, hi, v);
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}
CLI::Validator number_in(double lo, double hi, bool lo_open) {
  return CLI::Validator(
      [lo, hi, lo_open](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(v.c_str(), &end);
        if (!v.empty() && end == v.c_str() + v.size() && errno == 0 && std::isfinite(x) &&
            (lo_open ? x > lo : x >= lo) && x <= hi)
          return {};
        return fmt::format("expected a number in {}{}, {}], got '{}'", lo_open ? "(" : "[", lo, hi, v);
      },
      fmt::format("NUMBER in {}{}, {}]", lo_open ? "(" : "[", lo, hi));
}
constexpr int64_t k_max_iterations = th::k_most_iterations;  // as [reconstruct] iterations

// The text of an exception that is not a tycho::error, naming what it can: the standard
// library's own texts ("filesystem error: ...", "std::bad_alloc") say neither which file nor what
// was expected.
std::string describe(const std::exception& e) {
  if (const auto* f = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    std::string paths = f->path1().empty() ? "" : fmt::format(" '{}'", f->path1().string());
    if (!f->path2().empty()) paths += fmt::format(" and '{}'", f->path2().string());
    return fmt::format("cannot access{}: {}", paths, f->code().message());
  }
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return "out of host memory (a larger machine, fewer patterns per rank, or a smaller batch_size; tycho plan "
           "shows what a run needs)";
  if (const auto* s = dynamic_cast<const std::system_error*>(&e))
    return fmt::format("a system call failed: {} ({})", s->code().message(), s->what());
  return e.what();
}

}  // namespace

int main(int argc, char** argv) {
  th::install_stop_signal_handlers();
  CLI::App app{"tycho: ptychographic reconstruction at scale"};
  app.set_version_flag("--version", fmt::format("tycho {} (ABI {}.{})", TYCHO_VERSION_STRING,
                                                TYCHO_ABI_VERSION_MAJOR, TYCHO_ABI_VERSION_MINOR));
  app.require_subcommand(1);

  auto* rec = app.add_subcommand("reconstruct", "reconstruct object and probe from a TOML config");
  std::string config_path, output;
  int64_t iterations = 0, stop_after = 0;
  std::string from;
  std::vector<std::string> sets;
  bool quiet = false, overwrite = false;
  std::vector<int64_t> devices;
  rec->add_option("config", config_path, "TOML configuration file (optional with --from a prepared file)");
  rec->add_option("--devices", devices, "GPUs to run on (sets [reconstruct] devices): one per rank under a launcher")
      ->delimiter(',')
      ->check(whole_number_in(0, 65535));
  rec->add_option("--iterations", iterations,
                  "iterations to run (default: [reconstruct] iterations); with --from: iterations to run more")
      ->check(whole_number_in(1, k_max_iterations));
  rec->add_option("--stop-after", stop_after,
                  "run only this many iterations now; the learning-rate schedules keep the run's total length")
      ->check(whole_number_in(1, k_max_iterations));
  rec->add_option("--from", from, "continue the run saved in this result file (object, probe, optimizer state, "
                                  "iteration count, loss history), or start a fresh run from a prepared file "
                                  "(tycho preprocess)");
  rec->add_option("--output,-o", output, "result file (default: [output] path); never one of the run's inputs");
  rec->add_flag("--overwrite", overwrite,
                "replace the result file if it exists (sets [output] overwrite = true); without it an existing "
                "file is refused");
  rec->add_option("--set", sets, "override a config value: --set reconstruct.batch_size=64")
      ->allow_extra_args(false);  // one value per --set, so a config path after it stays positional
  rec->add_flag("--quiet,-q", quiet, "no progress lines");

  auto* ev = app.add_subcommand("evaluate", "accuracy of a result against a ground-truth phase (JSON)");
  std::string result_path, truth_path;
  double sigma_A = 2.0, fov = 0.8;
  std::optional<double> eval_slice_thickness;
  ev->add_option("result", result_path, "result file written by tycho reconstruct")->required();
  ev->add_option("--truth", truth_path,
                 ".npz with phase (or phase_total), pixel_size_A, scan_origin_A; optionally phase_slices, "
                 "phase_top/phase_bottom with layer_depths_A, positions_true_A")
      ->required();
  ev->add_option("--sigma-A", sigma_A, "σ of the local-phase Gaussian, Å (default 2)")->check(number_in(0, 1e6, true));
  ev->add_option("--fov-fraction", fov, "inner fraction of the scanned field of view (default 0.8)")
      ->check(number_in(0, 1, true));
  ev->add_option("--slice-thickness-A", eval_slice_thickness,
                 "thickness of each of the result's slices, Å (default: what its manifest records)")
      ->check(number_in(0, 1e6, true));

  auto* plan = app.add_subcommand("plan", "memory per device of every term of a run, without reading the data");
  std::string plan_config;
  std::vector<std::string> plan_sets;
  th::plan_options plan_options;
  plan->add_option("config", plan_config, "TOML configuration file")->required();
  plan->add_option("--devices", plan_options.devices, "devices sharing the patterns (default: [reconstruct] devices)")
      ->check(whole_number_in(1, 1000000));
  plan->add_option("--device-memory", plan_options.memory_GiB,
                   "memory per device in GiB (default: the CUDA device's, or this machine's for the cpu engine)")
      ->check(number_in(0, 1e9, false));
  plan->add_option("--set", plan_sets, "override a config value: --set reconstruct.batch_size=64")
      ->allow_extra_args(false);
  bool plan_no_time = false;
  plan->add_flag("--no-time", plan_no_time,
                 "skip the time estimate (a calibration run of about a second of this machine's engine)");

  auto* pre = app.add_subcommand("preprocess", "run the preprocessing stage and save the data as a prepared file");
  std::string pre_config, pre_output;
  std::vector<std::string> pre_sets;
  bool save_raw_data = false;
  pre->add_option("config", pre_config, "TOML configuration file")->required();
  pre->add_option("--output,-o", pre_output, "the prepared file to write, e.g. prepared.zip")->required();
  pre->add_option("--set", pre_sets, "override a config value: --set preprocess.com_fit=plane")
      ->allow_extra_args(false);
  pre->add_flag("--save-raw-data", save_raw_data,
                "embed the preprocessed patterns (sets [preprocess] save_raw_data = true): the file is then "
                "self-contained");
  pre->add_flag("--overwrite", overwrite, "replace the prepared file if it exists (else an existing file is refused)");
  pre->add_flag("--quiet,-q", quiet, "only warnings and errors");

  auto* pl = app.add_subcommand("plugins", "list plugin folders, plugins, components, refusals");
  std::string keys_of;
  pl->add_option("--keys", keys_of,
                 "print the config keys of component NAME (or of a runtime table, e.g. reconstruct): type, "
                 "default, range, doc");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    say_err("tycho: error: {}\n(tycho {} --help lists the options)\n", e.what(),
            app.get_subcommands().empty() ? std::string() : app.get_subcommands().front()->get_name());
    return 2;
  }
  if (quiet) th::set_log_level(TYCHO_LOG_WARNING);
  try {
    if (rec->parsed()) g_launch = tycho::detect_launch(tycho::process_environment());
    if (rec->parsed())
      return cmd_reconstruct(config_path, iterations, stop_after, from, output, sets, devices, quiet, overwrite);
    if (ev->parsed()) {
      say("{}\n", th::evaluate_result(th::registry::global(), result_path, truth_path, sigma_A, fov,
                                         eval_slice_thickness));
      return 0;
    }
    if (pl->parsed()) return keys_of.empty() ? cmd_plugins() : cmd_plugin_keys(keys_of);
    if (plan->parsed()) {
      plan_options.estimate_time = !plan_no_time;
      return cmd_plan(plan_config, plan_sets, plan_options);
    }
    if (pre->parsed()) return cmd_preprocess(pre_config, pre_output, pre_sets, save_raw_data, quiet, overwrite);
  } catch (const tycho::error& e) {
    say_err("tycho: error: {}{}\n", rank_prefix(), e.what());
    stop_other_ranks(2);
    return 2;
  } catch (const tycho::sdk::error& e) {  // an SDK helper's refusal (tycho/sdk/checked.hpp) inside the host
    say_err("tycho: error: {}{}\n", rank_prefix(), e.what());
    stop_other_ranks(2);
    return 2;
  } catch (const std::bad_alloc& e) {
    say_err("tycho: error: {}{}\n", rank_prefix(), describe(e));
    stop_other_ranks(2);
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    say_err("tycho: error: {}{}\n", rank_prefix(), describe(e));
    stop_other_ranks(2);
    return 2;
  } catch (const std::system_error& e) {
    // stdout closed by its reader (`tycho plugins | head -1`, SIGPIPE ignored): what was asked
    // for has been read; nothing else is lost.
    if (e.code() == std::errc::broken_pipe) return 0;
    say_err("tycho: error: {}{}\n", rank_prefix(), describe(e));
    stop_other_ranks(2);
    return 2;
  } catch (const std::exception& e) {
    say_err("tycho: internal error: {}{}\n", rank_prefix(), describe(e));
    stop_other_ranks(3);
    return 3;
  } catch (...) {
    say_err("tycho: internal error: {}an exception of unknown type\n", rank_prefix());
    stop_other_ranks(3);
    return 3;
  }
  return 1;
}
