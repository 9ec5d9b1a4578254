// Which build of a plugin's vectorised loops to run (header-only, not included by sdk.hpp).
//
// The built-in cpu engine (plugins/engines/cpu/pointwise.hpp) and losses
// (plugins/losses/far_field_loss.hpp) compile their pixel loops twice, for baseline x86-64 (SSE2)
// and with __attribute__((target("avx2"))) (no FMA, so both do the same IEEE operations and give
// the same bits), and call the AVX2 build when use_avx2_loops() says so. A plugin that does the
// same should ask here, so that one switch serves every plugin of a run: the environment variable
// TYCHO_CPU_SIMD=sse2 asks for the SSE2 builds on any CPU (to compare, or on a CPU that
// misreports its features).
//
// Thread-safe; reads the environment on every call (cheap: call it once per engine or per batch,
// not per pixel). false on a compiler or CPU family without the x86-64 feature test.
#pragma once

#include <cstdlib>
#include <cstring>

namespace tycho::sdk {

inline bool use_avx2_loops() {
  const char* asked = std::getenv("TYCHO_CPU_SIMD");
  if (asked != nullptr && std::strcmp(asked, "sse2") == 0) return false;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;  // the CPU, and the OS saving its registers
#else
  return false;
#endif
}

}  // namespace tycho::sdk
