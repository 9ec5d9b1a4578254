#!/usr/bin/env bash
# What the default recipe (the scan's geometry measured from the data, [preprocess]
# scan_rotation_deg = "auto", and the scan map refined during the run, [reconstruct.positions]
# refine_scan_map = true) costs on the MoS2 example against the nominal raster
# (scan_rotation_deg = 0, refine_scan_map = false), same binary, runs interleaved A B A B ... so
# that a drifting load hits both alike. Prints each pair's CPU (user + sys) seconds, the median
# ratio and both Pearson figures; appends one JSON line to bench/results.jsonl.
# Other work on the machine skews CPU time too (shared caches, frequency): the load average is
# printed with the figures.
# Also the iterations' own CPU time (the manifest's history.cpu_seconds summed: the µs per
# position·iteration, without start-up and preprocessing), the ratio per pair and its median.
# Usage: [THREADS=n] bench/default_recipe_cost.sh [PAIRS] [ITERATIONS]   (default 5 pairs, 100
# iterations, the engine's default threads; one thread leaves OpenMP's waits out of the figures)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-5}
iterations=${2:-100}
tycho=build/bin/tycho
truth=examples/data/mos2_ground_truth.npz
[[ -x $tycho ]] || { echo "build first: scripts/build" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load_before=$(cut -d' ' -f1 /proc/loadavg)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
nominal=(--set preprocess.scan_rotation_deg=0 --set reconstruct.positions.refine_scan_map=false)
run() {  # $1: name; the rest: extra arguments. Prints CPU seconds.
  local name=$1
  shift
  /usr/bin/time -f "%U %S" -o "$tmp/$name.time" $tycho reconstruct examples/mos2.toml -q --iterations "$iterations" \
    --set output.previews=false ${THREADS:+--set reconstruct.threads=$THREADS} -o "$tmp/$name.zip" --overwrite "$@" \
    >"$tmp/$name.log" 2>&1
  awk '{print $1 + $2}' "$tmp/$name.time"
}
iteration_cpu() {  # the iterations' CPU seconds, from the result's manifest
  python3 -c 'import json, sys, zipfile; print(round(sum(json.loads(zipfile.ZipFile(sys.argv[1]).read("manifest.json"))["history"]["cpu_seconds"]), 4))' "$tmp/$1.zip"
}
ratios=()
iteration_ratios=()
echo "| pair | nominal CPU s | default CPU s | ratio | iterations' CPU s: nominal, default | ratio |"
echo "|---|---|---|---|---|---|"
for ((p = 1; p <= pairs; ++p)); do
  a=$(run nominal "${nominal[@]}")
  b=$(run default)
  r=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.4f", b / a}')
  ia=$(iteration_cpu nominal)
  ib=$(iteration_cpu default)
  ir=$(awk -v a="$ia" -v b="$ib" 'BEGIN{printf "%.4f", b / a}')
  ratios+=("$r")
  iteration_ratios+=("$ir")
  echo "| $p | $a | $b | $r | $ia, $ib | $ir |"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}')
iteration_median=$(printf '%s\n' "${iteration_ratios[@]}" | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}')
pearson() { $tycho evaluate "$tmp/$1.zip" --truth "$truth" 2>/dev/null | sed -n 's/.*"pearson": \([0-9.e+-]*\).*/\1/p' | head -1; }
pn=$(pearson nominal)
pd=$(pearson default)
load_after=$(cut -d' ' -f1 /proc/loadavg)
echo
echo "median CPU ratio default / nominal: $median (the iterations alone: $iteration_median); Pearson nominal $pn, default $pd"
echo "load average before: $load_before, after: $load_after ($(nproc) cores); $iterations iterations each"
printf '{"date":"%s","commit":"%s","benchmark":"default_recipe_cost","machine":{"cpu":"%s","cores":%s},"case":"mos2","threads":"%s","iterations":%s,"pairs":%s,"cpu_ratios":[%s],"median_cpu_ratio":%s,"iteration_cpu_ratios":[%s],"median_iteration_cpu_ratio":%s,"pearson_nominal":%s,"pearson_default":%s,"load_before":%s,"load_after":%s}\n' \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$cpu" "$(nproc)" "${THREADS:-default}" "$iterations" "$pairs" "$(IFS=,; echo "${ratios[*]}")" \
  "$median" "$(IFS=,; echo "${iteration_ratios[*]}")" "$iteration_median" "$pn" "$pd" "$load_before" "$load_after" >>bench/results.jsonl
