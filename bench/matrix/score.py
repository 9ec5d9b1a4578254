#!/usr/bin/env python3
"""Scores a reconstruction of a validation-matrix entry against its truth, whoever made it.

The metric of ../shared/data/mos2/README.md, with the registration a user who does not know the
scan's origin needs: the local phase φ_hp = arg(z · conj(G_σ ⊛ z)) (σ = 2 Å) of the object z and of
exp(i·truth) (for multislice results of thick crystals, the high-passed unwrapped total phase
φ − G_σ ⊛ φ of both), compared inside the inner 80 % of the scanned field of view after registration:
the truth's map is cross-correlated with the object's over the whole periodic cell (integer peak,
then refined to 1/20 pixel by an upsampled DFT; the truth is shifted by a Fourier phase ramp,
exact for the periodic cell); Pearson correlation and RMS difference (mean removed) at that shift.

Positions: RMS of (estimated − true) over all positions after removing the mean difference (what
ptychography cannot determine), in Å; and the affine part of that error (the least-squares
affine map of the error on the nominal raster), its largest value over the scan, in Å.

Inputs: a tycho result (.zip: object, positions_A, manifest) or an .npz with `object` (complex,
(H, W) or (S, H, W)), `object_pixel_A`, and optionally `positions_A` or `positions_px`.
Usage: score.py RESULT TRUTH.npz [--json]
"""
import argparse
import io
import json
import math
import sys
import zipfile

import numpy as np


def gaussian_filter_periodic(img, sigma_px):
    f0 = np.fft.fftfreq(img.shape[0])[:, None]
    f1 = np.fft.fftfreq(img.shape[1])[None, :]
    g = np.exp(-2 * math.pi ** 2 * sigma_px ** 2 * (f0 ** 2 + f1 ** 2))
    return np.fft.ifft2(np.fft.fft2(img) * g)


def gaussian_filter_reflect(img, sigma_px):
    """Filter with reflecting edges (the object is not periodic): mirror-pad, filter, crop."""
    pad = int(4 * sigma_px + 1)
    p = np.pad(img, pad, mode="symmetric")
    return gaussian_filter_periodic(p, sigma_px)[pad:-pad, pad:-pad]


def local_phase(z, sigma_px, periodic):
    smooth = gaussian_filter_periodic(z, sigma_px) if periodic else (
        gaussian_filter_reflect(z.real, sigma_px) + 1j * gaussian_filter_reflect(z.imag, sigma_px))
    return np.angle(z * np.conj(smooth))


def high_passed(phi, sigma_px, periodic):
    smooth = gaussian_filter_periodic(phi, sigma_px).real if periodic else gaussian_filter_reflect(phi, sigma_px).real
    return phi - smooth


def read_result(path):
    if path.endswith(".npz"):
        r = np.load(path, allow_pickle=False)
        out = {k: r[k] for k in r.files}
        return out
    out = {}
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if name.endswith(".npy") and name[:-4] in ("object", "positions_A", "positions_px", "probe"):
                out[name[:-4]] = np.load(io.BytesIO(z.read(name)), allow_pickle=False)
        m = json.loads(z.read("manifest.json"))
    out["object_pixel_A"] = m["calibration"]["object_pixel_A"][0]
    out["manifest"] = m
    return out


def register(a, b_periodic, up=20):
    """Shift s (pixels) that best aligns b (periodic, larger) onto a: b(n + s) ≈ a(n) over a's
    support, for a placed at b's origin. Integer peak of the full cross-correlation, then an
    upsampled DFT around it."""
    H, W = b_periodic.shape
    pa = np.zeros((H, W))
    pa[:a.shape[0], :a.shape[1]] = a - a.mean()
    B = np.fft.fft2(b_periodic - b_periodic.mean())
    X = B * np.conj(np.fft.fft2(pa))
    c = np.real(np.fft.ifft2(X))
    p = np.unravel_index(np.argmax(c), c.shape)
    off = np.arange(-1.5 * up, 1.5 * up + 1) / up
    x0, x1 = p[0] + off, p[1] + off
    E0 = np.exp(2j * np.pi * np.outer(x0, np.fft.fftfreq(H)))
    E1 = np.exp(2j * np.pi * np.outer(np.fft.fftfreq(W), x1))
    cf = np.real(E0 @ X @ E1)
    q = np.unravel_index(np.argmax(cf), cf.shape)
    return np.array([x0[q[0]], x1[q[1]]])


def fourier_shift_periodic(img, s):
    f0 = np.fft.fftfreq(img.shape[0])[:, None]
    f1 = np.fft.fftfreq(img.shape[1])[None, :]
    return np.real(np.fft.ifft2(np.fft.fft2(img) * np.exp(2j * np.pi * (f0 * s[0] + f1 * s[1]))))


def score(result, truth, sigma_A=2.0, fov_fraction=0.8, metric=None):
    obj = np.asarray(result["object"])
    px = float(result["object_pixel_A"])
    tp = float(truth["pixel_size_A"])
    if abs(px - tp) > 1e-3 * tp:
        raise SystemExit(f"object pixel {px} Å is not the truth's {tp} Å")
    if metric is None:
        metric = "high_passed" if obj.ndim == 3 and obj.shape[0] > 1 else "local_phase"
    if obj.ndim == 3:
        if metric == "high_passed":
            phase_obj = np.sum([np.unwrap(np.unwrap(np.angle(s), axis=0), axis=1) for s in obj], 0)
        z = np.prod(obj, 0)
    else:
        z = obj
    sig = sigma_A / px
    truth_phase = truth["phase"].astype(np.float64)
    if metric == "local_phase":
        m_obj = local_phase(z, sig, periodic=False)
        m_truth = local_phase(np.exp(1j * truth_phase), sig, periodic=True)
    else:
        m_obj = high_passed(phase_obj, sig, periodic=False)
        m_truth = high_passed(truth_phase, sig, periodic=True)
    # Field of view: the positions' bounding box (object pixels), inner fraction.
    if "positions_px" in result:
        pos = np.asarray(result["positions_px"], float)
    else:
        pos = None
    if pos is not None and pos.size:
        lo, hi = pos.min(0), pos.max(0)
    else:
        lo, hi = np.array([0, 0]), np.array(z.shape) - 1
    centre, half = (lo + hi) / 2, (hi - lo) / 2 * fov_fraction
    r0 = np.clip(np.floor(centre - half).astype(int), 0, None)
    r1 = np.minimum(np.ceil(centre + half).astype(int), z.shape)
    a = m_obj[r0[0]:r1[0], r0[1]:r1[1]]
    s = register(a, m_truth)
    aligned = fourier_shift_periodic(m_truth, s)[:a.shape[0], :a.shape[1]]
    pearson = float(np.corrcoef(a.ravel(), aligned.ravel())[0, 1])
    d = a - aligned
    rms = float(np.sqrt(((d - d.mean()) ** 2).mean()))
    # The shift maps object pixel n (in the compared box) to truth pixel n + s: object origin in truth px.
    return dict(pearson=pearson, rms_rad=rms, metric=metric, fov_px=list(a.shape),
                object_origin_in_truth_px=(s - r0).tolist())


def score_positions(result, truth, origin_px=None):
    if "positions_A" in result:
        est = np.asarray(result["positions_A"], float)
    elif "positions_px" in result:
        est = np.asarray(result["positions_px"], float) * float(result["object_pixel_A"])
    else:
        return {}
    true = np.asarray(truth["positions_true_A"], float)
    nominal = np.asarray(truth["positions_nominal_A"], float)
    if est.shape != true.shape:
        return dict(error=f"positions {est.shape} against {true.shape}")
    err = est - true
    err -= err.mean(0)
    rms = float(np.sqrt((err ** 2).sum(1).mean()))
    X = np.hstack([nominal - nominal.mean(0), np.ones((len(nominal), 1))])
    coef, *_ = np.linalg.lstsq(X, err, rcond=None)
    affine_err = X @ coef
    local = err - affine_err
    return dict(positions_rms_A=rms, positions_affine_max_A=float(np.sqrt((affine_err ** 2).sum(1)).max()),
                positions_local_rms_A=float(np.sqrt((local ** 2).sum(1).mean())))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("result")
    ap.add_argument("truth")
    ap.add_argument("--metric", choices=["local_phase", "high_passed"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = read_result(a.result)
    t = np.load(a.truth)
    out = score(r, t, metric=a.metric)
    if "positions_true_A" in t.files:
        out.update(score_positions(r, t))
    print(json.dumps(out) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    sys.exit(main())
