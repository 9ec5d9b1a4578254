#!/usr/bin/env bash
# The CPU side of docs/scaling.md: median seconds per iteration of the MoS2 example (batch 128)
# for 1 rank x 1 thread, 1 rank x 2 threads and 2 ranks x 1 thread (mpirun), the time rank 0
# spent in gradient all-reduces, and the machine's load average before and after (other work
# on the machine skews the figures). Usage: bench/parallel_cpu.sh [ITERATIONS]  (default 30)
set -euo pipefail
cd "$(dirname "$0")/.."
iterations=${1:-30}
tycho=build/bin/tycho
[[ -x $tycho ]] || { echo "build first: cmake -S . -B build -G Ninja && ninja -C build" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
load_before=$(cut -d' ' -f1 /proc/loadavg)
echo "| ranks x threads | median s/iteration | speed-up vs 1 x 1 | all-reduce s per iteration (rank 0) |"
echo "|---|---|---|---|"
base=""
for spec in "1 1" "1 2" "2 1"; do
  set -- $spec
  log=$tmp/run-$1-$2.log
  # One rank runs without mpirun: mpirun binds each process to one core by default, which would
  # put a single rank's threads on one core.
  launch=()
  (( $1 > 1 )) && launch=(mpirun --oversubscribe -np "$1")
  "${launch[@]}" $tycho reconstruct examples/mos2.toml --iterations "$iterations" -o "$tmp/r.zip" \
    --set output.previews=false --set reconstruct.threads="$2" >"$log" 2>&1
  median=$(grep "s/it" "$log" | awk '{print $(NF-1)}' | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}')
  [[ -z $base ]] && base=$median
  reduce=$(sed -n 's/.*gradient all-reduces ([a-z]*): [0-9]* calls of [0-9.]* KiB, \([0-9.e-]*\) s in all.*/\1/p' "$log")
  per_it=$([[ -n $reduce ]] && awk -v r="$reduce" -v n="$iterations" 'BEGIN{printf "%.4f", r/n}' || echo "-")
  speedup=$(awk -v b="$base" -v m="$median" 'BEGIN{printf "%.2f", b/m}')
  echo "| $1 x $2 | $median | $speedup | $per_it |"
done
echo
echo "load average before: $load_before, after: $(cut -d' ' -f1 /proc/loadavg) ($(nproc) cores); $iterations iterations each"
