#!/usr/bin/env python3
"""Reconstructs a 4D-STEM data set with quantEM 0.1.10 as a new quantEM user would: its own reader,
preprocessing, models and defaults, given only what a tycho user gets (the file and the nominal
optics). The validation matrix's quantEM column (bench/matrix/quantem_run.md).

    quantem_run.py DATA.h5 --energy-eV E --semiangle-mrad A --C10-A C --iterations N --out OUT.npz
        [--slices S --slice-thickness-A T] [--probe-modes M] [--correct-positions]
        [--batch 128] [--threads 2] [--padding-px 16] [--seed 0]

Needs the venv with quantem==0.1.10 (numpy, h5py, torch, quantem only). Nothing is tuned per data
set against a truth.

Pipeline (quantEM's documented workflow: quantem-docs "Preparing 4D-STEM data", the tutorials'
`Ptychography.from_models` path):
  1. `quantem.core.io.file_readers.read_emdfile_to_4dstem` (quantEM's py4DSTEM/EMD 1.0 reader:
     /datacube_root/datacube/data, R_/Q_pixel_size and units).
  2. `PtychographyDatasetRaster.from_dataset4dstem(learn_scan_positions=--correct-positions,
     learn_descan=False)`, `.preprocess(com_fit_function="constant", probe_energy=E)`: the centre
     of mass of every pattern, fitted by a constant (the docs' stated default), the patterns
     shifted by it; the scan-to-detector rotation and transpose by quantEM's curl minimisation
     over -89..90 deg in 1 deg steps, with and without transpose (never forced). Reported as
     com_rotation_deg / com_transpose. That fit is blind to a 180 deg turn (quantEM's own
     troubleshooting page says so); a user would notice an inverted phase and rerun, we do not.
  3. `ObjectPixelated.from_uniform(num_slices=S, slice_thicknesses=T)` (obj_type "complex", its
     default: amplitude clamped to [0, 1], global phase fixed), `ProbePixelated.from_params(
     {"energy", "semiangle_cutoff", "C10"}, num_probes=M)` (soft aperture edge, the nominal C10 at
     the entrance surface, extra modes at quantEM's default weights 1-0.02(M-1), 0.02, ...,
     Gram-Schmidt orthogonalised), `DetectorPixelated()`.
  4. `Ptychography.from_models(..., rng=seed)`, `.preprocess(obj_padding_px=(pad, pad))`.
  5. `.reconstruct(num_iters=N, optimizer_params=..., batch_size=B, loss_type="l2_amplitude",
     autograd=True)`: no scheduler (quantEM's default: constant learning rates), no constraints
     beyond the defaults, no validation split.

Values quantEM does not default, taken from tycho's example (examples/mos2.toml), as the
benchmark's brief says:
  - Adam, learning rate 5e-3 for the object AND the probe. (quantEM's defaults are 5e-3 for the
    object and 1e-3 for the probe; 5e-3 on both is what tycho's example and the shared README's
    quantEM 0.1.8 reference run use.)
  - batch 128 positions (quantEM defaults to the whole scan in one batch), amplitude loss
    (quantEM's default "l2_amplitude" anyway), the iteration count given.
  - object padding 16 px (--padding-px). quantEM's API default is (0, 0) but every quantEM
    tutorial sets it (8 to 32 px): its object is periodic (probe windows wrap around its edges),
    and unpadded it would be 96 x 72 px for the shared MoS2 scan, narrower than the 96 px probe
    window. quantEM then grows the padding until each object side is a multiple of 8 px.
  - seed 0 (quantEM's default is an unseeded generator; the seed only fixes the batch order).
--force-com-rotation / --force-com-transpose exist for diagnosis only (what the estimate costs);
the benchmark never passes them.
With --correct-positions: quantEM's position learning (learn_scan_positions=True plus a "dataset"
optimizer) with its default optimizer and learning rate for it (Adam, 1e-3 object pixels per
step) and its default constraint (positions clipped to the object); descan is not learned.

Output (OUT.npz):
  object            complex64 (H, W): quantEM's full (padded) object, the product over slices for
                    multislice, global phase removed (quantEM's `Ptychography.obj`).
  object_slices     complex64 (S, H, W): every slice (only when S > 1).
  object_phase_total  float64 (H, W): the summed slice phases, each slice's phase taken about its
                    own mean phase (as tycho's summed_slice_phases), so a total phase above pi does
                    not wrap (only when S > 1).
  object_pixel_A    float64 scalar: its pixel size, Å (axis 0's; object_pixel_A_per_axis (2,) has
                    both, equal for a square detector with one pixel size).
  positions_px      float64 (P, 2): the final probe centres in object pixels (axis 0, axis 1) of
                    `object`, P = Rx*Ry in C order over the scan (row i*Ry + j is scan index (i, j)).
                    quantEM places the probe window centred on the position (fftfreq offsets),
                    so this is the probe centre, as in tycho's conventions.
  positions_initial_px  the same before any position learning.
  com_rotation_deg, com_transpose   quantEM's estimate, used as is.
  object_scan_frame complex64: quantEM's `obj_cropped` (product over slices): the object turned back
                    by -com_rotation, un-transposed and cropped to the scanned field of view
                    (bilinear interpolation when the rotation is not 0).
  positions_scan_frame_px  positions_px carried into that frame (axis 0 = scan Rx, axis 1 = Ry).
  loss_history      float64 (N,): the mean batch loss per iteration (quantEM's iter_losses).
  seconds           wall time of reconstruct() only; seconds_total: the whole script up to saving;
                    cpu_seconds: CPU time of reconstruct() summed over this process's threads (on a
                    shared machine less dependent on the others' load than the wall time).
  iterations, settings (JSON: every choice above, versions, threads), loadavg_start/_end.

Axes. quantEM compares the FFT of the exit wave with the stored pattern directly, so `object` is in
the frame of the stored detector: object axis 0 <-> the data's axis 2 (Qx), axis 1 <-> axis 3
(Qy). The scan positions enter that frame turned by com_rotation about their centre and, when
com_transpose, with their two components swapped. So with com_rotation = 0 and no transpose,
object axis 0 = scan axis Rx (tycho's convention); in general `object` is in the stored detector's
frame (a truth simulated in the detector's frame compares with `object` directly, once it is
transposed when the data's detector axes were swapped) and `object_scan_frame` in the scan's.
On the shared MoS2 file quantEM estimates 1 deg, no transpose (the truth: 0 deg, no transpose), so
its object axis 0 is Rx up to that 1 deg (bench/matrix/quantem_run.md).
"""
import argparse
import json
import os
import sys
import time

T_START = time.perf_counter()


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Reconstruct an EMD 1.0 (py4DSTEM) 4D-STEM file with quantEM 0.1.10's defaults.")
    p.add_argument("data", help="EMD 1.0 file in py4DSTEM's layout (/datacube_root/datacube/data)")
    p.add_argument("--energy-eV", type=float, required=True, help="beam energy, eV")
    p.add_argument("--semiangle-mrad", type=float, required=True, help="probe semiangle, mrad")
    p.add_argument("--C10-A", type=float, required=True, help="nominal C10, Å (negative = underfocus)")
    p.add_argument("--iterations", type=int, required=True, help="passes over the scan")
    p.add_argument("--out", required=True, help="output .npz (written atomically; never the input)")
    p.add_argument("--slices", type=int, default=1, help="object slices (multislice when > 1)")
    p.add_argument("--slice-thickness-A", type=float, default=None, help="slice spacing, Å (with --slices > 1)")
    p.add_argument("--probe-modes", type=int, default=1, help="probe modes (mixed state when > 1)")
    p.add_argument("--correct-positions", action="store_true", help="learn the scan positions")
    p.add_argument("--batch", type=int, default=128, help="positions per optimizer step")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--padding-px", type=int, default=16, help="object padding, px (tycho's example: 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of quantEM's generator (batch order)")
    p.add_argument("--device", default="cpu", help="torch device for quantEM (default cpu)")
    p.add_argument("--force-com-rotation", type=float, default=None,
                   help="diagnostic only: impose this scan rotation, deg, instead of quantEM's estimate")
    p.add_argument("--force-com-transpose", choices=("true", "false"), default=None,
                   help="diagnostic only: impose the transpose instead of quantEM's estimate")
    a = p.parse_args(argv)

    def bad(msg):
        p.error(msg)

    if not os.path.isfile(a.data):
        bad(f"data file '{a.data}' does not exist")
    for name in ("energy_eV", "semiangle_mrad"):
        v = getattr(a, name)
        if not (v > 0 and v < float("inf")):
            bad(f"--{name.replace('_', '-')} must be a positive finite number, got {v}")
    if not (abs(a.C10_A) < float("inf")):
        bad(f"--C10-A must be finite, got {a.C10_A}")
    if a.iterations < 1 or a.iterations > 1_000_000:
        bad(f"--iterations must lie in [1, 1000000], got {a.iterations}")
    if a.slices < 1 or a.slices > 4096:
        bad(f"--slices must lie in [1, 4096], got {a.slices}")
    if a.slices > 1 and not (a.slice_thickness_A is not None and 0 < a.slice_thickness_A < float("inf")):
        bad("--slices > 1 needs --slice-thickness-A, a positive number of Å")
    if a.probe_modes < 1 or a.probe_modes > 64:
        bad(f"--probe-modes must lie in [1, 64], got {a.probe_modes}")
    if a.batch < 1:
        bad(f"--batch must be at least 1, got {a.batch}")
    if a.threads < 1 or a.threads > 1024:
        bad(f"--threads must lie in [1, 1024], got {a.threads}")
    if a.padding_px < 0 or a.padding_px > 4096:
        bad(f"--padding-px must lie in [0, 4096], got {a.padding_px}")
    if not a.out.endswith(".npz"):
        bad(f"--out must name an .npz file, got '{a.out}'")
    if os.path.abspath(a.out) == os.path.abspath(a.data):
        bad("--out must not be the input file")
    return a


ARGS = parse_args(sys.argv[1:])

# Thread pools read these when they start: set before numpy/torch are imported.
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)
os.environ.setdefault("MPLBACKEND", "Agg")  # quantEM imports matplotlib; never open a window

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(ARGS.threads)

import quantem  # noqa: E402
from quantem.core.io.file_readers import read_emdfile_to_4dstem  # noqa: E402
from quantem.diffractive_imaging import (  # noqa: E402
    DetectorPixelated,
    ObjectPixelated,
    ProbePixelated,
    Ptychography,
    PtychographyDatasetRaster,
)


def fail(msg):
    sys.stderr.write(f"quantem_run.py: {msg}\n")
    sys.exit(2)


def unit_text(u):
    """quantEM 0.1.10's EMD reader stores h5py's bytes units as the text "b'A^-1'"; undo that."""
    if isinstance(u, bytes):
        return u.decode()
    u = str(u)
    if len(u) >= 3 and u[:2] in ("b'", 'b"') and u[-1] == u[1]:
        return u[2:-1]
    return u


def load(path):
    try:
        dset = read_emdfile_to_4dstem(path)
    except (KeyError, OSError) as e:
        fail(f"{path}: not an EMD 1.0 file in py4DSTEM's layout ({e})")
    if dset.array is None or dset.array.ndim != 4:
        fail(f"{path}: /datacube_root/datacube/data must be 4-D (Rx, Ry, Qx, Qy)")
    if min(dset.array.shape) < 2:
        fail(f"{path}: /datacube_root/datacube/data has shape {dset.array.shape}; every axis needs >= 2")
    units = [unit_text(u) for u in dset.units]
    sampling = np.asarray(dset.sampling, dtype=np.float64).copy()
    if units[0] in ("Å", "A", "angstrom"):
        units[0] = units[1] = "A"
    elif units[0] == "nm":  # quantEM's real space is in Å
        sampling[:2] *= 10.0
        units[0] = units[1] = "A"
    else:
        fail(f"{path}: R_pixel_units '{units[0]}' (expected 'A' or 'nm')")
    if units[2] in ("A^-1", "Å^-1", "1/A"):
        units[2] = units[3] = "A^-1"
    elif units[2] != "mrad":
        fail(f"{path}: Q_pixel_units '{units[2]}' (expected 'A^-1' or 'mrad')")
    else:
        units[3] = "mrad"
    if not np.all(np.isfinite(sampling)) or np.any(sampling <= 0):
        fail(f"{path}: R_pixel_size / Q_pixel_size must be positive, got {sampling[[0, 2]].tolist()}")
    dset.units = units
    dset.sampling = sampling
    return dset


def summed_slice_phases(slices):
    """Sum over slices of arg(m_s) + arg(z_s conj(m_s)), m_s the slice's mean (tycho's rule)."""
    total = np.zeros(slices.shape[1:], dtype=np.float64)
    for z in slices.astype(np.complex128):
        m = z.mean()
        ref = np.conj(m) / abs(m) if abs(m) > 0 else 1.0
        total += np.angle(m) + np.angle(z * ref)
    return total


def scan_frame_positions(ptycho, positions):
    """The positions in the frame of quantEM's `obj_cropped`. That crop turns the object back
    (scipy.ndimage.rotate, order 1) and un-transposes it: applied to images of the row and column
    indices, which order-1 interpolation carries exactly, it tells where each cropped pixel came
    from; the affine map fitted to that (interior pixels) takes the positions along."""
    s, h, w = ptycho.obj_shape_full
    rows, cols = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
    src_r = np.asarray(ptycho._crop_rotate_obj_fov(np.repeat(rows[None], s, axis=0)))[0]
    src_c = np.asarray(ptycho._crop_rotate_obj_fov(np.repeat(cols[None], s, axis=0)))[0]
    out_r, out_c = np.meshgrid(np.arange(src_r.shape[0], dtype=np.float64),
                               np.arange(src_r.shape[1], dtype=np.float64), indexing="ij")
    inside = (src_r > 1) & (src_r < h - 2) & (src_c > 1) & (src_c < w - 2)
    if inside.sum() < 3:
        return np.full_like(positions, np.nan), float("nan")
    X = np.stack([src_r[inside], src_c[inside], np.ones(inside.sum())], axis=1)
    Y = np.stack([out_r[inside], out_c[inside]], axis=1)
    coef, *_ = np.linalg.lstsq(X, Y, rcond=None)
    residual = float(np.abs(X @ coef - Y).max())
    return np.hstack([positions, np.ones((len(positions), 1))]) @ coef, residual


def loadavg():
    try:
        return np.array(os.getloadavg())
    except OSError:
        return np.full(3, np.nan)


def main():
    a = ARGS
    load_start = loadavg()
    raw = load(a.data)

    learn_pos = bool(a.correct_positions)
    pdset = PtychographyDatasetRaster.from_dataset4dstem(
        raw, learn_scan_positions=learn_pos, learn_descan=False, verbose=1)
    forced_transpose = None if a.force_com_transpose is None else a.force_com_transpose == "true"
    pdset.preprocess(com_fit_function="constant", probe_energy=a.energy_eV,
                     force_com_rotation=a.force_com_rotation, force_com_transpose=forced_transpose,
                     plot_rotation=False, plot_com=False)
    com_rotation_deg = float(np.rad2deg(pdset.com_rotation_rad))
    com_transpose = bool(pdset.com_transpose)

    obj_model = ObjectPixelated.from_uniform(
        num_slices=a.slices, slice_thicknesses=a.slice_thickness_A if a.slices > 1 else None)
    probe_model = ProbePixelated.from_params(
        probe_params={"energy": a.energy_eV, "semiangle_cutoff": a.semiangle_mrad, "C10": a.C10_A},
        num_probes=a.probe_modes)
    ptycho = Ptychography.from_models(
        dset=pdset, obj_model=obj_model, probe_model=probe_model, detector_model=DetectorPixelated(),
        device=a.device, verbose=True, rng=a.seed)
    ptycho.preprocess(obj_padding_px=(a.padding_px, a.padding_px), plot_rotation=False, plot_com=False)

    positions_initial = ptycho.dset.initial_scan_positions_px.detach().cpu().numpy().astype(np.float64)

    optimizer_params = {"object": {"name": "adam", "lr": 5e-3}, "probe": {"name": "adam", "lr": 5e-3}}
    if learn_pos:
        optimizer_params["dataset"] = {"name": "adam"}  # lr: quantEM's default for the dataset

    t0, c0 = time.perf_counter(), time.process_time()
    ptycho.reconstruct(num_iters=a.iterations, reset=True, optimizer_params=optimizer_params,
                       batch_size=a.batch, loss_type="l2_amplitude", autograd=True)
    if str(a.device).startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    cpu_seconds = time.process_time() - c0  # all threads of this process: less load-dependent

    slices = np.asarray(ptycho.obj)  # (S, H, W) complex, global phase removed
    obj = np.prod(slices, axis=0) if slices.shape[0] > 1 else slices[0]
    cropped = np.asarray(ptycho.obj_cropped)
    cropped = np.prod(cropped, axis=0) if cropped.ndim == 3 else cropped
    positions = ptycho.dset.scan_positions_px.detach().cpu().numpy().astype(np.float64)
    positions_scan_frame, map_residual = scan_frame_positions(ptycho, positions)
    lr_dataset = None
    if learn_pos and "dataset" in ptycho.optimizers:
        lr_dataset = float(ptycho.optimizers["dataset"].param_groups[0]["lr"])

    pixel = np.asarray(ptycho.sampling, dtype=np.float64)  # 1 / (detector size x its pixel), per axis
    if abs(pixel[0] - pixel[1]) > 1e-9 * pixel[0]:
        sys.stderr.write(f"quantem_run.py: warning: the object's pixels are not square ({pixel[0]:.6g} x "
                         f"{pixel[1]:.6g} Å); object_pixel_A holds axis 0's, object_pixel_A_per_axis both\n")
    settings = dict(
        quantem=quantem.__version__, torch=torch.__version__, numpy=np.__version__, threads=a.threads,
        device=str(a.device), data=os.path.abspath(a.data), data_shape=list(raw.array.shape),
        sampling=[float(s) for s in raw.sampling], units=list(raw.units),
        energy_eV=a.energy_eV, semiangle_mrad=a.semiangle_mrad, C10_A=a.C10_A,
        slices=a.slices, slice_thickness_A=a.slice_thickness_A, probe_modes=a.probe_modes,
        correct_positions=learn_pos, lr_positions=lr_dataset, batch=a.batch, seed=a.seed,
        padding_px_requested=a.padding_px, padding_px_used=[int(v) for v in ptycho.obj_padding_px],
        optimizer="adam", lr_object=5e-3, lr_probe=5e-3, scheduler="none", loss="l2_amplitude",
        com_fit_function="constant", obj_type="complex",
        force_com_rotation=a.force_com_rotation, force_com_transpose=forced_transpose,
        scan_frame_map_residual_px=map_residual,
        object_shape=list(obj.shape), object_scan_frame_shape=list(cropped.shape))

    out = dict(
        object=obj.astype(np.complex64),
        object_pixel_A=np.float64(pixel[0]), object_pixel_A_per_axis=pixel,
        positions_px=positions, positions_initial_px=positions_initial,
        com_rotation_deg=np.float64(com_rotation_deg), com_transpose=np.bool_(com_transpose),
        object_scan_frame=cropped.astype(np.complex64), positions_scan_frame_px=positions_scan_frame,
        loss_history=np.asarray(ptycho.iter_losses, dtype=np.float64),
        seconds=np.float64(seconds), cpu_seconds=np.float64(cpu_seconds), iterations=np.int64(a.iterations),
        loadavg_start=load_start, loadavg_end=loadavg(), settings=np.array(json.dumps(settings)))
    if slices.shape[0] > 1:
        out["object_slices"] = slices.astype(np.complex64)
        out["object_phase_total"] = summed_slice_phases(slices)

    out_dir = os.path.dirname(os.path.abspath(a.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, f".{os.path.basename(a.out)}.{os.getpid()}.tmp.npz")
    out["seconds_total"] = np.float64(time.perf_counter() - T_START)
    try:
        np.savez(tmp, **out)
        os.replace(tmp, a.out)  # atomic: a reader never sees half a file
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    print(json.dumps(dict(out=a.out, com_rotation_deg=com_rotation_deg, com_transpose=com_transpose,
                          object_shape=list(obj.shape), padding_px=settings["padding_px_used"],
                          seconds=round(seconds, 2), seconds_per_iteration=round(seconds / a.iterations, 3),
                          cpu_seconds=round(cpu_seconds, 2),
                          seconds_total=round(float(out["seconds_total"]), 2),
                          final_loss=float(out["loss_history"][-1]),
                          loadavg_start=[round(float(v), 2) for v in load_start],
                          loadavg_end=[round(float(v), 2) for v in out["loadavg_end"]])))


if __name__ == "__main__":
    main()
