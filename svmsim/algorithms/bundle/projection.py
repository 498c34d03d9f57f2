"""Euclidean projections onto Pragam's dual domains Q2 (paper 004, Appendix B; notes-004 section 3.5), in numba.

Every domain is a box with at most one linear equality over signs sigma_i in {-1, +1}:

    box        {0 <= alpha_i <= U}                                  (Pragam, no bias): a clip, O(n)
    bias       {0 <= alpha_i <= U, sum_i y_i alpha_i = 0}            (Pragam-b)
    simplex    {alpha_i >= 0, sum_i alpha_i <= 1}                   (the lower-bound instance's max with a zero plane)
               {alpha_i >= 0, sum_i alpha_i = 1}                    (the instance without it)

For the last two the projection of m is alpha_i = clip(m_i + sigma_i nu, 0, U_i) with nu the root of the monotone
piecewise-linear g(nu) = sum_i sigma_i clip(m_i + sigma_i nu, 0, U_i) = z (Appendix B's eq. (30), the paper's
multiplier lambda renamed nu). `equality_root` finds it by Algorithm 2: median selection over the kinks still
inside the bracket, with the resolved points aggregated into a constant, a slope and an offset, so each probe
costs O(points still unresolved) and the whole search expected O(n); once no kink lies inside the bracket g is
linear there and nu is exact (notes-004 gotcha 9: duplicate kinks and flat segments handled by strict bracket
tests; the median is the lower one of an even count).
"""
from __future__ import annotations

import numpy as np

from ...core.jit import inner
from .params import PROBE_COMBINE, PROBE_WIDTH

__all__ = ["equality_root", "project_bias", "project_box", "project_simplex"]


@inner
def _select(buf, k, hi):
    """The k-th smallest of buf[0:hi] (buf is reordered): Hoare's quickselect with a median-of-three pivot."""
    lo = 0
    hi -= 1
    while lo < hi:
        mid = (lo + hi) >> 1
        a, b, c = buf[lo], buf[mid], buf[hi]
        if a > b:
            a, b = b, a
        if b > c:
            b = c
            if a > b:
                b = a
        pivot = b
        i, j = lo, hi
        while i <= j:
            while buf[i] < pivot:
                i += 1
            while buf[j] > pivot:
                j -= 1
            if i <= j:
                buf[i], buf[j] = buf[j], buf[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return buf[k]
    return buf[k]


@inner
def _piece(m, sigma, upper, nu):
    """sigma clip(m + sigma nu, 0, upper)."""
    v = m + sigma * nu
    if v < 0.0:
        v = 0.0
    elif v > upper:
        v = upper
    return sigma * v


@inner
def _g(m, sigma, upper, nu):
    acc = 0.0
    for i in range(m.shape[0]):
        acc += _piece(m[i], sigma[i], upper[i], nu)
    return acc


@inner
def equality_root(m, sigma, upper, z, live, kinks, guess=np.nan, step=0.0):
    """nu with sum_i sigma_i clip(m_i + sigma_i nu, 0, upper_i) = z (Algorithm 2). `live` (int64, n) and `kinks`
    (float64, 2n) are scratch. The caller guarantees feasibility (z within the range of g). With a finite `guess`
    (the previous root: successive projections of an iteration move it little) the search starts from a bracket
    around it, found by doubling `step` from the guess (a few O(n) probes), so few kinks remain inside it."""
    n = m.shape[0]
    lo = -np.inf
    hi = np.inf
    if guess == guess and step > 0.0:
        if _g(m, sigma, upper, guess) >= z:
            hi = guess
            for _ in range(60):
                if _g(m, sigma, upper, guess - step) < z:
                    lo = guess - step
                    break
                hi = guess - step
                step *= 4.0
        else:
            lo = guess
            for _ in range(60):
                if _g(m, sigma, upper, guess + step) >= z:
                    hi = guess + step
                    break
                lo = guess + step
                step *= 4.0
    const = 0.0          # the resolved points' constant parts
    slope = 0.0          # how many resolved points are on their linear piece over the whole bracket
    offset = 0.0         # their offsets: sigma (m + sigma nu) = nu + sigma m
    n_live = n
    for i in range(n):
        live[i] = i
    while True:
        # resolve the points with no kink left inside (lo, hi) (a warm bracket may hold none of them at all)
        keep = 0
        for t in range(n_live):
            i = live[t]
            if sigma[i] > 0:
                a, b = -m[i], upper[i] - m[i]
            else:
                a, b = m[i] - upper[i], m[i]
            if b <= lo:                       # on its right constant over the bracket
                const += upper[i] if sigma[i] > 0 else 0.0
            elif a >= hi:                     # on its left constant
                const += 0.0 if sigma[i] > 0 else -upper[i]
            elif a <= lo and b >= hi:         # on its linear piece
                slope += 1.0
                offset += sigma[i] * m[i]
            else:
                live[keep] = i
                keep += 1
        n_live = keep
        # the kinks strictly inside (lo, hi); kink values: sigma = +1: -m, U - m; sigma = -1: m - U, m
        nk = 0
        for t in range(n_live):
            i = live[t]
            if sigma[i] > 0:
                a, b = -m[i], upper[i] - m[i]
            else:
                a, b = m[i] - upper[i], m[i]
            if lo < a < hi:
                kinks[nk] = a
                nk += 1
            if lo < b < hi:
                kinks[nk] = b
                nk += 1
        if nk == 0:
            break
        pivot = _select(kinks, (nk - 1) >> 1, nk)
        g = const + slope * pivot + offset
        for t in range(n_live):
            i = live[t]
            g += _piece(m[i], sigma[i], upper[i], pivot)
        if g >= z:
            hi = pivot
        else:
            lo = pivot
    # every point is resolved: g is linear on [lo, hi], const + slope nu + offset
    if slope > 0.0:
        nu = (z - const - offset) / slope
        if nu < lo:
            nu = lo
        if nu > hi:
            nu = hi
        return nu
    if lo > -np.inf:
        return lo
    if hi < np.inf:
        return hi
    return 0.0


@inner
def project_box(target, upper, out):
    """out = clip(target, 0, upper) (Q2 of Pragam without bias)."""
    for i in range(target.shape[0]):
        v = target[i]
        out[i] = 0.0 if v < 0.0 else (upper if v > upper else v)


@inner
def project_bias(target, y, upper, out, uppers, live, kinks, guess=np.nan):
    """The projection onto {0 <= alpha <= upper, y^T alpha = 0} (Pragam-b's Q2); `uppers` (n floats, filled with
    upper), `live` and `kinks` are scratch; `guess`: a previous root. Returns nu."""
    nu = equality_root(target, y, uppers, 0.0, live, kinks, guess, 0.01 * upper)
    for i in range(target.shape[0]):
        out[i] = y[i] * _piece(target[i], y[i], upper, nu)
    return nu


@inner
def project_simplex(target, out, ones, uppers, live, kinks, capped):
    """The projection onto {alpha >= 0, sum alpha <= 1} (`capped`: the zero-plane instance's Q2; max(target, 0)
    when that sums to at most 1) or onto the simplex sum alpha = 1 (`ones` all 1.0, `uppers` all 1.0: scratch the
    caller keeps)."""
    s = 0.0
    for i in range(target.shape[0]):
        s += max(target[i], 0.0)
    if capped and s <= 1.0:
        for i in range(target.shape[0]):
            out[i] = max(target[i], 0.0)
        return 0.0
    nu = equality_root(target, ones, uppers, 1.0, live, kinks)
    for i in range(target.shape[0]):
        out[i] = _piece(target[i], 1.0, 1.0, nu)
    return nu


# ---------------------------------------------------------------------------------------------------------------
# the root of the bias projection when the examples are spread over K workers (notes-004 section 6: "distributed
# 1-D root finding for nu, each probe a scalar all-reduce"; our design, an extrapolation as the section says); what
# a probe all-reduces, PROBE_WIDTH scalars combined by PROBE_COMBINE, is declared in `params`
# ---------------------------------------------------------------------------------------------------------------


@inner
def bias_probe(target, y, upper, nu, lo, hi, row):
    """One worker's part of a probe at nu over its rows lo..hi-1 of g(nu) = sum_i y_i clip(m_i + y_i nu, 0, U):
    row = [g, the slope of g just right of nu, just left of it, the largest kink < nu, the smallest kink > nu]."""
    g = 0.0
    right = 0.0
    left = 0.0
    below = -np.inf
    above = np.inf
    for i in range(lo, hi):
        t, s = target[i], y[i]
        v = t + s * nu
        g += s * (0.0 if v < 0.0 else (upper if v > upper else v))
        rising = 0.0 <= v < upper           # on its linear piece just where v grows (sigma_i y_i v' = 1 there)
        falling = 0.0 < v <= upper          # ... just where v shrinks
        if (rising if s > 0.0 else falling):      # v = m + y nu grows with nu where y = +1, shrinks where y = -1
            right += 1.0
        if (falling if s > 0.0 else rising):
            left += 1.0
        a = -s * t                        # v = 0 here
        b = s * (upper - t)               # v = U here
        if a < nu:
            below = max(below, a)
        elif a > nu:
            above = min(above, a)
        if b < nu:
            below = max(below, b)
        elif b > nu:
            above = min(above, b)
    row[0] = g
    row[1] = right
    row[2] = left
    row[3] = below
    row[4] = above


@inner
def bias_root_step(total, nu, bracket):
    """The next move of the root search from a probe's all-reduced `total` at nu (every worker computes the same):
    returns (True, root) when the root is known, else (False, the next probe). g is monotone and piecewise linear:
    a Newton step on the linear piece that holds nu is exact when it stays on that piece; otherwise it (or, on a
    flat piece, the piece's end) is the next probe, kept strictly inside the bracket [lo, hi] of points where g < 0
    and g >= 0 (bisection when it is not), which every probe narrows."""
    g, right, left, below, above = total[0], total[1], total[2], total[3], total[4]
    if g == 0.0:
        return True, nu
    if g < 0.0:
        bracket[0] = max(bracket[0], nu)
        if right > 0.0:
            cand = nu - g / right
            if cand <= above:
                return True, cand
        else:
            cand = above
    else:
        bracket[1] = min(bracket[1], nu)
        if left > 0.0:
            cand = nu - g / left
            if cand >= below:
                return True, cand
        else:
            cand = below
    lo, hi = bracket[0], bracket[1]
    if not (lo < cand < hi):
        cand = 0.5 * (lo + hi)
        if not (lo < cand < hi):          # lo and hi are adjacent floats: the root lies between them
            return True, hi
    return False, cand
