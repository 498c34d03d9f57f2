"""The no-bias kernel SVM (2.2) solved to a certified gap, and the nu it corresponds to (notes-003 1.3).

Paper 003 sets nu = L(w*) / ||w*|| from the exact solution w* of the lambda problem (no closed form maps C or lambda
to nu). `solve_no_bias` runs dual coordinate ascent on (4.1) (box [0, C], C = 1/(lam n)) over a dense Gram matrix
until the duality gap P(w) - D(alpha) of the C-SVM is below `tol` times P, so the reference is certified; its
kernel evaluations (n^2 for the matrix) are counted apart from any method's. Needs the dense n x n matrix: larger
sets get a clear error (give nu directly: Table 2's values, e.g. a9a 1.10e-2).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from ...core import deadline
from ...errors import InfeasibleParameterError
from ...numerics.kernels import KernelData, KernelParams, kernel_matrix

__all__ = ["GRAM_LIMIT_BYTES", "NoBiasSolution", "nu_from_lambda", "solve_no_bias"]

#: the largest dense Gram matrix the reference builds (20 000 points)
GRAM_LIMIT_BYTES = 3.2e9


class NoBiasSolution(NamedTuple):
    alpha: np.ndarray        # dual variables in [0, C]; w = sum_j alpha_j y_j Phi(x_j)
    norm: float              # ||w||
    hinge: float             # mean hinge loss of w
    primal: float            # 1/2 ||w||^2 + C sum hinge
    gap: float               # certified: primal - dual
    nu: float                # hinge / norm
    epochs: int
    evaluations: int


@numba.njit(cache=True, nogil=True)
def _dual_cd(Q, C, alpha, grad, epochs, tol, order_seed):
    """Dual coordinate ascent on max sum alpha - 1/2 alpha' Q alpha over [0, C]^n; grad = Q alpha - 1 kept; stops
    when the largest projected-gradient violation is below tol. Returns the epochs run."""
    n = alpha.shape[0]
    order = np.arange(n)
    np.random.seed(order_seed)
    for epoch in range(epochs):
        np.random.shuffle(order)
        worst = 0.0
        for r in range(n):
            i = order[r]
            g = grad[i]
            a = alpha[i]
            pg = min(g, 0.0) if a <= 0.0 else (max(g, 0.0) if a >= C else g)
            worst = max(worst, abs(pg))
            if pg != 0.0 and Q[i, i] > 0.0:
                new = min(max(a - g / Q[i, i], 0.0), C)
                delta = new - a
                if delta != 0.0:
                    alpha[i] = new
                    for j in range(n):
                        grad[j] += delta * Q[i, j]
        if worst < tol:
            return epoch + 1
    return epochs


#: rows of the kernel matrix signed at once
_ROWS_AT_ONCE = 512


def solve_no_bias(data: KernelData, params: KernelParams, y: np.ndarray, C: float, *, tol: float = 1e-6,
                  max_epochs: int = 10_000, seed: int = 0) -> NoBiasSolution:
    """The certified no-bias C-SVM (InfeasibleParameterError when the Gram matrix is too large)."""
    n = y.shape[0]
    if 8.0 * n * n > GRAM_LIMIT_BYTES:
        raise InfeasibleParameterError(
            f"nu = 'auto' solves the no-bias SVM over a dense {n} x {n} kernel matrix ({8e-9 * n * n:.1f} GB); "
            f"allowed: at most {int(math.sqrt(GRAM_LIMIT_BYTES / 8))} training points; give nu directly "
            "(paper 003's Table 2: Adult 1.10e-2, MNIST 2.21e-4, Reuters 6.34e-4)")
    evaluations = np.zeros(1, np.int64)
    Q = kernel_matrix(data, params, evaluations, max_bytes=GRAM_LIMIT_BYTES)
    for lo in range(0, n, _ROWS_AT_ONCE):           # Q = K * y y', in place, a block of rows at a time (the same
        hi = min(n, lo + _ROWS_AT_ONCE)              # products; not three n x n arrays at once: 1.9 GB at n = 8844)
        Q[lo:hi] *= np.outer(y[lo:hi], y)
    alpha = np.zeros(n)
    grad = -np.ones(n)
    epochs_done = 0
    gap = math.inf
    primal = math.nan
    pg_tol = 1e-3
    while epochs_done < max_epochs:
        epochs_done += _dual_cd(Q, C, alpha, grad, min(100, max_epochs - epochs_done), pg_tol, seed + epochs_done)
        margins = grad + 1.0                        # y_i f(x_i)
        hinge = np.maximum(0.0, 1.0 - margins)
        w2 = float(alpha @ (margins))               # alpha' Q alpha
        primal = 0.5 * w2 + C * hinge.sum()
        dual = alpha.sum() - 0.5 * w2
        gap = primal - dual
        if gap <= tol * abs(primal):
            break
        if deadline.expired():
            raise InfeasibleParameterError(
                f"nu = 'auto' needs the certified no-bias SVM, and its solve was still at a relative gap of "
                f"{gap / abs(primal):.2g} after {epochs_done} epochs when {deadline.BUDGET_CAUSE}; allowed: a larger "
                "max_seconds, or nu given directly (paper 003's Table 2: Adult 1.10e-2)")
        pg_tol *= 0.1
    w2 = max(float(alpha @ (grad + 1.0)), 0.0)
    margins = grad + 1.0
    norm = math.sqrt(w2)
    hinge = float(np.maximum(0.0, 1.0 - margins).mean())
    return NoBiasSolution(alpha, norm, hinge, primal, gap, hinge / norm if norm > 0 else math.inf, epochs_done,
                          int(evaluations[0]))


def nu_from_lambda(data: KernelData, params: KernelParams, y: np.ndarray, lam: float, **kw) -> NoBiasSolution:
    """The reference at C = 1/(lam n) and its nu = L(w*) / ||w*|| (Lemma 2.1; the paper's way of setting nu)."""
    return solve_no_bias(data, params, y, 1.0 / (lam * y.shape[0]), **kw)
