// Starting and stopping MPI from inside a plugin that the host loads with dlopen.
#pragma once

namespace tycho::mpi_plugin {

// Initialises MPI once per process (MPI_THREAD_SERIALIZED) unless the caller already did.
// A dlopen'd plugin's libmpi is loaded RTLD_LOCAL, which hides MPI's symbols from the
// components Open MPI itself dlopens; this promotes it to RTLD_GLOBAL first. It also pins
// this plugin in memory (RTLD_NODELETE), because the MPI_Finalize it registers with atexit
// must still be mapped when the process exits.
void ensure_initialized();

// MPI_Finalize, now rather than at exit, if ensure_initialized started MPI.
void finalize_if_started();

}  // namespace tycho::mpi_plugin
