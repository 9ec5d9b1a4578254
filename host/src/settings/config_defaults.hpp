// The built-in components and values the configuration falls back to when a key is absent:
// the only place in host/ that names a built-in component (tests/test_host_names.cpp greps
// host/ for the names and allows them here only). host/src/settings/host_settings.cpp declares them as
// the keys' defaults; the session reads them through those declarations. Everything else the host learns from the
// components themselves: an engine's memory (plan_memory), an optimizer's state
// (state_arrays), which reducer sums which device's tensors (tycho_component::devices).
#pragma once

namespace tycho::host::defaults {

inline constexpr const char* source = "emd";          // [data] source
inline constexpr const char* engine = "cpu";          // [reconstruct] engine
inline constexpr const char* loss = "amplitude";      // [reconstruct] loss
inline constexpr const char* optimizer = "adam";      // [reconstruct.object|probe] optimizer
inline constexpr const char* format = "zip";          // [output] format, and of a path without a known extension
// The built-in constraints the runtime's shorthand keys stand for (host/src/constraint_list.cpp).
inline constexpr const char* amplitude_constraint = "object_amplitude";  // [reconstruct.object] amplitude_max
inline constexpr const char* phase_constraint = "object_phase";          // [reconstruct.object] kind = "phase"
inline constexpr const char* potential_constraint = "object_potential";  // [reconstruct.object] kind = "potential"
inline constexpr const char* mode_constraint = "probe_orthogonal_modes"; // [reconstruct.probe] orthogonalize_modes
inline constexpr const char* depth_constraint = "object_missing_cone";   // [reconstruct.object] depth_regulariser
// [parallel] rendezvous = "mpi": the ranks of a GPU run meet through a host reducer under mpirun.
inline constexpr const char* rendezvous_host_reducer = "mpi";

}  // namespace tycho::host::defaults
