#!/usr/bin/env bash
# Issue 11's drift check at full length: on the clean MoS2 file (its recorded positions are the
# true ones) a run of ITERATIONS with position correction and one without; the object's phase
# centroid over the scanned field (the nominal probe centres' box, 8 px inside; the phase above
# its mean as the weight, as tests/test_position_drift.cpp does for 40 iterations) must agree
# within 0.1 Å. Prints the centroid shift, the positions' mean and largest move, and appends one
# JSON line to bench/results.jsonl.
# Usage: bench/position_drift.sh [ITERATIONS]   (default 500; ~2 x 4 minutes on 2 quiet cores)
set -euo pipefail
cd "$(dirname "$0")/.."
iterations=${1:-500}
tycho=build/bin/tycho
clean=../shared/data/mos2/mos2_80kV_32x24_clean.h5
[[ -x $tycho ]] || { echo "build first: scripts/build" >&2; exit 2; }
[[ -f $clean ]] || { echo "needs $clean" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for correct in false true; do
  t0=$(date +%s.%N)
  $tycho reconstruct examples/mos2.toml -q -o "$tmp/$correct.zip" --iterations "$iterations" \
    --set output.previews=false --set "data.path=\"$PWD/$clean\"" \
    --set "reconstruct.positions.correct=$correct" --set reconstruct.positions.first_iteration=5
  echo "positions.correct = $correct: $(echo "$(date +%s.%N) - $t0" | bc) s"
done
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
/usr/bin/python3 - "$tmp" "$iterations" "$commit" <<'PY'
import io, json, sys, zipfile, datetime
import numpy as np
tmp, iterations, commit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(name):
    z = zipfile.ZipFile(f"{tmp}/{name}.zip")
    arr = lambda m: np.load(io.BytesIO(z.read(m)))
    return arr("object.npy")[0], arr("positions_px.npy")
obj_f, pos_f = load("false")
obj_c, pos_c = load("true")
lo = np.ceil(pos_f.min(axis=0)).astype(int) + 8
hi = np.floor(pos_f.max(axis=0)).astype(int) - 8
def centroid(obj):
    ph = np.angle(obj[lo[0]:hi[0], lo[1]:hi[1]]).astype(np.float64)
    w = np.maximum(ph - ph.mean(), 0)
    a, b = np.meshgrid(np.arange(lo[0], hi[0]), np.arange(lo[1], hi[1]), indexing="ij")
    return np.array([(w * a).sum(), (w * b).sum()]) / w.sum()
pixel_A = 50.0 / 288.0  # the MoS2 set's 96-px window over 16.667 Å
shift_A = float(pixel_A * np.hypot(*(centroid(obj_c) - centroid(obj_f))))
move = pos_c - pos_f
print(f"{iterations} iterations: phase centroid moved {shift_A:.4f} Å (target < 0.1 Å); positions' mean move "
      f"({move[:, 0].mean():.2e}, {move[:, 1].mean():.2e}) px, largest {np.abs(move).max():.3f} px")
line = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": commit,
        "benchmark": "position_drift", "case": "mos2_clean", "iterations": iterations,
        "centroid_shift_A": shift_A, "largest_move_px": float(np.abs(move).max()),
        "mean_move_px": [float(move[:, 0].mean()), float(move[:, 1].mean())]}
with open("bench/results.jsonl", "a") as f:
    f.write(json.dumps(line) + "\n")
PY
