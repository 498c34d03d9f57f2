"""LIBLINEAR as paper 004's baseline: scikit-learn's LinearSVC (LIBLINEAR's dual coordinate descent, hinge loss, no
bias: the paper's setting, notes-004 gotcha 18) at C = 1/(lam n), fitted afresh on a doubling epoch budget (1, 2,
4, ... epochs; LIBLINEAR has no warm start through scikit-learn) so that its J, err_t and accuracy can be drawn
against epochs and time beside the iterative methods. Its "iteration" is an epoch (notes-004 gotcha 15)."""
from __future__ import annotations

import time
import warnings

import numpy as np

from ..allreduce import check_problem
from ..bqo.objective import as_csr
from .params import LiblinearParams

__all__ = ["LiblinearParams", "build_liblinear"]


def build_liblinear(params: LiblinearParams, problem):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    from ...deployment import SingleMachineRun
    from .build import Evaluator, problem_risk

    ds = problem.dataset
    if problem_risk(ds) != "hinge":
        from ...errors import InfeasibleParameterError

        raise InfeasibleParameterError("liblinear solves the hinge-loss SVM; the lower-bound instance is not one; "
                                       "allowed: pragam, ls-bmrm, qp-bmrm on it")
    check_problem(ds, 1)
    X, y = as_csr(ds.X), np.asarray(ds.y, np.float64)
    C = 1.0 / (params.lam * ds.n)
    evaluator = Evaluator(X, y, params.lam, X_test=ds.X_test, y_test=ds.y_test)

    def fit(on_check, eval_every):
        budget = 1
        elapsed = 0.0
        w = np.zeros(ds.d)
        while budget <= params.max_epochs:
            est = LinearSVC(C=C, loss="hinge", dual=True, fit_intercept=False, tol=1e-12, max_iter=budget,
                            random_state=problem.seed)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                est.fit(X, y)
            elapsed = time.perf_counter() - t0
            w = np.asarray(est.coef_).ravel()
            m = evaluator.metrics(w, int(est.n_iter_))
            m["time"] = elapsed
            if on_check(m) or est.n_iter_ < budget:
                break
            budget *= 2
        return {"coef": evaluator.best_w.copy(), "intercept": 0.0, "w_last": w}

    return SingleMachineRun(fit=fit, info={"n": ds.n, "d": ds.d, "C": C, **evaluator.info()})
