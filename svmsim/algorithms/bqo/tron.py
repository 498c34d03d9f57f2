"""Distributed TRON, paper 001's primal baseline for the L2-SVM (Zhuang et al. 2015; Lin, Weng & Keerthi 2008; the
trust-region constants of LIBLINEAR's tron.cpp, notes-001 section 3).

The primal f(w) = 1/2 w^T w + C sum_i max(0, 1 - y_i w^T x_i)^2 is minimised by trust-region Newton steps; the
Newton system is solved by conjugate gradients with the generalized Hessian H = I + 2C X_I^T X_I (I: the points
with y_i w^T x_i < 1). Every global quantity is one all-reduce among the K workers:

    function value and gradient at a point   [2C sum_{i in I} (z_i - 1) y_i x_i , C sum_{i in I} (1 - z_i)^2]
    each CG step's Hessian-vector product     [2C sum_{i in I} (x_i^T v) x_i , 0]

so every all-reduce carries d + 1 scalars (MPI-LIBLINEAR sends the function value apart, one scalar, before the
gradient; here it rides with the gradient, and a Hessian-vector product leaves that slot at 0). The replicated
vectors (w, g, the CG iterates) are updated identically on every worker. One Newton iteration is (CG steps) + 1
all-reduces; the iteration count the scheduler sees is the number of Newton iterations.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from ...comm.collectives import state_with_collective
from ...core.jit import inner
from ...numerics.vectors import dot as _dot
from ...program import KERNEL_WAKE
from ..allreduce import FIRST, WAITING, allreduce_receive, allreduce_start
from .local_cd import concat_shards

__all__ = ["TronState", "tron_state", "tron_step"]

# trust-region constants (tron.cpp)
ETA0, ETA1, ETA2 = 1e-4, 0.25, 0.75
SIGMA1, SIGMA2, SIGMA3 = 0.25, 0.5, 4.0
#: what the all-reduce under way computes
FIRST_POINT, TRIAL_POINT, HESSIAN_PRODUCT = range(3)

TronState = state_with_collective("TronState", [
    ("indptr", np.ndarray), ("indices", np.ndarray), ("data", np.ndarray), ("y", np.ndarray),
    ("row_lo", np.ndarray),
    ("active", np.ndarray), ("active_trial", np.ndarray),   # rows with y_i w^T x_i < 1 at w / at the trial point
    ("w", np.ndarray), ("w_trial", np.ndarray), ("g", np.ndarray), ("g_trial", np.ndarray),
    ("s", np.ndarray), ("r", np.ndarray), ("direction", np.ndarray), ("hessian_direction", np.ndarray),
    ("C", float), ("dim", int), ("rounds_needed", int),
    ("f", np.ndarray), ("f_trial", np.ndarray), ("delta", np.ndarray), ("rtr", np.ndarray), ("cg_tol", np.ndarray),
    ("phase", np.ndarray), ("iteration", np.ndarray), ("allreduces", np.ndarray), ("cg_steps", np.ndarray),
    ("start_round", np.ndarray), ("last_round", np.ndarray), ("work", np.ndarray),
])


def tron_state(plan, hosted, shards, dim, tag_ids, C):
    indptr, indices, data, y, row_lo = concat_shards(shards)
    n = int(row_lo[-1])
    coll = plan.arrays(hosted, np.zeros((len(hosted), plan.d)), tag_ids, "partial", "total")
    vec = lambda: np.zeros(dim)
    one = lambda: np.zeros(1)
    count = lambda: np.zeros(1, np.int64)
    return TronState(*coll, indptr, indices, data, y, row_lo, np.zeros(n, np.bool_), np.zeros(n, np.bool_), vec(),
                     vec(), vec(), vec(), vec(), vec(), vec(), vec(), float(C), int(dim), int(plan.rounds()), one(),
                     one(), one(), one(), one(), count(), count(), count(), count(), count(), count(),
                     np.zeros(len(hosted)))


@inner
def _local_function_gradient(st):
    """Each member's [2C sum_I (z_i - 1) y_i x_i, C sum_I (1 - z_i)^2] at w_trial; marks active_trial."""
    dim, C = st.dim, st.C
    for m in range(st.row_lo.shape[0] - 1):
        row = st.value[m]
        for c in range(dim + 1):
            row[c] = 0.0
        lo, hi = st.row_lo[m], st.row_lo[m + 1]
        for i in range(lo, hi):
            z = 0.0
            for k in range(st.indptr[i], st.indptr[i + 1]):
                z += st.data[k] * st.w_trial[st.indices[k]]
            z *= st.y[i]
            if z < 1.0:
                st.active_trial[i] = True
                row[dim] += C * (1.0 - z) * (1.0 - z)
                f = 2.0 * C * (z - 1.0) * st.y[i]
                for k in range(st.indptr[i], st.indptr[i + 1]):
                    row[st.indices[k]] += f * st.data[k]
            else:
                st.active_trial[i] = False
        st.work[m] += 3.0 * (st.indptr[hi] - st.indptr[lo]) + 4.0 * (hi - lo) + dim


@inner
def _local_hessian_product(st):
    """Each member's 2C sum_I (x_i^T v) x_i for v = the CG direction (active rows at w)."""
    dim, C = st.dim, st.C
    for m in range(st.row_lo.shape[0] - 1):
        row = st.value[m]
        for c in range(dim + 1):
            row[c] = 0.0
        lo, hi = st.row_lo[m], st.row_lo[m + 1]
        for i in range(lo, hi):
            if not st.active[i]:
                continue
            xv = 0.0
            for k in range(st.indptr[i], st.indptr[i + 1]):
                xv += st.data[k] * st.direction[st.indices[k]]
            f = 2.0 * C * xv
            for k in range(st.indptr[i], st.indptr[i + 1]):
                row[st.indices[k]] += f * st.data[k]
        st.work[m] += 4.0 * (st.indptr[hi] - st.indptr[lo]) + (hi - lo) + dim


@inner
def _start_cg(st):
    """s = 0, r = -g, direction = r; then the first Hessian product, or (a tiny gradient) the trial point at once."""
    dim = st.dim
    for c in range(dim):
        st.s[c] = 0.0
        st.r[c] = -st.g[c]
        st.direction[c] = st.r[c]
    st.rtr[0] = _dot(st.r, st.r)
    st.cg_tol[0] = 0.1 * math.sqrt(_dot(st.g, st.g))
    if math.sqrt(st.rtr[0]) <= st.cg_tol[0]:
        _start_trial(st)
    else:
        st.phase[0] = HESSIAN_PRODUCT
        _local_hessian_product(st)


@inner
def _start_trial(st):
    for c in range(st.dim):
        st.w_trial[c] = st.w[c] + st.s[c]
    st.phase[0] = TRIAL_POINT
    _local_function_gradient(st)


@inner
def _cg_step(st, total):
    """One CG step of LIBLINEAR's trcg with the all-reduced Hessian product; starts the next all-reduce."""
    dim = st.dim
    hd = st.hessian_direction
    for c in range(dim):
        hd[c] = st.direction[c] + total[c]
    st.cg_steps[0] += 1
    alpha = st.rtr[0] / _dot(st.direction, hd)
    if not math.isfinite(alpha):       # a product that overflowed (e.g. a lossy codec's): CG cannot go on, and with
        _start_trial(st)               # NaN no test below would ever end it; the trial point decides
        return
    for c in range(dim):
        st.s[c] += alpha * st.direction[c]
    if math.sqrt(_dot(st.s, st.s)) > st.delta[0]:          # to the trust region's boundary
        for c in range(dim):
            st.s[c] -= alpha * st.direction[c]
        std = _dot(st.s, st.direction)
        sts = _dot(st.s, st.s)
        dtd = _dot(st.direction, st.direction)
        dsq = st.delta[0] * st.delta[0]
        rad = math.sqrt(std * std + dtd * (dsq - sts))
        alpha = (dsq - sts) / (std + rad) if std >= 0 else (rad - std) / dtd
        for c in range(dim):
            st.s[c] += alpha * st.direction[c]
            st.r[c] -= alpha * hd[c]
        _start_trial(st)
        return
    for c in range(dim):
        st.r[c] -= alpha * hd[c]
    rnew = _dot(st.r, st.r)
    if math.sqrt(rnew) <= st.cg_tol[0]:
        _start_trial(st)
        return
    beta = rnew / st.rtr[0]
    for c in range(dim):
        st.direction[c] = st.r[c] + beta * st.direction[c]
    st.rtr[0] = rnew
    st.phase[0] = HESSIAN_PRODUCT
    _local_hessian_product(st)


@inner
def _accept_or_reject(st):
    """tron.cpp's trust-region update after the trial point's function value and gradient."""
    gs = _dot(st.g, st.s)
    prered = -0.5 * (gs - _dot(st.s, st.r))
    actred = st.f[0] - st.f_trial[0]
    snorm = math.sqrt(_dot(st.s, st.s))
    if st.iteration[0] == 0:
        st.delta[0] = min(st.delta[0], snorm)
    if st.f_trial[0] - st.f[0] - gs <= 0:
        alpha = SIGMA3
    else:
        alpha = max(SIGMA1, -0.5 * (gs / (st.f_trial[0] - st.f[0] - gs)))
    delta = st.delta[0]
    if actred < ETA0 * prered:
        delta = min(max(alpha, SIGMA1) * snorm, SIGMA2 * delta)
    elif actred < ETA1 * prered:
        delta = max(SIGMA1 * delta, min(alpha * snorm, SIGMA2 * delta))
    elif actred < ETA2 * prered:
        delta = max(SIGMA1 * delta, min(alpha * snorm, SIGMA3 * delta))
    else:
        delta = max(delta, min(alpha * snorm, SIGMA3 * delta))
    st.delta[0] = delta
    if actred > ETA0 * prered:
        _take_trial(st)
    st.iteration[0] += 1


@inner
def _take_trial(st):
    st.f[0] = st.f_trial[0]
    for c in range(st.dim):
        st.w[c] = st.w_trial[c]
        st.g[c] = st.g_trial[c]
    for i in range(st.active.shape[0]):
        st.active[i] = st.active_trial[i]


@numba.njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def tron_step(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    """One round of a group of TRON workers (the `SyncKernel` step)."""
    n_out, where = allreduce_receive(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src,
                                     out_dst, out_payload)
    if where == FIRST:                                  # round 0: the function and gradient at w = 0
        st.phase[0] = FIRST_POINT
        _local_function_gradient(st)
        n_out = allreduce_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out)
        if st.rounds_needed > 0:
            return n_out, -1, KERNEL_WAKE
    elif where == WAITING:
        return n_out, -1, KERNEL_WAKE
    total = st.value[0]
    st.allreduces[0] += 1
    done = -1
    phase = st.phase[0]
    if phase == HESSIAN_PRODUCT:
        _cg_step(st, total)
    else:
        st.f_trial[0] = 0.5 * _dot(st.w_trial, st.w_trial) + total[st.dim]
        for c in range(st.dim):
            st.g_trial[c] = st.w_trial[c] + total[c]
        if phase == FIRST_POINT:
            _take_trial(st)
            st.delta[0] = math.sqrt(_dot(st.g, st.g))
        else:
            _accept_or_reject(st)
            done = st.iteration[0]
        _start_cg(st)
    # the members' rows already hold the next local sums
    n_out = allreduce_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out)
    return n_out, done, KERNEL_WAKE
