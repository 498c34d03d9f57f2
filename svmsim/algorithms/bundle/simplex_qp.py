"""qp-BMRM's inner problem (paper 004, eq. (10); notes-004 section 1.4): over the simplex,

    max_{alpha in simplex_t}  D_t(alpha) = -1/(2 lam) alpha^T G alpha + b^T alpha,   G = A_t^T A_t,

solved as min f(alpha) = -D_t(alpha) by SMO on the simplex (one equality, alpha >= 0: LIBSVM's working-pair method
with every label +1): the pair is the coordinate of greatest gradient among the positive ones (to shrink) and,
by LIBSVM's second-order rule, the coordinate of smaller gradient whose exact step along the pair decreases f
most (to grow); the step is exact along the pair, and the gradient is updated from two
columns of G in O(t). The solve stops when the Frank-Wolfe duality gap <grad, alpha> - min_i grad_i (an upper bound
on f(alpha) - f*) is at most the tolerance; D_t(alpha) is a valid lower bound on J* for any alpha in the simplex,
so an inexact solve never breaks the certificate. It starts from the previous solution (the new plane at 0).

The bundle is bounded (``max_bundle`` planes): when full, planes with alpha = 0 leave it; when none has alpha = 0,
all are replaced by their aggregate (sum alpha_i a_i, sum alpha_i b_i), a convex combination and so still a valid
cutting plane (Kiwiel's aggregation; the paper does not discuss bundle management, notes-004 gotcha 20).
"""
from __future__ import annotations

import math

import numpy as np

from ...core.jit import inner

__all__ = ["add_plane", "compact_bundle", "solve_simplex_qp"]


@inner
def add_plane(st, a, b):
    """Append the plane (a, b): its Gram row and column (t dot products of length d), alpha_t = 0 and its
    gradient."""
    t = st.bundle_size[0]
    dim = st.dim
    for c in range(dim):
        st.planes[t, c] = a[c]
    st.plane_offsets[t] = b
    g_new = 0.0
    for p in range(t + 1):
        acc = 0.0
        for c in range(dim):
            acc += st.planes[p, c] * a[c]
        st.gram[p, t] = acc
        st.gram[t, p] = acc
        g_new += st.bundle_alpha[p] * acc if p < t else 0.0
    st.bundle_alpha[t] = 1.0 if t == 0 else 0.0
    st.bundle_size[0] = t + 1
    if t == 0:
        st.qp_grad[0] = st.gram[0, 0] / st.lam - b
    else:
        st.qp_grad[t] = g_new / st.lam - b


@inner
def compact_bundle(st):
    """Make room: drop the planes with alpha = 0, or (none) aggregate them all into one."""
    t = st.bundle_size[0]
    dim = st.dim
    keep = 0
    for p in range(t):
        if st.bundle_alpha[p] > 0.0:
            keep += 1
    st.compactions[0] += 1
    if keep < t:
        kept = 0
        for p in range(t):                     # in increasing order: a kept plane only moves down
            if st.bundle_alpha[p] > 0.0:
                kq = 0
                for q in range(t):
                    if st.bundle_alpha[q] > 0.0:
                        st.gram[kept, kq] = st.gram[p, q]
                        kq += 1
                kept += 1
        j = 0
        for p in range(t):
            if st.bundle_alpha[p] > 0.0:
                if j != p:
                    for c in range(dim):
                        st.planes[j, c] = st.planes[p, c]
                    st.plane_offsets[j] = st.plane_offsets[p]
                    st.bundle_alpha[j] = st.bundle_alpha[p]
                    st.qp_grad[j] = st.qp_grad[p]    # dropped planes had alpha = 0: the gradient is unchanged
                j += 1
        st.bundle_size[0] = keep
        return
    for c in range(dim):
        acc = 0.0
        for p in range(t):
            acc += st.bundle_alpha[p] * st.planes[p, c]
        st.planes[0, c] = acc
    off = 0.0
    for p in range(t):
        off += st.bundle_alpha[p] * st.plane_offsets[p]
    st.plane_offsets[0] = off
    st.bundle_alpha[0] = 1.0
    _regram(st, 1)
    st.qp_grad[0] = st.gram[0, 0] / st.lam - off
    st.bundle_size[0] = 1


@inner
def _regram(st, t):
    """The Gram matrix of the first t planes, recomputed (after a compaction: t d^2-free dot products)."""
    for p in range(t):
        for q in range(p, t):
            acc = 0.0
            for c in range(st.dim):
                acc += st.planes[p, c] * st.planes[q, c]
            st.gram[p, q] = acc
            st.gram[q, p] = acc


@inner
def _refresh_gradient(st, t):
    """grad = G alpha / lam - b from scratch (the positive alphas only)."""
    for p in range(t):
        acc = 0.0
        for q in range(t):
            if st.bundle_alpha[q] > 0.0:
                acc += st.gram[p, q] * st.bundle_alpha[q]
        st.qp_grad[p] = acc / st.lam - st.plane_offsets[p]


@inner
def _gap(st, t):
    """The Frank-Wolfe duality gap <grad, alpha> - min_p grad_p of the inner QP (>= f(alpha) - f*), and the
    coordinate of least gradient."""
    dot = 0.0
    lo = 0
    for p in range(t):
        dot += st.bundle_alpha[p] * st.qp_grad[p]
        if st.qp_grad[p] < st.qp_grad[lo]:
            lo = p
    return dot - st.qp_grad[lo], lo


@inner
def _active_set(st, t, tol, max_steps):
    """The primal active-set method on the simplex QP from the current (feasible) alpha: solve the equality-
    constrained QP on the free set W = {alpha > 0} (its KKT system by least squares, so collinear planes are
    harmless), step towards it until a coordinate reaches 0 (it leaves W) or take it and let in the coordinate of
    least gradient while the duality gap exceeds tol. Finite; exact up to rounding. Returns the steps taken."""
    alpha = st.bundle_alpha
    free = np.zeros(t, np.bool_)
    for p in range(t):
        free[p] = alpha[p] > 0.0
    steps = 0
    while steps < max_steps:
        steps += 1
        idx = np.nonzero(free)[0]
        m = idx.shape[0]
        K = np.zeros((m + 1, m + 1))
        r = np.zeros(m + 1)
        for a in range(m):
            for b in range(m):
                K[a, b] = st.gram[idx[a], idx[b]] / st.lam
            K[a, m] = 1.0
            K[m, a] = 1.0
            r[a] = st.plane_offsets[idx[a]]
        r[m] = 1.0
        sol = np.linalg.lstsq(K, r)[0]
        step = 1.0
        leave = -1
        for a in range(m):
            cur = alpha[idx[a]]
            if sol[a] < 0.0 and cur - sol[a] > 0.0:
                ratio = cur / (cur - sol[a])
                if ratio < step:
                    step = ratio
                    leave = idx[a]
        total = 0.0
        for a in range(m):
            v = alpha[idx[a]] + step * (sol[a] - alpha[idx[a]])
            alpha[idx[a]] = v if v > 0.0 else 0.0
            total += alpha[idx[a]]
        for a in range(m):                     # back onto sum = 1 exactly
            alpha[idx[a]] /= total
        if leave >= 0:
            alpha[leave] = 0.0
            free[leave] = False
            continue
        _refresh_gradient(st, t)
        gap, lo = _gap(st, t)
        if gap <= tol or free[lo]:
            break
        free[lo] = True
    return steps


@inner
def solve_simplex_qp(st, tol):
    """SMO until the duality gap of the inner QP is <= tol; past 20 t + 100 steps (a slow, ill-conditioned bundle)
    the active-set method finishes the solve exactly. A failure (counted) when neither gets there within
    qp_max_steps."""
    t = st.bundle_size[0]
    lam = st.lam
    alpha, grad, G = st.bundle_alpha, st.qp_grad, st.gram
    steps = 0
    gap = 0.0
    while True:
        lo = 0
        hi = -1
        dot = 0.0
        for p in range(t):
            dot += alpha[p] * grad[p]
            if grad[p] < grad[lo]:
                lo = p
            if alpha[p] > 0.0 and (hi < 0 or grad[p] > grad[hi]):
                hi = p
        gap = dot - grad[lo]
        if gap <= tol or hi == lo:
            break
        if steps >= min(st.qp_max_steps, 20 * t + 100):
            steps += _active_set(st, t, tol, min(st.qp_max_steps, 3 * t + 30))
            _refresh_gradient(st, t)
            gap = _gap(st, t)[0]
            if gap > tol:
                st.qp_failures[0] += 1
            break
        # second-order choice of the coordinate to grow (Fan, Chen & Lin 2005): the largest decrease of f along
        # the pair, (grad_hi - grad_p)^2 / curvature, among the coordinates of smaller gradient
        best = 0.0
        for p in range(t):
            diff = grad[hi] - grad[p]
            if diff > 0.0:
                curv = (G[p, p] + G[hi, hi] - 2.0 * G[p, hi]) / lam
                score = diff * diff / curv if curv > 1e-300 else math.inf
                if score > best:
                    best = score
                    lo = p
        curv = (G[lo, lo] + G[hi, hi] - 2.0 * G[lo, hi]) / lam
        delta = alpha[hi]
        if curv > 0.0:
            delta = min(delta, (grad[hi] - grad[lo]) / curv)
        alpha[lo] += delta
        alpha[hi] -= delta
        if alpha[hi] < 0.0:
            alpha[hi] = 0.0
        for p in range(t):
            grad[p] += delta * (G[p, lo] - G[p, hi]) / lam
        steps += 1
    st.qp_steps[0] = steps
    st.qp_gap[0] = gap
