#!/usr/bin/env bash
# Peak memory of `tycho preprocess` on a 2 GB Merlin .mib scan (issue 29): the mib source reads
# frames by offset in pieces of at most 16 MiB as the host's chunked stage asks for them, so the
# scan itself is never held; since issue 30 neither are its preprocessed targets (the last pass is
# written into the file, or only summed for its totals), so the peak stays ~40 MiB at any binning
# (bench/RESULTS.md). The default bins the 256 x 256 frames by 4, as ptychography of Merlin data
# commonly does.
#
# The .mib (128 x 120 positions of 256 x 256 12-bit counts, U16: 2.02 GB, + .hdr with ScanX/ScanY)
# is generated on demand by numpy into $TYCHO_BENCH_DIR (default a temporary folder, removed
# after) and reused when already there. Peak RSS is GNU time's maximum resident set size of the
# tycho process. Prints the figures and appends one JSON line to bench/results.jsonl.
# Usage: bench/mib_preprocess.sh [BINNING]   (default 4)
set -euo pipefail
cd "$(dirname "$0")/.."
binning=${1:-4}
tycho=build/bin/tycho
[[ -x $tycho ]] || { echo "build first: scripts/build" >&2; exit 2; }
dir=${TYCHO_BENCH_DIR:-}
if [[ -z $dir ]]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir"
mib="$dir/scan_2GB.mib"
if [[ ! -s $mib ]]; then
  /usr/bin/python3 - "$mib" <<'PY'  # Debian's, with numpy
import sys, numpy as np
# 128 x 120 positions of 256 x 256 U16 frames: a bright-field disk moving with the scan and
# Poisson counts, 16 distinct frames cycled (the values do not change what is measured).
path = sys.argv[1]
ry, rx, n = 120, 128, 256
y, x = np.mgrid[:n, :n]
rng = np.random.default_rng(1)
frames = []
for k in range(16):
    cy, cx = n / 2 + 3 * np.sin(k), n / 2 + 3 * np.cos(k)
    disk = ((y - cy) ** 2 + (x - cx) ** 2 < 40 ** 2) * 200.0 + 2.0
    frames.append(np.minimum(rng.poisson(disk), 4095).astype(">u2")[::-1].tobytes())
def header(seq):
    h = (f"MQ1,{seq:06d},00384,01,0256,0256,U16,   1x1,01,2021-04-15 15:03:32.852759,0.001000,0,0,0,"
         "2.000000E+0,5.110000E+2,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,"
         f"3RX,011,511,000,000,000,000,000,000,175,010,200,125,100,100,093,100,099,030,128,004,255,140,128,"
         f"191,179,511,511,MQ1A,2021-04-15T13:43:00.835428351Z,1000000ns,12,").encode()
    return h + b"\0" * (384 - len(h))
with open(path, "wb") as f:
    for k in range(rx * ry):
        f.write(header(k + 1))
        f.write(frames[k % 16])
with open(path[:-4] + ".hdr", "w") as f:
    f.write(f"HDR,\t\nCounter Depth (number):\t12\nScanX:\t{ry}\nScanY:\t{rx}\nEnd\t\n")
PY
fi
bytes=$(stat -c %s "$mib")
cat >"$dir/mib.toml" <<EOF
[data]
source = "mib"
path = "$mib"
scan_step_A = 0.5
detector_pixel_invA = 0.01
[optics]
energy_eV = 300e3
semiangle_mrad = 20.0
[preprocess]
binning = $binning
saturation_value = 4095
EOF
load_before=$(cut -d' ' -f1 /proc/loadavg)
/usr/bin/time -f '%M %e %U %S' -o "$dir/time.txt" "$tycho" preprocess "$dir/mib.toml" -q --overwrite -o "$dir/prepared.zip"
read -r rss_kb wall user sys <"$dir/time.txt"
load_after=$(cut -d' ' -f1 /proc/loadavg)
rss_mb=$(( rss_kb / 1024 ))
echo "mib preprocess: $(( bytes / 1000000 )) MB file, binning $binning: peak RSS $rss_mb MiB, $wall s wall, $user + $sys s CPU (load $load_before -> $load_after)"
commit=$(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty)
printf '{"date":"%s","commit":"%s","case":"mib_preprocess","file_bytes":%s,"scan_shape":[128,120],"detector":[256,256],"binning":%s,"peak_rss_MiB":%s,"wall_s":%s,"cpu_s":%s,"load":[%s,%s]}\n' \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$bytes" "$binning" "$rss_mb" "$wall" "$(echo "$user + $sys" | bc)" \
  "$load_before" "$load_after" >>bench/results.jsonl
