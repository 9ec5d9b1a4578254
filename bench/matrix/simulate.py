#!/usr/bin/env python3
"""Simulates the validation matrix's data sets with abTEM 1.0.11 (bench/matrix/entries.py).

Independent of tycho's forward model: abTEM builds the potential (independent-atom model, Lobato
parametrisation, infinite projection) and runs the multislice of its own probe through it at each
true probe position over the whole periodic cell; the far field is sampled at 1/3 of a detector
pixel and every detector pixel sums its 3 x 3 samples (the detector integrates over its area, as in
../shared/data). A finite source is the Gaussian-weighted incoherent sum of coherent patterns on a
grid of probe positions fine enough for the pattern's band limit (as ../shared/data/mos2_partial).
Counts are Poisson draws of dose x step² x the fraction of the beam per pixel.

Writes, per entry, into bench/matrix/data/<id>/ (not committed; regenerated on demand):
  <id>.h5          EMD 1.0 as py4DSTEM writes it: the counts, the *nominal* raster step and optics
  <id>_truth.npz   the true phase, positions, geometry and optics
  <id>_truepos.h5  the same counts with the true positions listed (for the run given the truth)
  README.md        the entry's geometry, truth and simulation record

Usage: simulate.py [ID ...] [--force] [--threads N]     (default: every entry not yet simulated)
Needs a venv with abtem==1.0.11 and h5py (bench/matrix/README.md).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from entries import BY_ID, ENTRIES  # noqa: E402

SUBSAMPLE = 3  # far-field samples per detector pixel and axis; the cell is SUBSAMPLE windows wide
SEED = 20261205


def wavelength_A(energy_eV):
    return 12.2643 / math.sqrt(energy_eV * (1 + 0.978476e-6 * energy_eV))


# ---------------------------------------------------------------- specimens

def _tile_to_box(atoms, L0, L1):
    """Repeats an orthogonal cell until it covers L0 x L1 and keeps the atoms inside the box."""
    reps = (int(math.ceil(L0 / atoms.cell[0, 0])) + 1, int(math.ceil(L1 / atoms.cell[1, 1])) + 1, 1)
    atoms = atoms * reps
    p = atoms.positions
    atoms = atoms[(p[:, 0] >= 0) & (p[:, 0] < L0) & (p[:, 1] >= 0) & (p[:, 1] < L1)]
    atoms.cell = [L0, L1, atoms.cell[2, 2]]
    atoms.pbc = True
    return atoms


def _remove_seam_clashes(atoms, L, min_distance=1.2):
    """A lattice cut to a box it does not fit has a seam on the box's edges: drop atoms that come
    closer than min_distance to another across it (periodic images)."""
    p = atoms.positions[:, :2]
    keep = np.ones(len(atoms), bool)
    near_edge = np.where((p[:, 0] < 2) | (p[:, 0] > L - 2) | (p[:, 1] < 2) | (p[:, 1] > L - 2))[0]
    z = atoms.positions[:, 2]
    for a in near_edge:
        if not keep[a]:
            continue
        d = p - p[a]
        d -= L * np.round(d / L)
        dist = np.sqrt((d ** 2).sum(1) + (z - z[a]) ** 2)
        dist[a] = np.inf
        clash = np.where((dist < min_distance) & keep)[0]
        keep[clash] = False
    return atoms[keep]


def layer_material(name):
    from ase.build import graphene, mx2
    table = {
        "MoS2": lambda: mx2("MoS2", kind="2H", a=3.18, thickness=3.19, vacuum=2),
        "WS2": lambda: mx2("WS2", kind="2H", a=3.153, thickness=3.14, vacuum=2),
        "MoSe2": lambda: mx2("MoSe2", kind="2H", a=3.288, thickness=3.34, vacuum=2),
        "WSe2": lambda: mx2("WSe2", kind="2H", a=3.282, thickness=3.35, vacuum=2),
        "MoTe2": lambda: mx2("MoTe2", kind="2H", a=3.52, thickness=3.60, vacuum=2),
        "graphene": lambda: graphene("C2", a=2.46, vacuum=2),
        "hBN": lambda: graphene("BN", a=2.504, vacuum=2),
    }
    return table[name]()


def crystal_cell(name):
    """An orthogonal cell of the crystal with the beam (z) along its zone axis."""
    from ase.lattice.compounds import B3
    from ase.lattice.cubic import Diamond
    from ase.spacegroup import crystal
    d110 = [[1, -1, 0], [0, 0, 1], [-1, -1, 0]]
    if name == "Si110":
        return Diamond(directions=d110, size=(1, 1, 1), symbol="Si", latticeconstant=5.431)
    if name == "Ge110":
        return Diamond(directions=d110, size=(1, 1, 1), symbol="Ge", latticeconstant=5.658)
    if name == "GaAs110":
        return B3(directions=d110, size=(1, 1, 1), symbol=("Ga", "As"), latticeconstant=5.653)
    if name == "SrTiO3_001":
        return crystal(["Sr", "Ti", "O"], basis=[(0, 0, 0), (0.5, 0.5, 0.5), (0.5, 0.5, 0)], spacegroup=221,
                       cellpar=[3.905] * 3 + [90] * 3)
    raise KeyError(name)


CRYSTALS = {"Si110", "Ge110", "GaAs110", "SrTiO3_001"}
SPECIMENS = CRYSTALS | {"MoS2", "WS2", "MoSe2", "WSe2", "MoTe2", "graphene", "hBN"}


def crystal_box(name, target_L, thickness_A):
    """The crystal repeated to a square periodic cell near target_L (strained by < 0.5 % so that
    both lateral periods fit it exactly) and at least thickness_A thick."""
    import abtem
    unit = abtem.orthogonalize_cell(crystal_cell(name))
    p0, p1, pz = unit.cell[0, 0], unit.cell[1, 1], unit.cell[2, 2]
    best = None
    for n0 in range(max(1, int(target_L / p0 * 0.8)), int(target_L / p0 * 1.25) + 2):
        n1 = max(1, round(n0 * p0 / p1))
        mismatch = abs(n0 * p0 - n1 * p1) / (n0 * p0)
        score = mismatch + 0.002 * abs(n0 * p0 - target_L) / target_L
        if best is None or score < best[0]:
            best = (score, n0, n1, mismatch)
    _, n0, n1, mismatch = best
    if mismatch > 0.005:
        raise RuntimeError(f"{name}: no square cell within 0.5 % near {target_L} Å (best {mismatch:.4f})")
    nz = int(math.ceil(thickness_A / pz))
    atoms = unit * (n0, n1, nz)
    L = 0.5 * (n0 * p0 + n1 * p1)
    atoms.positions[:, 0] *= L / (n0 * p0)
    atoms.positions[:, 1] *= L / (n1 * p1)
    atoms.cell = [L, L, nz * pz]
    atoms.pbc = True
    return atoms, L, nz * pz, mismatch


# ---------------------------------------------------------------- scan

def scan_positions(e, L):
    """Nominal raster (the file's), and the true positions in the cell's frame (Å)."""
    rx, ry = e["scan"]
    s = e["step_A"]
    i, j = np.meshgrid(np.arange(rx), np.arange(ry), indexing="ij")
    nominal = np.stack([i * s, j * s], -1).reshape(-1, 2).astype(np.float64)
    centred = nominal - nominal.mean(0)
    e0, e1 = e["step_error"]
    m = np.array([[1 + e0, 0.0], [e["shear"], 1 + e1]])
    t = math.radians(e["rotation_deg"])
    rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    linear = rot @ m
    true = centred @ linear.T
    # Drift linear in acquisition time, fast axis swept first.
    if e["fast_axis"] == 0:
        order = (i + rx * j).reshape(-1)
    else:
        order = (j + ry * i).reshape(-1)
    amount, direction = e["drift_A"]
    d = math.radians(direction)
    drift = np.outer(order / (rx * ry - 1), [amount * math.cos(d), amount * math.sin(d)])
    drift -= drift.mean(0)
    rng = np.random.default_rng(SEED + sum(map(ord, e["id"])))
    jitter = rng.normal(0.0, e["jitter_A"], size=true.shape) if e["jitter_A"] > 0 else np.zeros_like(true)
    true = true + drift + jitter + np.array([L / 2, L / 2])
    return nominal, true, dict(linear=linear, drift=drift, jitter=jitter, acquisition_order=order)


# ---------------------------------------------------------------- simulation

def far_field_patterns(waves, N, m):
    """|FFT|² of exit waves (n, G, G) over the cell, summed over m x m samples per detector pixel,
    centred (zero frequency at pixel N/2)."""
    G = waves.shape[-1]
    f = np.fft.fftshift(np.abs(np.fft.fft2(waves)) ** 2, axes=(-2, -1))
    start = G // 2 + m * (-(N // 2)) - (m - 1) // 2
    crop = f[:, start:start + m * N, start:start + m * N]
    return crop.reshape(-1, N, m, N, m).sum(axis=(2, 4))


def coherent_patterns(probe, potential, positions, N, m, label=""):
    import abtem
    G = potential.gpts[0]
    chunk = max(2, int(32 * (576 / G) ** 2))  # about 1 GB of exit waves and their transforms
    out = np.empty((len(positions), N, N), np.float64)
    t0 = time.time()
    for a in range(0, len(positions), chunk):
        w = probe.multislice(potential, scan=abtem.CustomScan(positions[a:a + chunk])).compute(progress_bar=False)
        out[a:a + chunk] = far_field_patterns(np.asarray(w.array), N, m)
        done = min(a + chunk, len(positions))
        rate = (time.time() - t0) / done
        print(f"  {label} {done}/{len(positions)} patterns, {rate:.2f} s each, "
              f"{rate * (len(positions) - done) / 60:.1f} min left", flush=True)
    return out


def source_grid(true, sigma, band_invA):
    """Grid positions and weights for a Gaussian source: spacing h such that the quadrature's
    error exp(−2π²σ²(1/h − band)²) stays below 1e-4 of the signal; points within 4σ."""
    h = 1.0 / (band_invA + math.sqrt(math.log(1e4) / (2 * math.pi ** 2 * sigma ** 2)))
    lo = true.min(0) - 4 * sigma - h
    hi = true.max(0) + 4 * sigma + h
    g0 = np.arange(math.floor(lo[0] / h), math.ceil(hi[0] / h) + 1) * h
    g1 = np.arange(math.floor(lo[1] / h), math.ceil(hi[1] / h) + 1) * h
    grid = np.stack(np.meshgrid(g0, g1, indexing="ij"), -1).reshape(-1, 2)
    used = np.zeros(len(grid), bool)
    weights = []
    for p in true:
        d2 = ((grid - p) ** 2).sum(1)
        near = np.where(d2 <= (4 * sigma) ** 2)[0]
        w = np.exp(-d2[near] / (2 * sigma ** 2))
        weights.append((near, w / w.sum()))
        used[near] = True
    index = -np.ones(len(grid), int)
    index[used] = np.arange(used.sum())
    weights = [(index[near], w) for near, w in weights]
    return grid[used], weights, h


def truth_phase(potential_array, energy_eV, N, m):
    """Sum over slices of the transmission function's angle, band-limited to the detector
    (Fourier crop to the central m N x m N frequencies) and sampled at the window's pixel."""
    tf = potential_array.transmission_function(energy_eV).compute()
    phase = np.angle(np.asarray(tf.array)).sum(0)
    G = phase.shape[-1]
    F = np.fft.fftshift(np.fft.fft2(phase))
    c = G // 2 - (m * N) // 2
    crop = F[c:c + m * N, c:c + m * N]
    return np.real(np.fft.ifft2(np.fft.ifftshift(crop))) * (m * N) ** 2 / G ** 2


def write_emd(path, counts, step_A, dk_invA, optics, positions_A=None):
    import h5py
    tmp = path + ".part"
    with h5py.File(tmp, "w") as f:
        f.attrs.update({"emd_group_type": "file", "version_major": 1, "version_minor": 0,
                        "authoring_program": "tycho bench/matrix/simulate.py (abTEM 1.0.11)"})
        root = f.create_group("datacube_root")
        root.attrs.update({"emd_group_type": "root", "python_class": "Root"})
        cube = root.create_group("datacube")
        cube.attrs.update({"emd_group_type": "array", "python_class": "Array"})
        d = cube.create_dataset("data", data=counts, chunks=(1, 1) + counts.shape[2:])
        d.attrs["units"] = "counts"
        for k, (name, units, step) in enumerate([("Rx", "A", step_A), ("Ry", "A", step_A), ("Qx", "A^-1", dk_invA),
                                                 ("Qy", "A^-1", dk_invA)]):
            ds = cube.create_dataset(f"dim{k}", data=np.array([0.0, step]))
            ds.attrs.update({"name": name, "units": units})
        meta = root.create_group("metadatabundle")
        meta.attrs["emd_group_type"] = "metadatabundle"
        cal = meta.create_group("calibration")
        cal.attrs.update({"emd_group_type": "metadata", "python_class": "Metadata"})
        for key, value, kind in [("R_pixel_size", step_A, "number"), ("R_pixel_units", "A", "string"),
                                 ("Q_pixel_size", dk_invA, "number"), ("Q_pixel_units", "A^-1", "string"),
                                 ("QR_rotation_degrees", 0.0, "number"), ("QR_flip", False, "bool")]:
            ds = cal.create_dataset(key, data=value)
            ds.attrs["type"] = kind
        mic = meta.create_group("microscope")
        mic.attrs.update({"emd_group_type": "metadata", "python_class": "Metadata"})
        for key, value in optics.items():
            ds = mic.create_dataset(key, data=float(value))
            ds.attrs["type"] = "number"
        if positions_A is not None:
            f.create_dataset("positions_A", data=positions_A)
    os.replace(tmp, path)


def simulate(e, out_dir, threads):
    import abtem
    abtem.config.set({"device": "cpu", "fft": "fftw", "fftw.threads": threads, "num_workers": threads})
    N, m = e["detector"], SUBSAMPLE
    lam = wavelength_A(e["energy_eV"])
    t_start = time.time()
    # The cell: m windows wide; for crystals the window follows from the lattice's period.
    if e["specimen"] in CRYSTALS:
        atoms, L, thickness, strain = crystal_box(e["specimen"], m * N * 0.22, e["thickness_A"])
        dk = m / L
        slice_thickness = 2.0
    else:
        dk = e["dk_invA"]
        L = m / dk
        atoms = _remove_seam_clashes(_tile_to_box(abtem.orthogonalize_cell(layer_material(e["specimen"])), L, L), L)
        thickness, strain = atoms.cell[2, 2], 0.0
        slice_thickness = 1.0
    W = L / m
    G = 2 * m * N
    nominal, true, parts = scan_positions(e, L)
    if (true.min(0) < W / 2).any() or (true.max(0) > L - W / 2).any():
        raise RuntimeError(f"{e['id']}: the scan leaves the cell's central part (L = {L:.1f} Å, window {W:.1f} Å)")
    print(f"{e['id']}: {len(atoms)} atoms, cell {L:.2f} Å ({G}² grid), window {W:.2f} Å, dk {dk:.5f} Å⁻¹, "
          f"{len(true)} positions", flush=True)
    potential = abtem.Potential(atoms, gpts=(G, G), slice_thickness=slice_thickness, parametrization="lobato",
                                projection="infinite").build().compute(progress_bar=False)
    probe = abtem.Probe(energy=e["energy_eV"], semiangle_cutoff=e["semiangle_mrad"], defocus=-e["C10_A"])
    probe.grid.match(potential)
    vacuum = np.asarray(probe.build().compute(progress_bar=False).array)
    beam = (np.abs(np.fft.fft2(vacuum)) ** 2).sum()
    t_potential = time.time() - t_start
    sigma = e["source_sigma_A"]
    if sigma > 0:
        grid, weights, h = source_grid(true, sigma, 2 * e["semiangle_mrad"] * 1e-3 / lam)
        coherent = coherent_patterns(probe, potential, grid, N, m, label="source grid") / beam
        patterns = np.stack([(coherent[idx] * w[:, None, None]).sum(0) for idx, w in weights])
        source_note = (f"incoherent sum over a {h:.3f} Å grid of {len(grid)} probe positions (Gaussian weights "
                       f"within 4σ, quadrature error below 1e-4 of the signal)")
    else:
        patterns = coherent_patterns(probe, potential, true, N, m, label="positions") / beam
        source_note = "coherent"
    t_sim = time.time() - t_start - t_potential
    rng = np.random.default_rng(SEED + 7 * sum(map(ord, e["id"])))
    electrons = e["dose"] * e["step_A"] ** 2
    counts = rng.poisson(np.clip(patterns, 0, None) * electrons)
    if counts.max() > 65535:
        raise RuntimeError(f"{e['id']}: a pixel holds {counts.max()} counts, more than uint16")
    counts = counts.astype(np.uint16).reshape(e["scan"][0], e["scan"][1], N, N)
    if e["transpose"]:
        counts = np.ascontiguousarray(counts.swapaxes(2, 3))
    phase = truth_phase(potential, e["energy_eV"], N, m).astype(np.float32)
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, e["id"])
    nominal_optics = {"beam_energy_eV": e["energy_eV"], "convergence_semiangle_mrad": e["semiangle_mrad"],
                      "C10_A": e["C10_nominal_A"]}
    write_emd(stem + ".h5", counts, e["step_A"], dk, nominal_optics)
    write_emd(stem + "_truepos.h5", counts, e["step_A"], dk, nominal_optics, positions_A=true)
    # The affine map that best explains the true positions from the nominal ones (least squares):
    # what a global scan-geometry estimate can recover; the rest is jitter.
    X = np.hstack([nominal - nominal.mean(0), np.ones((len(nominal), 1))])
    coef, *_ = np.linalg.lstsq(X, true, rcond=None)
    affine = coef[:2].T  # true Å per nominal Å (dimensionless)
    truth = dict(phase=phase, pixel_size_A=W / N, positions_true_A=true, positions_nominal_A=nominal,
                 position_drift_A=parts["drift"], position_offsets_random_A=parts["jitter"],
                 scan_linear=parts["linear"], scan_affine_fit=affine, acquisition_order=parts["acquisition_order"],
                 scan_shape=np.array(e["scan"]), scan_step_A=e["step_A"], scan_origin_A=true[0],
                 source_sigma_A=sigma, dose_e_per_A2=e["dose"], energy_eV=e["energy_eV"],
                 semiangle_mrad=e["semiangle_mrad"], C10_A=e["C10_A"], C10_nominal_A=e["C10_nominal_A"],
                 rotation_deg=e["rotation_deg"], transpose=e["transpose"], detector_pixel_invA=dk, cell_A=L,
                 thickness_A=thickness, slice_thickness_A=slice_thickness, entry=json.dumps(e))
    np.savez_compressed(stem + "_truth.npz", **truth)
    record = dict(atoms=len(atoms), cell_A=L, window_A=W, grid=G, dk_invA=dk, strain=strain, thickness_A=thickness,
                  potential_s=t_potential, patterns_s=t_sim, source=source_note, max_count=int(counts.max()),
                  mean_counts=float(counts.reshape(len(true), -1).sum(1).mean()), electrons=electrons)
    write_readme(out_dir, e, record, affine)
    print(f"{e['id']}: done in {(time.time() - t_start) / 60:.1f} min", flush=True)
    return record


def write_readme(out_dir, e, r, affine):
    lam = wavelength_A(e["energy_eV"])
    lines = [
        f"# {e['id']}: validation-matrix entry (abTEM 1.0.11), generated by bench/matrix/simulate.py",
        "",
        f"- Specimen: {e['specimen']}" + (f", {r['thickness_A']:.1f} Å thick along the beam" if e["specimen"] in CRYSTALS
                                          else " monolayer") + f"; {r['atoms']} atoms in a {r['cell_A']:.3f} Å periodic cell"
        + (f" (lattice strained by {100 * r['strain']:.2f} % to fit it)" if r["strain"] > 0 else ""),
        f"- Optics: {e['energy_eV'] / 1e3:g} keV (λ = {lam:.6f} Å), semiangle {e['semiangle_mrad']} mrad, "
        f"true C10 = {e['C10_A']} Å; the file and a user state C10 = {e['C10_nominal_A']} Å",
        f"- Detector: {e['detector']}² pixels of {r['dk_invA']:.6f} Å⁻¹, patterns centred (zero frequency at index "
        f"{e['detector'] // 2}), {'transposed against the object (axis 2 is the object axis 1)' if e['transpose'] else 'axes parallel to the object axes'}",
        f"- Scan: nominal raster {e['scan'][0]} x {e['scan'][1]} at {e['step_A']} Å (the only geometry in the file);"
        f" true positions: turned by {e['rotation_deg']}°, step errors {e['step_error']}, shear {e['shear']}, "
        f"drift {e['drift_A'][0]} Å towards {e['drift_A'][1]}° (fast axis {e['fast_axis']}), jitter {e['jitter_A']} Å rms",
        f"- Least-squares linear map of the true positions on the nominal ones (true Å per nominal Å): "
        f"[[{affine[0, 0]:.5f}, {affine[0, 1]:.5f}], [{affine[1, 0]:.5f}, {affine[1, 1]:.5f}]]",
        f"- Source: σ = {e['source_sigma_A']} Å ({r['source']})",
        f"- Dose {e['dose']:g} e/Å² = {r['electrons']:g} electrons per pattern; mean counts {r['mean_counts']:.0f}, "
        f"largest {r['max_count']}",
        f"- Simulation grid {r['grid']}² over the cell; window {r['window_A']:.3f} Å; potential {r['potential_s']:.0f} s, "
        f"patterns {r['patterns_s'] / 60:.1f} min",
        "",
        "Truth (`*_truth.npz`): `phase` the total projected phase (sum over slices of the transmission function's "
        "angle), band-limited to the detector and sampled at `pixel_size_A` over the periodic cell (axis 0 = x); "
        "`positions_true_A` (row i·Ry + j for scan index (i, j)) in the cell's frame; the nominal raster, drift, "
        "jitter, the true linear map and its least-squares fit; the true optics.",
    ]
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ids", nargs="*")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "data"))
    args = ap.parse_args()
    ids = args.ids or [e["id"] for e in ENTRIES]
    for i in ids:
        e = BY_ID[i]
        d = os.path.join(args.out, i)
        if not args.force and os.path.exists(os.path.join(d, i + "_truth.npz")):
            print(f"{i}: already simulated ({d})")
            continue
        simulate(e, d, args.threads)


if __name__ == "__main__":
    main()
