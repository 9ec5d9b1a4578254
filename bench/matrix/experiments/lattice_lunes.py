"""EXPERIMENT (session 10, issue 27; not used by tycho; bench/RESULTS.md "Session 10"). Usage:
  python lattice_lunes.py ENTRY...   (matrix data under /work/matrix/data)
Prototype: the scan's linear map from a lattice's peaks in the scan's spectrum (nominal units)
matched to their detector vectors g (true units) through the double-overlap lunes of G(k, Q)."""
import sys, numpy as np, h5py
from scipy.optimize import minimize

def load(entry, root='/work/matrix/data'):
    f = h5py.File(f'{root}/{entry}/{entry}.h5', 'r')
    d = f['datacube_root/datacube/data'][...].astype(np.float32)
    cal = f['datacube_root/metadatabundle/calibration']
    mic = f['datacube_root/metadatabundle/microscope']
    step = float(cal['R_pixel_size'][()]); dk = float(cal['Q_pixel_size'][()])
    E = float(mic['beam_energy_eV'][()]); alpha = float(mic['convergence_semiangle_mrad'][()]) * 1e-3
    t = np.load(f'{root}/{entry}/{entry}_truth.npz')
    return d, step, dk, E, alpha, t

def wavelength(E):
    m = 510998.95; hc = 12398.419843
    return hc / np.sqrt(E * (2 * m + E))

def fit_lune_g(W, kv, R):
    """The detector vector g (px) whose double-overlap lunes, disc(0) ∩ (disc(g) ∪ disc(−g)) of
    radius R, correlate best with W (|G(k, Q)|² over the pixels kv): a grid search over the half
    plane, then Nelder–Mead. Returns (g, correlation)."""
    def soft_disk(c, r):
        dist = np.hypot(kv[:, 0] - c[0], kv[:, 1] - c[1])
        return np.clip(r - dist + 0.5, 0, 1)
    A0 = soft_disk((0, 0), R)
    def corr(g):
        m = A0 * np.maximum(soft_disk(g, R), soft_disk(-g, R))
        mm = m - m.mean(); ww = W - W.mean()
        return np.sum(mm * ww) / np.sqrt(np.sum(mm ** 2) * np.sum(ww ** 2) + 1e-30)
    best = (-2, None)
    rng = int(2 * R)
    for a in range(-rng, rng + 1):
        for b in range(0, rng + 1):
            if b == 0 and a <= 0: continue
            n = np.hypot(a, b)
            if n < 1.5 or n > 2 * R - 1: continue
            c = corr(np.array([a, b], float))
            if c > best[0]: best = (c, np.array([a, b], float))
    r2 = minimize(lambda g: -corr(g), best[1], method='Nelder-Mead', options=dict(xatol=1e-4, fatol=1e-10))
    return r2.x, -r2.fun

def run(entry, npeaks=6, verbose=True):
    d, step, dk, E, alpha, t = load(entry)
    Rx, Ry, K0, K1 = d.shape
    lam = wavelength(E); R = alpha / lam / dk  # aperture radius, detector px
    k0 = np.arange(K0) - K0 // 2; k1 = np.arange(K1) - K1 // 2
    KK0, KK1 = np.meshgrid(k0, k1, indexing='ij')
    sel = (KK0**2 + KK1**2) <= (1.05 * R) ** 2
    kv = np.stack([KK0[sel], KK1[sel]], 1).astype(float)
    I = d.reshape(Rx, Ry, -1)[:, :, sel.ravel()]
    I = I - I.mean((0, 1))
    w = np.outer(np.hanning(Rx + 2)[1:-1], np.hanning(Ry + 2)[1:-1]).astype(np.float32)
    Iw = I * w[:, :, None]
    pad = 4
    F = np.fft.fft2(Iw, s=(pad * Rx, pad * Ry), axes=(0, 1))
    S = (np.abs(F) ** 2).sum(2)
    # peaks: local maxima beyond 2.5 original bins from DC
    q0 = np.fft.fftfreq(pad * Rx) * Rx; q1 = np.fft.fftfreq(pad * Ry) * Ry  # in original bins
    Q0, Q1 = np.meshgrid(q0, q1, indexing='ij')
    ok = np.hypot(Q0, Q1) > 2.5
    from scipy.ndimage import maximum_filter
    mx = (S == maximum_filter(S, size=2 * pad + 1, mode='wrap')) & ok
    idx = np.argwhere(mx)
    vals = S[mx]
    order = np.argsort(-vals)
    peaks = []
    for o in order:
        i, j = idx[o]
        q = np.array([q0[i], q1[j]])
        if any(np.hypot(*(q + p)) < 1.0 for p in peaks):  # the -Q twin of a kept one
            continue
        peaks.append(q)
        if len(peaks) >= npeaks // 2: break
    ii, jj = np.meshgrid(np.arange(Rx), np.arange(Ry), indexing='ij')
    def G_at(q):  # q in original bins -> cycles per index = q/R
        ph = np.exp(-2j * np.pi * (q[0] * ii / Rx + q[1] * jj / Ry))
        return np.tensordot(ph, Iw, axes=([0, 1], [0, 1]))
    out = []
    for q in peaks:
        res = minimize(lambda x: -np.sum(np.abs(G_at(x)) ** 2), q, method='Nelder-Mead',
                       options=dict(xatol=1e-4, fatol=1e-12, maxiter=400))
        qf = res.x
        Gk = G_at(qf)
        W = np.abs(Gk) ** 2
        g, c = fit_lune_g(W, kv, R)
        Qn = qf / np.array([Rx * step, Ry * step])  # cycles per nominal Å
        out.append((Qn, g * dk, c, res.fun))
        if verbose: print(f'  peak q={qf} bins, g={g} px, corr {c:.3f}')
    # fit L^T: Qn = L^T g  (signs of g free)
    Qs = np.array([o[0] for o in out]); gs = np.array([o[1] for o in out])
    import itertools
    bestfit = None
    for signs in itertools.product([1, -1], repeat=len(out) - 1):
        sg = np.concatenate([[1], signs])[:, None] * gs
        LT, res, *_ = np.linalg.lstsq(sg, Qs, rcond=None)
        r = np.sum((sg @ LT - Qs) ** 2)
        if bestfit is None or r < bestfit[0]: bestfit = (r, LT)
    L = bestfit[1].T
    Lt = t['scan_affine_fit']
    iso = np.sqrt(abs(np.linalg.det(L))); iso_t = np.sqrt(abs(np.linalg.det(Lt)))
    cn = np.linalg.norm(L, axis=0); cn_t = np.linalg.norm(Lt, axis=0)
    print(f'{entry}: iso {iso:.4f} truth {iso_t:.4f} err {100*(iso/iso_t-1):+.2f} %; columns {cn.round(4)} truth {cn_t.round(4)}; resid {bestfit[0]:.2e}')
    return iso / iso_t - 1

if __name__ == '__main__':
    for e in sys.argv[1:]:
        run(e)
