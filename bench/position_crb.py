#!/usr/bin/env python3
"""The Cramér-Rao bound on the scan positions of the mos2_jitter and mos2_partial files.

How well can any unbiased estimator locate each probe from its own pattern's counts? For Poisson
counts with expectation λ_k(c) at probe centre c, the Fisher information is
F_ab = Σ_k ∂_a λ_k ∂_b λ_k / λ_k, and every unbiased estimate has covariance ≥ F⁻¹
(the Cramér-Rao bound; S. M. Kay, Fundamentals of Statistical Signal Processing: Estimation
Theory, 1993, ch. 3, with the Poisson Fisher information). This computes it with the object and the probe *known* (the truth's phase as a
pure-phase object exp(iφ), the optics' probe), so the bound for a reconstruction that estimates
them too is larger still. The model is the one the data were simulated with (their README):
80 kV, 25 mrad, C10 = −150 Å, 96² window of 0.17361 Å pixels, 1e5 e/Å² at a 0.5 Å step (25,000
electrons per pattern), and for the partial file the incoherent average over source offsets on a
0.3 Å grid with Gaussian weights (σ = 0.35 Å) within 4σ. Not modelled (each makes the data less
informative, so the bound only rises): the detector's 3 × 3 sub-sampling, the object's absorption.

Prints the bound's RMS per axis and the 2-D RMS (the figure `tycho evaluate` reports as
positions.rms_A, and issue 11's 0.05 Å target) over a random subset of the positions.
Usage: bench/position_crb.py [jitter|partial] [POSITIONS]   (default: both, 192 positions; the
partial file takes ~1 minute for 192 on one core). Needs numpy and ../shared/data.
"""
import os
import sys

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "mos2_partial")
N, WAVELENGTH_A, SEMIANGLE, C10_A, ELECTRONS = 96, 0.041757, 25e-3, -150.0, 1e5 * 0.5 * 0.5


def bound(which, positions, seed=0):
    t = np.load(os.path.join(DATA, f"mos2_{which}_ground_truth.npz"))
    obj = np.exp(1j * t["phase"].astype(np.float64))
    px, sigma, true_A = float(t["pixel_size_A"]), float(t["source_sigma_A"]), t["positions_true_A"]
    f = np.fft.fftfreq(N, d=px)
    kx, ky = np.meshgrid(f, f, indexing="ij")
    k2 = kx**2 + ky**2
    spectrum = (np.sqrt(k2) * WAVELENGTH_A <= SEMIANGLE) * np.exp(-1j * np.pi * WAVELENGTH_A * C10_A * k2)
    spectrum /= np.sqrt((np.abs(spectrum) ** 2).sum())  # unit power
    if sigma > 0:
        g = np.arange(-5, 6) * 0.3
        sx, sy = np.meshgrid(g, g, indexing="ij")
        keep = sx**2 + sy**2 <= (4 * sigma) ** 2
        offsets = np.stack([sx[keep], sy[keep]], 1)
        weights = np.exp(-(sx[keep] ** 2 + sy[keep] ** 2) / (2 * sigma**2))
        weights /= weights.sum()
    else:
        offsets, weights = np.zeros((1, 2)), np.ones(1)

    def expected_counts(c):
        out = np.zeros((N, N))
        for o, w in zip(offsets, weights):
            centre = (c + o) / px
            top = np.floor(centre).astype(int) - N // 2
            frac = centre - np.floor(centre)
            probe = np.fft.fftshift(np.fft.ifft2(spectrum * np.exp(-2j * np.pi * (kx * frac[0] + ky * frac[1]) * px)) * N)
            rows = (np.arange(N) + top[0]) % obj.shape[0]
            cols = (np.arange(N) + top[1]) % obj.shape[1]
            out += w * np.abs(np.fft.fft2(probe * obj[np.ix_(rows, cols)]) / N) ** 2
        return ELECTRONS * out

    h = 0.01  # Å: central differences
    chosen = np.random.default_rng(seed).choice(len(true_A), size=min(positions, len(true_A)), replace=False)
    variances = []
    for p in chosen:
        c = true_A[p]
        lam = np.maximum(expected_counts(c), 1e-300)
        d = [(expected_counts(c + h * e) - expected_counts(c - h * e)) / (2 * h) for e in np.eye(2)]
        fisher = np.array([[np.sum(d[a] * d[b] / lam) for b in range(2)] for a in range(2)])
        variances.append(np.diag(np.linalg.inv(fisher)))
    v = np.array(variances)
    print(f"{which}: source σ {sigma} Å, {len(chosen)} of {len(true_A)} positions, {ELECTRONS:.0f} electrons per pattern: "
          f"Cramér-Rao bound RMS x {np.sqrt(v[:, 0].mean()):.4f} Å, y {np.sqrt(v[:, 1].mean()):.4f} Å, "
          f"2-D {np.sqrt(v.sum(1).mean()):.4f} Å")


if __name__ == "__main__":
    which = sys.argv[1:2] or ["jitter", "partial"]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 192
    for w in which:
        bound(w, count)
