#!/bin/bash
# Interactive: allocate a node, then run tycho on its GPUs from the shell.
#
#   salloc --nodes=1 --gpus=4 --time=00:30:00
#   bash docs/slurm/interactive.sh run.toml          # one process, one thread per GPU
#   bash docs/slurm/interactive.sh run.toml --ranks  # one process per GPU under srun
set -euo pipefail
CONFIG=${1:?usage: interactive.sh CONFIG.toml [--ranks]}
GPUS=${SLURM_GPUS_ON_NODE:-$(nvidia-smi -L | wc -l)}
DEVICES=$(seq -s, 0 $((GPUS - 1)))

if [[ "${2:-}" == "--ranks" ]]; then
  export MASTER_ADDR=$(hostname)
  export MASTER_PORT=$((20000 + ${SLURM_JOB_ID:-$$} % 20000))
  srun --kill-on-bad-exit=1 --ntasks="$GPUS" --gpus-per-task=1 tycho reconstruct "$CONFIG" --set reconstruct.engine='"cuda"'
else
  # No launcher: [reconstruct] devices with several GPUs runs one rank per GPU as threads of
  # this process (NCCL communicators made in-process; nothing is spawned).
  tycho reconstruct "$CONFIG" --set reconstruct.engine='"cuda"' --devices "$DEVICES"
fi
