// What the cuda engine says about itself without a GPU or the CUDA runtime: its config keys
// and its memory (the cuda model of tycho/core/memory_plan.hpp). Shared by the engine plugin
// and, in builds without CUDA, the plan-only plugin that lets `tycho plan` size a GPU run.
#pragma once

#include <tycho/tycho_plugin.h>

namespace tycho::cuda {

// batch_size is a core key of [reconstruct]; the engine reads it to size its buffers and plans.
inline const char* const k_config_keys[] = {"batch_size", "deterministic", "pool_release_threshold_bytes", nullptr};

// Typed declarations (ABI 1.1); batch_size is the runtime's key, declared there.
inline const tycho_setting k_settings[] = {
    {sizeof(tycho_setting), "deterministic", TYCHO_SETTING_BOOL, "false", 0u, 0.0, 0.0, nullptr, nullptr,
     "sum the probe gradient in a fixed order: bit-for-bit repeatable runs, a little slower"},
    {sizeof(tycho_setting), "pool_release_threshold_bytes", TYCHO_SETTING_INTEGER, "-1", TYCHO_SETTING_HAS_MIN, -1.0,
     0.0, nullptr, "bytes", "memory the stream-ordered pool keeps between batches; -1: keep everything"},
    {sizeof(tycho_setting), nullptr, TYCHO_SETTING_STRING, nullptr, 0u, 0.0, 0.0, nullptr, nullptr, nullptr}};

inline constexpr const char* k_description = "single-slice gradient engine on one NVIDIA GPU (cuFFT, batched kernels)";

// tycho_engine_vtable::plan_memory of the cuda engine (cuda_description.cpp).
tycho_status plan_memory(const tycho_config* cfg, const tycho_memory_problem* problem, tycho_memory_report* out);

}  // namespace tycho::cuda
