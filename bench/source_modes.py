#!/usr/bin/env python3
"""How many probe modes a Gaussian source needs: the power of each mode of the mixed state.

A finite source of Gaussian size sigma makes every pattern the incoherent average of coherent
patterns over probe positions spread by sigma. That mixed state's density matrix is
rho = sum_d w(d) P(r - d) P*(r - d); its eigenvalues are the powers of the orthogonal modes
`probe_modes` fits. This prints them (and their running sum) for the optics and window given, so
`[reconstruct] probe_modes` and `[reconstruct.probe] mode_power` can be chosen from the source size
instead of by trial: probe_modes to catch ~97 % of the power, mode_power = 1 - (mode 0's share).

Needs numpy. Defaults: the MoS2 partial-coherence file of ../shared/data/mos2_partial (80 keV,
25 mrad, C10 = -150 A, 96 px at 0.06 1/A, sigma = 0.35 A); docs/multislice-modes-positions.md
quotes its output.

Usage: bench/source_modes.py [--sigma-A 0.35] [--energy-eV 80e3] [--semiangle-mrad 25]
                             [--C10-A -150] [--window-px 96] [--detector-pixel-invA 0.06]
"""
import argparse

import numpy as np


def wavelength_A(energy_eV):
    # Relativistic electron wavelength (CONVENTIONS.md): h / sqrt(2 m E (1 + E / (2 m c^2))).
    m_c2 = 510998.95
    return 12.2642598 / np.sqrt(energy_eV * (1 + energy_eV / (2 * m_c2)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sigma-A", type=float, default=0.35)
    ap.add_argument("--energy-eV", type=float, default=80e3)
    ap.add_argument("--semiangle-mrad", type=float, default=25.0)
    ap.add_argument("--C10-A", type=float, default=-150.0)
    ap.add_argument("--window-px", type=int, default=96)
    ap.add_argument("--detector-pixel-invA", type=float, default=0.06)
    ap.add_argument("--modes", type=int, default=12, help="how many modes to print")
    a = ap.parse_args()
    if not a.sigma_A > 0:
        raise SystemExit("--sigma-A must be > 0 (a point source needs one mode)")
    lam = wavelength_A(a.energy_eV)
    n, dk = a.window_px, a.detector_pixel_invA
    k = (np.arange(n) - n // 2) * dk
    kx, ky = np.meshgrid(k, k, indexing="ij")
    k2 = kx**2 + ky**2
    # The probe's Fourier transform A(k) exp(-i chi(k)), chi = pi lambda C10 |k|^2 (the data's convention).
    probe_k = (np.sqrt(k2) <= a.semiangle_mrad * 1e-3 / lam) * np.exp(-1j * np.pi * lam * a.C10_A * k2)
    # Quadrature of the source over a grid of shifts (sigma / 7 apart, out to 4 sigma): each row is
    # sqrt(w) times the shifted probe, so rows^H rows is rho and the squared singular values are
    # the modes' powers.
    h = a.sigma_A / 7
    g = np.arange(-4 * a.sigma_A, 4 * a.sigma_A + h / 2, h)
    rows = []
    for dx in g:
        for dy in g:
            r2 = dx * dx + dy * dy
            if r2 <= (4 * a.sigma_A) ** 2:
                w = np.exp(-r2 / (2 * a.sigma_A**2))
                rows.append(np.sqrt(w) * (probe_k * np.exp(-2j * np.pi * (kx * dx + ky * dy))).ravel())
    s = np.linalg.svd(np.array(rows), compute_uv=False) ** 2
    s /= s.sum()
    print(f"source sigma {a.sigma_A} A, {a.energy_eV / 1e3:g} keV, {a.semiangle_mrad:g} mrad, C10 {a.C10_A:g} A")
    print("mode  power  cumulative")
    for m in range(min(a.modes, len(s))):
        print(f"{m:4d}  {s[m]:.4f}  {s[:m + 1].sum():.4f}")


if __name__ == "__main__":
    main()
