"""The local solver of paper 001 (section 2.3, notes-001 section 2.2): shuffled dual coordinate descent over one
node's shard, as numba kernels over CSR arrays (dense data is held as CSR rows with every column).

For the node's block J_k of the dual (2), one pass visits J_k in a fresh random permutation and makes the exact
coordinate step of the local subproblem (7) at each point:

    a   = alpha_i + d_i                                       (the trial value)
    G   = y_i x_i^T (w + sigma * u) - 1 + s * a + tau * d_i    (the subproblem's gradient; notes 7.4 keeps tau*d_i)
    a'  = clip(a - G / QD_i, 0, U),  QD_i = sigma * ||x_i||^2 + s + tau
    d_i += a' - a,  u += (a' - a) y_i x_i

so that after the pass d = Delta alpha_{J_k} and u = X_{J_k}^T Y_{J_k} d (the local part of Delta w, eq. 17).
sigma = 1 for BQO and DSVM-AVE; sigma = K for DisDCA's practical variant (its local view w + K u, notes 3).
The kernel keeps the local view v = w + sigma u in one dense vector (one sparse dot and one sparse update per
point, as LIBLINEAR's epoch) and returns u = (v - w) / sigma.
"""
from __future__ import annotations

import numba
import numpy as np

from ...core.streams import counter_uniform
from ...numerics.csr import CSR_INDEX

__all__ = ["PG_TOLERANCE", "DualCD", "ShrinkingCD", "cd_pass", "row_sqnorms", "shrinking_epoch", "shuffle"]

#: a coordinate whose projected gradient is below this is left alone (LIBLINEAR's and the authors' threshold)
PG_TOLERANCE = 1e-12


@numba.njit(cache=True, nogil=True)
def shuffle(perm, lo, hi, key, counter):
    """Fisher-Yates over perm[lo:hi] with the counter-based stream `key` from `counter`; returns the counter."""
    for j in range(hi - lo - 1, 0, -1):
        r = int(counter_uniform(key, counter) * (j + 1))
        counter += 1
        t = perm[lo + j]
        perm[lo + j] = perm[lo + r]
        perm[lo + r] = t
    return counter


@numba.njit(cache=True, nogil=True)
def row_sqnorms(indptr, data):
    out = np.zeros(indptr.shape[0] - 1)
    for i in range(out.shape[0]):
        acc = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            acc += data[k] * data[k]
        out[i] = acc
    return out


@numba.njit(cache=True, nogil=True)
def cd_pass(indptr, indices, data, y, qd, alpha, step, perm, lo, hi, w, view, u, sigma, s, upper, tau, passes,
            key, counter):
    """`passes` shuffled passes over rows lo..hi-1 (one node's block): writes the block's step d into
    step[lo:hi] and its X^T Y d into u (d scalars); `view` and perm[lo:hi] are scratch. Returns the stream
    counter."""
    for i in range(lo, hi):
        step[i] = 0.0
        perm[i] = i
    for c in range(w.shape[0]):
        view[c] = w[c]
    for _ in range(passes):
        counter = shuffle(perm, lo, hi, key, counter)
        for j in range(lo, hi):
            i = perm[j]
            a = alpha[i] + step[i]
            g = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                g += data[k] * view[indices[k]]
            grad = y[i] * g - 1.0 + s * a + tau * step[i]
            if a <= 0.0:
                pg = min(grad, 0.0)
            elif a >= upper:
                pg = max(grad, 0.0)
            else:
                pg = grad
            if abs(pg) <= PG_TOLERANCE:
                continue
            if qd[i] > 0.0:
                a_new = min(max(a - grad / qd[i], 0.0), upper)
            else:                      # an empty row with s = tau = 0: the gradient is -1, go to the bound
                a_new = upper if grad < 0.0 else 0.0
            delta = a_new - a
            if delta == 0.0:
                continue
            step[i] += delta
            f = sigma * delta * y[i]
            for k in range(indptr[i], indptr[i + 1]):
                view[indices[k]] += f * data[k]
    for c in range(w.shape[0]):
        u[c] = (view[c] - w[c]) / sigma
    return counter


def concat_shards(shards: list) -> tuple:
    """(indptr, indices, data, y, row_lo) of several CSR shards ``(X_k, y_k)`` laid end to end: member m's rows
    are row_lo[m]..row_lo[m+1] (one group's workers in one set of arrays)."""
    rows = [int(X.shape[0]) for X, _ in shards]
    row_lo = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    nnz = np.concatenate([[0], np.cumsum([X.nnz for X, _ in shards])]).astype(np.int64)
    indptr = np.concatenate([[0]] + [X.indptr[1:].astype(np.int64) + off for (X, _), off in zip(shards, nnz[:-1])])
    indices = np.concatenate([X.indices.astype(CSR_INDEX) for X, _ in shards]) if shards else np.zeros(0, CSR_INDEX)
    data = np.concatenate([X.data.astype(np.float64) for X, _ in shards]) if shards else np.zeros(0)
    y = np.concatenate([np.asarray(yk, np.float64) for _, yk in shards]) if shards else np.zeros(0)
    return indptr.astype(np.int64), indices, data, y, row_lo


class DualCD:
    """Shuffled dual coordinate descent over a whole data set on one machine (K = 1, the step taken in full; no
    shrinking): the reference optimum and the `DualCDSVC` estimator run it. `X` is CSR."""

    def __init__(self, X, y: np.ndarray, s: float, upper: float, seed: int = 0):
        from ...core.streams import STREAM_PROGRAM, stream_keys

        self.indptr, self.indices, self.data = X.indptr.astype(np.int64), X.indices.astype(CSR_INDEX), X.data
        self.y = np.asarray(y, np.float64)
        n, d = X.shape
        self.s, self.upper = float(s), float(upper)
        self.qd = row_sqnorms(self.indptr, self.data) + self.s
        self.alpha, self.step, self.perm = np.zeros(n), np.zeros(n), np.arange(n, dtype=np.int64)
        self.w, self.view, self.u = np.zeros(d), np.zeros(d), np.zeros(d)
        self.key = stream_keys(seed, STREAM_PROGRAM, 1)[0]
        self.counter = 0
        self.epochs = 0

    def epoch(self) -> None:
        self.counter = cd_pass(self.indptr, self.indices, self.data, self.y, self.qd, self.alpha, self.step,
                               self.perm, 0, self.alpha.shape[0], self.w, self.view, self.u, 1.0, self.s, self.upper,
                               0.0, 1, self.key, self.counter)
        self.alpha += self.step
        np.clip(self.alpha, 0.0, self.upper, out=self.alpha)
        self.w += self.u
        self.epochs += 1


@numba.njit(cache=True, nogil=True)
def shrinking_epoch(indptr, indices, data, y, qd, alpha, active, n_active, w, s, upper, bounds, key, counter):
    """One shuffled epoch of dual coordinate descent over the active rows active[:n_active] with LIBLINEAR's
    shrinking (Hsieh et al. 2008, section 3.2): a row at a bound whose gradient lies beyond last epoch's extreme
    projected gradients (bounds[0] = max, bounds[1] = min) leaves the active set. When the active rows' projected
    gradients span at most the tolerance bounds[2], every row comes back (bounds reset). Updates
    alpha and w in place; returns (n_active, counter, converged on all rows)."""
    counter = shuffle(active, 0, n_active, key, counter)
    pg_max, pg_min = -np.inf, np.inf
    j = 0
    while j < n_active:
        i = active[j]
        g = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            g += data[k] * w[indices[k]]
        grad = y[i] * g - 1.0 + s * alpha[i]
        pg = 0.0
        if alpha[i] <= 0.0:
            if grad > bounds[0]:
                n_active -= 1
                active[j], active[n_active] = active[n_active], active[j]
                continue
            if grad < 0.0:
                pg = grad
        elif alpha[i] >= upper:
            if grad < bounds[1]:
                n_active -= 1
                active[j], active[n_active] = active[n_active], active[j]
                continue
            if grad > 0.0:
                pg = grad
        else:
            pg = grad
        pg_max = max(pg_max, pg)
        pg_min = min(pg_min, pg)
        if abs(pg) > PG_TOLERANCE:
            if qd[i] > 0.0:
                a_new = min(max(alpha[i] - grad / qd[i], 0.0), upper)
            else:                  # an all-zero row of the L1 loss (Q_ii = 0): the gradient is -1, go to the bound
                a_new = upper if grad < 0.0 else 0.0
            delta = a_new - alpha[i]
            if delta != 0.0:
                alpha[i] = a_new
                f = delta * y[i]
                for k in range(indptr[i], indptr[i + 1]):
                    w[indices[k]] += f * data[k]
        j += 1
    converged = False
    if pg_max - pg_min <= bounds[2]:
        if n_active == active.shape[0]:
            converged = True
        n_active = active.shape[0]              # every row back in for the next epoch
        bounds[0], bounds[1] = np.inf, -np.inf
    else:
        bounds[0] = pg_max if pg_max > 0.0 else np.inf
        bounds[1] = pg_min if pg_min < 0.0 else -np.inf
    return n_active, counter, converged


class ShrinkingCD:
    """Dual coordinate descent with LIBLINEAR's shrinking on one machine: the reference optimum's solver (the
    certificate is computed apart, on every row, so shrinking only changes the speed). `X` is CSR."""

    def __init__(self, X, y: np.ndarray, s: float, upper: float, seed: int = 0, tol: float = 1e-10):
        from ...core.streams import STREAM_PROGRAM, stream_keys

        self.indptr, self.indices, self.data = X.indptr.astype(np.int64), X.indices.astype(CSR_INDEX), X.data
        self.y = np.asarray(y, np.float64)
        n, d = X.shape
        self.s, self.upper = float(s), float(upper)
        self.qd = row_sqnorms(self.indptr, self.data) + self.s
        self.alpha, self.w = np.zeros(n), np.zeros(d)
        self.active = np.arange(n, dtype=np.int64)
        self.n_active = n
        self.bounds = np.array([np.inf, -np.inf, tol])
        self.key = stream_keys(seed, STREAM_PROGRAM, 1)[0]
        self.counter = 0
        self.epochs = 0

    def unshrink(self) -> None:
        """Every row active again."""
        self.n_active = self.active.shape[0]
        self.bounds[0], self.bounds[1] = np.inf, -np.inf

    def epoch(self) -> bool:
        """One epoch over the active rows (an epoch of a shrunk set costs only its rows); True once the projected
        gradients of all rows span <= tol."""
        self.n_active, self.counter, done = shrinking_epoch(
            self.indptr, self.indices, self.data, self.y, self.qd, self.alpha, self.active, self.n_active, self.w,
            self.s, self.upper, self.bounds, self.key, self.counter)
        self.epochs += 1
        return done
