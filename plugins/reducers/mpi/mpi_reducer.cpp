// The `mpi` reducer: collectives on host tensors over an MPI communicator (a duplicate of
// MPI_COMM_WORLD, or the caller's), behind the ABI's reducer vtable (tycho/sdk/reducer.hpp
// checks the arguments and catches every exception at the boundary).
#include <mpi.h>

#include <tycho/sdk.hpp>
#include <tycho/sdk/reducer.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "mpi_runtime.hpp"

namespace {

using namespace tycho::sdk;

// Collectives over one communicator: a duplicate of MPI_COMM_WORLD (freed here) or the caller's.
class mpi_reducer {
 public:
  explicit mpi_reducer(const tycho_reducer_setup& setup) {
    tycho::mpi_plugin::ensure_initialized();
    if (setup.communicator != nullptr) {
      comm_ = *static_cast<const MPI_Comm*>(setup.communicator);  // the caller's: not freed
    } else {
      check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
      owns_comm_ = true;
    }
    // Errors come back as codes (reported with the rank), not as MPI's default abort.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    // The launcher's view (setup) and MPI's must agree: a mismatch means this libmpi is not the
    // one the launcher speaks (each process would see itself as a world of one).
    if (setup.world_size > 0 && setup.world_size != size_)
      fail(TYCHO_ERR_UNSUPPORTED, "mpi reducer: the launcher starts ", setup.world_size,
           " ranks but MPI sees a world of ", size_,
           "; launch with the mpirun of the MPI tycho was built with (Open MPI), or srun --mpi=pmix");
    if (setup.rank >= 0 && setup.world_size > 0 && setup.rank != rank_)
      fail(TYCHO_ERR_INTERNAL, "mpi reducer: the launcher says rank ", setup.rank, ", MPI says ", rank_);
  }
  ~mpi_reducer() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_comm_ && !finalized) MPI_Comm_free(&comm_);
  }
  mpi_reducer(const mpi_reducer&) = delete;
  mpi_reducer& operator=(const mpi_reducer&) = delete;

  int32_t rank() const { return rank_; }
  int32_t world_size() const { return size_; }

  // The runtime broadcasts its own bytes (uint8) through a host reducer.
  static constexpr bool broadcasts_bytes = true;
  // Deterministic sums: int64, added exactly (MPI_INT64_T) in whatever order MPI chooses.
  static constexpr bool sums_int64 = true;

  void allreduce_sum(const collective_buffer& b, void*) {
    const MPI_Datatype type = b.integer ? MPI_INT64_T : b.value_bytes == 8 ? MPI_DOUBLE : MPI_FLOAT;
    const int64_t elem = b.value_bytes;
    char* data = static_cast<char*>(b.data);
    for (int64_t done = 0; done < b.count; done += INT_MAX / 2) {  // MPI counts are int
      const int n = int(std::min<int64_t>(INT_MAX / 2, b.count - done));
      check(MPI_Allreduce(MPI_IN_PLACE, data + done * elem, n, type, MPI_SUM, comm_), "MPI_Allreduce");
    }
  }
  void broadcast(const collective_buffer& b, int32_t root, void*) {
    const int64_t bytes = int64_t(b.bytes());
    char* data = static_cast<char*>(b.data);
    for (int64_t done = 0; done < bytes; done += INT_MAX / 2) {
      const int n = int(std::min<int64_t>(INT_MAX / 2, bytes - done));
      check(MPI_Bcast(data + done, n, MPI_BYTE, root, comm_), "MPI_Bcast");
    }
  }
  void barrier() { check(MPI_Barrier(comm_), "MPI_Barrier"); }
  // MPI_COMM_WORLD, not the duplicate: the whole job must stop, whatever communicator the
  // failing collective used.
  void abort(int32_t exit_code) noexcept { MPI_Abort(MPI_COMM_WORLD, exit_code); }
  static void shutdown() { tycho::mpi_plugin::finalize_if_started(); }

 private:
  void check(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail(TYCHO_ERR_INTERNAL, "mpi reducer, rank ", rank_, " of ", size_, ": ", what, " failed: ",
         std::string(text, std::size_t(len)));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owns_comm_ = false;
  int rank_ = 0, size_ = 1;
};

const char* const no_config_keys[] = {nullptr};
const tycho_setting no_settings[] = {end_of_settings()};

const tycho_component components[] = {with_settings(
    component(TYCHO_COMPONENT_REDUCER, "mpi", "1.0.0",
              "MPI collectives on host tensors (mpirun, srun --mpi=pmix); MPI_Abort stops the job",
              TYCHO_DEVICE_BIT(kDLCPU), no_config_keys, reducer_vtable<mpi_reducer>("mpi", TYCHO_DEVICE_BIT(kDLCPU))),
    no_settings)};

}  // namespace

TYCHO_PLUGIN("mpi", "1.0.0", components)
