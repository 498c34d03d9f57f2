"""`SBPClassifier`: paper 003's kernelized Stochastic Batch Perceptron as a scikit-learn estimator.

It runs the same compiled loop as the ``sbp`` scenario algorithm (`methods.sbp_iterations`) for ``epochs * n``
iterations and returns the averaged iterate rescaled by its level (Algorithm 1's output). SBP has no stopping
certificate (notes-003 gotcha 17): the budget is the stopping rule. When the averaged iterate's level is not
positive (too few iterations for the data), the model is the unscaled average and a ConvergenceWarning says so.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

from ...core.streams import STREAM_PROGRAM, stream_keys
from ...errors import InfeasibleParameterError
from ...numerics.kernels import kernel_block, kernel_data, kernel_params
from ..sklearn_api import binary_fit_data
from .build import averaged_model
from .kernel_problem import scale_sigma2
from .methods import sbp_iterations, sbp_scalars
from .reference import nu_from_lambda
from .responses import responses

__all__ = ["SBPClassifier"]

_CHUNK = 256          # support vectors per block of the decision function


class SBPClassifier(ClassifierMixin, BaseEstimator):
    """The kernelized Stochastic Batch Perceptron (Cotter, Shalev-Shwartz & Srebro 2012).

    Parameters
    ----------
    kernel: "gaussian", "linear" or "polynomial".
    sigma2: the Gaussian's sigma^2, or "scale" (d Var(X) / 2).
    gamma, coef0, degree: the polynomial kernel (gamma <x, z> + coef0)^degree.
    nu: the slack budget of (2.3) (>= 0), or "auto": L(w*)/||w*|| of the certified no-bias SVM at `lam`.
    lam: lambda of (2.2) for nu = "auto" (None: 1/n).
    epochs: iterations = epochs * n.
    fit_intercept: the unregularised bias (section 3.6).
    random_state: seed of the sampling stream (int or None = 0).

    Attributes: ``dual_coef_`` (beta_j >= 0 on y_j Phi(x_j)), ``support_``, ``support_vectors_``,
    ``intercept_``, ``level_`` (f of the averaged iterate), ``nu_``, ``n_kernel_evaluations_``, ``classes_``.
    """

    def __init__(self, kernel="gaussian", sigma2="scale", gamma=1.0, coef0=0.0, degree=3, nu="auto", lam=None,
                 epochs=10.0, fit_intercept=False, random_state=None):
        self.kernel = kernel
        self.sigma2 = sigma2
        self.gamma = gamma
        self.coef0 = coef0
        self.degree = degree
        self.nu = nu
        self.lam = lam
        self.epochs = epochs
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = False
        return tags

    def _kernel(self, X):
        sigma2 = self.sigma2
        if self.kernel == "gaussian" and isinstance(sigma2, str):
            if sigma2 != "scale":
                raise ValueError(f"sigma2={sigma2!r} is not allowed; allowed: a number > 0 or 'scale'")
            sigma2 = scale_sigma2(X) if X.shape[0] > 1 else 1.0
        return kernel_params(self.kernel, sigma2=sigma2 if self.kernel == "gaussian" else None,
                             gamma=None if self.kernel == "gaussian" else self.gamma, coef0=self.coef0,
                             degree=self.degree)

    def fit(self, X, y):
        if not (isinstance(self.epochs, (int, float)) and math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"epochs={self.epochs!r} must be a finite number > 0")
        if self.lam is not None and not (isinstance(self.lam, (int, float)) and self.lam > 0):
            raise ValueError(f"lam={self.lam!r} must be a number > 0 or None")
        X, classes, yy = binary_fit_data(self, X, y)
        if self.fit_intercept and (yy > 0).all() or self.fit_intercept and (yy < 0).all():
            raise ValueError("fit_intercept=True needs both classes")
        params = self._kernel(X)
        data = kernel_data(X)
        n = yy.shape[0]
        if isinstance(self.nu, str):
            if self.nu != "auto":
                raise ValueError(f"nu={self.nu!r} is not allowed; allowed: a number >= 0 or 'auto'")
            try:
                nu = nu_from_lambda(data, params, yy, self.lam if self.lam is not None else 1.0 / n).nu
            except InfeasibleParameterError as exc:
                raise ValueError(str(exc)) from None
        else:
            nu = float(self.nu)
            if not (0.0 <= nu <= 1.0):
                raise ValueError(f"nu={self.nu!r} must be a number in [0, 1] or 'auto'")
        seed = 0 if self.random_state is None else int(self.random_state)
        R = responses(data, params, yy, averaged=True)
        S = sbp_scalars(R.kdiag, yy, nu, bool(self.fit_intercept), stream_keys(seed, STREAM_PROGRAM, 1)[0])
        T = max(1, round(self.epochs * n))
        sbp_iterations(R, S, T, np.empty(n))
        coef, _, _, level, b = averaged_model(R, T, S.volume, bool(self.fit_intercept))
        if not level > 0:
            warnings.warn(f"SBP's averaged iterate has level {level:.3g} <= 0 after {T} iterations: the model is "
                          "the unscaled average (its signs only); increase epochs", ConvergenceWarning, stacklevel=2)
        divide = level if level > 0 else 1.0
        support = np.flatnonzero(coef)
        self.classes_ = classes
        self.support_ = support
        self.support_vectors_ = X[support]
        self.dual_coef_ = coef[support] / divide
        self._support_y = yy[support]
        self.intercept_ = np.array([b / divide])
        self.level_ = level
        self.nu_ = nu
        self.n_kernel_evaluations_ = int(R.evaluations[0])
        self.n_iter_ = T
        self._params = params
        return self

    def decision_function(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        sv = self.support_vectors_
        if sp.issparse(sv) != sp.issparse(X):
            X = sp.csr_matrix(X) if sp.issparse(sv) else X.toarray()
        data, q = kernel_data(X), kernel_data(sv)
        out = np.full(X.shape[0], self.intercept_[0])
        weights = self.dual_coef_ * self._support_y
        evaluations = np.zeros(1, np.int64)
        scratch = np.zeros(data.d)
        for lo in range(0, sv.shape[0], _CHUNK):
            rows = np.arange(lo, min(lo + _CHUNK, sv.shape[0]), dtype=np.int64)
            block = np.empty((rows.shape[0], X.shape[0]))
            kernel_block(data, self._params, q, rows, block, scratch, evaluations)
            out += weights[lo:lo + rows.shape[0]] @ block
        return out

    def predict(self, X):
        return np.where(self.decision_function(X) > 0, self.classes_[1], self.classes_[0])
