"""Paper 003's baselines that are not response methods: LIBSVM's SMO (scikit-learn's `SVC`) and random Fourier
features with a linear SVM (LIBLINEAR through `LinearSVC`).

* ``libsvm``: `SVC` with the same kernel and C = 1/(lam n) (it has a bias), fitted on a doubling iteration budget
  so that its test error can be drawn against its cost (SMO's "critical point", section 4.3). LIBSVM keeps a
  kernel cache that svmsim cannot see, so its evaluations are an **estimate**, bracketed: at least n per support
  vector (each moved coefficient needs its row once), at most 2 n per SMO iteration (two rows, no cache hit); the
  point estimate is its fit time over its own cost per evaluation, measured in the same run through
  `SVC.decision_function` (n_test x n_SV evaluations), clipped into the bracket.
* ``rff``: Rahimi-Recht features for the Gaussian kernel (Appendix A): v_i ~ N(0, I/sigma^2),
  P(x) = [cos <v_i, x>, sin <v_i, x>] / sqrt(k), k = 1, 2, 4, ... up to `max_features`; each point is the exact
  linear SVM (no bias, the same C) on 2k features; its cost is k n d-dimensional inner products (the training
  features), reported as `inner_products` and as `kernel_evaluations` (Fig. 3's common unit; the linear solve is
  not counted, as in the paper).
"""
from __future__ import annotations

import math
import time
import warnings

import numpy as np
import scipy.sparse as sp

from ...errors import InfeasibleParameterError
from .kernel_problem import KernelProblem
from .params import LibsvmParams, RFFParams

__all__ = ["LibsvmParams", "RFFParams", "build_libsvm", "build_rff", "sklearn_kernel"]


def sklearn_kernel(kp: KernelProblem) -> dict:
    """`SVC` keyword arguments for the problem's kernel."""
    kind = int(kp.kernel.kind)
    if kind == 1:
        return {"kernel": "rbf", "gamma": kp.kernel.gamma}
    if kind == 2:
        return {"kernel": "poly", "gamma": kp.kernel.gamma, "coef0": kp.kernel.coef0, "degree": kp.kernel.degree}
    return {"kernel": "linear"}


def build_libsvm(params: LibsvmParams, problem):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import SVC

    from ...deployment import SingleMachineRun

    kp = KernelProblem(params, problem.dataset)
    ds = problem.dataset

    def fit(on_check, eval_every):
        budget = params.first_budget if params.curve else -1
        est = None
        while True:
            est = SVC(C=kp.C, tol=params.tol, cache_size=params.cache_mb, max_iter=budget, **sklearn_kernel(kp))
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                est.fit(ds.X, kp.y)
            fit_time = time.perf_counter() - t0
            iters = int(np.asarray(est.n_iter_).sum())
            m = {"iteration": iters, "solver_time": fit_time, "support": int(est.support_.shape[0]),
                 **_libsvm_evaluations(est, kp, fit_time, iters)}
            m["train_accuracy"] = kp.accuracy(est.decision_function(ds.X), kp.y)
            if ds.X_test is not None and len(ds.y_test):
                acc = kp.accuracy(est.decision_function(ds.X_test), np.asarray(ds.y_test, np.float64))
                m.update(test_accuracy=acc, test_error=1.0 - acc)
            converged = budget < 0 or iters < budget
            m["converged"] = converged
            if on_check(m) or converged:
                break
            budget *= 2
        coef = np.zeros(kp.n)
        dual = est.dual_coef_
        coef[est.support_] = np.abs(np.asarray(dual.toarray() if sp.issparse(dual) else dual).ravel())
        return {"dual_coef": coef, "intercept": float(np.asarray(est.intercept_).ravel()[0])}

    return SingleMachineRun(fit=fit, info={**kp.info(), "kernel_evaluations_source": "estimate (LIBSVM caches; "
                                           "bracketed by kernel_evaluations_lower / _upper)"},
                            measured=("kernel_evaluations", "inner_products", "libsvm_ns_per_evaluation"))


def _libsvm_evaluations(est, kp: KernelProblem, fit_time: float, iters: int) -> dict:
    """LIBSVM's evaluations, bracketed, and the time-based point estimate (see the module docstring)."""
    n = kp.n
    n_sv = int(est.support_.shape[0])
    lower = n * n_sv
    upper = max(2 * n * iters, lower)
    X = kp.dataset.X_test if kp.dataset.X_test is not None else kp.dataset.X
    probe = X[: min(X.shape[0], max(1, 2_000_000 // max(n_sv, 1)))]
    t0 = time.perf_counter()
    est.decision_function(probe)
    per_eval = (time.perf_counter() - t0) / max(probe.shape[0] * n_sv, 1)
    estimate = min(max(fit_time / per_eval, lower), upper) if per_eval > 0 else float(upper)
    return {"kernel_evaluations": float(estimate), "inner_products": float(estimate),
            "kernel_evaluations_lower": lower, "kernel_evaluations_upper": upper,
            "libsvm_ns_per_evaluation": per_eval * 1e9}


def build_rff(params: RFFParams, problem):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    from ...deployment import SingleMachineRun

    kp = KernelProblem(params, problem.dataset)
    if kp.kernel.kind != 1:
        raise InfeasibleParameterError("rff approximates a shift-invariant kernel; allowed: kernel = 'gaussian'")
    ds = problem.dataset
    rng = np.random.default_rng(problem.seed)
    sigma = math.sqrt(kp.sigma2)
    V = rng.normal(size=(ds.d, params.max_features)) / sigma        # the columns for k = 1, 2, 4, ... are nested
    Xtr = ds.X
    Xte = ds.X_test if (ds.X_test is not None and len(ds.y_test)) else None

    def features(X, k):
        Z = X @ V[:, :k]
        Z = np.asarray(Z.toarray() if sp.issparse(Z) else Z)
        return np.hstack([np.cos(Z), np.sin(Z)]) / math.sqrt(k)

    def fit(on_check, eval_every):
        k = 1
        elapsed = 0.0
        est = None
        while k <= params.max_features:
            t0 = time.perf_counter()
            F = features(Xtr, k)
            est = LinearSVC(C=kp.C, loss="hinge", dual=True, fit_intercept=False, tol=1e-6, max_iter=100_000,
                            random_state=problem.seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                est.fit(F, kp.y)
            elapsed += time.perf_counter() - t0
            w = est.coef_.ravel()
            margins = kp.y * (F @ w)
            hinge = float(np.maximum(0.0, 1.0 - margins).mean())
            m = {"iteration": k, "features": 2 * k, "kernel_evaluations": k * kp.n, "inner_products": k * kp.n,
                 "solver_time": elapsed, "objective": 0.5 * kp.lam * float(w @ w) + hinge,
                 "train_accuracy": float(np.mean(margins > 0))}
            if Xte is not None:
                acc = kp.accuracy(features(Xte, k) @ w, np.asarray(ds.y_test, np.float64))
                m.update(test_accuracy=acc, test_error=1.0 - acc)
            if on_check(m):
                break
            k *= 2
        return {"coef": est.coef_.ravel().copy(), "intercept": 0.0}

    return SingleMachineRun(fit=fit, info={**kp.info(), "max_features": params.max_features})
