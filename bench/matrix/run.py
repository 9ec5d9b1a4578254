#!/usr/bin/env python3
"""Runs tycho's default recipe over the validation matrix and prints one table.

For every simulated entry (bench/matrix/simulate.py; entries.py says what each is):
  default   what a user writes: the data path and the nominal optics (energy, semiangle, the
            stated C10), and for a thick crystal the slices its thickness needs. Nothing else.
  truth     the same run given the truth: the true positions (listed by the file), the true C10,
            the detector's transpose.
  affine    as truth, but the positions are the truth's affine map of the nominal raster (its
            least-squares fit: rotation, steps, shear, the drift) without the random offsets
            (jitter): what a method that finds the scan's global geometry exactly and none of the
            jitter reaches. Its file links to the truth's patterns (HDF5 external link).
  quantem   quantEM 0.1.10 with its documented defaults and the same nominal inputs
            (quantem_run.py, in its own venv), when --quantem is given.
Each result is scored by score.py (local-phase Pearson against the truth, positions RMS), and the
scan geometry and C10 tycho estimated are read from its manifest and compared with the truth.
One row per entry and run goes to bench/results.jsonl ("bench": "matrix").

Usage: run.py [IDS ...] [--tycho build/bin/tycho] [--quantem] [--iterations N] [--only default,truth]
Needs the data (simulate.py) and a python with numpy (score.py).
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from entries import BY_ID, ENTRIES  # noqa: E402
import score as scoring  # noqa: E402

CRYSTAL_SLICE_A = 10.0  # the slice thickness the recipes give thick crystals (si110.toml: 10 x 10 Å)


def slices_for(truth):
    t = float(truth["thickness_A"])
    if t < 20:
        return 1, 0.0
    n = max(2, int(round(t / CRYSTAL_SLICE_A)))
    return n, t / n


def affine_positions_file(eid, data_dir, truth, work):
    """Writes work/<eid>_affinepos.h5: an external link to the truth file's patterns and, as
    /positions_A, the least-squares affine map of the nominal raster onto the true positions."""
    import h5py
    n = np.asarray(truth["positions_nominal_A"], float).reshape(-1, 2)
    p = np.asarray(truth["positions_true_A"], float).reshape(-1, 2)
    design = np.hstack([n, np.ones((len(n), 1))])
    coef, *_ = np.linalg.lstsq(design, p, rcond=None)
    path = os.path.join(work, f"{eid}_affinepos.h5")
    with h5py.File(path, "w") as f:
        f["/datacube_root/datacube/data"] = h5py.ExternalLink(
            os.path.abspath(os.path.join(data_dir, f"{eid}_truepos.h5")), "/datacube_root/datacube/data")
        f["/positions_A"] = design @ coef
    return path


def config_text(e, truth, kind, out_zip, data_dir, iterations=None, positions_file=None):
    eid = e["id"]
    slices, thickness = slices_for(truth)
    lines = []
    if kind in ("truth", "affine"):
        path = positions_file or f"{data_dir}/{eid}_truepos.h5"
        lines += ["[data]", 'source = "hdf5"', f'path = "{path}"',
                  'dataset = "/datacube_root/datacube/data"',
                  'axes = ["Rx", "Ry", "Qy", "Qx"]' if e["transpose"] else 'axes = ["Rx", "Ry", "Qx", "Qy"]',
                  'positions_dataset = "/positions_A"', 'positions_unit = "A"',
                  f"detector_pixel_invA = {float(truth['detector_pixel_invA'])!r}"]
        c10 = e["C10_A"]
    else:
        lines += ["[data]", 'source = "emd"', f'path = "{data_dir}/{eid}.h5"']
        c10 = e["C10_nominal_A"]
    lines += ["", "[optics]", f"energy_eV = {e['energy_eV']!r}", f"semiangle_mrad = {e['semiangle_mrad']!r}",
              f"C10_A = {c10!r}"]
    if kind in ("truth", "affine"):
        # The truth's positions (or their affine part) are the geometry: nothing to estimate.
        lines += ["", "[preprocess]", "scan_rotation_deg = 0", "scan_transpose = false",
                  "", "[reconstruct.positions]", "refine_scan_map = false"]
    rec = []
    if slices > 1:
        rec += [f"slices = {slices}", f"slice_thickness_A = {thickness!r}"]
    if iterations:
        rec += [f"iterations = {iterations}"]
    if rec:
        lines += ["", "[reconstruct]"] + rec
    lines += ["", "[output]", f'path = "{out_zip}"', "previews = false"]
    return "\n".join(lines) + "\n"


def manifest_geometry(zip_path):
    import zipfile
    with zipfile.ZipFile(zip_path) as z:
        m = json.loads(z.read("manifest.json"))
    pre = m.get("preprocess") or {}
    return pre.get("scan_map"), m


def truth_geometry(truth):
    """The truth's linear map of the nominal raster (the least-squares fit of the true positions,
    the drift included) in the decomposition L = R(θ) [[s0, 0], [h, s1]], for the transposed
    detector after tycho's transpose (the frame it reconstructs in)."""
    L = np.array(truth["scan_affine_fit"], float)
    # The stored patterns of a transposed detector are the cell's transposed; tycho transposes
    # them back, so its frame is the cell's and L applies as it is.
    s1 = math.hypot(L[0, 1], L[1, 1])
    th = math.atan2(-L[0, 1], L[1, 1])
    c, s = math.cos(th), math.sin(th)
    return dict(rotation_deg=math.degrees(th), scale0=c * L[0, 0] + s * L[1, 0], scale1=s1,
                shear=-s * L[0, 0] + c * L[1, 0], linear=L)


def angle_diff(a, b):
    return (a - b + 180) % 360 - 180


def run_one(e, kind, args, work):
    eid = e["id"]
    data_dir = os.path.join(args.data, eid)
    truth = np.load(os.path.join(data_dir, f"{eid}_truth.npz"))
    out_zip = os.path.join(work, f"{eid}-{kind}{args.tag}.zip")
    row = dict(bench="matrix", entry=eid, run=kind + args.tag, date=time.strftime("%Y-%m-%d"), host=platform.node())
    if kind == "quantem":
        slices, thickness = slices_for(truth)
        out = os.path.join(work, f"{eid}-quantem.npz")
        cmd = [args.quantem_python, os.path.join(HERE, "quantem_run.py"), os.path.join(data_dir, f"{eid}.h5"),
               "--energy-eV", str(e["energy_eV"]), "--semiangle-mrad", str(e["semiangle_mrad"]),
               "--C10-A", str(e["C10_nominal_A"]), "--iterations", str(args.iterations or 100), "--out", out]
        if slices > 1:
            cmd += ["--slices", str(slices), "--slice-thickness-A", str(thickness)]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        row["seconds"] = time.time() - t0
        if p.returncode != 0:
            row["error"] = (p.stderr or p.stdout)[-500:]
            return row
        result = scoring.read_result(out)
    else:
        cfg = os.path.join(work, f"{eid}-{kind}{args.tag}.toml")
        with open(cfg, "w") as f:
            positions_file = affine_positions_file(eid, data_dir, truth, work) if kind == "affine" else None
            f.write(config_text(e, truth, kind, out_zip, data_dir, args.iterations, positions_file))
        t0 = time.time()
        extra = [a for kv in (args.set if kind == "default" else []) for a in ("--set", kv)]
        p = subprocess.run([args.tycho, "reconstruct", cfg, "--overwrite"] + extra, capture_output=True, text=True)
        row["seconds"] = time.time() - t0
        with open(os.path.join(work, f"{eid}-{kind}{args.tag}.log"), "w") as f:
            f.write(p.stdout + p.stderr)
        if p.returncode != 0:
            row["error"] = (p.stderr or p.stdout)[-500:]
            return row
        result = scoring.read_result(out_zip)
        geometry, manifest = manifest_geometry(out_zip)
        if geometry:
            tg = truth_geometry(truth)
            row["rotation_deg"] = geometry.get("rotation_deg")
            row["rotation_error_deg"] = angle_diff(geometry.get("rotation_deg") or 0.0, tg["rotation_deg"])
            row["transpose_right"] = bool(geometry.get("transpose")) == bool(truth["transpose"])
            row["geometry_source"] = geometry.get("source")
            par = geometry.get("parallax") or {}
            if par.get("C10_at_nominal_step_A") is not None:
                row["parallax_C10_A"] = par["C10_at_nominal_step_A"]
        refined = (manifest.get("scan_map_refined") or {}) if isinstance(manifest, dict) else {}
        for key in ("rotation_deg", "step_scale", "shear", "C10_A"):
            if key in refined:
                row["refined_" + key] = refined[key]
        if refined.get("linear"):
            tg = truth_geometry(truth)
            L, T = np.array(refined["linear"], float), tg["linear"]
            row["refined_map_vs_truth"] = float(np.abs(L - T).max())
            # The refined map against the truth's, each as R(θ) [[s0, 0], [h, s1]]: the rotation
            # error and the isotropic scale's (√det L against √det T, relative).
            row["refined_rotation_error_deg"] = angle_diff(refined["rotation_deg"], tg["rotation_deg"])
            row["refined_scale_error"] = math.sqrt(abs(np.linalg.det(L)) / abs(np.linalg.det(T))) - 1
        if "C10_A" in (manifest.get("probe_fit") or {}):
            row["C10_fitted_A"] = manifest["probe_fit"]["C10_A"]
            row["C10_true_A"] = e["C10_A"]
    s = scoring.score(result, truth)
    row.update(pearson=s["pearson"], rms_rad=s["rms_rad"], metric=s["metric"])
    row.update(scoring.score_positions(result, truth))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ids", nargs="*")
    ap.add_argument("--tycho", default=os.path.join(ROOT, "build", "bin", "tycho"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--only", default="default,truth")
    ap.add_argument("--quantem", action="store_true", help="also run quantEM (quantem_run.py)")
    ap.add_argument("--quantem-python", default=os.environ.get("QUANTEM_PYTHON", "/work/venv-quantem/bin/python"))
    ap.add_argument("--iterations", type=int)
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE passed to the default run (experiments)")
    ap.add_argument("--tag", default="", help="suffix of the work files and the run's name (experiments)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    kinds = args.only.split(",") + (["quantem"] if args.quantem and "quantem" not in args.only else [])
    ids = args.ids or [e["id"] for e in ENTRIES]
    rows = []
    for i in ids:
        e = BY_ID[i]
        if not os.path.exists(os.path.join(args.data, i, f"{i}_truth.npz")):
            print(f"{i}: not simulated (bench/matrix/simulate.py {i})", file=sys.stderr)
            continue
        for kind in kinds:
            r = run_one(e, kind, args, args.work)
            rows.append(r)
            print(json.dumps(r), flush=True)
            if not args.no_record:
                with open(os.path.join(ROOT, "bench", "results.jsonl"), "a") as f:
                    f.write(json.dumps(r) + "\n")
    print_table(rows)


def print_table(rows):
    by_entry = {}
    for r in rows:
        by_entry.setdefault(r["entry"], {})[r["run"]] = r
    head = (f"{'entry':28} {'run':8} {'pearson':>8} {'pos rms Å':>9} {'affine Å':>8} {'rot err°':>8} "
            f"{'map rot°':>8} {'scale %':>7} {'s':>6}")
    print(head)
    for eid, runs in by_entry.items():
        for kind, r in runs.items():
            if "error" in r:
                print(f"{eid:28} {kind:8} error: {r['error'][-80:]!r}")
                continue
            def num(key, scale=1.0):
                v = r.get(key)
                return v * scale if v is not None else float("nan")
            # rot err°: the preprocessing's estimate; map rot° and scale %: the refined map's errors.
            print(f"{eid:28} {kind:8} {r['pearson']:8.4f} {num('positions_rms_A'):9.3f} "
                  f"{num('positions_affine_max_A'):8.3f} {num('rotation_error_deg'):8.2f} "
                  f"{num('refined_rotation_error_deg'):8.2f} {num('refined_scale_error', 100):7.2f} {r['seconds']:6.0f}")


if __name__ == "__main__":
    main()
