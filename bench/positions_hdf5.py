#!/usr/bin/env python3
"""Write a result's corrected positions next to the patterns, for a fresh run at those positions.

The second step of the two-step recipe for data whose positions must be corrected and whose
source is strongly incoherent (docs/multislice-modes-positions.md, the MoS2 recipes): step 1
(`examples/mos2_partial.toml`) corrects the positions; this copies the patterns of an EMD file and
the result's `positions_A` into one HDF5 file, which `examples/mos2_partial_refine.toml` reads with
the `hdf5` source (`positions_dataset`) to reconstruct anew, positions fixed, with more modes and
the Poisson loss.

Needs numpy and h5py. Usage:
  bench/positions_hdf5.py RESULT.zip DATA.h5 OUT.h5 [--dataset /datacube_root/datacube/data]
"""
import argparse
import io
import zipfile

import h5py
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", help="a tycho result (.zip) with corrected positions")
    ap.add_argument("data", help="the HDF5 (EMD) file the result was reconstructed from")
    ap.add_argument("out", help="the HDF5 file to write: /patterns and /positions_A")
    ap.add_argument("--dataset", default="/datacube_root/datacube/data", help="the patterns in DATA (Rx, Ry, Qx, Qy)")
    a = ap.parse_args()
    with zipfile.ZipFile(a.result) as z:
        names = [n for n in z.namelist() if n.endswith("positions_A.npy")]
        if not names:
            raise SystemExit(f"{a.result}: no positions_A.npy in it (is it a tycho result?)")
        positions = np.load(io.BytesIO(z.read(names[0]))).reshape(-1, 2).astype(np.float64)
    with h5py.File(a.data, "r") as f:
        if a.dataset not in f:
            raise SystemExit(f"{a.data}: no dataset {a.dataset} (give --dataset)")
        patterns = f[a.dataset][...]
    if patterns.ndim != 4 or patterns.shape[0] * patterns.shape[1] != len(positions):
        raise SystemExit(f"{a.data}:{a.dataset} has shape {patterns.shape}; the result has {len(positions)} positions: "
                         "expected (Rx, Ry, Qx, Qy) with Rx * Ry of them")
    with h5py.File(a.out, "w") as f:
        f["patterns"] = patterns  # the stored dtype, unchanged (counts stay counts)
        f["positions_A"] = positions  # (Rx * Ry, 2), C order over (Rx, Ry), Å
    print(f"wrote {a.out}: patterns {patterns.shape} {patterns.dtype}, positions {positions.shape}")


if __name__ == "__main__":
    main()
