"""Paper 004's objective and its certified optimum (notes-004 sections 1.1, 3.2).

    J(w) = lam/2 ||w||^2 + 1/n sum_i max(0, 1 - y_i <x_i, w>)          (eq. 2; Pegasos' scaling)
    J_b(w) = lam/2 ||w||^2 + min_b 1/n sum_i max(0, 1 - y_i (<x_i, w> + b))   (Pragam-b, section 4)
    D(alpha) = b^T alpha - 1/(2 lam) ||sum_i alpha_i y_i x_i||^2,  alpha in Q2   (eq. 21: D <= J* <= J)

J is LIBLINEAR's primal 1/2 ||w||^2 + C sum hinge times lam, with C = 1/(lam n) (notes-004 section 1.1), so the
reference optimum J* is paper 001's certified dual optimum at that C (`bqo.objective.reference_optimum`, to a
duality gap <= 1e-8 |f*|) times lam: LIBLINEAR's own word is not taken (at lam = 2^-18 it may not converge).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..bqo.objective import as_csr, reference_optimum

__all__ = ["Optimum", "band_lower_bound", "best_bias", "lipschitz", "objective", "optimum"]


def best_bias(scores: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(b, mean hinge) minimising 1/n sum_i max(0, 1 - y_i (scores_i + b)): a convex piecewise-linear function of
    b with kinks at y_i - scores_i whose slope, (#{y = -1 active} - #{y = +1 active}) / n, rises through the
    kinks; the minimiser is the kink where it turns non-negative (O(n log n) by sorting)."""
    kinks = y - scores
    order = np.argsort(kinks, kind="stable")
    k, yy = kinks[order], y[order]
    # slope just right of kink j: negatives with kink <= k_j are active (+1/n each), positives with kink > k_j too
    neg_left = np.cumsum(yy < 0)
    pos_right = np.count_nonzero(y > 0) - np.cumsum(yy > 0)
    slope = neg_left - pos_right
    j = int(np.argmax(slope >= 0)) if np.any(slope >= 0) else len(k) - 1
    b = float(k[j])
    return b, float(np.mean(np.maximum(0.0, 1.0 - y * (scores + b))))


def objective(X, y: np.ndarray, w: np.ndarray, lam: float, *, bias: bool = False, risk: str = "hinge",
              zero_plane: bool = True) -> tuple[float, float]:
    """(J(w), b): the objective and, with `bias`, the minimising bias (else 0). risk = "max_of_planes": the
    lower-bound instance's max(0, max_i <a_i, w>) (rows a_i, labels -1; without the 0 when not `zero_plane`)."""
    scores = np.asarray(X @ w).ravel()
    reg = 0.5 * lam * float(w @ w)
    if risk == "max_of_planes":
        top = float(np.max(-y * scores))
        return reg + (max(0.0, top) if zero_plane else top), 0.0
    if bias:
        b, r = best_bias(scores, y)
        return reg + r, b
    return reg + float(np.mean(np.maximum(0.0, 1.0 - y * scores))), 0.0


def lipschitz(X, lam: float, safety: float = 1e-6) -> float:
    """L = sigma_max(X)^2 / lam, the Lipschitz constant of grad D (notes-004 section 3.2; labels do not change
    it), by ARPACK (scipy's svds) and raised by `safety` relative: Algorithm 1 needs an over-estimate."""
    import scipy.sparse.linalg as sla

    X = as_csr(X)
    if min(X.shape) <= 2:
        s = float(np.linalg.norm(X.toarray(), 2))
    else:
        s = float(sla.svds(X, k=1, return_singular_vectors=False, tol=1e-10, random_state=0)[0])
    return (1.0 + safety) * s * s / lam


@dataclass(frozen=True)
class Optimum:
    """J* and how well it is known (relative; 0 for the instance, whose J* is exact)."""

    value: float
    rel_uncertainty: float
    source: str


def optimum(X, y: np.ndarray, lam: float, risk: str = "hinge", zero_plane: bool = True) -> Optimum:
    """The certified J* of the problem without bias."""
    if risk == "max_of_planes":
        if zero_plane:
            return Optimum(0.0, 0.0, "exact: J(0) = 0 (notes-004 section 2.2, fix 2)")
        return Optimum(-0.5 / (lam * X.shape[0]), 0.0, "exact: -1/(2 lam d) at w = -(1/(lam d)) sum a_i (orthonormal "
                       "planes, notes-004 section 2.2, fix 1)")
    n = X.shape[0]
    ref = reference_optimum(X, y, 1.0 / (lam * n), "hinge")
    if not ref.certified:                     # no target: primal_error and rel_primal are NaN
        return Optimum(math.nan, ref.rel_uncertainty,
                       f"none: svmsim's dual coordinate descent at C = 1/(lam n) failed its certificate after "
                       f"{ref.epochs} epochs ({ref.cause})")
    return Optimum(-lam * ref.f_star, ref.rel_uncertainty,
                   f"svmsim dual coordinate descent at C = 1/(lam n), {ref.epochs} epochs, certified by its "
                   f"duality gap (relative {ref.rel_uncertainty:.1e})")


def relative(value: float, ref: float) -> float:
    return (value - ref) / abs(ref) if ref else math.inf


def band_lower_bound(X, y: np.ndarray, w: np.ndarray, lam: float, bands=(0.1, 0.3), epochs: int = 50,
                     seed: int = 0) -> float:
    """A certified lower bound on J* (no bias) from a primal iterate w: D(alpha) for the alpha of Q2 that fixes
    alpha_i = 1/n where y_i <x_i, w> < 1 - delta, 0 where it is > 1 + delta, and maximises D over the margin band
    |y_i <x_i, w> - 1| <= delta by dual coordinate descent restricted to the band (`epochs` epochs, paper 001's
    local solver). Any alpha in Q2 gives D(alpha) <= J*, so the bound is as certified as Pragam's own; near the
    optimum the band holds the support vectors on the margin and the bound closes the gap that Pragam's dual
    iterates leave (they trail its primal iterates by 15-45x on a9a). The best over the `bands` deltas."""
    from ..bqo.local_cd import DualCD

    X = as_csr(X)
    n = X.shape[0]
    upper = 1.0 / (lam * n)                     # paper 001's scaling: a = alpha / lam in [0, C], C = 1/(lam n)
    margins = y * np.asarray(X @ w).ravel()
    best = -math.inf
    for delta in bands:
        fixed = np.where(margins < 1.0 - delta, upper, 0.0)
        band = np.flatnonzero(np.abs(margins - 1.0) <= delta)
        w_fixed = np.asarray(X.T @ (y * fixed)).ravel()
        if band.size:
            cd = DualCD(X[band], y[band], 0.0, upper, seed)
            cd.w[:] = w_fixed
            previous = -math.inf
            for _ in range(epochs):
                cd.epoch()
                value = float(cd.alpha.sum()) - 0.5 * float(cd.w @ cd.w)
                if value - previous <= 1e-6 * abs(value):
                    break
                previous = value
            a_sum, wv = float(fixed.sum() + cd.alpha.sum()), cd.w
        else:
            a_sum, wv = float(fixed.sum()), w_fixed
        best = max(best, lam * (a_sum - 0.5 * float(wv @ wv)))      # D(alpha) = -lam f(a)
    return best
