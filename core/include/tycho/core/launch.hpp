// Who started this process: the rank, world size and local rank a launcher (torchrun, srun,
// mpirun, mpiexec) puts in the environment, read without talking to any runtime.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace tycho {

struct launch_environment {
  std::string launcher;    // "mpirun", "srun", "torchrun", "mpiexec"; empty: started alone
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t local_rank = 0;  // rank among the processes on this node
  std::string variables;   // the variables read, for messages: "RANK, WORLD_SIZE, LOCAL_RANK"
  std::string master_addr; // MASTER_ADDR (torchrun convention), empty when not set
  std::string master_port; // MASTER_PORT as set (checked where it is used), empty when not set
  bool multi_process() const { return world_size > 1; }
};

// Reads a variable; nullopt when unset. Tests pass their own.
using environment_lookup = std::function<std::optional<std::string>(const char*)>;
environment_lookup process_environment();

// Open MPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK} first, then torchrun's RANK/WORLD_SIZE/
// LOCAL_RANK, then an srun step's SLURM_PROCID/SLURM_STEP_NUM_TASKS/SLURM_LOCALID (a batch
// script's own shell, which has SLURM_PROCID but no SLURM_STEP_ID, is not a rank), then
// PMI_RANK/PMI_SIZE (MPICH, Intel MPI). Malformed values (not integers, rank outside
// [0, world)) are errors naming the variable. MASTER_ADDR/MASTER_PORT are only recorded: a
// run that needs them (a TCP rendezvous) checks them.
launch_environment detect_launch(const environment_lookup& env);

}  // namespace tycho
