"""The client side of one Saddle-DSVC round (paper 000, Algorithm 4), for a group of clients at once: all the
small per-round arithmetic in compiled code, around the segment passes of `mirror` and `projection`.

Segments come in pairs per client: [client c's +1 points, client c's -1 points]. The clients share the
coordinate stream, so round 2's pass also prepares the sums that the next round 1 needs.
"""
from __future__ import annotations

import math

import numpy as np

from ...core.jit import inner
from .mirror import clients_mirror_hard, segment_capped_dot, segment_mirror_guess, segment_mirror_next
from .projection import threshold_sums_bracket, segment_cap_sums_dot
from .simd import EXP_HEADROOM


@inner
def client_delta_rows(acc_new, acc_old, theta, rows):
    """Round 1 replies from prepared sums: rows[c] = [delta+_c, delta-_c] (delta- = -signed sum, line 6)."""
    for c in range(rows.shape[0]):
        rows[c, 0] = (1.0 + theta) * acc_new[2 * c] - theta * acc_old[2 * c]
        rows[c, 1] = -((1.0 + theta) * acc_new[2 * c + 1] - theta * acc_old[2 * c + 1])


@inner
def _client_w_step(w, wnorm2, i, d, sigma, kappa, gamma, shift, delta):
    """Line 12 (the prox step on w_i*, eq. 9) and the exp shift guard: |<w_hat, x>| <= ||w_hat|| for ||x|| <= 1,
    so a shift of at least ||w_hat||/(gamma + kappa) - 700 keeps every exp finite. Returns dw."""
    wi = w[i]
    wnew = (wi + sigma * delta) / (sigma + 1.0)
    dw = wnew - wi
    w[i] = wnew
    wnorm2[0] += wnew * wnew - wi * wi
    wnorm_hat = math.sqrt(max(wnorm2[0], 0.0)) + (d - 1) * abs(dw)
    floor = wnorm_hat / (gamma + kappa) - EXP_HEADROOM
    for c in range(2):
        if shift[c] < floor:
            shift[c] = floor
    return dw


@inner
def client_mirror_round_newton(S, i, i_next, i_after, w, wnorm2, u, Lr, pr, seg_lo, seg_hi, seg_class, sigma, kappa,
                               gamma, off, logcap, mult, cap, shift, lognorm, c_prev, trend, dw_prev, delta_plus,
                               delta_minus, rows, acc_old):
    """Round 2 with the Newton projection: the w step and one pass per segment that also sums the projection at
    the predicted threshold, rows[c] = [Z+, Z-, N+, N-, B+, B-, RS+, RS-] (Z, and the capped count, the mass below
    and row i* times the mass below, at the guess).

    The guess is the single machine's (`_class_step`): the cap binds where c*e/Z >= cap; take c and the
    normaliser from the last iteration and move the threshold by minus this step's change of the uncapped
    log-weights, averaged with the trends that the server sent (trend = [means of row i*(t) and of row i*(t-1)
    over the uncapped weights] per class). dw_prev holds the last w step and is updated."""
    d = S.shape[0]
    dw = _client_w_step(w, wnorm2, i, d, sigma, kappa, gamma, shift, delta_plus - delta_minus)
    inv = 1.0 / (gamma + kappa)
    row = S[i]
    row_next = S[i_next]
    row_after = S[i_after]
    for s in range(seg_lo.shape[0]):
        c = seg_class[s]
        lo, hi = seg_lo[s], seg_hi[s]
        th = math.exp(math.log(cap / c_prev[c]) + lognorm[c] - shift[c]
                      - inv * (d * dw * trend[2 * c] - (d - 1) * dw_prev[0] * trend[2 * c + 1]))
        z, n_big, below, rs, a_old = segment_mirror_guess(row[lo:hi], row_next[lo:hi], row_after[lo:hi], u[lo:hi],
                                                          Lr[lo:hi], pr[lo:hi], dw, d * dw, kappa, gamma, off[c],
                                                          logcap, mult[c], cap, shift[c], th)
        rows[s // 2, c] = z
        rows[s // 2, 2 + c] = n_big
        rows[s // 2, 4 + c] = below
        rows[s // 2, 6 + c] = rs
        acc_old[s] = a_old
    dw_prev[0] = dw


@inner
def client_mirror_round(S, i, i_next, i_after, w, wnorm2, u, Lr, pr, seg_lo, seg_hi, seg_class, sigma, kappa,
                        gamma, off, logcap, mult, cap, shift, delta_plus, delta_minus, rows_z, acc_new, acc_old,
                        acc_after, primed):
    """Round 2 for a group of clients: the w step (line 12), the shift guard, and the fused pass per segment.

    wnorm2 is a one-element array holding |w|^2. rows_z[c] = [Z+_c, Z-_c] (line 15). The hard margin
    (cap = inf) keeps no raw weights: its pass also dots the new weights with row i*(t+2) (acc_after), which is
    the old-weights part of the delta after next, as the single machine does; `primed[0]` says acc_after holds
    that from a previous pass (the first pass takes it from the current weights).
    """
    d = S.shape[0]
    dw = _client_w_step(w, wnorm2, i, d, sigma, kappa, gamma, shift, delta_plus - delta_minus)
    row = S[i]
    row_next = S[i_next]
    if cap < np.inf:
        for s in range(seg_lo.shape[0]):
            c = seg_class[s]
            z, a_new, a_old = segment_mirror_next(row, row_next, u, Lr, pr, seg_lo[s], seg_hi[s], dw, d, kappa,
                                                  gamma, off[c], logcap, mult[c], cap, shift[c])
            rows_z[s // 2, s % 2] = z
            acc_new[s] = a_new
            acc_old[s] = a_old
        return
    row_after = S[i_after]
    inv = 1.0 / (gamma + kappa)
    c1 = kappa * inv
    for s in range(seg_lo.shape[0]):
        if primed[0] == 0:                      # <S_i*(t+1), p[t]> from the current weights, once
            acc_after[s] = segment_capped_dot(row_next, pr, seg_lo[s], seg_hi[s], mult[seg_class[s]], np.inf)
        acc_old[s] = acc_after[s]
    # rows_z is (clients, 2), C order: its flat index is the segment's (client, class) index
    clients_mirror_hard(row, row_next, row_after, u, Lr, seg_lo, seg_hi, seg_class, dw, d * dw, c1, inv, off, shift,
                        rows_z.reshape(rows_z.size), acc_new, acc_after)
    primed[0] = 1


@inner
def client_normalise(sums, mult, mult_capped, off, shift, acc_new, acc_after, seg_class, hard):
    """Round 3 (lines 20-21), lazily: eta = eta/S.Z+ and xi = xi/S.Z- become per-class multipliers."""
    for c in range(2):
        mult[c] = 1.0 / sums[c]
        mult_capped[c] = 0.0
        off[c] = shift[c] + math.log(sums[c])
        shift[c] = off[c]
    if hard:                              # the prepared sums with the new raw weights become sums with p[t+1]
        for s in range(acc_new.shape[0]):
            acc_new[s] *= mult[seg_class[s]]
            acc_after[s] *= mult[seg_class[s]]


@inner
def client_cap_round(row_next, pr, seg_lo, seg_hi, seg_class, sums, apply, mult, mult_capped, off, cap, rows,
                     acc_new):
    """Round 4 (lines 27-34): apply the previous sums (when `apply`) and report [s+, s-, O+, O-] per client."""
    if apply:
        for c in range(2):
            if sums[c] > 0.0 and sums[2 + c] > 0.0:
                f = 1.0 + sums[c] / sums[2 + c]
                mult_capped[c] = mult[c]
                mult[c] *= f
                off[c] -= math.log(f)
    for s in range(seg_lo.shape[0]):
        c = seg_class[s]
        e, b, dot = segment_cap_sums_dot(row_next, pr, seg_lo[s], seg_hi[s], mult[c], mult_capped[c], cap)
        rows[s // 2, s % 2] = e
        rows[s // 2, 2 + s % 2] = b
        acc_new[s] = dot


@inner
def clients_threshold_report(row_next, pr, seg_lo, seg_hi, seg_class, z, c, cap, rows, rc, rq):
    """A Newton pass of the distributed projection (cf. `newton_projection`): with p_j = min(cap, c*pr_j/Z)
    the entries with pr_j >= th = cap*Z/c are capped. Per client and class: rows = [count capped (2), raw mass
    below th (2), largest raw weight below th (2), smallest raw weight at or above th (2), sum of row_next*pr
    below th (2)]; per segment rc = sum of row_next over the capped, rq = sum of row_next*pr over the others (the
    next delta's dot, once c is final)."""
    rows[:, 8:10] = 0.0
    for s in range(seg_lo.shape[0]):
        k = seg_class[s]
        lo, hi = seg_lo[s], seg_hi[s]
        n_big, below, rc_s, rq_s, under, over = threshold_sums_bracket(pr[lo:hi], row_next[lo:hi],
                                                                        cap * z[k] / c[k])
        rows[s // 2, k] = n_big
        rows[s // 2, 2 + k] = below
        rows[s // 2, 4 + k] = under
        rows[s // 2, 6 + k] = over
        rows[s // 2, 8 + k] += rq_s
        rc[s] = rc_s
        rq[s] = rq_s
