#!/usr/bin/env bash
# Issue 35's acceptance for the stopping rule ([reconstruct] iterations = "auto"): each case run
# three ways with the same binary: its fixed count of 100 iterations (the default before the
# rule), "auto" (the recipe with `iterations` removed), and a fixed count of 4 x what "auto" took.
# Prints one line per run (iterations, why it stopped, CPU seconds, the figures of `tycho
# evaluate`) and appends one JSON line per case to bench/results.jsonl.
# Cases: the shared examples mos2, si110 and mos2_jitter (examples/*.toml), and two X-ray scans
# simulated by bench/xray/simulate_xray.py with only the data and the optics configured (every
# other key at its default: what a new user writes): xray-thick (100 iterations far too few) and
# xray-wide (the rule stops before 100).
# Other work on the machine skews CPU time (shared caches, frequency): the load average is
# printed with the figures.
# Usage: bench/stopping_rule.sh [CASE...]   (default: all; needs /usr/bin/python3 with numpy, h5py)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tycho=$root/build/bin/tycho
[[ -x $tycho ]] || { echo "build first: scripts/build" >&2; exit 2; }
cases=("$@")
((${#cases[@]})) || cases=(mos2 si110 jitter xray-thick xray-wide)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
shared=$root/../shared/data

# The recipe without `iterations`, next to the original so that its relative paths still resolve.
auto_copy() {  # $1: examples/NAME.toml → prints the copy's path
  local copy="$root/examples/.auto-$(basename "$1")"
  grep -v '^iterations[[:space:]]*=' "$1" >"$copy"
  echo "$copy"
}
# A new user's config for a simulated X-ray scan: data and optics only.
xray_config() {  # $1: preset → prints the config's path
  local dir=$tmp/xray-$1
  /usr/bin/python3 bench/xray/simulate_xray.py --preset "$1" --out "$dir" >/dev/null
  sed -n '/^\[data\]/,/^C10_A/p' "$dir/xray_$1.toml" >"$dir/user.toml"
  echo "$dir/user.toml"
}
# run NAME CONFIG TRUTH SIGMA [ARGS...]: prints "iterations reason cpu_s pearson rms [positions_rms]"
run() {
  local name=$1 config=$2 truth=$3 sigma=$4
  shift 4
  /usr/bin/time -f "%U %S" -o "$tmp/$name.time" nice -n 10 "$tycho" reconstruct "$config" -q --overwrite \
    --set output.previews=false -o "$tmp/$name.zip" "$@" >"$tmp/$name.log" 2>&1
  "$tycho" evaluate "$tmp/$name.zip" --truth "$truth" --sigma-A "$sigma" 2>/dev/null >"$tmp/$name.json"
  unzip -p "$tmp/$name.zip" manifest.json >"$tmp/$name.manifest"
  /usr/bin/python3 - "$tmp/$name.json" "$tmp/$name.manifest" "$tmp/$name.time" <<'EOF'
import json, sys
e, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
u, s = map(float, open(sys.argv[3]).read().split()[:2])
f = e.get("total_phase", e)  # multislice: the total phase's figures
h = m["history"]
print(h["iterations"], h["stopping"]["reason"], round(u + s, 2), round(f["pearson"], 4), round(f["rms_rad"], 4),
      round(e["positions"]["rms_A"], 4) if "positions" in e else "-")
EOF
}

for c in "${cases[@]}"; do
  load_before=$(cut -d' ' -f1 /proc/loadavg)
  case $c in
    mos2) fixed=examples/mos2.toml truth=examples/data/mos2_ground_truth.npz sigma=2 ;;
    si110) fixed=examples/si110.toml truth=$shared/si110/si110_ground_truth.npz sigma=2 ;;
    jitter) fixed=examples/mos2_jitter.toml truth=$shared/mos2_partial/mos2_jitter_ground_truth.npz sigma=2 ;;
    xray-thick | xray-wide)
      preset=${c#xray-}
      fixed=$(xray_config "$preset") truth=$tmp/xray-$preset/xray_${preset}_truth.npz sigma=2000 ;;
    *) echo "unknown case '$c' (mos2, si110, jitter, xray-thick, xray-wide)" >&2; exit 2 ;;
  esac
  if [[ $c == xray-* ]]; then auto=$fixed; else auto=$(auto_copy "$fixed"); fi
  # The fixed counts' schedules span their own length (a recipe's schedule_iterations, where one
  # sets it for the rule, is the rule's).
  read -r n100 r100 t100 p100 e100 q100 < <(run "$c-100" "$fixed" "$truth" "$sigma" --iterations 100 \
    --set reconstruct.schedule_iterations=100)
  read -r na ra ta pa ea qa < <(run "$c-auto" "$auto" "$truth" "$sigma")
  [[ $c == xray-* ]] || rm -f "$auto"
  n4=$((4 * na))
  read -r n4 r4 t4 p4 e4 q4 < <(run "$c-4x" "$fixed" "$truth" "$sigma" --iterations "$n4" \
    --set reconstruct.schedule_iterations="$n4")
  load_after=$(cut -d' ' -f1 /proc/loadavg)
  printf '%-10s fixed 100: Pearson %s rms %s pos %s, %s s CPU | auto: %s iterations (%s), Pearson %s rms %s pos %s, %s s CPU (%.2f x) | 4 x = %s: Pearson %s rms %s pos %s | load %s -> %s\n' \
    "$c" "$p100" "$e100" "$q100" "$t100" "$na" "$ra" "$pa" "$ea" "$qa" "$ta" "$(awk -v a="$ta" -v b="$t100" 'BEGIN{print a / b}')" \
    "$n4" "$p4" "$e4" "$q4" "$load_before" "$load_after"
  printf '{"date":"%s","commit":"%s","benchmark":"stopping_rule","machine":{"cpu":"%s","cores":%s},"case":"%s","fixed_100":{"pearson":%s,"rms_rad":%s,"positions_rms_A":"%s","cpu_s":%s},"auto":{"iterations":%s,"reason":"%s","pearson":%s,"rms_rad":%s,"positions_rms_A":"%s","cpu_s":%s},"fixed_4x":{"iterations":%s,"pearson":%s,"rms_rad":%s,"positions_rms_A":"%s","cpu_s":%s},"load_before":%s,"load_after":%s}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$cpu" "$(nproc)" "$c" "$p100" "$e100" "$q100" "$t100" "$na" "$ra" "$pa" "$ea" "$qa" "$ta" \
    "$n4" "$p4" "$e4" "$q4" "$t4" "$load_before" "$load_after" >>bench/results.jsonl
done
