"""The primal (1) and dual (2) of the linear SVM without bias, and a certified reference optimum.

    primal  f^P(w) = 1/2 w^T w + C sum_i xi(w; x_i, y_i),   xi = max(0, 1 - y_i w^T x_i) (L1) or its square (L2)
    dual    f(alpha) = 1/2 alpha^T Qbar alpha - e^T alpha = 1/2 ||w||^2 + s/2 ||alpha||^2 - e^T alpha  (w = X^T Y alpha)
    (s, U) = (0, C) for L1, (1/(2C), inf) for L2;  f^P(w*) = -f(alpha*)

For any w and feasible alpha, -f(alpha) <= f^P(w*) <= f^P(w): the gap f^P(w) + f(alpha) certifies both; paper
001's stopping rule (27) divides it by f^P(0) + f(0) = C l.
"""
from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .local_cd import ShrinkingCD

__all__ = ["LOSSES", "Reference", "dual_objective", "loss_constants", "primal_objective", "reference_optimum"]

#: scenario names of the two losses (the paper's L1-SVM and L2-SVM)
LOSSES = ("hinge", "squared_hinge")


def loss_constants(loss: str, C: float) -> tuple[float, float]:
    """(s, U) of the dual (2) for `loss`."""
    return (0.0, float(C)) if loss == "hinge" else (0.5 / float(C), math.inf)


def primal_objective(X, y: np.ndarray, w: np.ndarray, C: float, loss: str, margins: np.ndarray | None = None
                     ) -> float:
    """f^P(w); `margins` (y_i w^T x_i) when already computed."""
    m = np.asarray(X @ w).ravel() * y if margins is None else margins
    xi = np.maximum(0.0, 1.0 - m)
    return float(0.5 * (w @ w) + C * (xi.sum() if loss == "hinge" else (xi * xi).sum()))


def dual_objective(w: np.ndarray, alpha: np.ndarray, s: float) -> float:
    """f(alpha) from w = X^T Y alpha (the authors' cheap form)."""
    return float(0.5 * (w @ w) + 0.5 * s * (alpha @ alpha) - alpha.sum())


def as_csr(X) -> sp.csr_matrix:
    """X as CSR float64 with sorted int32 indices (dense input becomes rows of every column, not densified the
    other way round)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    X.sort_indices()
    return X


@dataclass(frozen=True)
class Reference:
    """A certified optimum: f* lies in [lower, upper] = [-f^P(w), f(alpha)] of the best pair found."""

    dual: float          # f(alpha) of the reference (the estimate of f*; f* <= dual)
    primal: float        # f^P(w) of the reference (f* >= -primal)
    epochs: int
    w: np.ndarray

    @property
    def f_star(self) -> float:
        return self.dual

    @property
    def rel_uncertainty(self) -> float:
        """(f^P(w) + f(alpha)) / |f(alpha)|: how far f* may lie from `dual`, relatively."""
        return (self.primal + self.dual) / abs(self.dual) if self.dual else math.inf


_CACHE: dict[tuple, Reference] = {}


def _fingerprint(X: sp.csr_matrix, y: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=16)
    for a in (X.indptr, X.indices, X.data, np.asarray(y, np.float64)):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr(X.shape).encode())
    return h.hexdigest()


def _cache_file(key: tuple):
    """Where a reference is kept between runs: $SVMSIM_CACHE_DIR (default ~/.cache/svmsim)/references/; None when
    SVMSIM_CACHE_DIR is set to an empty string."""
    import os
    from pathlib import Path

    base = os.environ.get("SVMSIM_CACHE_DIR")
    if base == "":
        return None
    root = Path(base) if base else Path.home() / ".cache" / "svmsim"
    return root / "references" / (f"{key[0]}-C{key[1]!r}-{key[2]}-tol{key[3]!r}.npz")


def _load(path) -> Reference | None:
    try:
        with np.load(path) as z:
            return Reference(dual=float(z["dual"]), primal=float(z["primal"]), epochs=int(z["epochs"]), w=z["w"])
    except (OSError, KeyError, ValueError):
        return None


def reference_optimum(X, y: np.ndarray, C: float, loss: str, rel_tol: float = 1e-8, max_epochs: int = 500_000,
                      seed: int = 0) -> Reference:
    """The dual optimum f* of (2), by shuffled dual coordinate descent on one machine with LIBLINEAR's shrinking
    until the duality gap (on every row) is at most `rel_tol` |f(alpha)|. Kept per data set (a hash of its arrays), C
    and loss in this process and on disk (see `_cache_file`), so a sweep or a second run computes it once. Tests
    hold it against LIBLINEAR (scikit-learn's LinearSVC)."""
    X = as_csr(X)
    y = np.asarray(y, np.float64)
    key = (_fingerprint(X, y), float(C), loss, float(rel_tol))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    path = _cache_file(key)
    if path is not None and path.is_file():
        hit = _load(path)
        if hit is not None and hit.w.shape == (X.shape[1],):
            _CACHE[key] = hit
            return hit
    s, upper = loss_constants(loss, C)
    cd = ShrinkingCD(X, y, s, upper, seed)
    best_dual, best_primal, best_w = math.inf, math.inf, cd.w.copy()
    check = 10
    while cd.epochs < max_epochs:
        for _ in range(check):
            cd.epoch()
        w_exact = np.asarray(X.T @ (y * cd.alpha)).ravel()      # no drift from the incremental updates
        best_dual = min(best_dual, dual_objective(w_exact, cd.alpha, s))
        primal = primal_objective(X, y, w_exact, C, loss)
        if primal < best_primal:
            best_primal, best_w = primal, w_exact
        if best_primal + best_dual <= rel_tol * abs(best_dual):
            break
        cd.unshrink()                          # rows shrunk on a stale gradient get another look
        check = min(2 * check, 1000)
    ref = Reference(dual=best_dual, primal=best_primal, epochs=cd.epochs, w=best_w)
    if not ref.rel_uncertainty <= rel_tol:
        warnings.warn(f"the reference optimum f* is certified only to {ref.rel_uncertainty:.2e} relative after "
                      f"max_epochs = {max_epochs} epochs (asked: {rel_tol:g}); relative primal and dual errors "
                      "below that are not meaningful", RuntimeWarning, stacklevel=2)
    _CACHE[key] = ref
    if path is not None:
        try:                                  # written whole under a temporary name, then renamed
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.npz")
            np.savez(tmp, dual=ref.dual, primal=ref.primal, epochs=ref.epochs, w=ref.w)
            tmp.replace(path)
        except OSError:
            pass                              # a read-only home: the reference is recomputed next time
    return ref
