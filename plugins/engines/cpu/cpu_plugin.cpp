// The `cpu` engine component: the engine class of cpu_engine.hpp behind the ABI's engine vtable
// (tycho/sdk/engine.hpp checks the setup and catches every exception at the boundary).
#include <tycho/core/memory_plan.hpp>
#include <tycho/sdk.hpp>
#include <tycho/sdk/engine.hpp>

#include <memory>
#include <string>

#include <tycho/sdk/fixed_point.hpp>

#include "cpu_engine.hpp"

namespace {
using namespace tycho::sdk;

// The memory model's count of the sums' header (core/src/memory_plan.cpp: 4478 words).
static_assert(fixed_point::header::words(2) == 4478);

// The engine in the precision the setup asks for, with its [reconstruct] keys read.
class cpu_component {
 public:
  explicit cpu_component(const engine_setup& s) : engine_(tycho::cpu::make_engine(*s.raw, options(s))) {}

  double compute_batch(const int64_t* indices, int64_t count) { return engine_->compute_batch(indices, count); }
  DLTensor* tensor(tycho_tensor_id id) { return engine_->tensor(id); }
  void set_position_gradient(bool on) { engine_->set_position_gradient(on); }
  void set_gradient_region(const int64_t* boxes, int64_t n) { engine_->set_gradient_region(boxes, n); }
  DLTensor* fixed_point_sums() { return engine_->fixed_point_sums(); }
  bool finish_batch(bool ends_iteration, double& loss) { return engine_->finish_batch(ends_iteration, loss); }
  void position_information(const int64_t* indices, int64_t count, double counts_per_target_unit, double* out) {
    engine_->position_information(indices, count, counts_per_target_unit, out);
  }

  // The cpu model of tycho/core/memory_plan.hpp: what cpu_engine.cpp allocates, per thread.
  static void plan_memory(const config_view& cfg, const tycho_memory_problem& problem, tycho_memory_report* out) {
    tycho::memory_problem p = tycho::from_abi(problem, tycho::memory_model::cpu);
    p.deterministic = cfg.get_bool("deterministic").value_or(false);
    std::vector<tycho::memory_term> terms = tycho::memory_terms(p);
    terms.pop_back();  // the total: the host sums
    tycho::to_abi(terms, tycho::memory_flags(p), out);
  }

 private:
  static tycho::cpu::engine_options options(const engine_setup& s) {
    const config_view& cfg = s.config;
    tycho::cpu::engine_options o;
    const int64_t threads = cfg.get_int("threads").value_or(0);
    if (threads < 0) fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'threads' must be >= 0");
    o.threads = s.raw->num_threads > 0 ? s.raw->num_threads : int(threads);
    // "measure" by default: its plans come from the per-machine wisdom file (fft_plan.hpp), so
    // runs stay bit-identical; "estimate" needs no file and no measuring at first use.
    const std::string planning = cfg.get_string("fft_planning").value_or("measure");
    if (planning != "estimate" && planning != "measure")
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'fft_planning' must be \"estimate\" or \"measure\", got \"",
           planning, "\"");
    o.measure_fft = planning == "measure";
    // true (default): the grouped shifts, 3 transform-equivalents per position where the problem
    // has one slice (any number of modes) and no position gradient; false: the reference path
    // (four 2-D transforms per position), to compare against.
    o.shift_groups = cfg.get_bool("shift_groups").value_or(true);
    // The grid of the grouped path's axis-0 offsets (cpu_engine.hpp): positions of a turned scan
    // share groups; at most half a grid step (1/64 px by default) between model and position.
    o.shift_group_grid_px = cfg.get_double("shift_group_grid_px").value_or(1.0 / 16);
    if (!(o.shift_group_grid_px >= 0 && o.shift_group_grid_px <= 0.5))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] shift_group_grid_px must be from 0 to 0.5 px, got ",
           o.shift_group_grid_px);
    // true: fixed-point sums, the same bits for any number of threads and ranks (cpu_engine.hpp);
    // false (default): float sums, whose last bits follow how the batch is cut. The default from
    // measurement: the fixed-point sums cost 12-15 % on the MoS2 example (bench/RESULTS.md).
    o.deterministic = cfg.get_bool("deterministic").value_or(false);
    o.batch_size = cfg.get_int("batch_size").value_or(128);
    if (o.batch_size <= 0) fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] batch_size must be > 0, got ", o.batch_size);
    o.host_finishes = s.host_finishes_batches;
    o.scan_positions = s.scan_positions_px;
    o.scan_patterns = s.scan_patterns;
    o.double_precision = s.float64;
    return o;
  }

  std::unique_ptr<tycho::cpu::engine_base> engine_;
};

constexpr engine_capabilities k_caps{"cpu", TYCHO_DEVICE_BIT(kDLCPU), /*float64=*/true, /*multislice=*/true,
                                     /*probe_modes=*/true, /*position_gradient=*/true, /*alternative=*/nullptr,
                                     /*streamed_targets=*/true};

// batch_size is the runtime's key (declared there); the engine reads it to bound its sums' grids.
const char* const k_keys[] = {"threads",       "fft_planning", "shift_groups", "shift_group_grid_px",
                              "deterministic", "batch_size",   nullptr};
const char* const k_planning[] = {"estimate", "measure", nullptr};
const tycho_setting k_settings[] = {
    setting("threads", TYCHO_SETTING_INTEGER, "0", "OpenMP threads for a batch; 0: all (OMP_NUM_THREADS applies)")
        .at_least(0),
    setting("fft_planning", TYCHO_SETTING_STRING, "\"measure\"",
            "FFTW planning: measure (plans from the per-machine wisdom file: fast and reproducible) or estimate")
        .one_of(k_planning),
    setting("shift_groups", TYCHO_SETTING_BOOL, "true",
            "true: sub-pixel probe shifts per row-offset group (3 transforms per position and mode; one slice, "
            "no position correction, else per position); false: per position (4)"),
    setting("shift_group_grid_px", TYCHO_SETTING_NUMBER, "0.0625",
            "px: the grouped shifts round each position's axis-0 sub-pixel offset to this grid (at most half of it "
            "from the position), so that the positions of a turned scan share groups; 0: exact")
        .at_least(0)
        .at_most(0.5),
    setting("deterministic", TYCHO_SETTING_BOOL, "false",
            "true: gradients and loss summed as fixed-point integers, the same bits for any number of threads and "
            "ranks; false: float sums, whose last bits follow how the batch is cut"),
    end_of_settings()};
const tycho_component k_components[] = {
    with_settings(component(TYCHO_COMPONENT_ENGINE, "cpu", "1.0.0",
                            "multislice, mixed-state gradient engine on the CPU (FFTW single or double precision, OpenMP)",
                            k_caps.devices, k_keys, engine_vtable<cpu_component>(k_caps)),
                  k_settings),
};
}  // namespace

TYCHO_PLUGIN("cpu", "1.0.0", k_components)
