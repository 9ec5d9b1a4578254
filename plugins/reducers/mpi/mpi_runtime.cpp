#include "mpi_runtime.hpp"

#include <dlfcn.h>
#include <mpi.h>

#include <cstdlib>
#include <mutex>

#include <tycho/sdk.hpp>

namespace tycho::mpi_plugin {

namespace {
bool we_initialized = false;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (we_initialized && !finalized) MPI_Finalize();
}

void promote_to_global(const void* symbol_in_library) {
  Dl_info info{};
  if (dladdr(symbol_in_library, &info) != 0 && info.dli_fname != nullptr)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD | RTLD_NODELETE);
}
}  // namespace

void finalize_if_started() { finalize_at_exit(); }

void ensure_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;  // the embedding program owns MPI (bring your own communicator)
    promote_to_global(reinterpret_cast<const void*>(&MPI_Init_thread));
    promote_to_global(reinterpret_cast<const void*>(&ensure_initialized));
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      sdk::fail(TYCHO_ERR_INTERNAL, "mpi reducer: MPI_Init_thread failed");
    we_initialized = true;
    std::atexit(&finalize_at_exit);
  });
}

}  // namespace tycho::mpi_plugin
