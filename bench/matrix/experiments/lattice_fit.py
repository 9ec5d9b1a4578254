"""EXPERIMENT (session 10, issue 27; not used by tycho; bench/RESULTS.md "Session 10"). Usage:
  python lattice_fit.py ENTRY...   (matrix data under /work/matrix/data; USE_LUNE=1: the lunes' g)
Prototype 2: lattice basis (q_a, q_b) in the scan's nominal frequencies by a variable-projection
fit of the whole 4D data (sinusoids at h q_a + k q_b, |h|,|k| <= 2); the detector's a*, b* from a
fit of the mean pattern's Bragg discs; L^T = [q_a q_b] [a* b*]^-1."""
import sys, itertools, numpy as np
from scipy.optimize import minimize, least_squares
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lattice_lunes import load, wavelength, fit_lune_g

def combos(order=2):
    return [(h, k) for h in range(-order, order + 1) for k in range(-order, order + 1)
            if (h, k) > (0, 0) and abs(h) + abs(k) <= order and not (h == 0 and k == 0)]

def run(entry, verbose=False):
    d, step, dk, E, alpha, t = load(entry)
    Rx, Ry, K0, K1 = d.shape
    lam = wavelength(E); R = alpha / lam / dk
    k0 = np.arange(K0) - K0 // 2; k1 = np.arange(K1) - K1 // 2
    KK0, KK1 = np.meshgrid(k0, k1, indexing='ij')
    sel = (KK0**2 + KK1**2) <= (1.05 * R) ** 2
    I = d.reshape(Rx * Ry, -1)[:, sel.ravel()].astype(np.float64)
    I = I - I.mean(0)
    # initial peaks: windowed, padded spectrum summed over pixels
    w = np.outer(np.hanning(Rx + 2)[1:-1], np.hanning(Ry + 2)[1:-1]).ravel()
    pad = 4
    F = np.fft.fft2((I * w[:, None]).reshape(Rx, Ry, -1), s=(pad * Rx, pad * Ry), axes=(0, 1))
    S = (np.abs(F) ** 2).sum(2)
    q0 = np.fft.fftfreq(pad * Rx); q1 = np.fft.fftfreq(pad * Ry)  # cycles per index
    Q0, Q1 = np.meshgrid(q0, q1, indexing='ij')
    from scipy.ndimage import maximum_filter
    ok = np.hypot(Q0 * Rx, Q1 * Ry) > 2.5
    mx = (S == maximum_filter(S, size=2 * pad + 1, mode='wrap')) & ok
    idx = np.argwhere(mx); vals = S[mx]
    cand = [np.array([q0[i], q1[j]]) for i, j in idx[np.argsort(-vals)]][:12]
    qa = cand[0]
    qb = next(c for c in cand[1:] if abs(qa[0] * c[1] - qa[1] * c[0]) > 0.3 * np.linalg.norm(qa) * np.linalg.norm(c))
    ii, jj = np.meshgrid(np.arange(Rx), np.arange(Ry), indexing='ij')
    r = np.stack([ii.ravel(), jj.ravel()], 1).astype(float)
    hk = combos(2)
    norm2 = np.sum(I ** 2)
    def cost(x):
        a = x[:2]; b = x[2:]
        cols = [np.ones(len(r))]
        for h, k in hk:
            q = h * a + k * b
            ph = 2 * np.pi * (r @ q)
            cols += [np.cos(ph), np.sin(ph)]
        X = np.stack(cols, 1)
        Qm, _ = np.linalg.qr(X)
        return -np.sum((Qm.T @ I) ** 2) / norm2
    x0 = np.concatenate([qa, qb])
    res = minimize(cost, x0, method='Nelder-Mead', options=dict(xatol=1e-7, fatol=1e-12, maxiter=2000))
    qa, qb = res.x[:2], res.x[2:]
    # detector side: mean pattern fit
    M = d.reshape(Rx * Ry, K0, K1).mean(0).astype(np.float64)
    def soft_disk(c, rad, width):
        dist = np.hypot(KK0 - c[0], KK1 - c[1])
        return 1 / (1 + np.exp((dist - rad) / width))
    # g guesses: from the lune fit of prototype 1 would be cleaner; here: search the mean pattern's
    # high-passed autocorrelation along the directions... use brute-force on model fit instead.
    def model(p, gs):
        c = p[0:2]; rad = p[2]; wdt = p[3]; a0 = p[4]; bg = p[5]
        m = a0 * soft_disk(c, rad, wdt) + bg
        for n, g in enumerate(gs):
            amp = p[6 + n]
            m = m + amp * (soft_disk(c + g, rad, wdt) + soft_disk(c - g, rad, wdt))
        return m
    # central disc first
    p0 = [0, 0, R, 0.5, M.max(), 0]
    r1 = least_squares(lambda p: (model(np.concatenate([p, []]), []) - M).ravel(), p0)
    pc = r1.x
    resid = M - model(pc, [])
    # g for a*, b*, a*+b* etc.: coarse search of each on the residual by correlating a disc pair
    def g_fit(g_init_list):
        npar = len(g_init_list)
        def f(x):
            p = np.concatenate([x[:6], x[6:6 + npar]])
            gs = [x[6 + npar + 2 * n: 8 + npar + 2 * n] for n in range(npar)]
            return (model(p, gs) - M).ravel()
        x0 = np.concatenate([pc, 0.02 * pc[4] * np.ones(npar), np.concatenate(g_init_list)])
        return least_squares(f, x0, x_scale='jac')
    # g from the lunes of G(k, q) at each lattice frequency (prototype 1's fit), then the mean pattern
    kv = np.stack([KK0[sel], KK1[sel]], 1).astype(float)
    def lune_g(q):
        ph = np.exp(-2j * np.pi * (r @ q))
        return fit_lune_g(np.abs((ph * w) @ I) ** 2, kv, R)[0]
    found = [lune_g(qa), lune_g(qb)]
    print('  lune g', found, [np.linalg.norm(g) for g in found])
    # mean pattern: discs at every h a* + k b* (|h|,|k| <= 2), a*, b* free within 1 px of the lunes'
    ga0, gb0 = found
    hk2 = [(h, k) for h in range(-2, 3) for k in range(-2, 3) if (h, k) != (0, 0)]
    def design(x):
        c = x[0:2]; rad = x[2]; wdt = x[3]; ga = x[4:6]; gb = x[6:8]
        cols = [np.ones(M.size), soft_disk(c, rad, wdt).ravel()]
        for h, k in hk2:
            g = h * ga + k * gb
            if np.linalg.norm(g) > 2.5 * R: continue
            cols.append(soft_disk(c + g, rad, wdt).ravel())
        return np.stack(cols, 1)
    msk = (np.hypot(KK0 - pc[0], KK1 - pc[1]) < 2.2 * R).ravel()
    def f(x):
        X = design(x)[msk]
        coef, *_ = np.linalg.lstsq(X, M.ravel()[msk], rcond=None)
        return X @ coef - M.ravel()[msk]
    x0 = np.concatenate([pc[:4], ga0, gb0])
    lo = x0 - np.array([2, 2, 3, 0.45, 1, 1, 1, 1]); hi = x0 + np.array([2, 2, 3, 2, 1, 1, 1, 1])
    rg = least_squares(f, x0, bounds=(lo, hi), x_scale=np.array([0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05]))
    gs = [rg.x[4:6], rg.x[6:8]]
    print('  mean-pattern g', gs, [np.linalg.norm(g) for g in gs], 'R', rg.x[2], 'vs', R, 'edge', rg.x[3])
    # match: pick for q_a and q_b the g whose L fit is consistent: solve with sign/permutation search
    # Qs for all found g: predicted via candidate L; choose pair (ga, gb) from gs (with signs) minimizing
    # mismatch of |ga|/|gb| and angle vs qa, qb under a similarity... brute force: L^T from (ga,gb),
    # then check other reflections' g predicted in scan frequencies are near spectrum peaks.
    stepv = np.array([step, step])
    Qa = qa / stepv; Qb = qb / stepv  # cycles per nominal Å
    bestc = None
    import os
    if os.environ.get('USE_LUNE'): gs = found
    for (ia, ga), (ib, gb) in [((0, gs[0]), (1, gs[1]))]:
        for sa, sb in itertools.product([1, -1], repeat=2):
            Gm = np.stack([sa * ga * dk, sb * gb * dk], 1)  # columns a*, b* (1/Å)
            if abs(np.linalg.det(Gm)) < 1e-6: continue
            LT = np.stack([Qa, Qb], 1) @ np.linalg.inv(Gm)
            L = LT.T
            s = np.linalg.svd(L, compute_uv=False)
            # plausibility: near-orthogonal similarity (scan maps within ±20 %)
            c = np.log(s.max() / s.min()) + abs(np.log(np.sqrt(s[0] * s[1])))
            if bestc is None or c < bestc[0]: bestc = (c, L, ia, ib)
    L = bestc[1]
    Lt = t['scan_affine_fit']
    iso = np.sqrt(abs(np.linalg.det(L))); iso_t = np.sqrt(abs(np.linalg.det(Lt)))
    cn = np.linalg.norm(L, axis=0); cn_t = np.linalg.norm(Lt, axis=0)
    print(f'{entry:28s} iso {iso:.4f} truth {iso_t:.4f} err {100*(iso/iso_t-1):+.2f} %; cols {cn.round(4)} truth {cn_t.round(4)}; '
          f'|g| px {[round(float(np.linalg.norm(g)),3) for g in gs]}')
    return iso / iso_t - 1

if __name__ == '__main__':
    for e in sys.argv[1:]:
        try: run(e)
        except Exception as ex: print(e, 'failed', ex)
