#!/usr/bin/env bash
# Issue 35's bad-pixel check at full length: the shared MoS2 counts, clean and with 8 injected bad
# pixels (bench/bad_pixels/inject.py), reconstructed with examples/mos2.toml (ITERATIONS, default
# its own 100) for each seed of SEEDS (default "0"); then, at the first seed, the injected copy
# with the search off, and the clean counts with the 8 pixels given by hand
# ([preprocess] bad_pixels), whose object must equal the injected run's bit for bit (the same
# targets once the pixels are masked). Prints what the injected run found and every Pearson
# figure against the ground truth (tycho evaluate), and appends one JSON line to
# bench/results.jsonl.
# Usage: SEEDS="0 1 2" bench/bad_pixels/run.sh [ITERATIONS]   (python3 with numpy, h5py: PYTHON=...)
set -euo pipefail
cd "$(dirname "$0")/../.."
iterations=${1:-100}
seeds=(${SEEDS:-0})
python=${PYTHON:-python3}
tycho=build/bin/tycho
counts=$(realpath ../shared/data/mos2/mos2_80kV_32x24_counts.h5)
truth=../shared/data/mos2/mos2_ground_truth.npz
given='[[61, 43], [36, 40], [45, 52], [30, 20], [66, 80], [0, 61], [50, 44], [77, 95]]'
[[ -x $tycho ]] || { echo "build first: scripts/build" >&2; exit 2; }
[[ -f $counts ]] || { echo "needs $counts" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" bench/bad_pixels/inject.py "$counts" "$tmp/injected.h5"

# run NAME DATA SEED [--set ...]: prints the Pearson figure
run() {
  local name=$1 data=$2 seed=$3
  shift 3
  $tycho reconstruct examples/mos2.toml -q --iterations "$iterations" --set output.previews=false \
    --set "data.path=\"$data\"" --set "reconstruct.seed=$seed" "$@" -o "$tmp/$name.zip" > /dev/null 2> "$tmp/$name.log"
  $tycho evaluate "$tmp/$name.zip" --truth "$truth" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["pearson"])'
}
clean=() injected=()
t0=$(date +%s.%N)
for seed in "${seeds[@]}"; do
  clean+=("$(run "clean$seed" "$counts" "$seed")")
  injected+=("$(run "injected$seed" "$tmp/injected.h5" "$seed")")
  echo "seed $seed: clean ${clean[-1]}, injected ${injected[-1]}"
done
seconds=$(echo "($(date +%s.%N) - $t0) / (2 * ${#seeds[@]})" | bc -l)
grep "preprocess:" "$tmp/injected${seeds[0]}.log" || true
unmasked=$(run unmasked "$tmp/injected.h5" "${seeds[0]}" --set preprocess.detect_bad_pixels=false)
by_hand=$(run by_hand "$counts" "${seeds[0]}" --set "preprocess.bad_pixels=$given")
same=false
unzip -p "$tmp/by_hand.zip" object.npy > "$tmp/a.npy" && unzip -p "$tmp/injected${seeds[0]}.zip" object.npy > "$tmp/b.npy" &&
  cmp -s "$tmp/a.npy" "$tmp/b.npy" && same=true
found=$(unzip -p "$tmp/injected${seeds[0]}.zip" manifest.json | "$python" -c '
import json, sys
d = json.load(sys.stdin)["data"]["bad_pixels"]["detection"]["found"]
print(json.dumps([[f["pixel"][0], f["pixel"][1], f["reason"], round(f["score"], 1)] for f in d]))')
echo "found: $found"
echo "seed ${seeds[0]}: injected with the search off $unmasked; clean with the 8 given by hand $by_hand (object equal to the injected run's: $same)"
summary=$("$python" - "${#seeds[@]}" "${clean[@]}" "${injected[@]}" <<'PY'
import json, statistics, sys
n = int(sys.argv[1]); c = [float(x) for x in sys.argv[2:2 + n]]; i = [float(x) for x in sys.argv[2 + n:]]
d = [b - a for a, b in zip(c, i)]
print(json.dumps({"clean": c, "injected": i, "clean_mean": statistics.mean(c), "injected_mean": statistics.mean(i),
                  "mean_difference": statistics.mean(d), "largest_difference": max(d, key=abs)}))
PY
)
echo "$summary"
printf '{"bench": "bad_pixels", "date": "%s", "host": "%s", "iterations": %s, "seeds": [%s], "pearson": %s, "pearson_injected_search_off": %s, "pearson_clean_given_by_hand": %s, "given_by_hand_equals_injected": %s, "seconds_per_run": %.1f, "found": %s, "load": "%s"}\n' \
  "$(date +%F)" "$(hostname)" "$iterations" "$(IFS=,; echo "${seeds[*]}")" "$summary" "$unmasked" "$by_hand" "$same" \
  "$seconds" "$found" "$(cut -d' ' -f1-3 /proc/loadavg)" >> bench/results.jsonl
