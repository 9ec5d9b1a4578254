#!/usr/bin/env bash
# The figures of docs/losses.md: the MoS2 example (examples/mos2.toml) with each built-in loss,
# everything else the same, then `tycho evaluate` against the ground truth. Prints a markdown
# table (local-phase Pearson, RMS error, the loss of the last iteration, median s/iteration) and
# appends one JSON line per loss to bench/results.jsonl. Other work on the machine skews the
# s/iteration column (the load average is printed), not the accuracy figures.
# Usage: bench/losses.sh [ITERATIONS] [LOSS...]   (default 100; amplitude intensity poisson)
set -euo pipefail
cd "$(dirname "$0")/.."
iterations=${1:-100}
shift || true
losses=("$@")
(( ${#losses[@]} )) || losses=(amplitude intensity poisson)
tycho=build/bin/tycho
truth=examples/data/mos2_ground_truth.npz
[[ -x $tycho ]] || { echo "build first: cmake -S . -B build -G Ninja && ninja -C build" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load_before=$(cut -d' ' -f1 /proc/loadavg)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "| loss | Pearson | RMS error (rad) | loss at iteration $iterations | median s/iteration |"
echo "|---|---|---|---|---|"
for loss in "${losses[@]}"; do
  log=$tmp/$loss.log
  $tycho reconstruct examples/mos2.toml --iterations "$iterations" --set reconstruct.loss="$loss" \
    --set output.previews=false -o "$tmp/$loss.zip" >"$log" 2>&1
  median=$(grep "s/it" "$log" | awk '{print $(NF-1)}' | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}')
  final=$(sed -n 's/.*final loss \([0-9.e+-]*\).*/\1/p' "$log")
  $tycho evaluate "$tmp/$loss.zip" --truth "$truth" >"$tmp/$loss.json" 2>/dev/null
  pearson=$(sed -n 's/.*"pearson": \([0-9.e+-]*\).*/\1/p' "$tmp/$loss.json")
  rms=$(sed -n 's/.*"rms_rad": \([0-9.e+-]*\).*/\1/p' "$tmp/$loss.json")
  printf '| `%s` | %.4f | %.4f | %s | %s |\n' "$loss" "$pearson" "$rms" "$final" "$median"
  printf '{"date":"%s","commit":"%s","benchmark":"losses","machine":{"cpu":"%s","cores":%s},"case":"mos2","loss":"%s","iterations":%s,"pearson":%s,"rms_rad":%s,"final_loss":%s,"median_s_per_iteration":%s}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$cpu" "$(nproc)" "$loss" "$iterations" "$pearson" "$rms" "$final" \
    "$median" >>bench/results.jsonl
done
echo
echo "load average before: $load_before, after: $(cut -d' ' -f1 /proc/loadavg) ($(nproc) cores); $iterations iterations each"
