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

from ...core import deadline
from ..stall import CertificateStall
from .local_cd import ShrinkingCD

__all__ = ["LOSSES", "Reference", "dual_objective", "loss_constants", "primal_objective", "reference_optimum",
           "row_gaps", "where_the_gap_lies"]

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
    other way round). The caller's matrix is never changed: rows whose indices are out of order are sorted in a
    copy."""
    X = sp.csr_matrix(X, dtype=np.float64)           # shares the caller's arrays when they are CSR float64 already
    return X if X.has_sorted_indices else X.sorted_indices()


#: the reference solver gives up, naming the cause, when its certificate has not improved for this many epochs
REFERENCE_PATIENCE = 2000


@dataclass(frozen=True)
class Reference:
    """A reference optimum: f* lies in [lower, upper] = [-f^P(w), f(alpha)] of the best pair found. It is
    `certified` when that interval is within the asked relative tolerance; otherwise `cause` says why not, and it
    is neither cached nor used as a target."""

    dual: float          # f(alpha) of the reference (the estimate of f*; f* <= dual)
    primal: float        # f^P(w) of the reference (f* >= -primal)
    epochs: int
    w: np.ndarray
    alpha: np.ndarray | None = None   # the dual point of `dual` (kept on disk, so a cached file is re-certified)
    cause: str | None = None          # None: certified; else why the certificate failed

    @property
    def certified(self) -> bool:
        return self.cause is None

    @property
    def f_star(self) -> float:
        return self.dual

    @property
    def rel_uncertainty(self) -> float:
        """(f^P(w) + f(alpha)) / |f(alpha)|: how far f* may lie from `dual`, relatively."""
        return (self.primal + self.dual) / abs(self.dual) if self.dual else math.inf


def row_gaps(X, y: np.ndarray, alpha: np.ndarray, C: float, loss: str) -> np.ndarray:
    """Each row's share of the duality gap f^P(w) + f(alpha) at w = X^T Y alpha (every share >= 0; they sum to the
    gap): C xi_i - alpha_i (1 - m_i) for L1, C xi_i^2 + alpha_i^2 / (4C) - alpha_i (1 - m_i) for L2, m_i =
    y_i w^T x_i. Where the gap lies tells why a certificate does not close."""
    w = np.asarray(X.T @ (y * alpha)).ravel()
    m = y * np.asarray(X @ w).ravel()
    xi = np.maximum(0.0, 1.0 - m)
    if loss == "hinge":
        return C * xi - alpha * (1.0 - m)
    return C * xi * xi + alpha * alpha / (4.0 * C) - alpha * (1.0 - m)


def where_the_gap_lies(X, y: np.ndarray, alpha: np.ndarray, C: float, loss: str) -> str | None:
    """A sentence on the rows that carry the duality gap of (alpha, X^T Y alpha): the all-zero rows' share (their
    Q_ii is 0 for L1, the case a coordinate step divides by), and how few rows carry 90% of it."""
    X = as_csr(X)
    rows = row_gaps(X, y, alpha, C, loss)
    total = float(rows.sum())
    if not total > 0:
        return None
    parts = []
    empty = np.diff(X.indptr) == 0
    if empty.any() and rows[empty].sum() >= 0.01 * total:
        parts.append(f"{int(empty.sum())} all-zero rows (Q_ii = 0) carry {rows[empty].sum() / total:.0%} of the gap")
    order = np.argsort(rows)[::-1]
    k = int(np.searchsorted(np.cumsum(rows[order]), 0.9 * total)) + 1
    parts.append(f"{min(k, rows.size)} of {rows.size} rows carry 90% of the gap (largest: row {int(order[0])}, "
                 f"{rows[order[0]]:.3g} of {total:.3g})")
    return "; ".join(parts)


_CACHE: dict[tuple, Reference] = {}

#: the on-disk format: bumped when an older file may hold a reference that this version would not certify
_FORMAT = "v2"


def _fingerprint(X: sp.csr_matrix, y: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=16)
    for a in (X.indptr, X.indices, X.data, np.asarray(y, np.float64)):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr(X.shape).encode())
    return h.hexdigest()


def _solver_stamp() -> str:
    """A hash of the reference solver's sources: a kept failure is the verdict of one version of the solver."""
    from pathlib import Path

    from . import local_cd

    h = hashlib.blake2b(digest_size=8)
    for source in (Path(__file__), Path(local_cd.__file__)):
        h.update(source.read_bytes())
    return h.hexdigest()


def _cache_file(key: tuple, failed: bool = False):
    """Where a reference (or, `failed`, the failure of this version of the solver) is kept between runs:
    $SVMSIM_CACHE_DIR (default ~/.cache/svmsim)/references/; None when SVMSIM_CACHE_DIR is set to an empty
    string."""
    import os
    from pathlib import Path

    base = os.environ.get("SVMSIM_CACHE_DIR")
    if base == "":
        return None
    root = Path(base) if base else Path.home() / ".cache" / "svmsim"
    tail = f"-failed-{_solver_stamp()}" if failed else ""
    return root / "references" / (f"{key[0]}-C{key[1]!r}-{key[2]}-tol{key[3]!r}-{_FORMAT}{tail}.npz")


def _load(path, X, y: np.ndarray, C: float, loss: str, rel_tol: float) -> Reference | None:
    """A kept reference, certified again on the data (its primal at w and its dual at alpha recomputed), or a kept
    failure (its `cause`, with the pair it ended on); None when the file is unreadable, of another shape, or a
    kept reference's certificate fails."""
    try:
        with np.load(path) as z:
            w, alpha, epochs = np.asarray(z["w"], np.float64), np.asarray(z["alpha"], np.float64), int(z["epochs"])
            cause = str(z["cause"]) if "cause" in z.files else None
    except (OSError, KeyError, ValueError):
        return None
    if w.shape != (X.shape[1],) or alpha.shape != (X.shape[0],):
        return None
    s, upper = loss_constants(loss, C)
    if not (np.all(alpha >= 0.0) and np.all(alpha <= upper)):
        return None
    dual = dual_objective(np.asarray(X.T @ (y * alpha)).ravel(), alpha, s)
    primal = primal_objective(X, y, w, C, loss)
    if cause is None and not primal + dual <= rel_tol * abs(dual):
        return None
    return Reference(dual=dual, primal=primal, epochs=epochs, w=w, alpha=alpha, cause=cause)


def _warn_uncertified(ref: Reference, rel_tol: float, kept: bool) -> None:
    warnings.warn(f"the reference optimum f* is not certified: certified only to {ref.rel_uncertainty:.2e} "
                  f"relative after {ref.epochs} epochs (asked: {rel_tol:g}); cause: {ref.cause}"
                  f"{' (found in the cache: an earlier run computed it)' if kept else ''}. It is not used as a "
                  "target: relative errors against it (rel_dual, rel_primal) are reported as NaN; stop on the "
                  "run's own certified gap instead", RuntimeWarning, stacklevel=3)


def _keep(path, ref: Reference) -> None:
    """Write `ref` (or its failure, with its cause) whole under a temporary name, then rename it."""
    if path is None:
        return
    extra = {} if ref.cause is None else {"cause": ref.cause}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, dual=ref.dual, primal=ref.primal, epochs=ref.epochs, w=ref.w, alpha=ref.alpha, **extra)
        tmp.replace(path)
    except OSError:
        pass                                  # a read-only home: the reference is recomputed next time


def reference_optimum(X, y: np.ndarray, C: float, loss: str, rel_tol: float = 1e-8, max_epochs: int = 500_000,
                      seed: int = 0) -> Reference:
    """The dual optimum f* of (2), by shuffled dual coordinate descent on one machine with LIBLINEAR's shrinking
    until the duality gap (on every row, all-zero rows included) is at most `rel_tol` |f(alpha)|. Only a certified
    reference is kept as a reference: per data set (a hash of its arrays), C and loss in this process and on disk
    (see `_cache_file`; a kept file is certified again when read), so a sweep or a second run computes it once. A
    reference that fails its certificate (its budget ran out, its certificate stalled, non-finite values) comes back
    with `cause` set and a RuntimeWarning naming the cause, and is never a target; the failure itself is kept (the
    same data, C, loss and tolerance fail the same way, so a later run says so at once instead of spending the
    epochs again), except a failure of a budget (`max_epochs`, the run's `max_seconds`), which a larger one may not
    repeat; a kept failure (seed 0) serves calls of seed 0 that allow at least as many epochs as it took.
    Tests hold it against LIBLINEAR (scikit-learn's LinearSVC)."""
    X = as_csr(X)
    y = np.asarray(y, np.float64)
    key = (_fingerprint(X, y), float(C), loss, float(rel_tol))
    hit = _CACHE.get(key)
    path, failed = _cache_file(key), _cache_file(key, failed=True)
    for kept in (path, failed):
        if hit is None and kept is not None and kept.is_file():
            hit = _load(kept, X, y, C, loss, rel_tol)
            if hit is not None:
                _CACHE[key] = hit
    if hit is not None and not hit.certified and (hit.epochs > max_epochs or seed != 0):
        hit = None                            # a failure after more epochs than this call may spend, or another
        #                                       path (seed): try anew
    if hit is not None:
        if not hit.certified:
            _warn_uncertified(hit, rel_tol, kept=True)
        return hit
    s, upper = loss_constants(loss, C)
    cd = ShrinkingCD(X, y, s, upper, seed)
    best_dual, best_primal, best_w, best_alpha = math.inf, math.inf, cd.w.copy(), cd.alpha.copy()
    stall = CertificateStall(REFERENCE_PATIENCE, unit="epochs",
                             explain=lambda: where_the_gap_lies(X, y, cd.alpha, C, loss))
    cause = None
    check = 10
    while True:
        for _ in range(min(check, max_epochs - cd.epochs)):
            cd.epoch()
        w_exact = np.asarray(X.T @ (y * cd.alpha)).ravel()      # no drift from the incremental updates
        dual = dual_objective(w_exact, cd.alpha, s)
        if dual < best_dual:
            best_dual, best_alpha = dual, cd.alpha.copy()
        primal = primal_objective(X, y, w_exact, C, loss)
        if primal < best_primal:
            best_primal, best_w = primal, w_exact
        if not (math.isfinite(dual) and math.isfinite(primal)):
            cause = "non-finite values (NaN or inf) in the data or the iterates"
            break
        if best_primal + best_dual <= rel_tol * abs(best_dual):
            break
        why = stall.update(cd.epochs, best_primal + best_dual, best_primal)
        if why:
            cause = why
            break
        if deadline.expired():               # the run's max_seconds counts set-up: give up, naming it
            cause = deadline.BUDGET_CAUSE
            break
        if cd.epochs >= max_epochs:
            where = where_the_gap_lies(X, y, cd.alpha, C, loss)
            cause = (f"its budget of max_epochs = {max_epochs} epochs ran out while the gap was still falling"
                     + (f"; {where}" if where else ""))
            break
        cd.unshrink()                          # rows shrunk on a stale gradient get another look
        check = min(2 * check, 1000)
    ref = Reference(dual=best_dual, primal=best_primal, epochs=cd.epochs, w=best_w, alpha=best_alpha, cause=cause)
    if cause is not None:
        _warn_uncertified(ref, rel_tol, kept=False)
        if cause == deadline.BUDGET_CAUSE or cd.epochs >= max_epochs or seed != 0:
            return ref                        # a budget's verdict (a larger budget may certify), or another path
    _CACHE[key] = ref
    _keep(path if ref.certified else failed, ref)
    return ref
