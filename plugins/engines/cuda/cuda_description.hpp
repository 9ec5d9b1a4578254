// What the cuda engine says about itself without a GPU or the CUDA runtime: its capabilities,
// config keys and its memory (the cuda model of tycho/core/memory_plan.hpp). Shared by the engine plugin
// and, in builds without CUDA, the plan-only plugin that lets `tycho plan` size a GPU run.
#pragma once

#include <tycho/sdk.hpp>
#include <tycho/sdk/engine.hpp>

namespace tycho::cuda {

// batch_size is a core key of [reconstruct]; the engine reads it to size its buffers and plans.
inline const char* const k_config_keys[] = {"batch_size", "deterministic", "pool_release_threshold_bytes", nullptr};

// Typed declarations (ABI 1.1); batch_size is the runtime's key, declared there.
inline const tycho_setting k_settings[] = {
    sdk::setting("deterministic", TYCHO_SETTING_BOOL, "false",
                 "gradients summed as fixed-point integers: the same object, probe and positions on any number of "
                 "devices and on every run; false: float atomics"),
    sdk::setting("pool_release_threshold_bytes", TYCHO_SETTING_INTEGER, "-1",
                 "memory the stream-ordered pool keeps between batches; -1: keep everything", "bytes")
        .at_least(-1),
    sdk::end_of_settings()};

// What the engine can do (tycho/sdk/engine.hpp refuses the rest at create, naming the cpu engine).
inline constexpr sdk::engine_capabilities k_capabilities{"cuda", TYCHO_DEVICE_BIT(kDLCUDA), /*float64=*/false,
                                                         /*multislice=*/false, /*probe_modes=*/false,
                                                         /*position_gradient=*/false, "engine = \"cpu\""};

inline constexpr const char* k_description = "single-slice gradient engine on one NVIDIA GPU (cuFFT, batched kernels)";

// The cuda engine's memory for `problem`, term by term (cuda_description.cpp): its engine class's
// plan_memory (tycho/sdk/engine.hpp), shared with the plan-only plugin.
void plan_memory(const sdk::config_view& cfg, const tycho_memory_problem& problem, tycho_memory_report* out);

}  // namespace tycho::cuda
