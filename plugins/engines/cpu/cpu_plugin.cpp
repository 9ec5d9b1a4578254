// The `cpu` engine component behind the ABI's engine vtable.
#include <tycho/core/memory_plan.hpp>
#include <tycho/sdk.hpp>

#include <cstddef>
#include <cstring>

#include "cpu_engine.hpp"

namespace {
using namespace tycho::sdk;
using tycho::cpu::engine_base;

tycho_status create(const tycho_engine_setup* setup, tycho_engine** out) {
  return guarded([&] {
    // A 1.1 host's setup ends at loss_ref: one slice, no position gradient (cpu_engine.cpp).
    if (setup == nullptr || setup->struct_size < offsetof(tycho_engine_setup, slice_propagator))
      fail(TYCHO_ERR_ABI_MISMATCH, "cpu engine: engine setup struct is too small");
    if (setup->device.device_type != kDLCPU)
      fail(TYCHO_ERR_UNSUPPORTED, "cpu engine: runs on the CPU only, device type ",
           int(setup->device.device_type), " was requested");
    config_view cfg(setup->config);
    tycho::cpu::engine_options options;
    int64_t threads = cfg.get_int("threads").value_or(0);
    if (threads < 0) fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'threads' must be >= 0");
    options.threads = setup->num_threads > 0 ? setup->num_threads : int(threads);
    // "measure" by default: its plans come from the per-machine wisdom file (fft_plan.hpp), so
    // runs stay bit-identical; "estimate" needs no file and no measuring at first use.
    std::string planning = cfg.get_string("fft_planning").value_or("measure");
    if (planning != "estimate" && planning != "measure")
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'fft_planning' must be \"estimate\" or \"measure\", got \"",
           planning, "\"");
    options.measure_fft = planning == "measure";
    // false: the reference path (four 2-D transforms per position), to compare against.
    options.shift_groups = cfg.get_bool("shift_groups").value_or(false);
    // The host has checked the value; a third-party host might not have.
    std::string precision = cfg.get_string("precision").value_or("float32");
    if (precision != "float32" && precision != "float64")
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] precision must be \"float32\" or \"float64\", got \"",
           precision, "\"");
    options.double_precision = precision == "float64";
    *out = reinterpret_cast<tycho_engine*>(tycho::cpu::make_engine(*setup, options).release());
  });
}

tycho_status compute_batch(tycho_engine* eng, const int64_t* indices, int64_t count,
                           double* loss_sum) {
  return guarded(
      [&] { *loss_sum += reinterpret_cast<engine_base*>(eng)->compute_batch(indices, count); });
}

tycho_status get_tensor(tycho_engine* eng, tycho_tensor_id id, DLTensor* out) {
  return guarded([&] { *out = *reinterpret_cast<engine_base*>(eng)->tensor(id); });
}

void destroy(tycho_engine* eng) { delete reinterpret_cast<engine_base*>(eng); }

tycho_status read_tensor(tycho_engine* eng, tycho_tensor_id id, void* dst, size_t bytes) {
  return guarded([&] {
    const DLTensor& t = *reinterpret_cast<engine_base*>(eng)->tensor(id);
    size_t size = size_t(element_count(t)) * (t.dtype.bits * t.dtype.lanes / 8u);
    if (bytes != size)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: read_tensor of ", shape_string(t), " needs ", size,
           " bytes, got ", bytes);
    std::memcpy(dst, data_of<const char>(t), size);
  });
}

void* no_stream(tycho_engine*) { return nullptr; }

// The cpu model of tycho/core/memory_plan.hpp: what cpu_engine.cpp allocates, per thread.
tycho_status plan_memory(const tycho_config*, const tycho_memory_problem* problem, tycho_memory_report* out) {
  return guarded([&] {
    if (problem == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: no memory problem");
    const tycho::memory_problem p = tycho::from_abi(*problem, tycho::memory_model::cpu);
    std::vector<tycho::memory_term> terms = tycho::memory_terms(p);
    terms.pop_back();  // the total: the host sums
    tycho::to_abi(terms, tycho::memory_flags(p), out);
  });
}

const tycho_engine_vtable k_vtable = {sizeof(tycho_engine_vtable), TYCHO_ABI_VERSION, &create,
                                      &compute_batch, &get_tensor, &destroy, &read_tensor,
                                      &no_stream, nullptr, &plan_memory};
const char* const k_keys[] = {"threads", "fft_planning", "shift_groups", nullptr};
const char* const k_planning[] = {"estimate", "measure", nullptr};
const tycho_setting k_settings[] = {
    setting("threads", TYCHO_SETTING_INTEGER, "0", "OpenMP threads for a batch; 0: all (OMP_NUM_THREADS applies)")
        .at_least(0),
    setting("fft_planning", TYCHO_SETTING_STRING, "\"measure\"",
            "FFTW planning: measure (plans from the per-machine wisdom file: fast and reproducible) or estimate")
        .one_of(k_planning),
    setting("shift_groups", TYCHO_SETTING_BOOL, "false",
            "true: sub-pixel probe shifts per row-offset group (3 transforms per position); false: per position (4)"),
    end_of_settings()};
const tycho_component k_components[] = {
    with_settings(component(TYCHO_COMPONENT_ENGINE, "cpu", "1.0.0",
                            "multislice, mixed-state gradient engine on the CPU (FFTW single or double precision, OpenMP)",
                            TYCHO_DEVICE_BIT(kDLCPU), k_keys, &k_vtable),
                  k_settings),
};
}  // namespace

TYCHO_PLUGIN("cpu", "1.0.0", k_components)
