// The `tycho` command: reconstruct, preprocess, plan, evaluate, plugins, --version.
#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/tycho_version.h>

#include <tycho/core/launch.hpp>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <filesystem>
#include <iostream>
#include <optional>

#include "tycho/host/evaluate.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/prepared.hpp"
#include "tycho/host/previews.hpp"
#include "tycho/host/registry.hpp"
#include "tycho/host/run_plan.hpp"
#include "tycho/host/session.hpp"

namespace th = tycho::host;

namespace {

// This process's rank of a multi-rank run, kept where main's error handler can stop the others.
std::unique_ptr<th::parallel_context> g_parallel;
// The launcher's view of this process, read first, so that errors before the ranks have met
// already say which rank they come from.
tycho::launch_environment g_launch;

// Fail now, not after an hour of work, if the output cannot be written there.
void check_output_path(const std::string& out_path, const char* example_name) {
  if (std::filesystem::is_directory(out_path))
    throw tycho::error(TYCHO_ERR_INVALID_ARGUMENT,
                       fmt::format("output '{}' is a folder; give a file name, e.g. '{}/{}'", out_path, out_path,
                                   example_name));
  auto out_dir = std::filesystem::absolute(out_path).parent_path();
  if (!std::filesystem::is_directory(out_dir))
    throw tycho::error(TYCHO_ERR_NOT_FOUND, fmt::format("output folder '{}' (for '{}') does not exist",
                                                        out_dir.string(), out_path));
}

// How many iterations an invocation runs, and over how many the learning-rate schedules are laid
// out (the run's total, [reconstruct] iterations):
//   fresh run:  --iterations N sets the total to N and runs N; --stop-after M runs only M of the
//               total (the schedules keep the total's length), so that the run can be resumed.
//   --from R:   the total is R's (recorded as history.schedule_iterations); --iterations N (or
//               --stop-after N) runs N more; neither runs what is left of the total. Past the
//               total, the schedules stay at their final value.
// Runs the iterations this invocation asks for and, on rank 0, saves the result and previews.
void run_and_save(th::session& session, int64_t iterations, int64_t stop_after, const std::string& from,
                  const std::string& out_path, bool quiet) {
  const int64_t done = session.iterations_done();
  int64_t n = 0;
  if (from.empty()) {
    n = stop_after > 0 ? stop_after : iterations > 0 ? iterations : session.configured_iterations();
  } else {
    n = iterations > 0 ? iterations : stop_after > 0 ? stop_after : session.configured_iterations() - done;
    if (n <= 0)
      throw tycho::error(TYCHO_ERR_INVALID_ARGUMENT,
                         fmt::format("'{}' already ran {} of its {} iterations: give --iterations N to run N more",
                                     from, done, session.configured_iterations()));
  }
  session.run(n, [&](const tycho_progress& p) {
    if (!quiet)
      fmt::print("iteration {:>4}/{}  loss {:.6e}  {:.3f} s/it\n", p.iteration, done + p.iterations_total,
                 p.loss, p.seconds);
    std::fflush(stdout);
    return true;
  });
  if (!session.parallel().is_root()) return;
  session.save(out_path, TYCHO_SAVE_OVERWRITE);
  fmt::print("wrote {}\n", out_path);
  if (session.previews_enabled())
    for (const auto& png : th::write_previews(out_path, session.get("object"), session.get("probe"),
                                              session.get("positions_px")))
      fmt::print("wrote {}\n", png);
}

int cmd_reconstruct(const std::string& config_path, int64_t iterations, int64_t stop_after,
                    const std::string& from_arg, const std::string& output,
                    const std::vector<std::string>& sets, const std::vector<int64_t>& devices, bool quiet) {
  auto& reg = th::registry::global();
  // --from a prepared file (`tycho preprocess`) starts a fresh run from its data; without CONFIG
  // the prepared file's own config is the run's.
  std::optional<th::prepared_file> prepared;
  if (!from_arg.empty()) prepared = th::try_load_prepared(reg, from_arg);
  if (config_path.empty() && !prepared)
    throw tycho::error(TYCHO_ERR_INVALID_ARGUMENT,
                       from_arg.empty() ? "give a CONFIG file (or --from a prepared file from tycho preprocess)"
                                        : fmt::format("'{}' is not a prepared file: give the CONFIG file of the run "
                                                      "it continues", from_arg));
  auto doc = config_path.empty() ? th::prepared_config(*prepared) : tycho::config_document::load_file(config_path);
  // The session gets the path (and loads the prepared file itself); `from` is the result that a
  // resumed run continues: empty for a prepared file, whose run is a fresh one.
  const std::string from = prepared ? std::string() : from_arg;
  prepared.reset();
  for (const auto& s : sets) doc.set_from_text(s);
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
  // Fail now, not after an hour of iterations, if the result cannot be written there (only rank 0
  // writes, so only rank 0's folder matters).
  if (g_launch.rank == 0) check_output_path(out_path, "result.zip");
  const tycho::launch_environment& launch = g_launch;
  // Several GPUs in one process: one thread per device, each a rank.
  if (const auto local_devices = th::local_rank_devices(doc, reg, launch); !local_devices.empty()) {
    th::run_local_ranks(doc, reg, local_devices, [&](th::parallel_context& ctx) {
      th::session session(doc.clone(), reg, from_arg, &ctx);
      run_and_save(session, iterations, stop_after, from, out_path, quiet || !ctx.is_root());
    });
    return 0;
  }
  // Under torchrun / srun / mpirun: this rank joins the others; only rank 0 prints progress and
  // writes files.
  g_parallel = th::parallel_context::create(doc, reg, launch);
  th::session session(std::move(doc), reg, from_arg, g_parallel.get());
  run_and_save(session, iterations, stop_after, from, out_path, quiet || !g_parallel->is_root());
  return 0;
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
                   bool save_raw_data) {
  check_output_path(output, "prepared.zip");
  auto doc = tycho::config_document::load_file(config_path);
  for (const auto& s : sets) doc.set_from_text(s);
  return th::preprocess_command(std::move(doc), th::registry::global(), output, save_raw_data, std::cout);
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tycho: ptychographic reconstruction at scale"};
  app.set_version_flag("--version", fmt::format("tycho {} (ABI {}.{})", TYCHO_VERSION_STRING,
                                                TYCHO_ABI_VERSION_MAJOR, TYCHO_ABI_VERSION_MINOR));
  app.require_subcommand(1);

  auto* rec = app.add_subcommand("reconstruct", "reconstruct object and probe from a TOML config");
  std::string config_path, output;
  int64_t iterations = 0, stop_after = 0;
  std::string from;
  std::vector<std::string> sets;
  bool quiet = false;
  std::vector<int64_t> devices;
  rec->add_option("config", config_path, "TOML configuration file (optional with --from a prepared file)");
  rec->add_option("--devices", devices, "GPUs to run on (sets [reconstruct] devices): one per rank under a launcher")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  const CLI::Validator positive(
      [](std::string& v) { return std::stoll(v) > 0 ? std::string() : "must be a positive integer"; }, "POSITIVE");
  rec->add_option("--iterations", iterations,
                  "iterations to run (default: [reconstruct] iterations); with --from: iterations to run more")
      ->check(positive);
  rec->add_option("--stop-after", stop_after,
                  "run only this many iterations now; the learning-rate schedules keep the run's total length")
      ->check(positive);
  rec->add_option("--from", from, "continue the run saved in this result file (object, probe, optimizer state, "
                                  "iteration count, loss history), or start a fresh run from a prepared file "
                                  "(tycho preprocess)");
  rec->add_option("--output,-o", output, "result file (default: [output] path)");
  rec->add_option("--set", sets, "override a config value: --set reconstruct.batch_size=64")
      ->allow_extra_args(false);  // one value per --set, so a config path after it stays positional
  rec->add_flag("--quiet,-q", quiet, "no progress lines");

  auto* ev = app.add_subcommand("evaluate", "accuracy of a result against a ground-truth phase (JSON)");
  std::string result_path, truth_path;
  double sigma_A = 2.0, fov = 0.8;
  ev->add_option("result", result_path, "result file written by tycho reconstruct")->required();
  ev->add_option("--truth", truth_path, ".npz with phase, pixel_size_A, scan_origin_A")->required();
  ev->add_option("--sigma-A", sigma_A, "σ of the local-phase Gaussian, Å (default 2)");
  ev->add_option("--fov-fraction", fov, "inner fraction of the scanned field of view (default 0.8)");

  auto* plan = app.add_subcommand("plan", "memory per device of every term of a run, without reading the data");
  std::string plan_config;
  std::vector<std::string> plan_sets;
  th::plan_options plan_options;
  plan->add_option("config", plan_config, "TOML configuration file")->required();
  plan->add_option("--devices", plan_options.devices, "devices sharing the patterns (default: [reconstruct] devices)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--device-memory", plan_options.memory_GiB,
                   "memory per device in GiB (default: the CUDA device's, or this machine's for the cpu engine)")
      ->check(CLI::NonNegativeNumber);
  plan->add_option("--set", plan_sets, "override a config value: --set reconstruct.batch_size=64")
      ->allow_extra_args(false);

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
  pre->add_flag("--quiet,-q", quiet, "only warnings and errors");

  auto* pl = app.add_subcommand("plugins", "list plugin folders, plugins, components, refusals");
  std::string keys_of;
  pl->add_option("--keys", keys_of,
                 "print the config keys of component NAME (or of a runtime table, e.g. reconstruct): type, "
                 "default, range, doc");

  CLI11_PARSE(app, argc, argv);
  if (quiet) th::set_log_level(TYCHO_LOG_WARNING);
  try {
    if (rec->parsed()) g_launch = tycho::detect_launch(tycho::process_environment());
    if (rec->parsed()) return cmd_reconstruct(config_path, iterations, stop_after, from, output, sets, devices, quiet);
    if (ev->parsed()) {
      fmt::print("{}\n", th::evaluate_result(th::registry::global(), result_path, truth_path, sigma_A, fov));
      return 0;
    }
    if (pl->parsed()) return keys_of.empty() ? cmd_plugins() : cmd_plugin_keys(keys_of);
    if (plan->parsed()) return cmd_plan(plan_config, plan_sets, plan_options);
    if (pre->parsed()) return cmd_preprocess(pre_config, pre_output, pre_sets, save_raw_data);
  } catch (const tycho::error& e) {
    fmt::print(stderr, "tycho: error: {}{}\n", rank_prefix(), e.what());
    stop_other_ranks(2);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tycho: internal error: {}{}\n", rank_prefix(), e.what());
    stop_other_ranks(3);
    return 3;
  }
  return 1;
}
