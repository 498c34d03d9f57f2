"""What users run today, as scenario algorithms: scikit-learn's `SVC`, `NuSVC` and `LinearSVC` (LIBSVM and
LIBLINEAR underneath), on the same data and split as svmsim's solvers, recorded the same way.

Each adapter fits once and reports one metrics row (fit time, objective, accuracies) through the runner, so one
scenario family can compare svmsim's solvers with the reference on time, objective and accuracy:

* ``sklearn-svc``: hard margin by `SVC(kernel="linear", C)` with a huge C. Its dual coefficients, normalised per
  class, are hull weights p, so it gets the same certificate as Saddle-SVC and Gilbert (upper |sum y_j p_j x_j|,
  lower gap(w)/|w|; objective = the hull distance).
* ``sklearn-nusvc``: the nu-SVM with paper 000's cap nu (or alpha) through `NuSVC(nu = 2/(n nu))`
  (notes-000 section 1); certified like Saddle-SVC (objective = -lower^2/8, problem (5)).
* ``sklearn-linearsvc``: the C-SVM (paper 000 Table 4 uses C = 8) by LIBLINEAR; its objective is the C-SVM
  primal 1/2|w|^2 + C sum loss (hinge or squared hinge, as fitted) -- a different problem, so the comparison is
  on time and accuracy, as in the paper.
"""
from __future__ import annotations

import math
import time
import warnings

import numpy as np
import scipy.sparse as sp

from ...reference import sklearn_nu
from ..saddle.certificate import SaddleEvaluator
from ..saddle.preprocess import resolve_cap
from .params import LinearSVCParams, NuSVCParams, SVCParams

__all__ = ["SVCParams", "NuSVCParams", "LinearSVCParams", "hull_weights", "csvm_primal"]


def hull_weights(y: np.ndarray, support: np.ndarray, dual_coef) -> np.ndarray:
    """Per-point hull weights p (each class's weights sum to 1) from a LIBSVM dual solution."""
    if sp.issparse(dual_coef):
        dual_coef = dual_coef.toarray()
    a = np.abs(np.asarray(dual_coef, dtype=np.float64).ravel())
    p = np.zeros(y.shape[0])
    p[support] = a
    for label in (1.0, -1.0):
        mask = y == label
        total = p[mask].sum()
        if total > 0:
            p[mask] /= total
    return p


def csvm_primal(X, y: np.ndarray, w: np.ndarray, b: float, C: float, loss: str = "hinge") -> float:
    """The C-SVM primal 1/2 |w|^2 + C sum_i loss(y_i (w.x_i + b)), loss = hinge or squared_hinge."""
    slack = np.maximum(0.0, 1.0 - y * (np.asarray(X @ w).ravel() + b))
    if loss == "squared_hinge":
        slack = slack * slack
    return 0.5 * float(w @ w) + C * float(slack.sum())


def _dense_coef(coef) -> np.ndarray:
    return coef.toarray().ravel() if sp.issparse(coef) else np.asarray(coef, dtype=np.float64).ravel()


#: the [stop] budgets a single library call honours: its iteration limit (max_iter); it cannot be stopped by time
ONE_CALL_BUDGETS = ("max_iterations",)


def _fit_matrix(X, dense: bool | None):
    """LIBSVM runs faster on a dense array when the data are dense-ish (> 30% non-zeros)."""
    if dense is None:
        dense = sp.issparse(X) and X.nnz > 0.3 * X.shape[0] * X.shape[1]
    return X.toarray() if (dense and sp.issparse(X)) else X


def _accuracies(ds, w: np.ndarray, b: float) -> dict:
    out = {"train_accuracy": float(np.mean(np.where(np.asarray(ds.X @ w).ravel() + b >= 0, 1.0, -1.0) == ds.y))}
    if ds.X_test is not None and ds.y_test is not None and len(ds.y_test):
        st = np.asarray(ds.X_test @ w).ravel() + b
        out["test_accuracy"] = float(np.mean(np.where(st >= 0, 1.0, -1.0) == ds.y_test))
    return out


def _hull_run(problem, make_estimator, cap: float, info: dict, dense: bool | None):
    """A single fit of a LIBSVM dual solver, certified on the (reduced) hulls like Saddle-SVC."""
    from ...deployment import SingleMachineRun

    ds = problem.dataset

    def fit(on_check, eval_every):
        # LIBSVM's one fit reports at its end: the iteration budget is its max_iter (SMO steps, its n_iter_)
        est = make_estimator(-1 if run.budget is None else int(run.budget))
        Xf = _fit_matrix(ds.X, dense)
        t0 = time.perf_counter()
        from sklearn.exceptions import ConvergenceWarning

        with warnings.catch_warnings():            # stopping at max_iter is the budget, said by the stop reason
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(Xf, ds.y)
        fit_time = time.perf_counter() - t0
        w = _dense_coef(est.coef_)
        p = hull_weights(ds.y, est.support_, est.dual_coef_)
        metrics = SaddleEvaluator(ds.X, ds.y, cap, None, ds.X_test, ds.y_test).certify(w, p)
        metrics.update(iteration=int(np.max(est.n_iter_)), fit_time=fit_time, n_support=int(est.support_.size))
        on_check(metrics)
        return {"coef": w, "intercept": float(est.intercept_[0]), "weights": p}

    run = SingleMachineRun(fit=fit, info=info, budgets=ONE_CALL_BUDGETS)
    return run


def build_svc(params: SVCParams, problem):
    from sklearn.svm import SVC

    return _hull_run(problem, lambda max_iter: SVC(kernel="linear", C=params.C, tol=params.tol,
                                                 max_iter=max_iter), math.inf,
                     {"C": params.C, "tol": params.tol, "n": problem.dataset.n}, params.dense)


def build_nusvc(params: NuSVCParams, problem):
    from sklearn.svm import NuSVC

    ds = problem.dataset
    cap = resolve_cap(int((ds.y > 0).sum()), int((ds.y < 0).sum()), params.nu, params.alpha)
    cap_value = min(cap, 1.0)
    mu = sklearn_nu(cap_value, ds.n)
    return _hull_run(problem, lambda max_iter: NuSVC(nu=mu, kernel="linear", tol=params.tol, max_iter=max_iter), cap,
                     {"cap": cap_value, "sklearn_nu": mu, "tol": params.tol, "n": ds.n}, params.dense)


def build_linearsvc(params: LinearSVCParams, problem):
    from sklearn.svm import LinearSVC

    from ...deployment import SingleMachineRun

    ds = problem.dataset

    def fit(on_check, eval_every):
        max_iter = params.max_iter if run.budget is None else min(params.max_iter, int(run.budget))
        est = LinearSVC(C=params.C, loss=params.loss, tol=params.tol, max_iter=max_iter,
                        fit_intercept=params.fit_intercept, dual="auto", random_state=problem.seed)
        t0 = time.perf_counter()
        est.fit(ds.X, ds.y)
        fit_time = time.perf_counter() - t0
        w, b = _dense_coef(est.coef_), float(est.intercept_[0])
        metrics = {"iteration": int(est.n_iter_), "fit_time": fit_time,
                   "objective": csvm_primal(ds.X, ds.y, w, b, params.C, params.loss), **_accuracies(ds, w, b)}
        on_check(metrics)
        return {"coef": w, "intercept": b}

    run = SingleMachineRun(fit=fit, info={"C": params.C, "loss": params.loss, "n": ds.n}, budgets=ONE_CALL_BUDGETS)
    return run




