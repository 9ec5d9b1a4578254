#!/usr/bin/env bash
# Targets read per mini-batch from disk against targets in memory (docs/streaming.md): a simulated
# 128 x 128 scan of 96 x 96 patterns (the size of bench_cpu's `tiled` case: 16,384 patterns,
# 604 MB of float32) is prepared once with its patterns embedded, then reconstructed with
# [reconstruct] target_residency = "device" and "disk", alternating, ROUNDS times each. The page
# cache is warm (the file was just written and read). Prints each run's median s/iteration
# (the result's history.seconds, warm-up iteration left out) and CPU time (user + system, which
# other load on the machine skews less than wall time), the overhead of "disk", the planner's
# residency lines, and appends one JSON line to bench/results.jsonl.
# Usage: bench/streaming.sh [ITERATIONS] [ROUNDS] [SCAN]   (default 4, 2, 128)
set -euo pipefail
cd "$(dirname "$0")/.."
iterations=${1:-4}
rounds=${2:-2}
scan=${3:-128}
tycho=build/bin/tycho
[[ -x $tycho ]] || { echo "build first: cmake -S . -B build -G Ninja && ninja -C build" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/sim.toml" <<EOF
[data]
source = "simulate"
scan_shape = [$scan, $scan]
detector_shape = [96, 96]
[reconstruct]
batch_size = 128
threads = 2
[output]
previews = false
EOF
load_before=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
$tycho preprocess "$tmp/sim.toml" --save-raw-data -q -o "$tmp/p.zip"
echo "prepared $(du -m "$tmp/p.zip" | cut -f1) MB in $(echo "$(date +%s.%N) - $t0" | bc) s"
$tycho plan "$tmp/sim.toml" | sed -n '/^target residency/,/^  disk/p'
median() {  # median s/iteration of a result, the first (warm-up) iteration left out
  python3 - "$1" <<'PY'
import json, sys, zipfile, statistics
m = json.loads(zipfile.ZipFile(sys.argv[1]).read("manifest.json"))
s = m["history"]["seconds"]  # wall time of each iteration
print(f"{statistics.median(s[1:] or s):.4f}")
PY
}
cpu_seconds() {  # runs the command; prints its CPU time (user + system, s): robust to other load
  python3 - "$@" <<'PY'
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{u.ru_utime + u.ru_stime:.2f}")
PY
}
declare -A times cpus
for r in $(seq "$rounds"); do
  for residency in device disk; do
    c=$(cpu_seconds $tycho reconstruct --from "$tmp/p.zip" -q --iterations "$iterations" -o "$tmp/$residency.zip" \
      --overwrite --set reconstruct.target_residency="'$residency'" --set output.previews=false)
    t=$(median "$tmp/$residency.zip")
    echo "round $r $residency: $t s/iteration, $c s CPU for the run"
    times[$residency]="${times[$residency]:-} $t"
    cpus[$residency]="${cpus[$residency]:-} $c"
  done
done
best() { tr ' ' '\n' | grep . | sort -n | head -1; }
device=$(echo "${times[device]}" | best)
disk=$(echo "${times[disk]}" | best)
device_cpu=$(echo "${cpus[device]}" | best)
disk_cpu=$(echo "${cpus[disk]}" | best)
overhead=$(python3 -c "print(f'{($disk / $device - 1) * 100:.1f}')")
cpu_overhead=$(python3 -c "print(f'{($disk_cpu - $device_cpu) / $iterations:.3f}')")
cpu_overhead_percent=$(python3 -c "print(f'{($disk_cpu / $device_cpu - 1) * 100:.1f}')")
echo "best median s/iteration: device $device, disk $disk: overhead $overhead % (wall)"
echo "best CPU per run: device $device_cpu s, disk $disk_cpu s: +$cpu_overhead s CPU per iteration ($cpu_overhead_percent % of the run)"
load_after=$(cut -d' ' -f1 /proc/loadavg)
echo "load average before: $load_before, after: $load_after ($(nproc) cores)"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
printf '{"date":"%s","commit":"%s","benchmark":"streaming","machine":{"cpu":"%s","cores":%s},"engine":"cpu","case":"simulate","scan_shape":[%s,%s],"detector":[96,96],"batch":128,"threads":2,"iterations":%s,"rounds":%s,"s_per_iteration_device":%s,"s_per_iteration_disk":%s,"disk_overhead_percent":%s,"cpu_s_device_run":%s,"cpu_s_disk_run":%s,"disk_cpu_s_per_iteration":%s,"disk_cpu_overhead_percent":%s,"load_average_before":%s,"load_average_after":%s,"note":"warm page cache; best of the rounds of the median s/iteration"}\n' \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$cpu" "$(nproc)" "$scan" "$scan" "$iterations" "$rounds" "$device" "$disk" \
  "$overhead" "$device_cpu" "$disk_cpu" "$cpu_overhead" "$cpu_overhead_percent" "$load_before" "$load_after" >>bench/results.jsonl
