// The CUDA runtime for the GPU tests, loaded at run time: the test binary does not link CUDA, so
// it builds and runs (skipping the GPU tests) on machines without it.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tycho::test {

// libcudart (the one the build found, TYCHO_CUDART_LIBRARY, then the usual sonames), or NULL
// when none loads. The handle stays open for the process.
inline void* open_cudart() {
  std::vector<std::string> names;
#ifdef TYCHO_CUDART_LIBRARY
  names.push_back(TYCHO_CUDART_LIBRARY);
#endif
  names.insert(names.end(), {"libcudart.so.13", "libcudart.so.12", "libcudart.so"});
  for (const auto& name : names)
    if (void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  return nullptr;
}

// TYCHO_REQUIRE_GPU set (and not "0"): a missing device fails the GPU tests instead of skipping
// them (scripts/gpu-check sets it).
inline bool gpu_required() {
  const char* v = std::getenv("TYCHO_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

}  // namespace tycho::test
