#!/usr/bin/env python3
"""A copy of the shared MoS2 counts with 8 bad detector pixels (issue 35), for bench/bad_pixels/run.sh.

Usage: inject.py SOURCE.h5 COPY.h5   (needs numpy and h5py)

The recipe is the one tests/test_bad_pixels.cpp (BadPixels.Mos2InjectedPixelsAreFoundExactly)
applies in memory: (row, column) of the stored (centred) 96 x 96 detector, the bright-field disc
being the pixels within ~10 of (48, 48). No random numbers: the same file every time.
"""
import shutil
import sys

import h5py
import numpy as np

ARRAY = "/datacube_root/datacube/data"

# (row, column, kind, value): dead = 0 in every pattern; offset = + value counts in every pattern
# (a hot pixel's dark current over the real counts); stuck = value in every pattern; spikes =
# value in patterns 17, 273 and 529 (hot in some patterns only).
RECIPE = [
    (61, 43, "dead", 0),      # dark field, ~0.35 counts per pattern around it
    (36, 40, "dead", 0),      # dark field
    (45, 52, "dead", 0),      # inside the bright-field disc (~79 counts per pattern)
    (30, 20, "offset", 30),   # dark field
    (66, 80, "offset", 3),    # dark field, a dim hot pixel (neighbours ~0.01 per pattern)
    (0, 61, "offset", 10),    # the detector's first row
    (50, 44, "spikes", 2000),  # inside the bright-field disc, 3 patterns of 768
    (77, 95, "stuck", 1000),  # the detector's last column
]
SPIKE_PATTERNS = (17, 273, 529)


def inject(counts):
    """counts: (Rx, Ry, Qx, Qy) uint16; returns the injected copy."""
    out = counts.copy()
    flat = out.reshape(-1, out.shape[-2], out.shape[-1])
    for r, c, kind, v in RECIPE:
        if kind == "dead":
            flat[:, r, c] = 0
        elif kind == "offset":
            flat[:, r, c] = flat[:, r, c] + v
        elif kind == "stuck":
            flat[:, r, c] = v
        elif kind == "spikes":
            flat[list(SPIKE_PATTERNS), r, c] = v
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        data = f[ARRAY]
        data[...] = inject(data[...])
    print(f"{dst}: {len(RECIPE)} bad pixels injected")


if __name__ == "__main__":
    main()
