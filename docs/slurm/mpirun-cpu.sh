#!/bin/bash
# CPU nodes: one rank per socket with the cpu engine and the mpi reducer (Open MPI's mpirun).
#   bash docs/slurm/mpirun-cpu.sh run.toml 2 16     # 2 ranks x 16 threads
set -euo pipefail
CONFIG=${1:?usage: mpirun-cpu.sh CONFIG.toml RANKS THREADS}
RANKS=${2:-2}
THREADS=${3:-1}
mpirun -np "$RANKS" --map-by socket --bind-to socket \
  tycho reconstruct "$CONFIG" --set reconstruct.threads="$THREADS"
