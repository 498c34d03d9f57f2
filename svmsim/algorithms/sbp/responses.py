"""What every kernel method of paper 003 keeps: a model w = scale * sum_j coef_j y_j Phi(x_j) and its responses.

SBP, kernel Pegasos, the Perceptron and SDCA all change one coefficient per step and then bring every training
response c_j = y_j <w, Phi(x_j)> up to date with one kernel row (n evaluations, counted by `numerics.kernels`); a
step that changes no coefficient needs no row (its response was already known). The test responses
f(x) = <w, Phi(x)> are maintained the same way, with their own counter: they are the evaluator's work (notes-003
2.2, [C]'s validation block), never part of a method's count. SBP also keeps the running sums of coef, c and the test
responses for its averaged iterate.

`scale` is a lazy factor on coef and on both response vectors (kernel Pegasos shrinks w every step without a row).
With averaging (SBP), the responses are kept in true units (every step changes all of them anyway) and only coef
is lazy: coef_true = coef * coef_scale, and coef_sum_j collects sum_t coef_j(t) coef_scale(t) from the running sum
of the scales (`scale_sum`) and the value it had when coef_j last changed (`coef_mark`), so that one step touches
one coefficient, not n (`coef_now`, `coef_total` read them).
"""
from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from ...numerics.kernels import KernelData, KernelParams, kernel_diagonal, kernel_row

__all__ = ["Responses", "add_row", "renormalise", "responses"]


class Responses(NamedTuple):
    data: KernelData
    test: KernelData
    params: KernelParams
    y: np.ndarray                 # training labels (+-1, float)
    kdiag: np.ndarray             # K(x_i, x_i) (the Gaussian's without evaluations)
    coef: np.ndarray              # w = scale * sum_j coef_j y_j Phi(x_j)
    c: np.ndarray                 # training responses y_j <w, Phi(x_j)> / scale
    test_c: np.ndarray            # test responses <w, Phi(x)> / scale
    averaged: bool                # keep the running sums below (SBP's averaged iterate)
    coef_sum: np.ndarray          # sum over iterations of coef * coef_scale, up to each coef's last change
    c_sum: np.ndarray             # ... of the training responses
    test_sum: np.ndarray          # ... of the test responses
    scale: np.ndarray             # (1,)
    coef_scale: np.ndarray        # (1,) averaged: coef's lazy factor
    scale_sum: np.ndarray         # (1,) averaged: the sum over iterations of coef_scale
    coef_mark: np.ndarray         # averaged: scale_sum when coef_j last changed
    row: np.ndarray               # scratch: one training kernel row
    test_row: np.ndarray          # scratch: one test kernel row
    scratch: np.ndarray           # scratch: a zero d-vector (sparse rows are scattered into it)
    evaluations: np.ndarray       # (M,) kernel evaluations of the method (training rows and the diagonal), per member
    members: np.ndarray           # (M + 1,) member m holds the training points members[m]..members[m + 1]
    test_evaluations: np.ndarray  # (1,) kernel evaluations for the test responses (the evaluator's)


def responses(data: KernelData, params: KernelParams, y: np.ndarray, test: KernelData | None = None,
              averaged: bool = False, members: np.ndarray | None = None) -> Responses:
    """A zero model on `data` (and `test`, when given: its responses are then kept up to date).

    `members`: the boundaries of the nodes whose points `data` concatenates (distributed SBP steps a group of
    clients as one); each member's kernel evaluations are counted apart (`evaluations[m]`). Default: one member."""
    n = data.sqnorm.shape[0]
    if test is None:
        test = KernelData(data.indptr[:1], data.indices[:0], data.values[:0], data.dense[:0], data.sqnorm[:0],
                          data.sparse, data.d)
    m = test.sqnorm.shape[0]
    members = np.array([0, n], np.int64) if members is None else np.asarray(members, np.int64)
    diagonal = np.zeros(1, np.int64)
    kdiag = kernel_diagonal(data, params, diagonal)
    evaluations = np.diff(members) if diagonal[0] else np.zeros(members.shape[0] - 1, np.int64)
    sums = n if averaged else 0
    return Responses(data, test, params, np.asarray(y, np.float64), kdiag, np.zeros(n), np.zeros(n), np.zeros(m),
                     bool(averaged), np.zeros(sums), np.zeros(sums), np.zeros(m if averaged else 0), np.ones(1),
                     np.ones(1), np.zeros(1), np.zeros(sums), np.zeros(n), np.zeros(m), np.zeros(data.d), evaluations,
                     members, np.zeros(1, np.int64))


@numba.njit(cache=True, nogil=True)
def add_row(R, i, delta, shrink):
    """w <- shrink * (w + delta * y_i Phi(x_i)), with every response brought up to date by one kernel row of x_i (and
    one test row); then the running sums, when kept. `delta` is in true units."""
    apply_row(R, R.data, i, R.y[i], i, delta, shrink)


@numba.njit(cache=True, nogil=True)
def apply_row(R, q, qi, yq, owner, delta, shrink):
    """`add_row` for a point z = row `qi` of `q` with label `yq` that may live elsewhere (distributed SBP: the sampled
    point arrives in a message); `owner` is its index here, or -1 when another node holds its coefficient."""
    n = R.c.shape[0]
    for k in range(R.members.shape[0] - 1):         # each member's rows, counted on that member
        lo, hi = R.members[k], R.members[k + 1]
        kernel_row(R.data, R.params, q, qi, lo, hi, R.row[lo:hi], R.scratch, R.evaluations[k:k + 1])
    a = delta * yq
    i = owner
    step = a / R.scale[0]                   # without averaging: in the lazy scale's units
    if R.averaged:                          # SBP: responses in true units, the projection applied in place
        P = R.scale_sum[0]
        if i >= 0:
            R.coef_sum[i] += R.coef[i] * (P - R.coef_mark[i])
            R.coef_mark[i] = P
            R.coef[i] += delta / R.coef_scale[0]
        for j in range(n):
            cj = (R.c[j] + a * R.y[j] * R.row[j]) * shrink
            R.c[j] = cj
            R.c_sum[j] += cj
        cs = R.coef_scale[0] * shrink
        R.coef_scale[0] = cs
        R.scale_sum[0] = P + cs
        if cs < FOLD_SHARE * (P + cs):     # below it, adding cs to scale_sum would round away its digits
            _fold_coef(R)
    else:
        if i >= 0:
            R.coef[i] += delta / R.scale[0]
        for j in range(n):
            R.c[j] += step * R.y[j] * R.row[j]
    m = R.test_c.shape[0]
    if m:
        kernel_row(R.test, R.params, q, qi, 0, m, R.test_row, R.scratch, R.test_evaluations)
        if R.averaged:
            for j in range(m):
                v = (R.test_c[j] + a * R.test_row[j]) * shrink
                R.test_c[j] = v
                R.test_sum[j] += v
        else:
            for j in range(m):
                R.test_c[j] += step * R.test_row[j]
    if not R.averaged:
        R.scale[0] *= shrink


#: averaged: coef_scale is folded into coef once it falls below this share of scale_sum. Each step adds coef_scale to
#: scale_sum; a term below 1e-16 scale_sum is rounded away, and coef_total then misses the recent steps'
#: coefficients while the responses' sums (in true units) keep them: ||w||^2 = coef . c came out too small and the
#: averaged iterate's objective below the certified optimum. At this share each term keeps 7 of its 16 digits.
FOLD_SHARE = 1e-9


@numba.njit(cache=True, nogil=True)
def _fold_coef(R):
    """Averaged: bring every coef_sum up to date and fold coef_scale into coef (before scale_sum rounds its terms
    away)."""
    P = R.scale_sum[0]
    cs = R.coef_scale[0]
    for j in range(R.coef.shape[0]):
        R.coef_sum[j] += R.coef[j] * (P - R.coef_mark[j])
        R.coef_mark[j] = 0.0
        R.coef[j] *= cs
    R.coef_scale[0] = 1.0
    R.scale_sum[0] = 0.0


def coef_now(R: Responses) -> np.ndarray:
    """The current coefficients in true units."""
    return R.coef * (R.coef_scale[0] if R.averaged else R.scale[0])


def coef_total(R: Responses) -> np.ndarray:
    """Averaged: sum over the iterations so far of the coefficients (the averaged iterate times T)."""
    return R.coef_sum + R.coef * (R.scale_sum[0] - R.coef_mark)


@numba.njit(cache=True, nogil=True)
def renormalise(R):
    """Fold `scale` into coef and the responses (when it drifts far from 1, or before reading them)."""
    s = R.scale[0]
    if s == 1.0:
        return
    for j in range(R.c.shape[0]):
        R.c[j] *= s
        R.coef[j] *= s
    for j in range(R.test_c.shape[0]):
        R.test_c[j] *= s
    R.scale[0] = 1.0
