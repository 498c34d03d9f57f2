"""What every kernel method of paper 003 keeps: a model w = scale * sum_j coef_j y_j Phi(x_j) and its responses.

SBP, kernel Pegasos, the Perceptron and SDCA all change one coefficient per step and then bring every training
response c_j = y_j <w, Phi(x_j)> up to date with one kernel row (n evaluations, counted by `numerics.kernels`); a
step that changes no coefficient needs no row (its response was already known). The test responses
f(x) = <w, Phi(x)> are maintained the same way, with their own counter: they are the evaluator's work (notes-003
2.2, [C]'s validation block), never part of a method's count. SBP also keeps the running sums of coef, c and the test
responses for its averaged iterate.

`scale` is a lazy factor on coef and on both response vectors (kernel Pegasos shrinks w every step without a row).
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
    coef_sum: np.ndarray          # sum over iterations of coef * scale
    c_sum: np.ndarray             # ... of the training responses
    test_sum: np.ndarray          # ... of the test responses
    scale: np.ndarray             # (1,)
    row: np.ndarray               # scratch: one training kernel row
    test_row: np.ndarray          # scratch: one test kernel row
    scratch: np.ndarray           # scratch: a zero d-vector (sparse rows are scattered into it)
    evaluations: np.ndarray       # (1,) kernel evaluations of the method (training rows and the diagonal)
    test_evaluations: np.ndarray  # (1,) kernel evaluations for the test responses (the evaluator's)


def responses(data: KernelData, params: KernelParams, y: np.ndarray, test: KernelData | None = None,
              averaged: bool = False) -> Responses:
    """A zero model on `data` (and `test`, when given: its responses are then kept up to date)."""
    n = data.sqnorm.shape[0]
    if test is None:
        test = KernelData(data.indptr[:1], data.indices[:0], data.values[:0], data.dense[:0], data.sqnorm[:0],
                          data.sparse, data.d)
    m = test.sqnorm.shape[0]
    evaluations = np.zeros(1, np.int64)
    kdiag = kernel_diagonal(data, params, evaluations)
    sums = n if averaged else 0
    return Responses(data, test, params, np.asarray(y, np.float64), kdiag, np.zeros(n), np.zeros(n), np.zeros(m),
                     bool(averaged), np.zeros(sums), np.zeros(sums), np.zeros(m if averaged else 0), np.ones(1),
                     np.zeros(n), np.zeros(m), np.zeros(data.d), evaluations, np.zeros(1, np.int64))


@numba.njit(cache=True, nogil=True)
def add_row(R, i, delta, shrink):
    """w <- shrink * (w + delta * y_i Phi(x_i)), with every response brought up to date by one kernel row of x_i (and
    one test row); then the running sums, when kept. Returns the new training responses' scale-free view (R.c).
    `delta` is in true units (not divided by `scale`)."""
    n = R.c.shape[0]
    kernel_row(R.data, R.params, R.data, i, 0, n, R.row, R.scratch, R.evaluations)
    step = delta / R.scale[0]
    R.coef[i] += step
    yi = R.y[i]
    a = step * yi
    if R.averaged:                          # SBP: scale stays 1; shrink (the projection) is applied in place
        for j in range(n):
            cj = (R.c[j] + a * R.y[j] * R.row[j]) * shrink
            R.c[j] = cj
            R.c_sum[j] += cj
            cf = R.coef[j] * shrink
            R.coef[j] = cf
            R.coef_sum[j] += cf
    else:
        for j in range(n):
            R.c[j] += a * R.y[j] * R.row[j]
        R.scale[0] *= shrink
    m = R.test_c.shape[0]
    if m:
        kernel_row(R.test, R.params, R.data, i, 0, m, R.test_row, R.scratch, R.test_evaluations)
        if R.averaged:
            for j in range(m):
                v = (R.test_c[j] + a * R.test_row[j]) * shrink
                R.test_c[j] = v
                R.test_sum[j] += v
        else:
            for j in range(m):
                R.test_c[j] += a * R.test_row[j]


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
