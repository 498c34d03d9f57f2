"""`DualCDSVC`: dual coordinate descent for the linear SVM without bias on one machine (Hsieh et al. 2008, the
local solver of paper 001 with K = 1), as a scikit-learn estimator to hold against `LinearSVC(dual=True,
fit_intercept=False)`."""
from __future__ import annotations

import math
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ...core.metrics import relative_gap
from ..sklearn_api import LinearBinaryClassifier, binary_fit_data
from .local_cd import DualCD
from .objective import LOSSES, as_csr, dual_objective, loss_constants, primal_objective

__all__ = ["DualCDSVC"]


class DualCDSVC(LinearBinaryClassifier):
    """Linear SVM (no intercept) by shuffled dual coordinate descent: one epoch visits every point once in a fresh
    random order and makes the exact coordinate step of the dual (2).

    C: loss weight of the primal 1/2 |w|^2 + C sum loss. loss: "hinge" (L1-SVM) or "squared_hinge" (L2-SVM).
    tol: stop when the duality gap over C n, (f^P(w) + f(alpha)) / (C n) (paper 001's eq. 27), is <= tol.
    max_iter: epochs. random_state: seed of the shuffling (an int; None means 0).

    Fitted: coef_ (1, d), intercept_ ([0.0]), classes_, dual_coef_ (alpha_i y_i), n_iter_ (epochs),
    primal_objective_, dual_objective_, gap_per_cn_ (eq. 27), rel_gap_ (the certified relative duality gap
    (f^P(w) + f(alpha)) / f^P(w)), n_features_in_.
    """

    def __init__(self, C=1.0, loss="hinge", tol=1e-3, max_iter=1000, random_state=None):
        self.C = C
        self.loss = loss
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state

    def _check_params(self):
        if self.loss not in LOSSES:
            raise ValueError(f"loss={self.loss!r} is not supported; allowed: {', '.join(LOSSES)}")
        if not (isinstance(self.C, (int, float)) and math.isfinite(self.C) and self.C > 0):
            raise ValueError(f"C={self.C!r} must be a finite number > 0")
        if not (isinstance(self.tol, (int, float)) and self.tol > 0):
            raise ValueError(f"tol={self.tol!r} must be a number > 0")
        if not (isinstance(self.max_iter, (int, np.integer)) and self.max_iter >= 1):
            raise ValueError(f"max_iter={self.max_iter!r} must be an integer >= 1")

    def fit(self, X, y, callback=None, check_every=1):
        """Fit on (X, y); `callback(info)` (optional) is called every `check_every` epochs with the primal, dual
        and gap of the current iterate and returns True to stop."""
        self._check_params()
        X, classes, yy = binary_fit_data(self, X, y)
        Xc = as_csr(X)
        n = Xc.shape[0]
        C = float(self.C)
        s, upper = loss_constants(self.loss, C)
        seed = 0 if self.random_state is None else int(self.random_state)
        cd = DualCD(Xc, yy, s, upper, seed)
        w, alpha = cd.w, cd.alpha
        epoch = 0
        t0 = time.perf_counter()
        self.stop_reason_ = "iteration budget"
        primal = dual = math.nan
        while True:
            check = epoch % check_every == 0 or epoch >= self.max_iter
            if check:
                primal = primal_objective(Xc, yy, w, C, self.loss)
                dual = dual_objective(w, alpha, s)
                gap = (primal + dual) / (C * n)
                if callback is not None and callback({"iteration": epoch, "primal": primal, "dual": dual,
                                                      "gap_per_cn": gap, "w": w, "alpha": alpha,
                                                      "time": time.perf_counter() - t0}):
                    self.stop_reason_ = "callback"
                    break
                if gap <= self.tol:
                    self.stop_reason_ = "duality gap / (C n)"
                    break
            if epoch >= self.max_iter:
                break
            cd.epoch()
            epoch += 1
        if self.stop_reason_ == "iteration budget" and callback is None:
            warnings.warn(f"DualCDSVC did not reach tol={self.tol:g} in max_iter={self.max_iter} epochs (duality "
                          f"gap / (C n) {(primal + dual) / (C * n):.3g}); increase max_iter", ConvergenceWarning,
                          stacklevel=2)
        self.classes_ = classes
        self.coef_ = w.reshape(1, -1).copy()
        self.intercept_ = np.zeros(1)
        self.dual_coef_ = (alpha * yy).reshape(1, -1)
        self.n_iter_ = epoch
        self.primal_objective_, self.dual_objective_ = primal, dual
        self.gap_per_cn_ = (primal + dual) / (C * n)
        self.rel_gap_ = relative_gap(primal, -dual)
        return self
