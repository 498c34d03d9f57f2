"""The water level of paper 003 (section 2.3, Figure 1; Algorithms 2 and 3, corrected as in notes-003 2.3-2.4).

Pour volume V = n nu into a basin whose floor heights are the responses c_i: the surface settles at the level gamma
with sum_i max(0, gamma - c_i) = V (gamma = min c when V = 0), which is f(w) of (3.1). The k lowest responses are
covered; a minimax p* is uniform on them (section 2.3), so SBP samples among them.

Three ways to the same level, each returning ``(gamma, top)`` where `top` is the largest covered response (sample
among ``{j : c_j <= top}``, exactly the k covered ones: ties at `top` are all covered):

* `water_level_sorted`   O(n log n): sort, prefix sums, the largest k with W(k) = k s_k - S_k <= V.
* `water_level_select`   expected O(n): Algorithm 2 as a quickselect, with the printed off-by-one corrected (the
                         tested lower block includes the pivot and its ties; notes-003 2.3).
* `water_level_newton`   tau <- (V + sum_{c < tau} c) / #{c < tau} from a warm start (the previous level): exact as
                         soon as the count stops changing (notes-003 2.3); the form the distributed SBP runs in rounds.

With an unregularised bias (section 3.6, Figure 4; Algorithm 3 is corrupted as printed, notes-003 2.4),
`water_level_bias` (by sorting; `water_level_bias_select` by selection around a guess of k, SBP's hot path) fills
two basins, positives at c_i + b and negatives at c_i - b, to one level: from the sorted
class responses, the largest k <= min(n+, n-) with W(k) = k (a_k + d_k) - A_k - D_k <= V gives
gamma = (V + A_k + D_k) / (2k); b is the midpoint of its optimal interval (b is not unique; gamma is).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from ...core.jit import inner

__all__ = [
    "NEWTON_MAX_PASSES",
    "water_level_bias",
    "water_level_newton",
    "water_level_select",
    "water_level_sorted",
]

#: `water_level_newton` falls back to selection after this many passes (rounding can make it cycle)
NEWTON_MAX_PASSES = 64


@numba.njit(cache=True, nogil=True)
def water_level_sorted(c, volume):
    """(gamma, top) by sorting."""
    s = np.sort(c)
    if volume <= 0.0:
        return s[0], s[0]
    n = s.shape[0]
    prefix = 0.0
    k = 0
    total = 0.0
    while k < n:                               # W(k + 1) = (k + 1) s_{k+1} - S_{k+1}, non-decreasing in k
        nxt = prefix + s[k]
        if (k + 1) * s[k] - nxt > volume:
            break
        prefix = nxt
        total = prefix
        k += 1
    return (volume + total) / k, s[k - 1]


@numba.njit(cache=True, nogil=True)
def water_level_select(c, volume, work):
    """(gamma, top) by quickselect (expected O(n)); `work` is scratch of c's length. Middle-of-three pivots.

    Invariant: `count` values with sum `covered` are known to lie below gamma; the level is decided inside
    work[lo:hi]. For a pivot v, W(v) = v * (count + #{<= v}) - (covered + sum{<= v}) is the volume below v: if it
    exceeds V, gamma < v and only the values below v stay in play; otherwise every value <= v is covered (ties
    exactly at the level too, as in `water_level_sorted`)."""
    n = c.shape[0]
    if volume <= 0.0:
        m = c[0]
        for j in range(1, n):
            m = min(m, c[j])
        return m, m
    for j in range(n):
        work[j] = c[j]
    lo, hi = 0, n
    count = 0
    covered = 0.0
    top = -math.inf
    while lo < hi:
        a, b, d = work[lo], work[(lo + hi) >> 1], work[hi - 1]
        v = max(min(a, b), min(max(a, b), d))          # the median of three
        # three-way partition of work[lo:hi]: [< v | == v | > v]
        lt, i, gt = lo, lo, hi
        while i < gt:
            x = work[i]
            if x < v:
                work[i] = work[lt]
                work[lt] = x
                lt += 1
                i += 1
            elif x > v:
                gt -= 1
                work[i] = work[gt]
                work[gt] = x
            else:
                i += 1
        below = 0.0
        for j in range(lo, gt):
            below += work[j]
        if v * (count + gt - lo) - (covered + below) > volume:
            hi = lt                                     # gamma < v: the level is among the values below v
        else:
            count += gt - lo                            # every value <= v is covered
            covered += below
            top = v
            lo = gt
    return (volume + covered) / count, top     # every covered block was <= its pivot: the last is the largest


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def count_below(c, tau):
    """(#{c < tau}, sum{c < tau}): one branch-free pass; the sum may be reassociated (vectorised), so its last bits
    depend on the machine's vector width, never on the run."""
    k = 0
    s = 0.0
    for j in range(c.shape[0]):
        x = c[j]
        m = x < tau
        k += m
        s += x if m else 0.0
    return k, s


@numba.njit(cache=True, nogil=True)
def water_level_newton(c, volume, tau, work):
    """(gamma, bound, count, passes) by Newton steps from the trial level `tau` (e.g. the previous level): the
    covered points are the `count` indices with c_j < bound. One pass over c per step. Falls back to
    `water_level_select` (with `work`) after `NEWTON_MAX_PASSES` passes."""
    n = c.shape[0]
    passes = 0
    if volume > 0.0:
        k, s = count_below(c, tau)
        passes += 1
        if k == 0:                              # below every response: start from (V + sum c) / n >= gamma
            total = 0.0
            for j in range(n):
                total += c[j]
            k, s = count_below(c, (volume + total) / n)
            passes += 2
        while passes < NEWTON_MAX_PASSES and k > 0:
            nxt = (volume + s) / k
            k2, s2 = count_below(c, nxt)
            passes += 1
            if k2 == k:                         # the covered set stopped changing: nxt is the level
                return nxt, nxt, k2, passes
            k, s = k2, s2
    g, top = water_level_select(c, volume, work)
    bound = np.nextafter(top, math.inf)
    k, _ = count_below(c, bound)
    return g, bound, k, passes + 2


@numba.njit(cache=True, nogil=True)
def _bias_level(volume, m, n_pos, n_neg, c, pos_order, neg_order):
    """The characterisation of notes-003 2.4 on the class responses read in sorted order (c[pos_order[r]]: the
    r-th smallest positive response)."""
    if volume <= 0.0:
        k = 1
        sigma = c[pos_order[0]] + c[neg_order[0]]
        g_pos = c[pos_order[0]]
    else:
        A = 0.0
        D = 0.0
        k = 0
        while k < m:
            ak = c[pos_order[k]]
            dk = c[neg_order[k]]
            A2 = A + ak
            D2 = D + dk
            if (k + 1) * (ak + dk) - A2 - D2 > volume:
                break
            A, D = A2, D2
            k += 1
        sigma = (volume + A + D) / k
        # gamma+ (the positives' level in c units) may be anything in [lo, hi]; take the midpoint
        a_next = c[pos_order[k]] if k < n_pos else math.inf
        d_next = c[neg_order[k]] if k < n_neg else math.inf
        lo = max(c[pos_order[k - 1]], sigma - d_next)
        hi = min(a_next, sigma - c[neg_order[k - 1]])
        if lo == -math.inf or hi == math.inf:
            g_pos = hi if lo == -math.inf else lo
        else:
            g_pos = 0.5 * (lo + hi)
    g_neg = sigma - g_pos
    # positives are covered up to c + b = gamma, negatives up to c - b = gamma: gamma+ = gamma - b, gamma- = gamma + b
    return 0.5 * sigma, 0.5 * (g_neg - g_pos), k


@numba.njit(cache=True, nogil=True)
def water_level_bias(c, y, volume):
    """(gamma, b, k, pos_order, neg_order) for the problem with a bias, by sorting: the level, the midpoint bias,
    the number k of covered points in each class, and the class indices sorted by response (the covered ones are
    the first k of each). The data must hold both classes."""
    pos = np.flatnonzero(y > 0)
    neg = np.flatnonzero(y <= 0)
    pos_order = pos[np.argsort(c[pos], kind="mergesort")]
    neg_order = neg[np.argsort(c[neg], kind="mergesort")]
    m = min(pos_order.shape[0], neg_order.shape[0])
    g, b, k = _bias_level(volume, m, pos_order.shape[0], neg_order.shape[0], c, pos_order, neg_order)
    return g, b, k, pos_order, neg_order


@inner
def _threshold(values, want_lo, want_hi, guess, vmin, vmax, upper):
    """(t, #{values < t}, sum of them) with want_lo <= # <= want_hi, found by interpolation on the empirical CDF
    (vectorised counting passes, `count_below`) from `guess`. When ties make that window unreachable, the side that
    keeps the caller's bracket valid: a larger count when `upper`, else a smaller one."""
    lo_t, lo_k, lo_s = vmin, 0, 0.0
    hi_t = np.nextafter(vmax, math.inf)
    hi_k, hi_s = count_below(values, hi_t)
    t = guess if vmin < guess < hi_t else 0.5 * (vmin + hi_t)
    want = 0.5 * (want_lo + want_hi)
    for _ in range(200):
        k, s = count_below(values, t)
        if want_lo <= k <= want_hi:
            return t, k, s
        if k < want_lo:
            lo_t, lo_k, lo_s = t, k, s
        else:
            hi_t, hi_k, hi_s = t, k, s
        if np.nextafter(lo_t, math.inf) >= hi_t:      # no value between: a run of ties straddles the window
            break
        nxt = lo_t + (hi_t - lo_t) * (want - lo_k) / (hi_k - lo_k)
        if not lo_t < nxt < hi_t:
            nxt = 0.5 * (lo_t + hi_t)
        t = nxt
    return (hi_t, hi_k, hi_s) if upper else (lo_t, lo_k, lo_s)


@inner
def _window(values, lo, hi, guesses, slot):
    """(sum of the lo - 1 smallest, the values of ranks lo..hi ascending) of `values` (1-based ranks, hi <= n):
    two thresholds bracket ranks lo..hi (counting passes, warm-started from guesses[slot], guesses[slot + 1], which
    are updated), one pass collects the values between them, and only those are sorted."""
    vmin, vmax = values.min(), values.max()
    slack = max(8, (hi - lo + 1) // 2)
    t1, k1, s1 = _threshold(values, max(0, lo - 1 - slack), lo - 1, guesses[slot], vmin, vmax, False)
    t2, k2, _ = _threshold(values, hi, min(values.shape[0], hi + slack), guesses[slot + 1], vmin, vmax, True)
    guesses[slot], guesses[slot + 1] = t1, t2
    between = np.empty(k2 - k1)
    j = 0
    for q in range(values.shape[0]):
        v = values[q]
        if t1 <= v < t2:
            between[j] = v
            j += 1
    between = np.sort(between[:j])
    below = s1
    for r in range(lo - 1 - k1):
        below += between[r]
    return below, between[lo - 1 - k1:hi - k1]


@numba.njit(cache=True, nogil=True)
def water_level_bias_select(c, volume, pos, neg, k_guess, guesses):
    """(gamma, b, k, a_k, d_k) as `water_level_bias`, by selection around a guess of k (SBP: the last step's k):
    counting passes find values that bracket the ranks of a window around the guess in each class, and only the
    values between them are sorted, instead of both classes; the window grows until it holds the answer. `pos`,
    `neg`: the class indices; `guesses` (4,): the brackets' values, kept from call to call as warm starts. The
    covered points of a class are its k lowest (ties at a_k, d_k broken by index, as the stable sort of
    `water_level_bias` does)."""
    a_all = c[pos]
    d_all = c[neg]
    n_pos, n_neg = a_all.shape[0], d_all.shape[0]
    m = min(n_pos, n_neg)
    if volume <= 0.0:
        a1, d1 = a_all.min(), d_all.min()
        return 0.5 * (a1 + d1), 0.5 * (d1 - a1), 1, a1, d1
    width = 16
    k0 = min(max(k_guess, 1), m)
    while True:
        lo = max(1, k0 - width)
        hi = min(m, k0 + width)
        a_below, a_win = _window(a_all, lo, min(n_pos, hi + 1), guesses, 0)
        d_below, d_win = _window(d_all, lo, min(n_neg, hi + 1), guesses, 2)
        A, D = a_below, d_below
        k = 0
        for r in range(lo, hi + 1):                 # W(r) = r (a_r + d_r) - A_r - D_r, non-decreasing in r
            ar, dr = a_win[r - lo], d_win[r - lo]
            if r * (ar + dr) - (A + ar) - (D + dr) > volume:
                break
            A += ar
            D += dr
            k = r
        if (k == 0 and lo > 1) or (k == hi and hi < m):
            width *= 4                              # the answer lies outside the window
            continue
        if k == 0:                                  # W(1) = 0 <= V always: not reached
            k = 1
            A, D = a_win[0], d_win[0]
        sigma = (volume + A + D) / k
        ak, dk = a_win[k - lo], d_win[k - lo]
        a_next = a_win[k + 1 - lo] if k < n_pos else math.inf
        d_next = d_win[k + 1 - lo] if k < n_neg else math.inf
        lo_pos = max(ak, sigma - d_next)
        hi_pos = min(a_next, sigma - dk)
        if lo_pos == -math.inf or hi_pos == math.inf:
            g_pos = hi_pos if lo_pos == -math.inf else lo_pos
        else:
            g_pos = 0.5 * (lo_pos + hi_pos)
        g_neg = sigma - g_pos
        return 0.5 * sigma, 0.5 * (g_neg - g_pos), k, ak, dk


@numba.njit(cache=True, nogil=True)
def pick_lowest(c, idx, k, kth, u):
    """The floor(u k)-th, in index order, of the k lowest of c[idx] (all below `kth`, the k-th value, then the ties at
    it by index: the set the stable sort gives)."""
    below = 0
    for j in range(idx.shape[0]):
        below += c[idx[j]] < kth
    ties = k - below
    r = min(int(u * k), k - 1)
    for j in range(idx.shape[0]):
        v = c[idx[j]]
        take = v < kth
        if not take and v == kth and ties > 0:
            ties -= 1
            take = True
        if take:
            if r == 0:
                return idx[j]
            r -= 1
    return -1
