#!/usr/bin/env python3
"""The Cramér-Rao bound on the scan positions of the validation matrix's entries (entries.py).

How well can any unbiased estimator locate each probe from its own pattern's counts? For Poisson
counts with expectation λ_k(c) at probe centre c, the Fisher information is
F_ab = Σ_k ∂_a λ_k ∂_b λ_k / λ_k, and every unbiased estimate has covariance ≥ F⁻¹ (the
Cramér-Rao bound; S. M. Kay, Fundamentals of Statistical Signal Processing: Estimation Theory,
1993, ch. 3, with the Poisson Fisher information). As ../position_crb.py, for every entry of the
matrix: the object and the probe are *known* (the truth's phase as a pure-phase object exp(iφ),
the true optics), so the bound for a reconstruction that estimates them too is larger still.

The model is simulate.py's, step by step, in the projection approximation:
- the periodic cell of the truth (L = 3 windows, 3 = simulate.SUBSAMPLE) on simulate.py's grid of
  2·3·N points per axis: the truth's phase (band-limited to the detector, periodic, on
  pixel_size_A = 1/(N·dk)) is Fourier-interpolated onto it, which is exact for it (no
  map_coordinates: the truth is a Fourier crop of a periodic function, so its Fourier series is
  the function);
- the probe: aperture of the true semiangle with abTEM's soft edge (one angular pixel of the
  cell), exp(−iπλ C10 k²) with the true C10 (< 0 underfocus; abTEM's defocus = −C10, its
  exp(−iχ)), λ = 12.2643/√(E(1 + 0.978476e-6 E)) Å, shifted to c by a Fourier phase ramp
  (periodic over the cell, as abTEM's scan), unit power over the whole far field (simulate.py
  divides by the vacuum beam's total);
- the exit wave probe × exp(iφ), band-limited by abTEM's antialias aperture (2/3 of the grid's
  Nyquist, cosine taper), its far field sampled at dk/3 and every detector pixel the sum of its
  3 × 3 samples (simulate.far_field_patterns' crop);
- electrons per pattern = dose × step² (simulate.py: counts = Poisson(pattern × dose × step²));
- a finite source (σ > 0) as the Gaussian-weighted incoherent sum of coherent patterns at offsets
  o on a grid of simulate.source_grid's spacing (quadrature error < 1e-4) within 4σ, here centred
  on each probe so that λ(c) = Σ_o w_o I(c + o) is the continuous convolution's quadrature;
- ∂λ/∂c analytically (the probe's shift is a Fourier phase ramp, ∂_c P(r − c) = F⁻¹[−2πi k P̃
  e^{−2πi k·c}], ∂I = 2 Re(Ψ* ∂Ψ)); --fd H uses central differences of step H Å instead (the check).
The detector's transpose and the scan's rotation do not change the bound (the positions are in the
object's frame, and a permutation of the pixels does not change F); they are ignored.

Not modelled: (1) the thick crystals (thickness ≥ 20 Å: Si110, SrTiO3, GaAs110, Ge110), whose
data are multislice through 40-60 Å and not a projection of the truth's phase: reported as not
computed. (2) For the monolayers, the multislice through the layer's 4-7 Å (1 Å slices) and the
true potential beyond the phase's band limit (simulate.truth_phase: exp(iφ) of the band-limited
phase is not the band-limited exp(iφ_true)). This moves the bound in no fixed direction, and
--check-data measures its size: the model's Pearson χ² per pixel against the data's counts at the
true positions is 0.99-1.09 on every 2-D entry (1 for the exact model; a C10 of the wrong sign
gives 1.58, a point-sampled detector 1.90 on ws2_60kv_64). (3) Anything the simulation does not
have either (absorption, detector noise, read-out, point spread): a real detector's would make the
data less informative, so its bound only rises. The detector's 3 × 3 integration, which
../position_crb.py leaves out, is modelled: point sampling would lower the bound (ws2_60kv_64:
0.061 instead of 0.075 Å).

Prints per entry the bound's RMS per axis and the 2-D RMS sqrt(mean(var_x + var_y)) (the figure
`tycho evaluate` reports as positions.rms_A) over a random subset of the positions (seed 0).
Usage: position_crb.py [IDS ...] [--positions N] [--data DIR] [--json] [--fd H] [--check-data]
(default: the 2-D entries, 96 positions; thick entries named in IDS print "not computed"). Needs
numpy and scipy (h5py for --check-data), e.g. /work/venv-abtem/bin/python. On one core of a busy
2-core machine: < 0.1 s a position coherent; with a source 1.7 s (N = 96, 45 offsets) to 5.6-7.7 s
(N = 128, 69-89 offsets), so all 2-D entries at 64 positions take about 16 minutes.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import scipy.fft as sfft

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from entries import BY_ID, ENTRIES  # noqa: E402
from simulate import SUBSAMPLE, wavelength_A  # noqa: E402

DATA = "/work/wt-27/bench/matrix/data"
THICK_A = 20.0
UPSAMPLE = 2  # simulate.py's grid: G = 2 · SUBSAMPLE · N over the cell
ANTIALIAS_CUTOFF, ANTIALIAS_TAPER = 2 / 3, 0.01  # abTEM 1.0.11's defaults (abtem.yaml)


def is_thick(e):
    return e.get("thickness_A", 0.0) >= THICK_A


class Model:
    """Expected counts λ(c) of one entry's pattern at probe centre c (Å, the truth's frame) and
    their gradient, with the truth's object and optics."""

    def __init__(self, truth, entry, electrons=None, threads=1):
        t = truth
        self.N = N = int(entry["detector"])
        m = self.m = SUBSAMPLE
        dk = float(t["detector_pixel_invA"])
        L = float(t["cell_A"])
        if abs(L * dk - m) > 1e-6 * m:
            raise ValueError(f"cell {L} Å is not {m} windows of 1/dk = {1 / dk} Å")
        phase = t["phase"].astype(np.float64)
        M = phase.shape[0]
        if phase.shape != (M, M) or abs(M * float(t["pixel_size_A"]) - L) > 1e-6 * L:
            raise ValueError("the truth's phase does not cover the periodic cell")
        G = self.G = UPSAMPLE * m * N
        self.L, self.threads = L, threads
        # The phase on the G-grid: zero-pad its (periodic, band-limited) Fourier series.
        F = np.fft.fftshift(np.fft.fft2(phase))
        pad = np.zeros((G, G), complex)
        a = G // 2 - M // 2
        pad[a:a + M, a:a + M] = F
        phi = np.real(np.fft.ifft2(np.fft.ifftshift(pad))) * (G / M) ** 2
        self.obj = np.exp(1j * phi)
        # Probe: soft aperture (abTEM: clip((α_c − α)/Δα + 1/2, 0, 1), Δα the cell's angular pixel).
        lam = wavelength_A(float(t["energy_eV"]))
        self.k = np.fft.fftfreq(G, d=L / G)
        kx, ky = np.meshgrid(self.k, self.k, indexing="ij")
        k2 = kx ** 2 + ky ** 2
        alpha = lam * np.sqrt(k2)
        aperture = np.clip((float(t["semiangle_mrad"]) * 1e-3 - alpha) / (lam / L) + 0.5, 0.0, 1.0)
        aperture[0, 0] = 1.0
        spec = aperture * np.exp(-1j * np.pi * lam * float(t["C10_A"]) * k2)
        self.spec = spec / np.sqrt((np.abs(spec) ** 2).sum())  # Σ|fft2(P)|² = 1: unit beam
        # abTEM's antialias aperture on the exit wave.
        r = np.sqrt(k2)
        cutoff = ANTIALIAS_CUTOFF / (L / G) / 2
        taper = ANTIALIAS_TAPER / (L / G)
        bl = 0.5 * (1 + np.cos(np.pi * (r - cutoff + taper) / taper))
        bl[r > cutoff] = 0.0
        self.bandlimit = np.where(r > cutoff - taper, bl, 1.0)
        # The detector: sub-samples (fft indices) of every pixel, as simulate.far_field_patterns.
        j = np.arange(N)[:, None] - N // 2
        s = np.arange(m)[None, :] - (m - 1) // 2
        self.sel = ((m * j + s).reshape(-1)) % G
        self.electrons = float(t["dose_e_per_A2"]) * float(t["scan_step_A"]) ** 2 if electrons is None else electrons
        # Source: Gaussian weights on a grid of simulate.source_grid's spacing, within 4σ.
        sigma = self.sigma = float(t["source_sigma_A"])
        if sigma > 0:
            band = 2 * float(t["semiangle_mrad"]) * 1e-3 / lam
            h = 1.0 / (band + math.sqrt(math.log(1e4) / (2 * math.pi ** 2 * sigma ** 2)))
            n = int(math.ceil(4 * sigma / h))
            g = np.arange(-n, n + 1) * h
            sx, sy = np.meshgrid(g, g, indexing="ij")
            keep = sx ** 2 + sy ** 2 <= (4 * sigma) ** 2
            self.offsets = np.stack([sx[keep], sy[keep]], 1)
            w = np.exp(-(sx[keep] ** 2 + sy[keep] ** 2) / (2 * sigma ** 2))
            self.weights = w / w.sum()
            self.source_step = h
        else:
            self.offsets, self.weights, self.source_step = np.zeros((1, 2)), np.ones(1), 0.0

    def _bin(self, a):
        N, m = self.N, self.m
        return a.reshape(N, m, N, m).sum(axis=(1, 3))

    def _far(self, waves):
        f = sfft.fft2(waves * self.obj, workers=self.threads) * self.bandlimit
        return f[..., self.sel, :][..., :, self.sel]

    def counts(self, c, gradient=True):
        """λ (N, N) at probe centre c, and if gradient its derivatives (2, N, N) per Å."""
        lam = np.zeros((self.N, self.N))
        grad = np.zeros((2, self.N, self.N)) if gradient else None
        for o, w in zip(self.offsets, self.weights):
            p = np.asarray(c, float) + o
            ramp = np.exp(-2j * np.pi * self.k * p[0])[:, None] * np.exp(-2j * np.pi * self.k * p[1])[None, :]
            S = self.spec * ramp
            if gradient:
                S = np.stack([S, -2j * np.pi * self.k[:, None] * S, -2j * np.pi * self.k[None, :] * S])
            psi = self._far(sfft.ifft2(S, workers=self.threads))
            if gradient:
                lam += w * self._bin(np.abs(psi[0]) ** 2)
                grad += w * np.stack([self._bin(2 * np.real(np.conj(psi[0]) * psi[a])) for a in (1, 2)])
            else:
                lam += w * self._bin(np.abs(psi) ** 2)
        lam *= self.electrons
        if gradient:
            grad *= self.electrons
        return lam, grad

    def fisher(self, c, fd=0.0):
        """The 2 × 2 Fisher information of the positions (Å⁻²) from one pattern at c; fd > 0:
        central differences of step fd Å instead of the analytic derivative."""
        if fd > 0:
            lam, _ = self.counts(c, gradient=False)
            d = [(self.counts(c + fd * e, False)[0] - self.counts(c - fd * e, False)[0]) / (2 * fd) for e in np.eye(2)]
        else:
            lam, d = self.counts(c)
        lam = np.maximum(lam, 1e-300)
        return np.array([[np.sum(d[a] * d[b] / lam) for b in range(2)] for a in range(2)])


def load(data, eid):
    return np.load(os.path.join(data, eid, f"{eid}_truth.npz"))


def chosen_positions(total, count, seed=0):
    return np.random.default_rng(seed).choice(total, size=min(count, total), replace=False)


def check_data(model, truth, data, eid, chosen):
    """How well the model explains the data's counts at the true positions: Pearson χ² per pixel,
    mean of (n − λ)²/λ (1 for a correct model, whatever λ), over the pixels with λ ≥ 1, or λ ≥ 0.1
    where fewer than 500 pixels reach 1 (the low-dose entry)."""
    import h5py
    with h5py.File(os.path.join(data, eid, f"{eid}.h5"), "r") as f:
        cube = f["datacube_root/datacube/data"]
        ry = cube.shape[1]
        n, lam = [], []
        for p in chosen:
            counts = cube[p // ry, p % ry].astype(np.float64)
            n.append(counts.T if bool(truth["transpose"]) else counts)
            lam.append(model.counts(truth["positions_true_A"][p], gradient=False)[0])
    n, lam = np.array(n), np.array(lam)
    threshold = 1.0 if (lam >= 1.0).sum() >= 500 else 0.1
    use = lam >= threshold
    return float(((n[use] - lam[use]) ** 2 / lam[use]).mean()), int(use.sum()), threshold


def bound(data, eid, positions, fd=0.0, threads=1, electrons=None, do_check=False):
    e = BY_ID[eid]
    out = dict(bench="matrix_crb", entry=eid)
    if is_thick(e):
        out.update(crb_rms_A=None, note="not computed (multislice truth)", thickness_A=e["thickness_A"])
        return out
    t0 = time.time()
    truth = load(data, eid)
    model = Model(truth, e, electrons=electrons, threads=threads)
    true_A = truth["positions_true_A"]
    chosen = chosen_positions(len(true_A), positions)
    v = np.array([np.diag(np.linalg.inv(model.fisher(true_A[p], fd))) for p in chosen])
    out.update(electrons_per_pattern=model.electrons, source_sigma_A=model.sigma, source_offsets=len(model.weights),
               positions=len(chosen), positions_total=len(true_A),
               crb_rms_x_A=float(np.sqrt(v[:, 0].mean())), crb_rms_y_A=float(np.sqrt(v[:, 1].mean())),
               crb_rms_A=float(np.sqrt(v.sum(1).mean())), crb_median_A=float(np.median(np.sqrt(v.sum(1)))),
               derivative=f"central differences {fd} A" if fd > 0 else "analytic",
               seconds=round(time.time() - t0, 1))
    if do_check:
        chi, npix, threshold = check_data(model, truth, data, eid, chosen)
        out.update(data_chi2_per_pixel=chi, data_pixels=npix, data_lambda_min=threshold)
    return out


def line(r):
    if r["crb_rms_A"] is None:
        return f"{r['entry']:26s} {r['note']}"
    s = (f"{r['entry']:26s} {r['electrons_per_pattern']:9.0f} e/pattern  source σ {r['source_sigma_A']:.2f} Å"
         f" ({r['source_offsets']:3d} offsets)  {r['positions']:3d}/{r['positions_total']} positions  "
         f"CRB RMS x {r['crb_rms_x_A']:.4f} y {r['crb_rms_y_A']:.4f} 2-D {r['crb_rms_A']:.4f} Å  ({r['seconds']:.0f} s)")
    if "data_chi2_per_pixel" in r:
        s += f"  data χ²/pixel {r['data_chi2_per_pixel']:.3f} ({r['data_pixels']} pixels λ ≥ {r['data_lambda_min']:g})"
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ids", nargs="*", help="entries (default: every 2-D entry)")
    ap.add_argument("--positions", type=int, default=96)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--fd", type=float, default=0.0, help="central differences of this step (Å) instead of analytic")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check-data", action="store_true", help="also the model's χ² against the data's counts")
    args = ap.parse_args()
    ids = args.ids or [e["id"] for e in ENTRIES if not is_thick(e)]
    for eid in ids:
        r = bound(args.data, eid, args.positions, fd=args.fd, threads=args.threads, do_check=args.check_data)
        print(json.dumps(r) if args.json else line(r), flush=True)


if __name__ == "__main__":
    main()
