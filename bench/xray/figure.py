#!/usr/bin/env python3
"""The figure of bench/xray/README.md: the simulated specimen's phase over the scanned field
beside tycho's reconstructions started from the zone-plate model and from the CXI file's
illumination, and the probes (the start from the file, and both at the end).

  python3 bench/xray/figure.py --truth xray_full_truth.npz --cxi xray_full.cxi \
      --model full-model.zip --file full-file.zip --pearson 0.973 0.971 -o docs/images/xray-zone-plate.png
"""
import argparse

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def field(obj, pos, margin=0):
    """The object's phase over the positions' bounding box (probe centres, object pixels)."""
    lo = np.floor(pos.min(0)).astype(int) - margin
    hi = np.ceil(pos.max(0)).astype(int) + margin
    z = obj[lo[0]:hi[0], lo[1]:hi[1]]
    return np.angle(z * np.exp(-1j * np.angle(np.mean(z))))  # the constant phase taken out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--truth", required=True)
    ap.add_argument("--cxi", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--pearson", nargs=2, type=float, required=True)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()

    t = np.load(a.truth)
    px = float(t["pixel_size_A"])
    pos_t = (t["positions_axes_A"] - t["positions_axes_A"][0] + t["scan_origin_A"]) / px
    truth = field(np.exp(1j * t["phase"]), pos_t)
    results = [np.load(p) for p in (a.model, a.file)]
    phases = [field(r["object"][0], r["positions_px"]) for r in results]
    with h5py.File(a.cxi) as f:
        illumination = f["/entry_1/instrument_1/source_1/illumination"][()]

    fig, ax = plt.subplots(2, 3, figsize=(12, 8), layout="constrained")
    extent_um = truth.shape[1] * px * 1e-4
    for k, (img, title) in enumerate([(truth, "truth (phase)"),
                                      (phases[0], f"model probe start: Pearson {a.pearson[0]:.3f}"),
                                      (phases[1], f"file probe start: Pearson {a.pearson[1]:.3f}")]):
        im = ax[0, k].imshow(img, cmap="gray", vmin=-1.1, vmax=0.4, extent=(0, extent_um, extent_um, 0))
        ax[0, k].set_title(title, fontsize=10)
        ax[0, k].set_xlabel("µm (axis 1: lab −x)")
    ax[0, 0].set_ylabel("µm (axis 0: lab −y)")
    fig.colorbar(im, ax=ax[0, 2], shrink=0.8, label="phase, rad")
    n = illumination.shape[0]
    w_um = n * px * 1e-4
    for k, (p, title) in enumerate([(illumination, "|probe| in the file (10 % off focus)"),
                                    (results[0]["probe"][0], "|probe| at the end, model start"),
                                    (results[1]["probe"][0], "|probe| at the end, file start")]):
        ax[1, k].imshow(np.abs(p), cmap="magma", extent=(0, w_um, w_um, 0))
        ax[1, k].set_title(title, fontsize=10)
        ax[1, k].set_xlabel("µm")
    fig.suptitle("Simulated 8.2 keV zone-plate scan (bench/xray), 16 × 16 positions, 128² frames, 100 iterations",
                 fontsize=11)
    fig.savefig(a.output, dpi=90)


if __name__ == "__main__":
    main()
