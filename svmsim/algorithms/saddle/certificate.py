"""Certificates of a Saddle-SVC / Saddle-DSVC iterate in the data's own units (paper 000; notes section 1): the
capped minimum over a (reduced) hull, the lower bound of a direction and the evaluator of an iterate (w, p).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...core.metrics import relative_gap
from .preprocess import Rotation, row_norms


def capped_min(values: np.ndarray, cap: float) -> float:
    """min over the capped simplex of sum p_j v_j: weight cap on the floor(1/cap) smallest values, the rest on
    the next one (notes section 1, capmin). cap >= 1 gives the plain minimum."""
    if values.size == 0:
        return math.nan
    if not cap < 1.0:
        return float(values.min())
    k = int(math.floor(1.0 / cap + 1e-12))
    k = min(k, values.size)
    m = min(k + 1, values.size)
    smallest = np.sort(np.partition(values, m - 1)[:m])
    total = cap * smallest[:k].sum()
    rest = 1.0 - cap * k
    if k < smallest.size and rest > 0:
        total += rest * smallest[k]
    return float(total)


def hull_lower_bound(X, y: np.ndarray, direction: np.ndarray, cap: float, proj: np.ndarray | None = None
                     ) -> tuple[float, float]:
    """(gap, b) of a direction v: gap = capmin_P(v.x) - capmax_Q(v.x), b the bisecting offset (notes section 1).

    gap/|v| is a lower bound on the (reduced) hull distance. `proj` = X @ v when already computed.
    """
    if proj is None:
        proj = np.asarray(X @ direction).ravel()
    lo_p = capped_min(proj[y > 0], cap)
    hi_q = -capped_min(-proj[y < 0], cap)
    return lo_p - hi_q, 0.5 * (lo_p + hi_q)




@dataclass
class SaddleEvaluator:
    """Certificates and accuracies of an iterate (w, p), computed from the original data (not the rotation).

    upper bound: |z| with z = sum_j y_j p_j x_j (a point of the Minkowski difference of the (reduced) hulls);
    lower bound: gap(v)/|v| for the mapped-back direction v; certified relative gap (upper - lower)/upper.
    For the nu-SVM, problem (5)'s value at the best scaling of v is -lower^2/8 and its dual value -upper^2/8.
    """

    X: object
    y: np.ndarray
    cap: float
    rotation: Rotation | None = None     # only needed for iterates w in the rotated coordinates
    X_test: object = None
    y_test: np.ndarray | None = None
    diagnosis: HullDiagnosis | None = None

    def model(self, w: np.ndarray, proj: np.ndarray | None = None) -> tuple[np.ndarray, float, float]:
        """Direction in original coordinates, offset b (predict sign(v.x - b)) and gap."""
        v = self.rotation.to_original(w)
        gap, b = hull_lower_bound(self.X, self.y, v, self.cap, proj)
        return v, b, gap

    def __call__(self, w: np.ndarray, p: np.ndarray) -> dict:
        """The certificate of an iterate of a run, with ``diagnosis`` when the run cannot reach any gap."""
        out = self.certify(self.rotation.to_original(w), p)
        out["w_norm"] = float(np.linalg.norm(w))
        why = self.diagnose(out["hull_lower"])
        if why:
            out["diagnosis"] = why
        return out

    def diagnose(self, lower: float) -> str | None:
        """The reason a run cannot certify any gap (the hulls intersect), given its latest lower bound; see
        `HullDiagnosis`. One diagnosis per evaluator: an evaluator follows one run."""
        if self.diagnosis is None:
            self.diagnosis = HullDiagnosis(self.X, self.y, self.cap)
        return self.diagnosis.update(lower)

    def certify(self, v: np.ndarray, p: np.ndarray) -> dict:
        """The certificate of a direction v in the data's own coordinates and hull weights p (any solver's)."""
        proj = np.asarray(self.X @ v).ravel()
        gap, b = hull_lower_bound(self.X, self.y, v, self.cap, proj)
        z = np.asarray(self.X.T @ (self.y * p)).ravel()
        upper = float(np.linalg.norm(z))
        vnorm = float(np.linalg.norm(v))
        lower = max(gap / vnorm, 0.0) if vnorm > 0 else 0.0
        out = {
            "hull_distance": upper,
            "hull_lower": lower,
            "margin": 0.5 * lower,
            "rel_gap": relative_gap(upper, lower),
            "gap_upper": upper,
            "gap_lower": lower,
        }
        if self.cap < 1.0:
            out["objective"] = -lower * lower / 8.0   # problem (5) at the best scaling of v
            out["dual_objective"] = -upper * upper / 8.0
        else:
            out["objective"] = upper                  # the paper's Table 1 "obj": distance between the hulls
        out["duality_gap"] = (upper * upper - lower * lower) / 8.0 if self.cap < 1.0 else upper - lower
        out["train_accuracy"] = float(np.mean(np.where(proj >= b, 1.0, -1.0) == self.y))
        if self.X_test is not None and self.y_test is not None and len(self.y_test):
            st = np.asarray(self.X_test @ v).ravel() - b
            out["test_accuracy"] = float(np.mean(np.where(st >= 0, 1.0, -1.0) == self.y_test))
        return out


#: evaluations in a row without a positive certified lower bound before the hulls are tested for a common point
SETTLE_EVALUATIONS = 3
#: the LP's feasibility tolerance, in units of the largest row norm
INTERSECTION_TOLERANCE = 1e-9


def common_point(X, y: np.ndarray, cap: float) -> bool | None:
    """Whether the (reduced) hulls of the two classes share a point: is there p with 0 <= p_j <= cap, weights
    summing to 1 over each class, and sum_j y_j p_j x_j = 0 (notes section 1)? An LP feasibility problem solved by
    HiGHS on X scaled to the unit ball (tolerance `INTERSECTION_TOLERANCE`). None when the solver cannot tell."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    X = sp.csr_matrix(X, dtype=np.float64)
    scale = float(row_norms(X).max())
    if not scale > 0:
        return True
    n = X.shape[0]
    rows = sp.vstack([(sp.diags(y / scale) @ X).T, sp.csr_matrix((y > 0).astype(np.float64)),
                      sp.csr_matrix((y < 0).astype(np.float64))], format="csr")
    rhs = np.concatenate([np.zeros(X.shape[1]), [1.0, 1.0]])
    res = linprog(np.zeros(n), A_eq=rows, b_eq=rhs, bounds=(0.0, min(cap, 1.0)), method="highs-ipm",
                  options={"primal_feasibility_tolerance": INTERSECTION_TOLERANCE, "presolve": True})
    if res.status == 0:
        return True
    if res.status == 2:
        return False
    return None


@dataclass
class HullDiagnosis:
    """Says why a run cannot reach its certified gap when the (reduced) hulls intersect: after
    `SETTLE_EVALUATIONS` certificates in a row without a positive lower bound it asks `common_point` once; if the
    hulls share a point, the hull distance is 0 and `update` returns the reason to stop (else None, for good)."""

    X: object
    y: np.ndarray
    cap: float
    without_lower: int = 0
    verdict: bool | None = None
    checked: bool = False

    def update(self, lower: float) -> str | None:
        self.without_lower = self.without_lower + 1 if not lower > 0 else 0
        if not self.checked and self.without_lower >= SETTLE_EVALUATIONS:
            self.checked = True
            self.verdict = common_point(self.X, self.y, self.cap)
        return self.reason() if self.verdict else None

    def reason(self) -> str:
        n_pos, n_neg = int(np.count_nonzero(self.y > 0)), int(np.count_nonzero(self.y < 0))
        if not self.cap < 1.0:
            return ("the convex hulls of the two classes intersect: the data are not linearly separable, so the "
                    "hard-margin SVM has no solution; allowed: the nu-SVM (set alpha or nu)")
        alpha = 1.0 / (self.cap * min(n_pos, n_neg))
        return (f"the reduced hulls intersect at alpha = {alpha:.4g} (nu = {self.cap:.4g}): their distance is 0, so "
                "no nu-SVM margin exists and no gap can be certified; allowed: a larger alpha (a smaller nu)")
