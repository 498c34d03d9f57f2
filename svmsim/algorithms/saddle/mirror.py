"""The multiplicative-weights passes of Saddle-SVC / Saddle-DSVC over a segment of points (paper 000,
Algorithm 2 lines 5-6 and Algorithm 4 lines 5-6 and 13-14; closed form eqs. (10)-(11)).
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
points more than to compute its sums. The distributed clients store the unshifted log-weights; the single-machine
loop (`single.run_iterations`) stores them relative to the exp shift of the pass that wrote them (so off_c =
log z - log c), which keeps them near the normalised values.
"""
from __future__ import annotations

import numba
import numpy as np

from ...numerics.fastmath import vexp
from .simd import JIT_OPTS, exp_le709, prefetch_l2, wide_simd

#: elements per chunk of the nu-SVM's fused pass; each chunk first prefetches the same span of the row needed
#: next iteration (a row of S is a fresh stream from L3/DRAM every iteration; fetched ahead it overlaps the
#: arithmetic instead of stalling it)
_CHUNK = 128

#: chunk of the hard-margin pass (no prefetch; chunking alone measured a little faster than one long loop)
_CHUNK_HARD = 2048


@numba.njit(**JIT_OPTS)
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


@numba.njit(cache=True, nogil=True)
def clients_delta(row, pr, p_prev, seg_lo, seg_hi, seg_class, mult, cap, theta, out):
    """Round 1 of Algorithm 4 for every client of a group: out[s] = signed delta of segment s."""
    for s in range(seg_lo.shape[0]):
        c = seg_class[s]
        out[s] = segment_delta(row, pr, p_prev, seg_lo[s], seg_hi[s], mult[c], cap, theta)


@numba.njit(**JIT_OPTS)
def mirror_hard(r, rn, rnn, uu, LL, dw, ddw, c1, k0, inv):
    """Hard-margin form of `segment_mirror_fused` on one class (slices; no cap, no stored weights).

    x_j = c1*Lr_j + k0 - inv*a_j is the new log-weight relative to the shift; stores u += dw*S_i*, Lr = x.
    Returns (sum e, sum row_next*e, sum row_after_next*e) with e = exp(x): the new weights' normaliser and
    their parts of the next two deltas (so the old weights need not be stored or read). Chunked like
    `segment_mirror_fused` but without its prefetch, which measured slower for this lighter pass.
    """
    wide_simd()
    z = 0.0
    acc_n = 0.0
    acc_nn = 0.0
    n = r.shape[0]
    for base in range(0, n, _CHUNK_HARD):
        end = min(base + _CHUNK_HARD, n)
        r_ = r[base:end]
        rn_ = rn[base:end]
        rnn_ = rnn[base:end]
        uu_ = uu[base:end]
        LL_ = LL[base:end]
        for j in range(end - base):
            s = r_[j]
            uj = uu_[j]
            uu_[j] = uj + dw * s
            x = c1 * LL_[j] + k0 - inv * (uj + ddw * s)
            e = exp_le709(x)
            LL_[j] = x
            z += e
            acc_n += rn_[j] * e
            acc_nn += rnn_[j] * e
    return z, acc_n, acc_nn


@numba.njit(**JIT_OPTS)
def exp_sums(LL, rn, rnn):
    """The sums of `mirror_hard` recomputed from stored log-weights (after a rebase)."""
    wide_simd()
    z = 0.0
    acc_n = 0.0
    acc_nn = 0.0
    for j in range(LL.shape[0]):
        e = exp_le709(LL[j])
        z += e
        acc_n += rn[j] * e
        acc_nn += rnn[j] * e
    return z, acc_n, acc_nn


@numba.njit(**JIT_OPTS)
def exp_into(LL, q):
    """q = exp(Lr) (the raw weights of the hard margin, written once per block)."""
    wide_simd()
    for j in range(LL.shape[0]):
        q[j] = exp_le709(LL[j])


@numba.njit(**JIT_OPTS)
def segment_mirror_fused(r, rn, uu, LL, q, fut, dw, ddw, c1, k0, inv, lcap, mult, cap, th):
    """Algorithm 2 lines 5-6 on one class (slices), fused with the next iteration's delta and the sums of the
    nu-projection at a guessed threshold (single machine, where i*(t+1) is known).

    With a_j = u_j + d*dw*S_i*j and L_j = min(Lr_j, lcap) (lcap = log cap + off), the new log-weight relative to
    the shift is x_j = c1*L_j + k0 - inv*a_j (c1 = kappa/(gamma+kappa), inv = 1/(gamma+kappa),
    k0 = -c1*off - shift); stores u += dw*S_i*, Lr = x, pr = e = exp(x).
    Returns (sum e, sum row_next*p_old with p_old = min(cap, mult*pr_old), and at the threshold th: number of
    e >= th, sum of e < th, sum of row_next over e >= th, sum of row_next*e over e < th, sum of row*e over
    e < th). `fut` (the row needed as row_next next iteration, same span) is prefetched along the way.
    """
    wide_simd()
    z = 0.0
    acc_old = 0.0
    n_big = 0
    below = 0.0
    rc = 0.0
    rq = 0.0
    rs = 0.0
    qcap = cap / mult                          # p_old = min(cap, mult*pr_old) = mult*min(pr_old, cap/mult)
    n = r.shape[0]
    for base in range(0, n, _CHUNK):
        end = min(base + _CHUNK, n)
        for k in range(base, end, 8):
            prefetch_l2(fut, k)
        r_ = r[base:end]
        rn_ = rn[base:end]
        uu_ = uu[base:end]
        LL_ = LL[base:end]
        q_ = q[base:end]
        for j in range(end - base):
            s = r_[j]
            uj = uu_[j]
            uu_[j] = uj + dw * s
            x = c1 * min(LL_[j], lcap) + k0 - inv * (uj + ddw * s)
            e = exp_le709(x)
            sn = rn_[j]
            acc_old += sn * min(q_[j], qcap)
            LL_[j] = x
            q_[j] = e
            z += e
            big = e >= th
            small = 0.0 if big else e          # (selects bound to names first: inline ternaries block SIMD)
            sn_big = sn if big else 0.0
            n_big += big
            below += small
            rc += sn_big
            rq += sn * small
            rs += s * small
    return z, mult * acc_old, n_big, below, rc, rq, rs


@numba.njit(cache=True, nogil=True)
def segment_max(Lr, lo, hi):
    m = -np.inf
    for v in Lr[lo:hi]:
        if v > m:
            m = v
    return m


@numba.njit(**JIT_OPTS)
def segment_rescale_exp(Lr, pr, lo, hi, shift):
    """Rebase a segment after an exp overflow/underflow: Lr -= shift, pr = exp(Lr); return the sum of pr."""
    LL = Lr[lo:hi]
    q = pr[lo:hi]
    z = 0.0
    for j in range(LL.shape[0]):
        x = LL[j] - shift
        LL[j] = x
        e = vexp(x)
        q[j] = e
        z += e
    return z


@numba.njit(**JIT_OPTS)
def segment_capped_dot(row, pr, lo, hi, mult, cap):
    wide_simd()
    r = row[lo:hi]
    q = pr[lo:hi]
    acc = 0.0
    for j in range(r.shape[0]):
        acc += r[j] * min(mult * q[j], cap)
    return acc


@numba.njit(**JIT_OPTS)
def segment_mirror_next(row, row_next, u, Lr, pr, lo, hi, dw, d, kappa, gamma, off, logcap, mult, cap, shift):
    """Algorithm 4 lines 13-14 on one segment, unnormalised (eqs. 10-11), fused with the sums the next delta
    needs (row_next = S_i*(t+1)): a_j = u_j + d*dw*S_i*j (w_hat = w[t] + d (w[t+1] - w[t])), u_j += dw*S_i*j,
    Lt_j = (kappa*log p_j - a_j)/(gamma + kappa), pr_j = exp(Lt_j - shift).

    Returns (sum of the new pr, sum row_next*pr_new, sum row_next*p[t]).
    """
    wide_simd()
    inv = 1.0 / (gamma + kappa)
    ddw = d * dw
    r = row[lo:hi]
    rn = row_next[lo:hi]
    uu = u[lo:hi]
    LL = Lr[lo:hi]
    q = pr[lo:hi]
    z = 0.0
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
        sn = rn[j]
        acc_e += sn * e
        acc_old += sn * p_old
    return z, acc_e, acc_old


@numba.njit(**JIT_OPTS)
def segment_mirror_guess(r, rn, fut, uu, LL, q, dw, ddw, kappa, gamma, off, logcap, mult, cap, shift, th):
    """`segment_mirror_next` for the Newton projection (slices of one segment): instead of the new weights' dot
    (the projection passes give it) the pass sums the projection at a predicted raw threshold th, as the single
    machine's fused pass does, and prefetches `fut` (the row that is row_next next iteration, a fresh stream).
    exp cannot overflow: the shift guard keeps Lt - shift <= 700. Returns (sum of the new pr, number of
    pr >= th, sum of pr < th, sum row*pr over pr < th, sum row_next*p[t])."""
    wide_simd()
    inv = 1.0 / (gamma + kappa)
    z = 0.0
    n_big = 0.0
    below = 0.0
    rs = 0.0
    acc_old = 0.0
    n = r.shape[0]
    for base in range(0, n, _CHUNK):
        end = min(base + _CHUNK, n)
        for k in range(base, end, 8):
            prefetch_l2(fut, k)
        r_ = r[base:end]
        rn_ = rn[base:end]
        uu_ = uu[base:end]
        LL_ = LL[base:end]
        q_ = q[base:end]
        for j in range(end - base):
            s = r_[j]
            uj = uu_[j]
            uu_[j] = uj + dw * s
            L = min(LL_[j] - off, logcap)
            p_old = min(mult * q_[j], cap)
            lt = (kappa * L - (uj + ddw * s)) * inv
            e = exp_le709(lt - shift)
            LL_[j] = lt
            q_[j] = e
            z += e
            small_m = e < th
            small = e if small_m else 0.0
            one = 0.0 if small_m else 1.0
            n_big += one
            below += small
            rs += s * small
            acc_old += rn_[j] * p_old
    return z, n_big, below, rs, acc_old


@numba.njit(**JIT_OPTS)
def clients_mirror_hard(r, rn, rnn, uu, LL, seg_lo, seg_hi, seg_class, dw, ddw, c1, inv, off, shift, out_z, out_n,
                        out_nn):
    """The hard-margin form of `segment_mirror_next` over every segment of a group, like the single machine's
    `mirror_hard`: no raw weights are stored or read. Lt_j = c1*(Lr_j - off_c) - inv*(u_j + ddw*S_i*j) is stored
    unshifted, u_j += dw*S_i*j, e_j = exp(Lt_j - shift_c). Per segment: sum e, sum row_next*e, sum
    row_after_next*e (the normaliser's part and the parts of the next two deltas).

    The points are indexed with unsigned integers over [lo, hi) rather than through slices: no wraparound
    code, so the loop vectorises, and no view per segment (measured 0.93 against 1.39 ns per point with 40
    segments)."""
    wide_simd()
    for s in range(seg_lo.shape[0]):
        c = seg_class[s]
        k0 = -c1 * off[c] - shift[c]
        z = 0.0
        acc_n = 0.0
        acc_nn = 0.0
        for j in range(numba.uint64(seg_lo[s]), numba.uint64(seg_hi[s])):
            v = r[j]
            uj = uu[j]
            uu[j] = uj + dw * v
            x = c1 * LL[j] - inv * (uj + ddw * v)
            e = exp_le709(x + k0)
            LL[j] = x - c1 * off[c]
            z += e
            acc_n += rn[j] * e
            acc_nn += rnn[j] * e
        out_z[s] = z
        out_n[s] = acc_n
        out_nn[s] = acc_nn
