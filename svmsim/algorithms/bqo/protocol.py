"""Paper 001's Algorithm 1 as a node program: K workers, one all-reduce per outer iteration.

Each worker holds its block J_k of the dual variables and the replicated w. Iteration t (notes-001 section 2.4):

    step 2.1   local CD pass over J_k -> d_k (= Delta alpha_{J_k}), u_k (= X_k^T Y_k d_k)         (`local_cd`)
    step 2.2+3 one all-reduce of [u_k, e^T d_k, s||d_k||^2, s alpha_k^T d_k (, min_i lambda_i)]   (eqs. 17-19)
    step 2.4   the step size from the reduced sums, the same on every worker                      (`step_size`)
    step 2.5   alpha_k += eta d_k;  w += eta Delta w

The step rule makes the method: BQO-E (exact line search, eqs. 20-21; the box limit lambda travels as a MIN column
of the same all-reduce: d + 4 scalars), BQO-A (Armijo, eqs. 9-12 in closed form: d + 3), DisDCA's practical
variant (H = K Q~ + sI, eta = 1: d) and DSVM-AVE / CoCoA (H = Q~ (+ sI for L2), eta = 1/K: d).

Rounds: the all-reduce starts in the round of the pass and carries messages for `rounds()` rounds; every worker
knows that number from the plan, so all of them finish the iteration together in the round its last message
arrives (an all-reduce followed by a barrier, as the authors time theirs) and start the next one in the same step.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from ...comm.collectives import Plan, state_with_collective
from ...core.jit import inner
from ...program import KERNEL_WAKE
from ..allreduce import FIRST, WAITING, allreduce_receive, allreduce_start
from .local_cd import cd_pass, concat_shards, row_sqnorms

__all__ = [
    "ADD",
    "ARMIJO",
    "AVERAGE",
    "EXACT",
    "RULE_NAMES",
    "WorkerState",
    "extra_columns",
    "step_size",
    "worker_state",
    "worker_step",
]

#: step rules (the method)
EXACT, ARMIJO, ADD, AVERAGE = range(4)
RULE_NAMES = ("exact", "armijo", "add", "average")

#: the worker's own fields beside the collective's (one flat named tuple; see `state_with_collective`)
WorkerState = state_with_collective("WorkerState", [
    # the group's shards as CSR rows, member m's rows are row_lo[m]..row_lo[m+1]
    ("indptr", np.ndarray), ("indices", np.ndarray), ("data", np.ndarray), ("y", np.ndarray),
    ("qd", np.ndarray),          # QD_i = sigma ||x_i||^2 + s + tau
    ("row_lo", np.ndarray),
    ("alpha", np.ndarray), ("step", np.ndarray), ("perm", np.ndarray),
    ("w", np.ndarray),           # the replicated primal vector (the same on every worker)
    ("local_view", np.ndarray), ("u", np.ndarray),   # scratch: the local view w + sigma u, and u
    ("keys", np.ndarray), ("counters", np.ndarray),   # each member's shuffling stream
    # the method's constants
    ("rule", int), ("s", float), ("upper", float), ("tau", float), ("sigma", float), ("workers", float),
    ("passes", int), ("armijo_beta", float), ("armijo_sigma", float), ("dim", int), ("rounds_needed", int),
    # progress: completed iterations, the round the current all-reduce started, the last step (eta, g, q, lambda)
    ("iteration", np.ndarray), ("start_round", np.ndarray), ("last", np.ndarray),
    ("last_round", np.ndarray),      # the last round this group was stepped in
    ("work", np.ndarray),            # per member: operations (multiply-adds) of its last step, for modelled time
])


def extra_columns(rule: int) -> list[str]:
    """How the all-reduce combines the columns after the d-vector, by rule."""
    return {EXACT: ["sum", "sum", "sum", "min"], ARMIJO: ["sum", "sum", "sum"]}.get(rule, [])


def worker_state(plan: Plan, hosted: np.ndarray, shards: list, dim: int, tag_ids: dict, *, rule: int, s: float,
                 upper: float, tau: float, sigma: float, passes: int, armijo_beta: float, armijo_sigma: float,
                 keys: np.ndarray) -> WorkerState:
    """The state of a group hosting workers `hosted` (node ids) with CSR shards ``(X_k, y_k)``."""
    indptr, indices, data, y, row_lo = concat_shards(shards)
    n = int(row_lo[-1])
    coll = plan.arrays(hosted, np.zeros((len(hosted), plan.d)), tag_ids, "partial", "total")
    return WorkerState(*coll, indptr, indices, data, y, sigma * row_sqnorms(indptr, data) + s + tau, row_lo,
                       np.zeros(n), np.zeros(n), np.arange(n, dtype=np.int64), np.zeros(dim), np.zeros(dim),
                       np.zeros(dim), np.asarray(keys, np.uint64), np.zeros(len(hosted), np.int64), int(rule),
                       float(s), float(upper), float(tau), float(sigma), float(plan.k), int(passes),
                       float(armijo_beta), float(armijo_sigma), int(dim), int(plan.rounds()),
                       np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(4, np.nan), np.zeros(1, np.int64),
                       np.zeros(len(hosted)))


@numba.njit(cache=True, nogil=True)
def _armijo(g, q, beta, sigma):
    """The largest beta^k <= 1 with f(alpha + beta^k d) - f(alpha) <= sigma beta^k g (gamma = 0): since f is
    quadratic, beta^k <= 2 (1 - sigma) (-g / q) (eqs. 11-12 in closed form, checked against rounding; notes 7.7)."""
    if not q > 0.0:
        return 1.0
    bound = 2.0 * (1.0 - sigma) * (-g / q)
    if bound >= 1.0:
        return 1.0
    if not bound > 0.0:
        return 0.0
    k = max(0, math.ceil(math.log(bound) / math.log(beta)))
    while beta ** k > bound:
        k += 1
    while k > 0 and beta ** (k - 1) <= bound:
        k -= 1
    return beta ** k


@numba.njit(cache=True, nogil=True)
def step_size(rule, total, w, dim, s, workers, armijo_beta, armijo_sigma, last):
    """eta from the all-reduced vector `total` (= [Delta w, e^T d, s||d||^2, s alpha^T d, lambda_min]); writes
    (eta, g, q, lambda) into `last`."""
    g = q = lam = math.nan
    if rule == EXACT or rule == ARMIJO:
        dw2 = 0.0
        wdw = 0.0
        for c in range(dim):
            dw2 += total[c] * total[c]
            wdw += w[c] * total[c]
        q = dw2 + total[dim + 1]                       # eq. 18: ||Delta alpha||^2_Qbar
        g = wdw + total[dim + 2] - total[dim]          # eq. 19: grad f^T Delta alpha
    if rule == EXACT:
        lam = total[dim + 3]                           # eq. 21: min_i lambda_i (a MIN column)
        if q > 0.0:
            eta = min(-g / q, lam)                     # eq. 20
        else:
            eta = lam                                  # q = 0 (L1, PSD): the box limit (notes 7.6)
        if not (eta >= 0.0 and eta < math.inf):        # Delta alpha = 0: optimal (Lemma 2.1)
            eta = 0.0
    elif rule == ARMIJO:
        eta = _armijo(g, q, armijo_beta, armijo_sigma)
    elif rule == ADD:
        eta = 1.0
    else:
        eta = 1.0 / workers
    last[0] = eta
    last[1] = g
    last[2] = q
    last[3] = lam
    return eta


@inner
def _begin(st):
    """Step 2.1 for every member: the local pass, then the member's all-reduce input."""
    dim = st.dim
    for m in range(st.row_lo.shape[0] - 1):
        lo, hi = st.row_lo[m], st.row_lo[m + 1]
        st.counters[m] = cd_pass(st.indptr, st.indices, st.data, st.y, st.qd, st.alpha, st.step, st.perm, lo, hi,
                                 st.w, st.local_view, st.u, st.sigma, st.s, st.upper, st.tau, st.passes, st.keys[m],
                                 st.counters[m])
        # a pass reads and updates each nonzero and touches each row a few times; the view and u cost O(d)
        st.work[m] += st.passes * (2.0 * (st.indptr[hi] - st.indptr[lo]) + 4.0 * (hi - lo)) + 3.0 * dim
        row = st.value[m]
        for c in range(dim):
            row[c] = st.u[c]
        if st.rule == EXACT or st.rule == ARMIJO:
            c1 = c2 = c3 = 0.0
            lam = math.inf
            for i in range(lo, hi):
                di = st.step[i]
                c1 += di
                c2 += di * di
                c3 += st.alpha[i] * di
                if di < 0.0:                          # eq. 21's box limit of coordinate i
                    lam = min(lam, -st.alpha[i] / di)
                elif di > 0.0:
                    lam = min(lam, (st.upper - st.alpha[i]) / di)
            row[dim] = c1
            row[dim + 1] = st.s * c2
            row[dim + 2] = st.s * c3
            if st.rule == EXACT:
                row[dim + 3] = lam


@inner
def _finish(st):
    """Steps 2.4-2.5 on every member, from the all-reduced vector (every member holds the same)."""
    total = st.value[0]
    eta = step_size(st.rule, total, st.w, st.dim, st.s, st.workers, st.armijo_beta, st.armijo_sigma, st.last)
    for i in range(st.alpha.shape[0]):
        a = st.alpha[i] + eta * st.step[i]
        st.alpha[i] = min(max(a, 0.0), st.upper)        # round-off may leave the box (notes 7.8)
    for c in range(st.dim):
        st.w[c] += eta * total[c]
    for m in range(st.work.shape[0]):
        st.work[m] += (st.row_lo[m + 1] - st.row_lo[m]) + 4.0 * st.dim
    st.iteration[0] += 1


@numba.njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def worker_step(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    """One round of a group of workers (the `SyncKernel` step)."""
    n_out, where = allreduce_receive(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src,
                                     out_dst, out_payload)
    if where == FIRST:                                 # the first round: iteration 0 starts
        _begin(st)
        n_out = allreduce_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out)
        if st.rounds_needed > 0:
            return n_out, -1, KERNEL_WAKE
    elif where == WAITING:
        return n_out, -1, KERNEL_WAKE
    _finish(st)                                        # every worker holds the sums: the iteration ends
    _begin(st)
    n_out = allreduce_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out)
    return n_out, st.iteration[0], KERNEL_WAKE
