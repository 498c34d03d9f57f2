"""Gilbert's algorithm for the hard-margin SVM (paper 000's baseline; Gilbert 1966, Gärtner & Jaggi 2009).

Read beside notes-000.md section 4: the nearest point of the Minkowski difference conv(P) - conv(Q) to the origin
is found by Frank-Wolfe steps. With x = p - q the current point:

    s = argmin_{p in P} <x, p> - argmax_{q in Q} <x, q>       (a vertex of the difference; one pass over the data)
    lambda = clip(<x, x - s> / |x - s|^2, 0, 1)               (exact line search)
    x <- (1 - lambda) x + lambda s

|x| is an upper bound on the hull distance and gap(x)/|x| (gap = min_P <x,p> - max_Q <x,q>) a lower bound: the
same certificate as Saddle-SVC's. Each iteration is one matrix-vector product over the whole data (O(nd)).
"""
from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from sklearn.base import BaseEstimator, ClassifierMixin

from ..errors import DataError
from .registry import AlgorithmInfo, register

__all__ = ["GilbertSVC", "GilbertParams"]


def _row(X, i: int) -> np.ndarray:
    """Row i of X as a dense vector (straight from the CSR arrays for sparse X)."""
    if sp.issparse(X):
        out = np.zeros(X.shape[1])
        lo, hi = X.indptr[i], X.indptr[i + 1]
        out[X.indices[lo:hi]] = X.data[lo:hi]
        return out
    return np.asarray(X[i], dtype=np.float64).ravel()


class GilbertSVC(ClassifierMixin, BaseEstimator):
    """Hard-margin linear SVM by Gilbert's algorithm on the Minkowski difference of the two classes' hulls.

    tol: stop when the certified relative gap (upper - lower)/upper of the hull distance is <= tol.
    max_iter: iteration budget. check_every: iterations between certificate records (the bound itself is free:
    every iteration computes it).

    Fitted attributes: coef_, intercept_ (decision = X @ coef_ + intercept_, canonical hard-margin scaling),
    classes_, hull_distance_, hull_lower_, margin_, rel_gap_, n_iter_, history_.
    """

    def __init__(self, tol=1e-3, max_iter=1_000_000, check_every=100):
        self.tol = tol
        self.max_iter = max_iter
        self.check_every = check_every

    def fit(self, X, y, callback=None, eval_set=None):
        t_start = time.perf_counter()
        classes = np.unique(y)
        if classes.size != 2:
            raise DataError(f"GilbertSVC needs exactly two classes; found {classes.size}")
        ypm = np.where(np.asarray(y) == classes[1], 1.0, -1.0)
        pos, neg = np.flatnonzero(ypm > 0), np.flatnonzero(ypm < 0)
        Xp, Xq = X[pos], X[neg]
        if sp.issparse(X):
            Xp, Xq = sp.csr_matrix(Xp), sp.csr_matrix(Xq)
        x = _row(Xp, 0) - _row(Xq, 0)                 # start: the difference of a pair
        history = []
        self.stop_reason_ = "iteration budget"
        it = 0
        upper = lower = gap = math.nan
        lo_p = hi_q = 0.0
        while True:
            proj_p = np.asarray(Xp @ x).ravel()
            proj_q = np.asarray(Xq @ x).ravel()
            ip, iq = int(np.argmin(proj_p)), int(np.argmax(proj_q))
            lo_p, hi_q = float(proj_p[ip]), float(proj_q[iq])
            xx = float(x @ x)
            upper = math.sqrt(xx)
            gap = lo_p - hi_q                          # <x, s> for the chosen vertex s
            lower = max(gap, 0.0) / upper if upper > 0 else 0.0
            rel = (upper - lower) / upper if upper > 0 else math.inf
            if it % self.check_every == 0 or rel <= self.tol or it >= self.max_iter:
                info = {"iteration": it, "hull_distance": upper, "hull_lower": lower, "margin": 0.5 * lower,
                        "rel_gap": rel, "objective": upper, "duality_gap": upper - lower,
                        "time": time.perf_counter() - t_start}
                b = 0.5 * (lo_p + hi_q)
                info["train_accuracy"] = float((np.count_nonzero(proj_p >= b) + np.count_nonzero(proj_q < b))
                                               / ypm.shape[0])
                if eval_set is not None:
                    st = np.asarray(eval_set[0] @ x).ravel() - b
                    yt = np.where(np.asarray(eval_set[1]) == classes[1], 1.0, -1.0)
                    info["test_accuracy"] = float(np.mean(np.where(st >= 0, 1.0, -1.0) == yt))
                history.append(info)
                if callback is not None and callback(info):
                    self.stop_reason_ = "callback"
                    break
            if rel <= self.tol:
                self.stop_reason_ = "certified gap"
                break
            if it >= self.max_iter:
                break
            s = _row(Xp, ip) - _row(Xq, iq)
            diff = x - s
            dd = float(diff @ diff)
            if dd <= 0.0:
                break
            lam = min(1.0, max(0.0, (xx - float(x @ s)) / dd))
            x = (1.0 - lam) * x + lam * s
            it += 1
        self.classes_ = classes
        self.n_iter_ = it
        self.history_ = history
        self.hull_distance_, self.hull_lower_, self.margin_ = upper, lower, 0.5 * lower
        self.rel_gap_ = (upper - lower) / upper if upper > 0 else math.inf
        factor = 2.0 / gap if gap > 0 else 1.0       # canonical scaling: min y (w.x - b) = 1
        self.coef_ = (factor * x).reshape(1, -1)
        self.intercept_ = np.array([-factor * 0.5 * (lo_p + hi_q)])
        self.fit_time_ = time.perf_counter() - t_start
        return self

    def decision_function(self, X):
        return np.asarray(X @ self.coef_[0]).ravel() + self.intercept_[0]

    def predict(self, X):
        return np.where(self.decision_function(X) >= 0, self.classes_[1], self.classes_[0])


class GilbertParams(BaseModel):
    """``[algorithm]`` keys of gilbert (hard margin only; it has no parameters of its own)."""

    model_config = ConfigDict(extra="forbid")
    eps: float = Field(1e-3, gt=0, lt=1, description="target certified relative gap (also the stop.gap default)")


def build_gilbert(params: GilbertParams, problem):
    from ..deployment import SingleMachineRun

    ds = problem.dataset

    def fit(on_check, eval_every):
        est = GilbertSVC(tol=0.0, max_iter=10**12, check_every=eval_every)
        eval_set = (ds.X_test, ds.y_test) if ds.X_test is not None else None
        est.fit(ds.X, ds.y, callback=on_check, eval_set=eval_set)
        return {"coef": est.coef_[0], "intercept": float(est.intercept_[0]), "estimator": est}

    return SingleMachineRun(fit=fit, info={"n": ds.n, "d": ds.d})


register(AlgorithmInfo(
    name="gilbert", family="saddle", paper="000_ff8faf4b278c4a32.txt, baseline (notes-000 section 4)",
    distributed=False, Params=GilbertParams, build=build_gilbert,
    description="Gilbert's algorithm: hard-margin SVM as the nearest point of the Minkowski difference",
    topologies=("star",)))
