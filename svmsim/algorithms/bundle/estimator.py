"""Paper 004's single-machine solvers as scikit-learn estimators: `PragamSVC` (Pragam, or Pragam-b with
``fit_intercept=True``) and `BMRMSVC` (qp-BMRM or ls-BMRM). They run the workers' compiled step with one worker and
no transport (`protocol.run_solo`), so they are the K = 1 case of the scenarios' runs, iterate for iterate.

Both minimise J(w) = lam/2 ||w||^2 + 1/n sum_i max(0, 1 - y_i (<x_i, w> + b)) (b = 0 without an intercept) and stop
on a certified relative gap (J_best - lower) / J_best <= tol, where lower <= J* is the method's own lower bound or
(Pragam without intercept, ``certificate="band"``) the better of it and `objective.band_lower_bound`.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..bqo.objective import as_csr
from ..sklearn_api import LinearBinaryClassifier, binary_fit_data
from .objective import band_lower_bound, objective
from .protocol import (
    DOMAIN_BIAS,
    DOMAIN_BOX,
    LS_BMRM,
    PRAGAM,
    QP_BMRM,
    run_solo,
)
from .workers import solo_state

__all__ = ["BMRMSVC", "PragamSVC"]


def _positive(name, value, integer=False):
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.floating))
    if not (ok and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={value!r} must be a{'n integer' if integer else ' finite number'} > 0")


class _BundleSVC(LinearBinaryClassifier):
    """Shared fit/predict; subclasses give the method, the domain and the certificate."""

    _method = PRAGAM

    def _check_params(self):
        _positive("lam", self.lam)
        _positive("tol", self.tol)
        _positive("max_iter", self.max_iter, integer=True)
        _positive("check_every", self.check_every, integer=True)

    def _state(self, X, y):
        raise NotImplementedError

    def _lower(self, X, y, st, w):
        return float(st.lower[0])

    def fit(self, X, y):
        self._check_params()
        X, classes, yy = binary_fit_data(self, X, y)
        Xc = as_csr(X)
        st = self._state(Xc, yy)
        bias = getattr(self, "fit_intercept", False)
        best, best_w, best_b = math.inf, np.zeros(Xc.shape[1]), 0.0
        lower = -math.inf
        done = 0
        self.stop_reason_ = "iteration budget"
        while done < self.max_iter:
            step = min(self.check_every, self.max_iter - done)
            run_solo(st, step)
            done += step
            w = st.w.copy()
            j, b = objective(Xc, yy, w, self.lam, bias=bias)
            if j < best:
                best, best_w, best_b = j, w, b
            lower = max(lower, self._lower(Xc, yy, st, best_w))
            if best - lower <= self.tol * abs(best):
                self.stop_reason_ = "certified relative gap"
                break
        gap = (best - lower) / abs(best) if best else math.inf
        if st.qp_failures[0]:
            warnings.warn(f"the inner QP stopped at its step limit {int(st.qp_failures[0])} time(s) (last gap "
                          f"{float(st.qp_gap[0]):.3g}); the lower bound stays certified", RuntimeWarning, stacklevel=2)
        if self.stop_reason_ == "iteration budget":
            warnings.warn(f"{type(self).__name__} did not certify tol={self.tol:g} in max_iter={self.max_iter} "
                          f"iterations (certified relative gap {gap:.3g}); increase max_iter", ConvergenceWarning,
                          stacklevel=2)
        self.classes_ = classes
        self.coef_ = best_w.reshape(1, -1)
        self.intercept_ = np.array([best_b])
        self.n_iter_ = done
        self.objective_, self.lower_bound_, self.rel_gap_ = best, lower, gap
        return self


class PragamSVC(_BundleSVC):
    """Pragam (paper 004, Algorithm 1): Nesterov's excessive gap technique on the linear SVM, O(1/sqrt(eps))
    iterations of two sparse matvecs.

    lam: regularisation (C = 1/(lam n) in LIBLINEAR's terms). fit_intercept: Pragam-b (Q2 with y^T alpha = 0,
    projections by Appendix B's root finder; the bias minimises J at the returned w). tol: certified relative gap.
    certificate: "band" (default without intercept: Pragam's own lower bound or `band_lower_bound`, the better;
    certified and close to the true error) or "own" (max_k D(beta_k) only; 15-45x the true error on a9a).
    max_iter: iterations; check_every: iterations between certificate checks.

    Fitted: coef_, intercept_, classes_, n_iter_, objective_ (J of the best iterate), lower_bound_, rel_gap_.
    """

    def __init__(self, lam=1e-4, fit_intercept=False, tol=1e-3, certificate="band", max_iter=100_000,
                 check_every=50):
        self.lam = lam
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.certificate = certificate
        self.max_iter = max_iter
        self.check_every = check_every

    def _check_params(self):
        super()._check_params()
        if self.certificate not in ("band", "own"):
            raise ValueError(f"certificate={self.certificate!r} is not supported; allowed: 'band', 'own'")

    def _state(self, X, y):
        return solo_state(X, y, PRAGAM, self.lam, domain=DOMAIN_BIAS if self.fit_intercept else DOMAIN_BOX)

    def _lower(self, X, y, st, w):
        own = float(st.lower[0])
        if self.certificate == "band" and not self.fit_intercept:
            return max(own, band_lower_bound(X, y, w, self.lam))
        return own


class BMRMSVC(_BundleSVC):
    """BMRM (paper 004, section 2): cutting planes of the hinge risk with the inner QP (10) over the simplex solved
    fully by SMO (solver="qp", qp-BMRM) or by a line search towards the newest plane (solver="ls", ls-BMRM); its
    certified gap eps_t (eq. 4) falls as O(1/t).

    lam, tol, max_iter, check_every: as `PragamSVC`. max_bundle: planes kept (qp). Fitted: as `PragamSVC`.
    """

    def __init__(self, lam=1e-4, solver="qp", tol=1e-3, max_iter=10_000, max_bundle=2000, check_every=10):
        self.lam = lam
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.max_bundle = max_bundle
        self.check_every = check_every

    def _check_params(self):
        super()._check_params()
        if self.solver not in ("qp", "ls"):
            raise ValueError(f"solver={self.solver!r} is not supported; allowed: 'qp', 'ls'")
        if not (isinstance(self.max_bundle, (int, np.integer)) and self.max_bundle >= 2):
            raise ValueError(f"max_bundle={self.max_bundle!r} must be an integer >= 2")

    def _state(self, X, y):
        return solo_state(X, y, QP_BMRM if self.solver == "qp" else LS_BMRM, self.lam, domain=DOMAIN_BOX,
                          max_bundle=int(self.max_bundle))
