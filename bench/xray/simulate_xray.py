#!/usr/bin/env python3
"""An X-ray ptychography scan simulated independently of tycho, written as a CXI file.

Hard X-rays (8.2 keV) focused by a Fresnel zone plate with a central stop; the specimen sits
downstream of the focus. A gold Siemens star with scattered particles is scanned on a raster
with random offsets; the far field is integrated over each detector pixel (computed on a grid
3 x finer in angle and summed) and recorded with Poisson noise. Everything is computed here in
the laboratory frame with numpy only: nothing of tycho's forward model or conventions is used.

Writes, into --out:
  xray_<preset>.cxi         the scan as CXI tools write it: gzip-compressed, chunked frames,
                            detector distance, pixel size and basis_vectors, translations in
                            metres, energy (J) and wavelength (m), an illumination dataset
  xray_<preset>_truth.npz   the specimen's transmission on the reconstruction's grid (tycho
                            evaluate reads `phase`, `pixel_size_A`, `scan_origin_A`)
  xray_<preset>.toml        a tycho config for the scan (the zone-plate model as the start)

Presets: "full" (128 x 128 frames, 16 x 16 positions, ~4 MB gzipped) and "small" (64 x 64,
10 x 10, under 1 MB: what the CI test reconstructs). README.md beside this script describes
the geometry and the truth.

  python3 bench/xray/simulate_xray.py --preset small --out /tmp/xray
"""
import argparse
import json
import os

import h5py
import numpy as np

HC_EV_M = 1.239841984e-6   # h c, eV m (CODATA 2018)
J_PER_EV = 1.602176634e-19

PRESETS = {
    # energy, zone plate (diameter, outermost zone), central stop, defocus (focus -> specimen),
    # detector (frames N, pixel, distance), scan (shape, step, jitter), photons per exposure
    "full": dict(energy_eV=8200.0, zp_diameter_m=150e-6, zp_drn_m=50e-9, central_stop=0.4,
                 defocus_m=250e-6, n=128, pixel_m=75e-6, distance_m=1.2,
                 scan=(16, 16), step_m=0.25e-6, jitter_m=0.05e-6, photons=1e6, seed=29),
    # 400 positions over a 5 um field of a star three times as thick (1.35 um of gold, phase
    # -2.7 rad): a scan where 100 iterations of the default learning rates are far too few
    # (issue 35's far-field scan, 400 positions, 128² frames)
    "thick": dict(energy_eV=8200.0, zp_diameter_m=150e-6, zp_drn_m=50e-9, central_stop=0.4,
                  defocus_m=250e-6, n=128, pixel_m=75e-6, distance_m=1.2,
                  scan=(20, 20), step_m=0.25e-6, jitter_m=0.05e-6, photons=1e6, seed=35, gold=3.0),
    # The same 400 positions over the star as "full" has it: the rule stops before 100 iterations
    "wide": dict(energy_eV=8200.0, zp_diameter_m=150e-6, zp_drn_m=50e-9, central_stop=0.4,
                 defocus_m=250e-6, n=128, pixel_m=75e-6, distance_m=1.2,
                 scan=(20, 20), step_m=0.25e-6, jitter_m=0.05e-6, photons=1e6, seed=35),
    "small": dict(energy_eV=8200.0, zp_diameter_m=150e-6, zp_drn_m=50e-9, central_stop=0.4,
                  defocus_m=250e-6, n=64, pixel_m=75e-6, distance_m=1.2,
                  scan=(10, 10), step_m=0.25e-6, jitter_m=0.05e-6, photons=1e6, seed=29),
}
S_ANGLE = 3   # far-field samples per detector pixel and axis (odd: a sample at each pixel centre)
S_SPACE = 2   # real-space samples per reconstruction pixel (angles beyond the detector too)
ILLUMINATION_DEFOCUS_ERROR = 1.10  # the file's illumination: the zone plate 10 % out of focus


def erf(x):
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf."""
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return s * y


def specimen(x, y, rng_seed, edge_m=8e-9, gold=1.0):
    """Complex transmission at sample coordinates (x, y) in metres: a 36-spoke gold Siemens star
    of radius 1.5 um (phase -0.9 rad, amplitude 0.92 in the spokes, about 450 nm of gold at
    8.2 keV; `gold` times as thick: phase and log-amplitude scaled) and 40 particles of radius
    30-120 nm. Edges are smoothed over edge_m (an erf)."""
    rng = np.random.default_rng(rng_seed)
    r = np.hypot(x, y)
    theta = np.arctan2(y, x)
    spokes = 36
    star = 0.5 * (1 + erf(r * np.sin(spokes / 2 * theta) / (spokes / 2) / edge_m))
    star *= 0.5 * (1 + erf((1.5e-6 - r) / edge_m))
    phase = -0.9 * gold * star
    log_amp = np.log(0.92) * gold * star
    for _ in range(40):
        cx, cy = rng.uniform(-2.0e-6, 2.0e-6, 2)
        rad = rng.uniform(30e-9, 120e-9)
        d = 0.5 * (1 + erf((rad - np.hypot(x - cx, y - cy)) / edge_m))
        phase += rng.uniform(-0.6, -0.2) * d
        log_amp += np.log(rng.uniform(0.95, 0.99)) * d
    return np.exp(log_amp + 1j * phase)


def angular_spectrum_probe(n, dx, wavelength, semiangle, stop, defocus):
    """The zone plate's field at `defocus` from its focus, on an n x n grid of pixel dx (lab axes
    (y, x), the beam axis at index n/2): the annular pupil (outer semiangle, central stop) in
    angle, propagated with the exact angular-spectrum phase (no paraxial approximation)."""
    k = np.fft.fftfreq(n, dx)
    ky, kx = np.meshgrid(k, k, indexing="ij")
    k2 = kx ** 2 + ky ** 2
    kr = np.sqrt(k2)
    k_out = semiangle / wavelength
    pupil = ((kr <= k_out) & (kr >= stop * k_out)).astype(float)
    inv = 1.0 / wavelength
    # exp(2 pi i z (sqrt(1/l^2 - k^2) - 1/l)), the constant phase taken out, written stably.
    kz = -k2 / (inv + np.sqrt(np.maximum(inv ** 2 - k2, 0.0)))
    field = np.fft.ifft2(pupil * np.exp(2j * np.pi * defocus * kz), norm="ortho")
    return np.fft.fftshift(field)


def simulate(p, out_dir, preset):
    wavelength = HC_EV_M / p["energy_eV"]                       # m
    f = p["zp_diameter_m"] * p["zp_drn_m"] / wavelength         # zone plate focal length
    semiangle = p["zp_diameter_m"] / (2 * f)                    # rad
    n, pix, z = p["n"], p["pixel_m"], p["distance_m"]
    dk = pix / (wavelength * z)                                 # detector pixel, 1/m
    dx = 1.0 / (n * dk)                                         # reconstruction pixel, m
    dxf = dx / S_SPACE
    m = S_ANGLE * S_SPACE * n                                   # fine grid: wider in angle, finer in angle
    rng = np.random.default_rng(p["seed"])

    # The beam on the fine grid; Σ|P|² = photons per exposure.
    probe = angular_spectrum_probe(m, dxf, wavelength, semiangle, p["central_stop"], p["defocus_m"])
    probe *= np.sqrt(p["photons"] / np.sum(np.abs(probe) ** 2))

    # Scan: where the beam hits the sample (sample coordinates, m), slow axis y, fast axis x; the
    # CXI translation moves the sample: t = -(that point). Positions fall on the fine grid.
    ny, nx = p["scan"]
    iy, ix = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    hit = np.stack([(ix - (nx - 1) / 2) * p["step_m"], (iy - (ny - 1) / 2) * p["step_m"]], -1).reshape(-1, 2)
    hit += rng.uniform(-p["jitter_m"], p["jitter_m"], hit.shape)
    hit = np.round(hit / dxf) * dxf                             # (x, y)

    # The specimen once, on a fine sample grid that covers every exposure's field.
    half = m // 2
    lo = hit.min(0) / dxf - half - 2
    hi = hit.max(0) / dxf + half + 2
    gx = np.arange(int(np.floor(lo[0])), int(np.ceil(hi[0])) + 1)
    gy = np.arange(int(np.floor(lo[1])), int(np.ceil(hi[1])) + 1)
    sy, sx = np.meshgrid(gy * dxf, gx * dxf, indexing="ij")
    sample = specimen(sx, sy, p["seed"] + 1, gold=p.get("gold", 1.0))

    frames = np.empty((len(hit), n, n), np.uint32)
    start = half + S_ANGLE * (-n // 2 + 1) - (S_ANGLE - 1) // 2
    for j, (hx, hy) in enumerate(hit):
        # The lab grid (y, x) around the beam: sample coordinate = lab coordinate + hit point.
        oy = int(round(hy / dxf)) - gy[0] - half
        ox = int(round(hx / dxf)) - gx[0] - half
        exit_wave = probe * sample[oy:oy + m, ox:ox + m]
        far = np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(exit_wave), norm="ortho"))
        inten = np.abs(far[start:start + S_ANGLE * n, start:start + S_ANGLE * n]) ** 2
        # Each detector pixel integrates its S_ANGLE x S_ANGLE samples; lab bin u is at
        # k = (u - n/2 + 1) dk, so the detector's flipped axes (basis_vectors below) are u = n-1-i.
        binned = inten.reshape(n, S_ANGLE, n, S_ANGLE).sum((1, 3))[::-1, ::-1]
        frames[j] = rng.poisson(binned)

    # The detector: frame axis 0 steps along lab -y, axis 1 along -x (basis_vectors, m), the
    # unscattered beam at pixel (n/2, n/2). Reconstruction axes follow the detector's, so the
    # truth is laid out along (-y, -x) too; the beam's position along them is -(hit . e).
    basis = np.array([[0.0, -pix, 0.0], [-pix, 0.0, 0.0]])
    translations = np.zeros((len(hit), 3))
    translations[:, :2] = -hit

    # The truth on the reconstruction's grid: the fine specimen band-limited to the detector's
    # angles and sampled every S_SPACE fine pixels, along (-y, -x).
    spec = np.fft.fft2(sample)
    fy = np.fft.fftfreq(sample.shape[0], dxf)[:, None]
    fx = np.fft.fftfreq(sample.shape[1], dxf)[None, :]
    spec *= (np.abs(fy) <= 0.5 / dx) & (np.abs(fx) <= 0.5 / dx)
    limited = np.fft.ifft2(spec)[::-1, ::-1][::S_SPACE, ::S_SPACE]
    # limited[a, b] lies at sample (y, x) = (gy[-1] - S_SPACE a, gx[-1] - S_SPACE b) * dxf: its
    # axis-0 coordinate along -y is -gy[-1] dxf + a dx.
    origin_axes = np.array([-gy[-1] * dxf, -gx[-1] * dxf])      # (along -y, along -x) of index 0
    pos_axes = np.stack([-hit[:, 1], -hit[:, 0]], -1)            # beam positions along (-y, -x)
    scan_origin = (pos_axes[0] - origin_axes) * 1e10            # Å, the first position in the truth

    # The illumination a CXI file carries as the starting probe: the zone plate's model at the
    # window's sampling, defocus 10 % off (as from an earlier, rough measurement), along (-y, -x).
    illum = angular_spectrum_probe(n, dx, wavelength, semiangle, p["central_stop"],
                                   p["defocus_m"] * ILLUMINATION_DEFOCUS_ERROR)
    illum = np.roll(illum[::-1, ::-1], (1, 1), (0, 1)).astype(np.complex64)  # centre stays at n/2

    os.makedirs(out_dir, exist_ok=True)
    name = f"xray_{preset}"
    cxi = os.path.join(out_dir, name + ".cxi")
    with h5py.File(cxi + ".tmp", "w") as h:
        h["cxi_version"] = 160
        h["number_of_entries"] = 1
        e = h.create_group("entry_1")
        e["program_name"] = np.bytes_("tycho bench/xray/simulate_xray.py")
        src = e.create_group("instrument_1/source_1")
        src["energy"] = p["energy_eV"] * J_PER_EV
        src["wavelength"] = wavelength
        src["illumination"] = illum
        det = e.create_group("instrument_1/detector_1")
        det.create_dataset("data", data=frames, compression="gzip", compression_opts=4, chunks=(1, n, n))
        det["distance"] = z
        det["x_pixel_size"] = pix
        det["y_pixel_size"] = pix
        det["basis_vectors"] = basis
        geo = e.create_group("sample_1/geometry_1")
        geo["translation"] = translations
        data = e.create_group("data_1")
        data["data"] = h5py.SoftLink("/entry_1/instrument_1/detector_1/data")
        data["translation"] = h5py.SoftLink("/entry_1/sample_1/geometry_1/translation")
    os.replace(cxi + ".tmp", cxi)

    truth = os.path.join(out_dir, name + "_truth.npz")
    np.savez(truth, phase=np.angle(limited).astype(np.float32),
             amplitude=np.abs(limited).astype(np.float32),
             pixel_size_A=np.float64(dx * 1e10), scan_origin_A=scan_origin,
             positions_axes_A=(pos_axes * 1e10), probe_window=np.roll(
                 angular_spectrum_probe(n, dx, wavelength, semiangle, p["central_stop"], p["defocus_m"])[::-1, ::-1],
                 (1, 1), (0, 1)).astype(np.complex64))

    config = f"""# X-ray ptychography of a simulated zone-plate scan (bench/xray/README.md)
[data]
source = "cxi"
path = "{name}.cxi"

[optics]
radiation = "xray"          # the file says so too (its wavelength is hc / E)
zone_plate_diameter_m = {p['zp_diameter_m']:.6g}
focal_length_m = {f:.6g}
central_stop = {p['central_stop']:.6g}
C10_A = {p['defocus_m'] * 1e10:.6g}        # the specimen {p['defocus_m'] * 1e6:.6g} um after the focus

[reconstruct]
iterations = 100
batch_size = 32
loss = "poisson"

[reconstruct.object]
learning_rate = 0.02

[reconstruct.probe]
learning_rate = 0.005       # 0.02 let a probe started 10 % out of focus drift off (README.md)
"""
    with open(os.path.join(out_dir, name + ".toml"), "w") as c:
        c.write(config)
    summary = dict(cxi=cxi, truth=truth, wavelength_A=wavelength * 1e10, focal_length_m=f,
                   semiangle_mrad=semiangle * 1e3, pixel_A=dx * 1e10, frames=list(frames.shape),
                   mean_counts=float(frames.sum((1, 2)).mean()), bright_field_radius_px=semiangle * z / pix)
    print(json.dumps(summary))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="full")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    simulate(PRESETS[a.preset], a.out, a.preset)


if __name__ == "__main__":
    main()
