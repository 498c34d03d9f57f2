"""Single-machine Saddle-SVC iterations (paper 000, Algorithm 2) in one compiled loop.

Per class and iteration, the hard margin makes one pass (`mirror.mirror_hard`) that keeps no raw weights: it
dots the new weights with rows i*(t+1) and i*(t+2), the latter being the old-weights part of the delta after
next. The nu-SVM makes one fused pass (`mirror.segment_mirror_fused`) that also sums the projection at a
predicted cap threshold, then read-only Newton passes (`projection._threshold_sums`, about 1.1 on a9a) until the
capped set is certified; the last pass's sums give the next delta's dot. The loop works on 64-byte aligned
copies of the state.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from ...core.jit import inner
from .mirror import (exp_into, exp_sums, mirror_hard, segment_capped_dot, segment_max, segment_mirror_fused,
                     segment_rescale_exp)
from .projection import newton_projection, cap_multiplier, sort_multiplier
from .simd import EXP_HEADROOM


class SolverState(NamedTuple):
    """The single machine's state, set up by Algorithm 1 line 5: per point (in class order: the +1 points, then
    the -1 points) and per class k. The weights are p_j = min(cap, mult[k]*pr_j) (see `mirror`)."""

    w: np.ndarray        # (d,) the iterate, in rotated coordinates
    u: np.ndarray        # (n,) u_j = <w, S_j>
    Lr: np.ndarray       # (n,) log-weights, relative to the exp shift of the pass that wrote them
    pr: np.ndarray       # (n,) raw weights
    off: np.ndarray      # (2,) log p_j = min(log cap, Lr_j - off[k]); off = log z - log c
    mult: np.ndarray     # (2,) mult = c / z
    shift: np.ndarray    # (2,) the exp shift of the last pass plus log z (the log-normaliser)
    c: np.ndarray        # (2,) the nu-projection's multiplier of the uncapped weights (1: hard margin)


class SolverParams(NamedTuple):
    """The constants of Algorithm 1 line 4 and the nu-projection's settings."""

    sigma: float
    kappa: float
    gamma: float
    theta: float
    cap: float           # the weight cap nu (inf: hard margin)
    max_passes: int      # projection passes per class and iteration at most
    mode: int            # projection: 0 = Newton from a predicted threshold, 1 = Rule 3 (from c = 1), 2 = Rule 2


@inner
def _put(dst, lo, src):
    """dst[lo:lo + len(src)] = src, element by element: a slice assignment compiles numba's shape-mismatch message
    (string formatting, about 5 s of a first fit) for a check these callers do not need."""
    for i in range(src.shape[0]):
        dst[lo + i] = src[i]


@numba.njit(cache=True, nogil=True)
def _aligned_copy(a):
    """A copy of the 1-d array `a` starting on a 64-byte boundary (whole-cache-line vector loads and stores)."""
    buf = np.empty(a.shape[0] + 8)
    start = ((-buf.ctypes.data) % 64) // 8
    out = buf[start:start + a.shape[0]]
    _put(out, 0, a)
    return out


@inner
def _class_step_hard(r, rn, rnn, uc, Lc, dw, d, prm, st, k, wnorm_hat):
    """One class k of one fused single-machine hard-margin iteration (state slices uc, Lc of the class):
    Algorithm 2 line 5-6 by eqs. (10)-(11), and the normalisation.

    The stored log-weights are relative to the shift of the pass that wrote them (Lr = lt - shift), so the
    class's offset is off = log z and st.shift keeps the log-normaliser shift + log z.
    Returns the new weights' dots with the next two rows, <S_i*(t+1), p[t+1]> and <S_i*(t+2), p[t+1]>.
    """
    inv = 1.0 / (prm.gamma + prm.kappa)
    c1 = prm.kappa * inv
    # shift: previous log-normaliser, but never so low that exp could overflow (|a_j| <= ||w_hat||)
    shift = max(st.shift[k], wnorm_hat * inv - EXP_HEADROOM)
    k0 = -c1 * st.off[k] - shift
    z, acc_n, acc_nn = mirror_hard(r, rn, rnn, uc, Lc, dw, d * dw, c1, k0, inv)
    if not (z > 1e-280 and z < 1e280):
        m = segment_max(Lc, 0, Lc.shape[0])
        for j in range(Lc.shape[0]):
            Lc[j] -= m
        shift += m
        z, acc_n, acc_nn = exp_sums(Lc, rn, rnn)
    logz = math.log(z)
    st.shift[k] = shift + logz
    st.off[k] = logz
    st.mult[k] = 1.0 / z
    return acc_n / z, acc_nn / z


@inner
def _class_step(r, rn, fut, uc, Lc, pc, dw, dw_prev, d, prm, logcap, st, trend, k, wnorm_hat):
    """One class k of one fused single-machine nu-SVM iteration (state slices uc, Lc, pc of the class):
    Algorithm 2 lines 5-6 (eqs. 10-11) and the nu-projection (Rule 2 / Lemma 11, Rule 3 / eqs. 12-13, or
    Newton); returns the class's delta for the next i*.

    Log-weights are stored relative to the pass's shift as in `_class_step_hard`; off = log z - log c.
    prm.mode: 0 = exact projection by Newton from a predicted threshold, fused with the dot, 1 = Rule 3 (from
    c = 1), 2 = Rule 2 (sort).

    The predicted threshold: the cap binds at log e = log(cap/c) + (log-normaliser of the uncapped weights) -
    shift. Against the previous iteration the uncapped log-weights move by -inv*(d*dw*S_i*(t) -
    (d-1)*dw_prev*S_i*(t-1)) (the new extrapolated step, minus the excess of the previous one), so to first
    order the threshold moves by minus that step averaged over the uncapped weights: trend[k] holds those two
    averages (of rows i*(t) and i*(t-1) over the uncapped p[t]), from the previous iteration's sums. A closer
    guess saves Newton passes; the result is exact either way."""
    cap = prm.cap
    inv = 1.0 / (prm.gamma + prm.kappa)
    c1 = prm.kappa * inv
    shift = max(st.shift[k], wnorm_hat * inv - EXP_HEADROOM)
    off = st.off[k]
    k0 = -c1 * off - shift
    th = math.exp(math.log(cap / st.c[k]) + st.shift[k] - shift
                  - inv * (d * dw * trend[k, 0] - (d - 1) * dw_prev * trend[k, 1]))
    z, acc_old, n_big, below, rc, rq, rs = segment_mirror_fused(r, rn, uc, Lc, pc, fut, dw, d * dw, c1, k0,
                                                                inv, logcap + off, st.mult[k], cap, th)
    trend[k, 1] = rs / below if below > 0.0 else 0.0
    n = pc.shape[0]
    if not (z > 1e-280 and z < 1e280):
        m = segment_max(Lc, 0, n)
        z = segment_rescale_exp(Lc, pc, 0, n, m)
        shift += m
        n_big = 0
        below = z
        trend[k, 1] = 0.0
    if prm.mode == 0:
        # one Newton step from the guess lands at or left of the answer (concavity); never below c = 1
        cm = z * (1.0 - cap * n_big) / below if below > 0.0 else 1.0
        cm, acc_new, _, trend[k, 0] = newton_projection(pc, rn, z, cap, max(cm, 1.0), prm.max_passes)
    else:
        if prm.mode == 2:
            cm = sort_multiplier(pc, 0, n, 1.0 / z, cap)
        else:
            cm, _ = cap_multiplier(pc, 0, n, 1.0 / z, cap, 1.0, prm.max_passes)
        acc_new = segment_capped_dot(rn, pc, 0, n, cm / z, cap)
    logz = math.log(z)
    st.c[k] = cm
    st.shift[k] = shift + logz
    st.off[k] = logz - math.log(cm)
    st.mult[k] = cm / z
    # Algorithm 2 lines 5-6: the extrapolated weights p[t+1] + theta (p[t+1] - p[t]) dotted with row i*(t+1)
    return (1.0 + prm.theta) * acc_new - prm.theta * acc_old


@inner
def _prox_step(w, i, delta, sigma, wnorm2, d):
    """Algorithm 2 line 4 (the prox step, eq. 9) on coordinate i: returns the step dw, the new ||w||^2 and
    ||w_hat|| <= ||w[t+1]|| + (d-1)|dw|, an upper bound on |<w_hat, x>| for ||x|| <= 1."""
    wi = w[i]
    wnew = (wi + sigma * delta) / (sigma + 1.0)
    dw = wnew - wi
    w[i] = wnew
    wnorm2 += wnew * wnew - wi * wi
    return dw, wnorm2, math.sqrt(max(wnorm2, 0.0)) + (d - 1) * abs(dw)


@inner
def _squared_norm(w):
    total = 0.0
    for i in range(w.shape[0]):
        total += w[i] * w[i]
    return total


def run_iterations(S, st, seg_lo, seg_hi, coords, n_iter, delta0, prm):
    """Run `n_iter` Saddle-SVC iterations (Algorithm 2) on a single machine (two segments: the two classes),
    updating the `SolverState` st in place; prm is the `SolverParams`.

    coords[t] is i* of iteration t and coords[n_iter] the next one (its delta is prepared at the end).
    delta0 = delta(+) - delta(-) for coords[0]. Returns the pending delta for coords[n_iter].
    The classes' u, Lr (and pr for the nu-SVM) are worked on in 64-byte aligned copies, written back at the end.
    The hard margin and the nu-SVM are two compiled loops, so that a fit compiles only its own class step.
    """
    if n_iter <= 0:
        return delta0
    loop = _iterations_nu if prm.cap < np.inf else _iterations_hard
    return loop(S, st, seg_lo, seg_hi, coords, n_iter, delta0, prm)


@numba.njit(cache=True, nogil=True)
def _iterations_hard(S, st, seg_lo, seg_hi, coords, n_iter, delta0, prm):
    """`run_iterations` for the hard margin: it keeps no raw weights in the loop (each pass already forms its
    part of the delta after next) and writes pr = exp(Lr) once at the end."""
    w, u, Lr, pr = st.w, st.u, st.Lr, st.pr
    d = S.shape[0]
    lo0, hi0, lo1, hi1 = seg_lo[0], seg_hi[0], seg_lo[1], seg_hi[1]
    u0 = _aligned_copy(u[lo0:hi0])
    u1 = _aligned_copy(u[lo1:hi1])
    L0 = _aligned_copy(Lr[lo0:hi0])
    L1 = _aligned_copy(Lr[lo1:hi1])
    # <S_i*(1), p[0]> of each class, the old-weights part of the delta of iteration 1
    nxt = S[coords[1]]
    old0 = segment_capped_dot(nxt, pr, lo0, hi0, st.mult[0], np.inf)
    old1 = segment_capped_dot(nxt, pr, lo1, hi1, st.mult[1], np.inf)
    delta = delta0
    wnorm2 = _squared_norm(w)
    for t in range(n_iter):
        i = coords[t]
        dw, wnorm2, wnorm_hat = _prox_step(w, i, delta, prm.sigma, wnorm2, d)
        row = S[i]
        row_next = S[coords[t + 1]]
        # i*(t+2): dotted with the new weights
        row_nn = S[coords[t + 2]] if t + 2 <= n_iter else row_next
        new0, nn0 = _class_step_hard(row[lo0:hi0], row_next[lo0:hi0], row_nn[lo0:hi0], u0, L0, dw, d, prm, st,
                                     0, wnorm_hat)
        new1, nn1 = _class_step_hard(row[lo1:hi1], row_next[lo1:hi1], row_nn[lo1:hi1], u1, L1, dw, d, prm, st,
                                     1, wnorm_hat)
        delta = (1.0 + prm.theta) * (new0 + new1) - prm.theta * (old0 + old1)
        old0 = nn0
        old1 = nn1
    _put(u, lo0, u0)
    _put(u, lo1, u1)
    _put(Lr, lo0, L0)
    _put(Lr, lo1, L1)
    exp_into(L0, pr[lo0:hi0])
    exp_into(L1, pr[lo1:hi1])
    return delta


@numba.njit(cache=True, nogil=True)
def _iterations_nu(S, st, seg_lo, seg_hi, coords, n_iter, delta0, prm):
    """`run_iterations` for the nu-SVM (weights capped at prm.cap)."""
    w, u, Lr, pr = st.w, st.u, st.Lr, st.pr
    d = S.shape[0]
    logcap = math.log(prm.cap)
    lo0, hi0, lo1, hi1 = seg_lo[0], seg_hi[0], seg_lo[1], seg_hi[1]
    u0 = _aligned_copy(u[lo0:hi0])
    u1 = _aligned_copy(u[lo1:hi1])
    L0 = _aligned_copy(Lr[lo0:hi0])
    L1 = _aligned_copy(Lr[lo1:hi1])
    p0 = _aligned_copy(pr[lo0:hi0])
    p1 = _aligned_copy(pr[lo1:hi1])
    delta = delta0
    dw = 0.0
    trend = np.zeros((2, 2))
    wnorm2 = _squared_norm(w)
    for t in range(n_iter):
        i = coords[t]
        dw_prev = dw
        dw, wnorm2, wnorm_hat = _prox_step(w, i, delta, prm.sigma, wnorm2, d)
        row = S[i]
        row_next = S[coords[t + 1]]
        # i*(t+2), prefetched: the next fresh row
        row_nn = S[coords[t + 2]] if t + 2 <= n_iter else row_next
        delta = _class_step(row[lo0:hi0], row_next[lo0:hi0], row_nn[lo0:hi0], u0, L0, p0, dw, dw_prev, d, prm,
                            logcap, st, trend, 0, wnorm_hat)
        delta += _class_step(row[lo1:hi1], row_next[lo1:hi1], row_nn[lo1:hi1], u1, L1, p1, dw, dw_prev, d, prm,
                             logcap, st, trend, 1, wnorm_hat)
    _put(u, lo0, u0)
    _put(u, lo1, u1)
    _put(Lr, lo0, L0)
    _put(Lr, lo1, L1)
    _put(pr, lo0, p0)
    _put(pr, lo1, p1)
    return delta
