#!/usr/bin/env bash
# The rank-to-rank spread of bench/RESULTS.md ("the shift groups become the default"): the MoS2
# example for 20 iterations under mpirun -np 1, 2 and 4 (1 thread each), then the largest
# difference of the 2- and 4-rank results from the 1-rank one (loss history relative, object
# and probe absolute). Extra arguments go to every run, e.g.
#   bench/rank_spread.sh --set reconstruct.shift_groups=false --set reconstruct.probe.epsilon=1e-6
set -euo pipefail
cd "$(dirname "$0")/.."
tycho=build/bin/tycho
[[ -x $tycho ]] || { echo "build first: cmake -S . -B build -G Ninja && ninja -C build" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
for np in 1 2 4; do
  mpirun --oversubscribe -np "$np" "$tycho" reconstruct examples/mos2.toml -q --iterations 20 \
    -o "$tmp/w$np.zip" --set output.previews=false --set reconstruct.threads=1 "$@" >/dev/null
done
python3 - "$tmp" <<'PY'
import io, sys, zipfile
import numpy as np
def load(path):
    z = zipfile.ZipFile(path)
    return {n[:-4]: np.load(io.BytesIO(z.read(n))) for n in z.namelist() if n.endswith(".npy")}
one = load(f"{sys.argv[1]}/w1.zip")
for np_ in (2, 4):
    r = load(f"{sys.argv[1]}/w{np_}.zip")
    loss = np.max(np.abs(r["loss_history"] / one["loss_history"] - 1))
    obj = np.max(np.abs(r["object"] - one["object"]))
    probe = np.max(np.abs(r["probe"] - one["probe"]))
    print(f"{np_} ranks: loss history {loss:.2e}  object {obj:.2e}  probe {probe:.2e}")
PY
