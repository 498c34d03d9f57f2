"""The nu-projection of Saddle-SVC / Saddle-DSVC (paper 000): the KL projection of a class's weights onto the
capped simplex {p >= 0, sum p = 1, p <= nu} (eqs. 7-8), in the lazy representation of `mirror`.

Projecting only rescales the uncapped weights by a multiplier c: Rule 2 (Lemma 11, sort), Rule 3 (the while-loop
of eqs. 12-13, from c = 1) and the warm-started Newton iteration on the piecewise-linear mass, which gives the
same answer in about one pass. The Saddle-DSVC form (Algorithm 4 lines 27-36) sums the same quantities per
client (`segment_cap_sums_dot`, `threshold_sums_bracket`).
"""
from __future__ import annotations

import numba
import numpy as np

from ...numerics.bits import bits_float, float_bits
from .simd import JIT_OPTS, wide_simd


@numba.njit(**JIT_OPTS)
def _threshold_sums(q, rn, th):
    """The projection sums of `segment_mirror_fused` at threshold th, from the stored weights (slices), and the
    largest weight below the threshold. (The count is a float: exact, and cheaper in SIMD.)"""
    wide_simd()
    n_big = 0.0
    below = 0.0
    rc = 0.0
    rq = 0.0
    under = 0
    for j in range(q.shape[0]):
        e = q[j]
        sn = rn[j]
        small_m = e < th
        small = e if small_m else 0.0
        one = 0.0 if small_m else 1.0
        bits_small = float_bits(e) if small_m else 0
        n_big += one
        below += small
        rc += sn * one
        rq += sn * small
        under = max(under, bits_small)
    return n_big, below, rc, rq, bits_float(under)


@numba.njit(**JIT_OPTS)
def threshold_sums_bracket(q, rn, th):
    """`_threshold_sums` plus the smallest weight at or above the threshold (+inf if none): the two weights
    around th, so that a Newton step in either direction can tell whether the capped set changes."""
    wide_simd()
    n_big = 0.0
    below = 0.0
    rc = 0.0
    rq = 0.0
    under = 0
    over = np.int64(0x7FF0000000000000)      # the bits of +inf
    for j in range(q.shape[0]):
        e = q[j]
        sn = rn[j]
        small_m = e < th
        small = e if small_m else 0.0
        one = 0.0 if small_m else 1.0
        bits = float_bits(e)
        bits_small = bits if small_m else 0
        bits_big = np.int64(0x7FF0000000000000) if small_m else bits
        n_big += one
        below += small
        rc += sn * one
        rq += sn * small
        under = max(under, bits_small)
        over = min(over, bits_big)
    return n_big, below, rc, rq, bits_float(under), bits_float(over)


@numba.njit(**JIT_OPTS)
def _capped_count_below(q, m, cap, mult):
    wide_simd()
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
            if cap * count <= 1.0 + 1e-12:      # everything capped at the answer (m cap = 1)
                return c, it + 1
            c = 1.0                             # a warm start past the answer capped everything: restart from
            prev_count = -1                     # c = 1 <= c* (the mass at 1 is at most 1)
            continue
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
def newton_projection(q, rn, z, cap, c, max_passes):
    """Exact KL projection of one class onto the capped simplex, fused with the next delta's capped dot.

    The weights are p_j = min(cap, c*e_j/z) (e = pr, z = sum e): entries with e >= th = cap*z/c are capped.
    Newton on the concave, piecewise-linear mass sum_j min(cap, c*e_j/z) = 1 is c <- z*(1 - cap*n_big)/below
    with the sums at th; started at or left of the answer c* it increases monotonically to c* (each pass caps
    more entries). A pass also finds the largest weight below its threshold: when the new (lower) threshold
    stays above it the capped set cannot change, so the new c is exact and the pass's sums already give the dot.
    `c` must be <= c* (c = 1 always is).
    Returns (c, sum_j row_next_j*p_j = cap*rc + (c/z)*rq, passes, the mean of row_next over the uncapped
    weights rq/below).
    """
    rc = 0.0
    rq = 0.0
    below = 0.0
    for it in range(max_passes):
        th = cap * z / c
        n_big, below, rc, rq, under = _threshold_sums(q, rn, th)
        if n_big == 0.0:
            c_new = 1.0
        elif below > 0.0:
            c_new = max(z * (1.0 - cap * n_big) / below, c)
        else:                                              # everything capped: only possible at the answer
            return c, cap * rc, it + 1, 0.0
        if under < cap * z / c_new:
            return c_new, cap * rc + (c_new / z) * rq, it + 1, rq / below
        c = c_new
    return c, cap * rc + (c / z) * rq, max_passes, rq / below if below > 0.0 else 0.0


@numba.njit(**JIT_OPTS)
def segment_cap_sums_dot(row_next, pr, lo, hi, mult, mult_capped, cap):
    """Rule 3 sums on one segment (Algorithm 4 lines 27-28, eqs. 12-13) in the lazy representation, fused with
    sum row_next*min(cap, mult*pr) (if this report closes the projection, that sum is the new-weights part of
    the next delta).

    During the passes the true weights are: cap for the entries capped by an earlier pass (those with
    mult_capped*pr > cap), mult*pr for the others. Returns (excess over the cap of the not-yet-capped entries,
    mass of the entries below the cap, the dot).
    """
    wide_simd()
    rn = row_next[lo:hi]
    q = pr[lo:hi]
    excess = 0.0
    below = 0.0
    dot = 0.0
    for j in range(q.shape[0]):
        p = mult * q[j]
        fresh = mult_capped * q[j] <= cap
        over = p > cap
        excess += (p - cap) if (fresh and over) else 0.0
        below += p if p < cap else 0.0
        dot += rn[j] * (cap if over else p)
    return excess, below, dot
