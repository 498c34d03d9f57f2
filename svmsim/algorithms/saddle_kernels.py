"""Numba kernels of Saddle-SVC / Saddle-DSVC (paper 000, Algorithms 2 and 4; eqs. (10)-(13)).

Layout. The rotated data live in one signed matrix S of shape (d, n), S[:, j] = y_j * x_j, C-contiguous so that
row i* (one coordinate of every point) is contiguous. Points are ordered in *segments*: one segment per class per
client ([client 0 +1 points, client 0 -1 points, client 1 +1 points, ...]); a single machine has two segments.
With signed columns both classes update the same way: the +1 class uses -<w, x_j> and the -1 class +<w, x_j>,
and both equal -<w, S_j> (eq. 11's "-y_i<w, X_i>").

State per point j: u_j = <w, S_j> kept exact up to drift by one-coordinate updates (O(n) per iteration),
Lr_j = raw log-weight, pr_j = raw weight. Per class c, two global scalars give the true weights lazily:
    p_j = min(cap, mult_c * pr_j),   log p_j = min(log cap, Lr_j - off_c)
(cap = nu for the nu-SVM, +inf for the hard margin). Normalisation (dividing by Z) and the nu-projection
(scaling the uncapped entries, Rule 3 / Lemma 11) only change (mult_c, off_c): a projection never loops over
points more than to compute its sums.

All reductions run with fastmath reassociation so that numba vectorises them; `vexp` is a vectorisable exp.
Two rules keep the loops SIMD: loop over a *slice* (`range(lo, hi)` indexing makes numba emit negative-index
wraparound, which blocks vectorisation), and never reduce with max (numba's max reduction stays scalar; a count
of entries above a threshold is used instead).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from ..numerics.fastmath import vexp

_FM = {"reassoc", "contract", "nsz", "arcp"}
_OPTS = dict(cache=True, nogil=True, fastmath=_FM, error_model="numpy", boundscheck=False)

#: exp(Lt - shift) stays finite while Lt - shift <= 700
_EXP_HEADROOM = 700.0


@numba.njit(**_OPTS)
def segment_delta(row, pr, p_prev, lo, hi, mult, cap, theta):
    """Algorithm 4 lines 5-6 on one segment: <S_i*, p[t] + theta (p[t] - p[t-1])>."""
    r = row[lo:hi]
    q = pr[lo:hi]
    qp = p_prev[lo:hi]
    acc = 0.0
    for j in range(r.shape[0]):
        p = min(mult * q[j], cap)
        acc += r[j] * ((1.0 + theta) * p - theta * qp[j])
    return acc


@numba.njit(**_OPTS)
def segment_mirror(row, u, Lr, pr, p_prev, lo, hi, dw, d, kappa, gamma, off, logcap, mult, cap, shift):
    """Algorithm 2 lines 5-6 / Algorithm 4 lines 13-14 on one segment, unnormalised (eqs. 10-11).

    a_j = <w_hat, S_j> = u_j + d*dw*S_i*j with w_hat = w[t] + d (w[t+1] - w[t]); then u_j += dw*S_i*j;
    Lt_j = (kappa*log p_j - a_j)/(gamma + kappa); pr_j = exp(Lt_j - shift). Keeps p[t] in p_prev.
    Returns the segment's sum of pr.
    """
    inv = 1.0 / (gamma + kappa)
    ddw = d * dw
    r = row[lo:hi]
    uu = u[lo:hi]
    LL = Lr[lo:hi]
    q = pr[lo:hi]
    qp = p_prev[lo:hi]
    z = 0.0
    for j in range(r.shape[0]):
        s = r[j]
        a = uu[j] + ddw * s
        uu[j] += dw * s
        L = min(LL[j] - off, logcap)
        qp[j] = min(mult * q[j], cap)
        lt = (kappa * L - a) * inv
        e = vexp(lt - shift)
        LL[j] = lt
        q[j] = e
        z += e
    return z


@numba.njit(**_OPTS)
def segment_mirror_fused(row, row_next, u, Lr, pr, lo, hi, dw, d, kappa, gamma, off, logcap, mult, cap, shift,
                         threshold):
    """`segment_mirror` fused with the next iteration's delta sums (single machine, where i*(t+1) is known).

    Returns (sum of pr, number of pr above `threshold`, sum row_next*pr_new, sum row_next*p_old).
    """
    inv = 1.0 / (gamma + kappa)
    ddw = d * dw
    r = row[lo:hi]
    rn = row_next[lo:hi]
    uu = u[lo:hi]
    LL = Lr[lo:hi]
    q = pr[lo:hi]
    z = 0.0
    over = 0
    acc_e = 0.0
    acc_old = 0.0
    for j in range(r.shape[0]):
        s = r[j]
        a = uu[j] + ddw * s
        uu[j] += dw * s
        L = min(LL[j] - off, logcap)
        p_old = min(mult * q[j], cap)
        lt = (kappa * L - a) * inv
        e = vexp(lt - shift)
        LL[j] = lt
        q[j] = e
        z += e
        over += e > threshold
        sn = rn[j]
        acc_e += sn * e
        acc_old += sn * p_old
    return z, over, acc_e, acc_old


@numba.njit(cache=True, nogil=True)
def segment_max(Lr, lo, hi):
    m = -np.inf
    for v in Lr[lo:hi]:
        if v > m:
            m = v
    return m


@numba.njit(**_OPTS)
def segment_rescale_exp(Lr, pr, lo, hi, shift):
    """Recompute pr = exp(Lr - shift) on a segment (after an exp overflow/underflow); return the sum."""
    LL = Lr[lo:hi]
    q = pr[lo:hi]
    z = 0.0
    for j in range(LL.shape[0]):
        e = vexp(LL[j] - shift)
        q[j] = e
        z += e
    return z


@numba.njit(**_OPTS)
def segment_cap_sums(pr, lo, hi, mult, mult_capped, cap):
    """Rule 3 sums on one segment (Algorithm 4 lines 27-28, eqs. 12-13), in the lazy representation.

    During the passes the true weights are: cap for the entries capped by an earlier pass (those with
    mult_capped*pr > cap), mult*pr for the others. Returns (excess over the cap of the not-yet-capped entries,
    mass of the entries below the cap).
    """
    q = pr[lo:hi]
    excess = 0.0
    below = 0.0
    for j in range(q.shape[0]):
        p = mult * q[j]
        fresh = mult_capped * q[j] <= cap
        excess += (p - cap) if (fresh and p > cap) else 0.0
        below += p if p < cap else 0.0
    return excess, below


@numba.njit(**_OPTS)
def segment_capped_dot(row, pr, lo, hi, mult, cap):
    r = row[lo:hi]
    q = pr[lo:hi]
    acc = 0.0
    for j in range(r.shape[0]):
        acc += r[j] * min(mult * q[j], cap)
    return acc


@numba.njit(**_OPTS)
def _capped_count_below(q, m, cap, mult):
    count = 0
    below = 0.0
    for j in range(q.shape[0]):
        capped = m * q[j] >= cap
        count += capped
        below += 0.0 if capped else mult * q[j]
    return count, below


@numba.njit(cache=True, nogil=True)
def cap_multiplier(pr, lo, hi, mult, cap, start, max_passes):
    """Find c with sum_j min(cap, c*mult*pr_j) = 1 on a class (the KL projection onto the capped simplex).

    Each pass is the Newton step on the piecewise-linear mass, c <- (1 - cap*#capped) / sum_uncapped(mult*pr),
    which from c = 1 is exactly Rule 3's rescaling c <- c (1 + excess/below); it stops when the capped set
    stops changing. `start` warm-starts c (the previous iteration's value). Returns (c, passes).
    """
    q = pr[lo:hi]
    c = start
    prev_count = -1
    for it in range(max_passes):
        count, below = _capped_count_below(q, c * mult, cap, mult)
        if below <= 0.0:
            return c, it + 1
        c_new = (1.0 - cap * count) / below
        if count == prev_count and abs(c_new - c) <= 1e-15 * c:
            return c_new, it + 1
        prev_count = count
        c = c_new
    return c, max_passes


@numba.njit(cache=True, nogil=True)
def sort_multiplier(pr, lo, hi, mult, cap):
    """Rule 2 (Lemma 11): sort the weights, cap the k largest for the smallest k with c_k * q_(k+1) <= cap,
    where c_k = (1 - k*cap) / (sum of the others). O(n log n). Returns c_k (1 when nothing exceeds the cap)."""
    q = np.sort(mult * pr[lo:hi])[::-1]
    m = q.shape[0]
    if q[0] <= cap:
        return 1.0
    rest = q.sum()
    for k in range(1, m):
        rest -= q[k - 1]
        if rest <= 0.0:
            break
        c = (1.0 - k * cap) / rest
        if c * q[k] <= cap:
            return c
    return (1.0 - (m - 1) * cap) / q[m - 1]


@numba.njit(cache=True, nogil=True)
def _class_step(row, row_next, u, Lr, pr, lo, hi, dw, d, kappa, gamma, logcap, cap, theta,
                cls_off, cls_mult, cls_shift, cls_c, c, wnorm_hat, max_passes, mode):
    """One class of one fused single-machine iteration; returns the class's delta for the next i*.

    mode: 0 = exact projection by Newton warm-started at the previous scale, 1 = Rule 3 (start at c = 1),
    2 = Rule 2 (sort)."""
    # shift: previous log-normaliser, but never so low that exp could overflow (|a_j| <= ||w_hat||)
    shift = max(cls_shift[c], wnorm_hat / (gamma + kappa) - _EXP_HEADROOM)
    # with this shift the sum Z is near 1; entries above cap/2 may need the cap once normalised
    threshold = 0.5 * cap
    z, over, acc_e, acc_old = segment_mirror_fused(row, row_next, u, Lr, pr, lo, hi, dw, d, kappa, gamma,
                                                   cls_off[c], logcap, cls_mult[c], cap, shift, threshold)
    if not (z > 1e-280 and z < 1e280):
        shift = segment_max(Lr, lo, hi)
        z = segment_rescale_exp(Lr, pr, lo, hi, shift)
        acc_e = segment_capped_dot(row_next, pr, lo, hi, 1.0, np.inf)
        over = 1
    logz = math.log(z)
    mult = 1.0 / z
    off = shift + logz
    cls_shift[c] = off
    if cap < np.inf and (over > 0 or z < 0.5):             # nu-projection may be needed (Rule 3 / Lemma 11)
        if mode == 2:
            cm = sort_multiplier(pr, lo, hi, mult, cap)
        else:
            cm, _ = cap_multiplier(pr, lo, hi, mult, cap, cls_c[c] if mode == 0 else 1.0, max_passes)
        cls_c[c] = cm
        mult *= cm
        off -= math.log(cm)
        acc_new = segment_capped_dot(row_next, pr, lo, hi, mult, cap)
    else:
        acc_new = mult * acc_e
    cls_mult[c] = mult
    cls_off[c] = off
    return (1.0 + theta) * acc_new - theta * acc_old


@numba.njit(cache=True, nogil=True)
def run_iterations(S, w, u, Lr, pr, seg_lo, seg_hi, coords, n_iter, delta0, sigma, kappa, gamma,
                   theta, cap, cls_off, cls_mult, cls_shift, cls_c, max_passes, mode):
    """Run `n_iter` Saddle-SVC iterations (Algorithm 2) on a single machine.

    coords[t] is i* of iteration t and coords[n_iter] the next one (its delta is prepared at the end).
    delta0 = delta(+) - delta(-) for coords[0]. Returns the pending delta for coords[n_iter].
    """
    d = S.shape[0]
    logcap = math.log(cap) if cap < np.inf else np.inf
    delta = delta0
    wnorm2 = 0.0
    for i in range(d):
        wnorm2 += w[i] * w[i]
    for t in range(n_iter):
        i = coords[t]
        wi = w[i]
        wnew = (wi + sigma * delta) / (sigma + 1.0)       # Algorithm 2 line 4 (prox step, eq. 9)
        dw = wnew - wi
        w[i] = wnew
        wnorm2 += wnew * wnew - wi * wi
        # ||w_hat|| <= ||w[t+1]|| + (d-1)|dw|, an upper bound on |<w_hat, x>| for ||x|| <= 1
        wnorm_hat = math.sqrt(max(wnorm2, 0.0)) + (d - 1) * abs(dw)
        row = S[i]
        row_next = S[coords[t + 1]]
        delta = 0.0
        for c in range(2):
            delta += _class_step(row, row_next, u, Lr, pr, seg_lo[c], seg_hi[c], dw, d, kappa, gamma, logcap,
                                 cap, theta, cls_off, cls_mult, cls_shift, cls_c, c, wnorm_hat, max_passes, mode)
    return delta


@numba.njit(cache=True, nogil=True)
def clients_delta(row, pr, p_prev, seg_lo, seg_hi, seg_class, mult, cap, theta, out):
    """Round 1 of Algorithm 4 for every client of a group: out[s] = signed delta of segment s."""
    for s in range(seg_lo.shape[0]):
        c = seg_class[s]
        out[s] = segment_delta(row, pr, p_prev, seg_lo[s], seg_hi[s], mult[c], cap, theta)


@numba.njit(cache=True, nogil=True)
def clients_mirror(row, u, Lr, pr, p_prev, seg_lo, seg_hi, seg_class, dw, d, kappa, gamma, off, logcap,
                   mult, cap, shift, out_z):
    """Round 2 of Algorithm 4 (lines 13-15) for every client of a group: per-segment sums of the new weights."""
    for s in range(seg_lo.shape[0]):
        c = seg_class[s]
        out_z[s] = segment_mirror(row, u, Lr, pr, p_prev, seg_lo[s], seg_hi[s], dw, d, kappa, gamma, off[c],
                                  logcap, mult[c], cap, shift[c])


@numba.njit(cache=True, nogil=True)
def clients_cap_sums(pr, seg_lo, seg_hi, seg_class, mult, mult_capped, cap, out_excess, out_below):
    """Round 4 of Algorithm 4 (lines 27-28) for every client of a group."""
    for s in range(seg_lo.shape[0]):
        c = seg_class[s]
        out_excess[s], out_below[s] = segment_cap_sums(pr, seg_lo[s], seg_hi[s], mult[c], mult_capped[c], cap)
