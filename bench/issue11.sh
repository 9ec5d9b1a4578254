#!/usr/bin/env bash
# The figures of docs/multislice-modes-positions.md: the recipes in examples/ for the abTEM data
# sets of ../shared/data (si110, bilayer, mos2_partial, mos2_jitter), each run as written (or with
# one key changed, to compare) and scored by `tycho evaluate`. Prints one line per run and appends
# one JSON line each (the evaluate output, the run's median s/iteration) to bench/results.jsonl.
# Takes ~30 minutes on 2 cores. Usage: bench/issue11.sh [ITERATIONS]   (default: each recipe's own);
# ISSUE11_CASES=REGEX runs only the cases whose names match (e.g. ISSUE11_CASES='coherent|jitter|partial').
set -euo pipefail
cd "$(dirname "$0")/.."
iterations=${1:-}  # empty: each recipe's [reconstruct] iterations
iterations_flag=()
[[ -n $iterations ]] && iterations_flag=(--iterations "$iterations")
tycho=build/bin/tycho
data=../shared/data
[[ -x $tycho ]] || { echo "build first: scripts/build" >&2; exit 2; }
[[ -d $data/si110 ]] || { echo "needs the data sets in $data" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)

# run NAME RECIPE TRUTH [--set KEY=VALUE ...]
run() {
  local name=$1 recipe=$2 truth=$3
  shift 3
  [[ $name =~ ${ISSUE11_CASES:-.} ]] || return 0  # ISSUE11_CASES: a regex of the cases to run
  local log=$tmp/$name.log
  $tycho reconstruct "examples/$recipe" "${iterations_flag[@]}" --set output.previews=false "$@" \
    -o "$tmp/$name.zip" >"$log" 2>&1
  local median
  median=$(grep "s/it" "$log" | awk '{print $(NF-1)}' | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}')
  $tycho evaluate "$tmp/$name.zip" --truth "$data/$truth" >"$tmp/$name.json" 2>/dev/null
  python3 - "$tmp/$name.json" "$name" "$median" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); name, median = sys.argv[2], sys.argv[3]
parts = [f"pearson {j['pearson']:.4f}"]
if "total_phase" in j: parts.append(f"total phase {j['total_phase']['pearson']:.4f} / {j['total_phase']['rms_rad']:.4f} rad")
for l in j.get("layers", []): parts.append(f"slice {l['slice']}: own {l['pearson']:.3f} other {l['pearson_other']:.3f}")
if "positions" in j: parts.append(f"positions {j['positions']['rms_A']:.4f} Å (start {j['positions']['start_rms_A']:.4f})")
print(f"{name:28s} {'; '.join(parts)}; {median} s/it")
PY
  python3 - "$tmp/$name.json" "$name" "$median" "$commit" "$cpu" "$(nproc)" >>bench/results.jsonl <<'PY'
import json, sys, datetime
j = json.load(open(sys.argv[1]))
rec = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": sys.argv[4],
       "benchmark": "issue11", "machine": {"cpu": sys.argv[5], "cores": int(sys.argv[6])}, "case": sys.argv[2],
       "iterations": j["iterations"], "median_s_per_iteration": float(sys.argv[3]),  # as run (evaluate's)
       "evaluate": {k: j[k] for k in ("pearson", "rms_rad", "total_phase", "layers", "positions") if k in j}}
print(json.dumps(rec))
PY
}

run si110-10-slices si110.toml si110/si110_ground_truth.npz
run si110-1-slice si110.toml si110/si110_ground_truth.npz --set reconstruct.slices=1
run bilayer-10-slices bilayer.toml bilayer/bilayer_ground_truth.npz
# The coherent MoS2 counts file (nominal positions, one mode) with each loss: the figure the
# jitter and partial files are compared with, loss for loss.
coherent=(--set 'data.path="../../shared/data/mos2/mos2_80kV_32x24_counts.h5"')
run coherent-amplitude mos2.toml mos2/mos2_ground_truth.npz "${coherent[@]}" --set 'reconstruct.loss="amplitude"'
run coherent-poisson mos2.toml mos2/mos2_ground_truth.npz "${coherent[@]}" --set 'reconstruct.loss="poisson"'
run jitter-positions mos2_jitter.toml mos2_partial/mos2_jitter_ground_truth.npz
run jitter-positions-amplitude mos2_jitter.toml mos2_partial/mos2_jitter_ground_truth.npz \
  --set 'reconstruct.loss="amplitude"'
run partial-1-mode-fixed mos2_partial.toml mos2_partial/mos2_partial_ground_truth.npz \
  --set reconstruct.probe_modes=1 --set reconstruct.positions.correct=false \
  --set reconstruct.positions.refine_scan_map=false
run partial-modes-fixed mos2_partial.toml mos2_partial/mos2_partial_ground_truth.npz \
  --set reconstruct.positions.correct=false --set reconstruct.positions.refine_scan_map=false
run partial-1-mode-positions mos2_partial.toml mos2_partial/mos2_partial_ground_truth.npz \
  --set reconstruct.probe_modes=1
run partial-modes-positions mos2_partial.toml mos2_partial/mos2_partial_ground_truth.npz
# Step 2 of the two-step recipe: a fresh 8-mode Poisson run at the positions step 1 corrected
# ([data] positions_from; skipped without step 1).
if [[ -f $tmp/partial-modes-positions.zip ]]; then
  step1=(--set "data.positions_from=\"$tmp/partial-modes-positions.zip\"")
  run partial-two-step-8-modes mos2_partial_refine.toml mos2_partial/mos2_partial_ground_truth.npz "${step1[@]}"
  run partial-two-step-4-modes mos2_partial_refine.toml mos2_partial/mos2_partial_ground_truth.npz "${step1[@]}" \
    --set reconstruct.probe_modes=4 --set reconstruct.probe.mode_power=0.1
  run partial-two-step-1-mode mos2_partial_refine.toml mos2_partial/mos2_partial_ground_truth.npz "${step1[@]}" \
    --set reconstruct.probe_modes=1
fi
echo "load average: $(cut -d' ' -f1 /proc/loadavg) ($(nproc) cores); iterations: ${iterations:-as in each recipe}"
