"""TOST on 0/1 scores done by hand (the tests' independent computation of analysis/paired/tost.py): for each side,
every outcome (W, L) of n items enumerated, Tango's restricted fit found by maximising the likelihood
numerically (not tost.py's closed-form root), the outcomes whose score reaches the observed one kept as they
are (no bisection, no window), and their multinomial probability at E = -M maximised over the discordance D
on a dense grid, then refined by scipy's bounded search."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import gammaln, xlog1py, xlogy


def restricted_q(w, ell, n: int, margin: float) -> np.ndarray:
    """The maximum-likelihood P(B wins) q under E = -margin (P(A wins) = q - margin), numerically: bisection
    on the likelihood's derivative w/(q - M) + L/q - 2T/(1 - 2q + M), which falls as q grows (every outcome at
    once; a derivative of one sign puts the fit at that end of [M, (1 + M)/2])."""
    w, ell = np.asarray(w, dtype=float), np.asarray(ell, dtype=float)
    t = n - w - ell
    lo, hi = np.full(w.shape, float(margin)), np.full(w.shape, (1 + margin) / 2)
    for _ in range(200):
        q = (lo + hi) / 2
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = np.nan_to_num(w / (q - margin)) + ell / q - np.nan_to_num(2 * t / (1 - 2 * q + margin))
        lo, hi = np.where(slope > 0, q, lo), np.where(slope > 0, hi, q)
    return (lo + hi) / 2


def _score(w, ell, n: int, margin: float, q) -> np.ndarray:
    return (w - ell + n * margin) / np.sqrt(n * (2 * q - margin * (1 + margin)))


def one_sided_by_hand(w_obs: int, l_obs: int, n: int, margin: float, grid: int = 1001) -> float:
    w, ell = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = w + ell <= n
    w, ell = w[keep], ell[keep]
    q = restricted_q(w, ell, n, margin)
    z = _score(w, ell, n, margin, q)
    z_obs = _score(w_obs, l_obs, n, margin, restricted_q(w_obs, l_obs, n, margin))
    region = z >= z_obs - 1e-9 * max(1.0, abs(z_obs))  # the numerical fit's rounding: ties kept in
    w, ell = w[region], ell[region]
    log_coef = gammaln(n + 1) - gammaln(w + 1) - gammaln(ell + 1) - gammaln(n - w - ell + 1)

    def prob(dd: float) -> float:
        pa, pb = (dd - margin) / 2, (dd + margin) / 2
        log_p = log_coef + xlogy(w, pa) + xlogy(ell, pb) + xlog1py(n - w - ell, -dd)  # 0 log 0 = 0
        return float(np.exp(log_p).sum())

    ds = np.linspace(margin, 1.0, grid)
    values = np.array([prob(x) for x in ds])
    i = int(np.argmax(values))
    lo, hi = ds[max(i - 1, 0)], ds[min(i + 1, grid - 1)]
    found = minimize_scalar(lambda x: -prob(x), bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
    return min(1.0, max(float(values[i]), -float(found.fun)))


def tost_by_hand(differences, margin: float) -> float:
    d = np.asarray(differences, dtype=float)
    w, ell, n = int((d > 0).sum()), int((d < 0).sum()), len(d)
    return max(one_sided_by_hand(w, ell, n, margin), one_sided_by_hand(ell, w, n, margin))
