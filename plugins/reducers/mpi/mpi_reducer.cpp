// The `mpi` reducer: collectives on host tensors over an MPI communicator (a duplicate of
// MPI_COMM_WORLD, or the caller's). Each vtable function runs under guarded(), so no
// exception crosses the C boundary.
#include <mpi.h>

#include <tycho/sdk.hpp>

#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "mpi_runtime.hpp"

namespace {

using namespace tycho::sdk;

struct reducer_state {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owns_comm = false;
  int rank = 0, size = 1;
};

void check_mpi(int rc, const reducer_state& r, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(TYCHO_ERR_INTERNAL, "mpi reducer, rank ", r.rank, " of ", r.size, ": ", what, " failed: ",
       std::string(text, std::size_t(len)));
}

// The MPI type and element count of a tensor's values (complex as pairs of reals).
void mpi_view(const DLTensor& t, const char* what, MPI_Datatype& type, int64_t& count) {
  if (t.device.device_type != kDLCPU)
    fail(TYCHO_ERR_UNSUPPORTED, "mpi reducer: ", what, " of a tensor on device type ",
         int(t.device.device_type), "; it reduces host tensors (a GPU engine uses reducer = \"nccl\")");
  if (!is_contiguous(t)) fail(TYCHO_ERR_INVALID_ARGUMENT, "mpi reducer: ", what, " needs a C-contiguous tensor");
  const DLDataType d = t.dtype;
  count = element_count(t);
  if (d.lanes == 1 && d.code == kDLFloat && d.bits == 32) type = MPI_FLOAT;
  else if (d.lanes == 1 && d.code == kDLFloat && d.bits == 64) type = MPI_DOUBLE;
  else if (d.lanes == 1 && d.code == kDLComplex && d.bits == 64) type = MPI_FLOAT, count *= 2;
  else if (d.lanes == 1 && d.code == kDLComplex && d.bits == 128) type = MPI_DOUBLE, count *= 2;
  else
    fail(TYCHO_ERR_UNSUPPORTED, "mpi reducer: ", what, " of a ", dtype_name(d),
         " tensor; expected float32, float64, complex64 or complex128");
}

char* bytes_of(DLTensor& t) { return static_cast<char*>(t.data) + t.byte_offset; }

tycho_status create(const tycho_reducer_setup* setup, tycho_reducer** out) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    if (setup == nullptr || out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "mpi reducer: no setup or output pointer");
    if (setup->device.device_type != kDLCPU)
      fail(TYCHO_ERR_UNSUPPORTED, "mpi reducer: the engine's tensors live on device type ",
           int(setup->device.device_type), "; the mpi reducer sums host tensors (use reducer = \"nccl\" with a GPU engine)");
    tycho::mpi_plugin::ensure_initialized();
    auto r = std::make_unique<reducer_state>();
    if (setup->communicator != nullptr) {
      r->comm = *static_cast<const MPI_Comm*>(setup->communicator);  // the caller's: not freed
    } else {
      check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &r->comm), *r, "MPI_Comm_dup");
      r->owns_comm = true;
    }
    // Errors come back as codes (reported with the rank), not as MPI's default abort.
    MPI_Comm_set_errhandler(r->comm, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_rank(r->comm, &r->rank), *r, "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(r->comm, &r->size), *r, "MPI_Comm_size");
    // The launcher's view (setup) and MPI's must agree: a mismatch means this libmpi is not the
    // one the launcher speaks (each process would see itself as a world of one).
    if (setup->world_size > 0 && setup->world_size != r->size)
      fail(TYCHO_ERR_UNSUPPORTED, "mpi reducer: the launcher starts ", setup->world_size,
           " ranks but MPI sees a world of ", r->size,
           "; launch with the mpirun of the MPI tycho was built with (Open MPI), or srun --mpi=pmix");
    if (setup->rank >= 0 && setup->world_size > 0 && setup->rank != r->rank)
      fail(TYCHO_ERR_INTERNAL, "mpi reducer: the launcher says rank ", setup->rank, ", MPI says ", r->rank);
    *out = reinterpret_cast<tycho_reducer*>(r.release());
  });
}

reducer_state& self(tycho_reducer* red) { return *reinterpret_cast<reducer_state*>(red); }
const reducer_state& self(const tycho_reducer* red) { return *reinterpret_cast<const reducer_state*>(red); }

int32_t rank(const tycho_reducer* red) { return self(red).rank; }
int32_t world_size(const tycho_reducer* red) { return self(red).size; }

tycho_status allreduce_sum(tycho_reducer* red, DLTensor* inout, void* /*stream*/) {
  return guarded([&] {
    MPI_Datatype type;
    int64_t count = 0;
    mpi_view(*inout, "allreduce_sum", type, count);
    const int64_t elem = type == MPI_FLOAT ? 4 : 8;
    char* data = bytes_of(*inout);
    for (int64_t done = 0; done < count; done += INT_MAX / 2) {  // MPI counts are int
      const int n = int(std::min<int64_t>(INT_MAX / 2, count - done));
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + done * elem, n, type, MPI_SUM, self(red).comm),
                self(red), "MPI_Allreduce");
    }
  });
}

tycho_status broadcast(tycho_reducer* red, DLTensor* inout, int32_t root, void* /*stream*/) {
  return guarded([&] {
    if (inout->device.device_type != kDLCPU)
      fail(TYCHO_ERR_UNSUPPORTED, "mpi reducer: broadcast of a tensor that is not in host memory");
    if (!is_contiguous(*inout)) fail(TYCHO_ERR_INVALID_ARGUMENT, "mpi reducer: broadcast needs a C-contiguous tensor");
    if (root < 0 || root >= self(red).size)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "mpi reducer: broadcast root ", root, " outside [0, ", self(red).size, ")");
    const int64_t bytes = element_count(*inout) * int64_t((inout->dtype.bits * inout->dtype.lanes + 7) / 8);
    char* data = bytes_of(*inout);
    for (int64_t done = 0; done < bytes; done += INT_MAX / 2) {
      const int n = int(std::min<int64_t>(INT_MAX / 2, bytes - done));
      check_mpi(MPI_Bcast(data + done, n, MPI_BYTE, root, self(red).comm), self(red), "MPI_Bcast");
    }
  });
}

tycho_status barrier(tycho_reducer* red) {
  return guarded([&] { check_mpi(MPI_Barrier(self(red).comm), self(red), "MPI_Barrier"); });
}

void abort_job(tycho_reducer* red, int32_t exit_code) {
  // MPI_COMM_WORLD, not the duplicate: the whole job must stop, whatever communicator the
  // failing collective used.
  (void)red;
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

void destroy(tycho_reducer* red) {
  if (red == nullptr) return;
  auto* r = reinterpret_cast<reducer_state*>(red);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (r->owns_comm && !finalized) MPI_Comm_free(&r->comm);
  delete r;
}

const tycho_reducer_vtable mpi_vtable = {sizeof(tycho_reducer_vtable), TYCHO_ABI_VERSION, &create, &rank,
                                         &world_size, &allreduce_sum, &broadcast, &barrier, &abort_job,
                                         &destroy, &tycho::mpi_plugin::finalize_if_started};

const char* const no_config_keys[] = {nullptr};

const tycho_component components[] = {component(
    TYCHO_COMPONENT_REDUCER, "mpi", "1.0.0",
    "MPI collectives on host tensors (mpirun, srun --mpi=pmix); MPI_Abort stops the job",
    TYCHO_DEVICE_BIT(kDLCPU), no_config_keys, &mpi_vtable)};

}  // namespace

TYCHO_PLUGIN("mpi", "1.0.0", components)
