"""Kernel functions, and the one place where kernel evaluations are done and counted.

Paper 003 measures cost in kernel evaluations, so every evaluation a method performs goes through `kernel_row`
(numba), which adds what it computed to an ``evaluations`` counter (a length-1 int64 array the caller owns; a node
program hands its count to the meter as the node quantity ``"kernel_evaluations"``). A value a method keeps (a
response it maintains, a cached diagonal) is not an evaluation. Every evaluation is also one d-dimensional inner
product (the Gaussian reads the squared norms computed once in `kernel_data`), which is the unit random Fourier
features are counted in.

Kernels (``KernelParams.kind``):

* linear      K(x, z) = <x, z>
* gaussian    K(x, z) = exp(-gamma ||x - z||^2), gamma = 1 / (2 sigma^2) (paper 003 lists sigma^2; notes-003 gotcha 10)
* polynomial  K(x, z) = (gamma <x, z> + coef0)^degree

Data are read as `KernelData`: CSR rows (``indptr``, ``indices``, ``values``) or dense rows (``dense``), with the
squared norms. A query row is scattered into a dense d-vector once per row (sparse data), so one evaluation costs
the nonzeros of one row.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np
import scipy.sparse as sp

from .csr import CSR_INDEX

__all__ = [
    "GAUSSIAN",
    "KERNEL_KINDS",
    "LINEAR",
    "POLYNOMIAL",
    "KernelData",
    "KernelParams",
    "kernel_block",
    "kernel_data",
    "kernel_diagonal",
    "kernel_matrix",
    "kernel_params",
    "kernel_row",
]

LINEAR, GAUSSIAN, POLYNOMIAL = 0, 1, 2
#: scenario name -> kind
KERNEL_KINDS = {"linear": LINEAR, "gaussian": GAUSSIAN, "polynomial": POLYNOMIAL}


class KernelParams(NamedTuple):
    """Which kernel, and its constants (read in numba by name)."""

    kind: int
    gamma: float
    coef0: float
    degree: int


class KernelData(NamedTuple):
    """Rows as the kernel routines read them. Sparse: ``indptr`` (n + 1), ``indices``, ``values`` and an empty
    ``dense`` (0 x d); dense: ``dense`` (n x d) and empty CSR arrays. ``sqnorm[i] = ||x_i||^2``."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    dense: np.ndarray
    sqnorm: np.ndarray
    sparse: bool
    d: int


def kernel_params(kind: str, *, sigma2: float | None = None, gamma: float | None = None, coef0: float = 0.0,
                  degree: int = 3) -> KernelParams:
    """`KernelParams` from scenario-style values (ValueError naming what is wrong and what is allowed)."""
    if kind not in KERNEL_KINDS:
        raise ValueError(f"kernel = {kind!r} is unknown; allowed: {', '.join(KERNEL_KINDS)}")
    if kind == "gaussian":
        if gamma is None:
            if sigma2 is None or not (sigma2 > 0 and math.isfinite(sigma2)):
                raise ValueError(f"the Gaussian kernel's sigma2 = {sigma2!r} is not allowed; allowed: a finite "
                                 "number > 0 (K = exp(-||x - z||^2 / (2 sigma2)))")
            gamma = 1.0 / (2.0 * sigma2)
    elif gamma is None:
        gamma = 1.0
    if not (gamma > 0 and math.isfinite(gamma)):
        raise ValueError(f"the kernel's gamma = {gamma!r} is not allowed; allowed: a finite number > 0")
    if kind == "polynomial" and (int(degree) != degree or degree < 1):
        raise ValueError(f"the polynomial kernel's degree = {degree!r} is not allowed; allowed: an integer >= 1")
    if not math.isfinite(coef0):
        raise ValueError(f"the kernel's coef0 = {coef0!r} is not allowed; allowed: a finite number")
    return KernelParams(KERNEL_KINDS[kind], float(gamma), float(coef0), int(degree))


def kernel_data(X, *, n_features: int | None = None) -> KernelData:
    """`KernelData` of a scipy sparse matrix (CSR rows) or a dense array."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        X.sort_indices()
        d = int(n_features or X.shape[1])
        sq = np.asarray(X.multiply(X).sum(axis=1), np.float64).ravel()
        return KernelData(X.indptr.astype(np.int64), X.indices.astype(CSR_INDEX), X.data.astype(np.float64),
                          np.zeros((0, d)), sq, True, d)
    A = np.ascontiguousarray(X, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"kernel data must be a 2-D array; got {A.ndim} dimension(s)")
    e = np.zeros(0, CSR_INDEX)
    return KernelData(np.zeros(1, np.int64), e, np.zeros(0), A, np.einsum("ij,ij->i", A, A), False, A.shape[1])


@numba.njit(cache=True, nogil=True, inline="always")
def _finish(params, dot, sq_a, sq_b):
    if params.kind == 1:
        dist = sq_a + sq_b - 2.0 * dot
        return math.exp(-params.gamma * (max(0.0, dist)))
    if params.kind == 2:
        base = params.gamma * dot + params.coef0
        out = 1.0
        for _ in range(params.degree):
            out *= base
        return out
    return dot


@numba.njit(cache=True, nogil=True, inline="always")
def _scatter(q, qi, scratch, value):
    """Write row qi of sparse `q` into the dense `scratch` (value=True) or clear it again (value=False)."""
    for p in range(q.indptr[qi], q.indptr[qi + 1]):
        scratch[q.indices[p]] = q.values[p] if value else 0.0


@numba.njit(cache=True, nogil=True)
def kernel_row(data, params, q, qi, lo, hi, out, scratch, evaluations):
    """out[j - lo] = K(x_j, z) for rows j in [lo, hi) of `data`, where z is row `qi` of `q` (same kind of storage);
    adds hi - lo to evaluations[0]. `scratch` is a zero d-vector (sparse data; left zero)."""
    qsq = q.sqnorm[qi]
    if data.sparse:
        _scatter(q, qi, scratch, True)
        ptr, idx, val = data.indptr, data.indices, data.values
        for j in range(lo, hi):
            acc = 0.0
            for p in range(ptr[j], ptr[j + 1]):
                acc += val[p] * scratch[idx[p]]
            out[j - lo] = _finish(params, acc, data.sqnorm[j], qsq)
        _scatter(q, qi, scratch, False)
    else:
        z = q.dense[qi]
        X = data.dense
        d = X.shape[1]
        for j in range(lo, hi):
            acc = 0.0
            for c in range(d):
                acc += X[j, c] * z[c]
            out[j - lo] = _finish(params, acc, data.sqnorm[j], qsq)
    evaluations[0] += hi - lo


@numba.njit(cache=True, nogil=True)
def kernel_diagonal(data, params, evaluations):
    """K(x_i, x_i) for every row; the Gaussian's is 1 without evaluating anything, the others count n."""
    n = data.sqnorm.shape[0]
    out = np.empty(n)
    for i in range(n):
        out[i] = 1.0 if params.kind == 1 else _finish(params, data.sqnorm[i], data.sqnorm[i], data.sqnorm[i])
    if params.kind != 1:
        evaluations[0] += n
    return out


@numba.njit(cache=True, nogil=True, parallel=False)
def kernel_block(data, params, q, q_rows, out, scratch, evaluations):
    """out[r, j] = K(x_j, z_r) for z_r = row q_rows[r] of `q` and every row j of `data` (counted)."""
    n = data.sqnorm.shape[0]
    for r in range(q_rows.shape[0]):
        kernel_row(data, params, q, q_rows[r], 0, n, out[r], scratch, evaluations)


def kernel_matrix(data: KernelData, params: KernelParams, evaluations: np.ndarray, *, q: KernelData | None = None,
                  max_bytes: float = 4e9) -> np.ndarray:
    """The dense (n_q x n) matrix K(z_r, x_j) (q defaults to data: the Gram matrix), counted; ValueError when it
    would need more than `max_bytes` of memory."""
    q = data if q is None else q
    n, m = data.sqnorm.shape[0], q.sqnorm.shape[0]
    need = 8.0 * n * m
    if need > max_bytes:
        raise ValueError(f"a dense {m} x {n} kernel matrix needs {need / 1e9:.1f} GB; allowed: at most "
                         f"{max_bytes / 1e9:.1f} GB (use fewer points, or give the value this matrix is computed for)")
    out = np.empty((m, n))
    kernel_block(data, params, q, np.arange(m, dtype=np.int64), out, np.zeros(data.d), evaluations)
    return out
