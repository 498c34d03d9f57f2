"""Paper 003's kernel methods as scikit-learn estimators: `SBPClassifier` and the baselines `KernelPegasosClassifier`,
`KernelPerceptron` and `KernelSDCAClassifier`.

Each runs the same compiled loop as its scenario algorithm (`methods.sbp_iterations`, `methods.baseline_iterations`)
for ``epochs * n`` iterations. SBP returns the averaged iterate rescaled by its level (Algorithm 1's output); it has
no stopping certificate (notes-003 gotcha 17): the budget is the stopping rule. When the averaged iterate's level
is not positive (too few iterations for the data), the model is the unscaled average and a ConvergenceWarning says
so. The baselines return their last iterate. All share the kernel keys and the decision function
sum_j dual_coef_j y_j K(x_j, x) + intercept over the support vectors.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

from ...core.streams import STREAM_PROGRAM, stream_keys
from ...errors import InfeasibleParameterError
from ...numerics.kernels import kernel_block, kernel_data, kernel_params
from ..sklearn_api import BinaryClassifier, binary_fit_data
from .build import averaged_model
from .kernel_problem import scale_sigma2
from .methods import (
    PEGASOS,
    PERCEPTRON,
    SDCA,
    baseline_iterations,
    baseline_scalars,
    sbp_iterations,
    sbp_scalars,
)
from .reference import nu_from_lambda
from .responses import renormalise, responses

__all__ = ["KernelPegasosClassifier", "KernelPerceptron", "KernelSDCAClassifier", "SBPClassifier"]

_CHUNK = 256          # support vectors per block of the decision function


class _KernelClassifier(BinaryClassifier):
    """What the kernel estimators share: the kernel from their keys and the decision function."""

    def _kernel(self, X):
        sigma2 = self.sigma2
        if self.kernel == "gaussian" and isinstance(sigma2, str):
            if sigma2 != "scale":
                raise ValueError(f"sigma2={sigma2!r} is not allowed; allowed: a number > 0 or 'scale'")
            sigma2 = scale_sigma2(X) if X.shape[0] > 1 else 1.0
        return kernel_params(self.kernel, sigma2=sigma2 if self.kernel == "gaussian" else None,
                             gamma=None if self.kernel == "gaussian" else self.gamma, coef0=self.coef0,
                             degree=self.degree)

    def _check_budget(self):
        if not (isinstance(self.epochs, (int, float)) and math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"epochs={self.epochs!r} must be a finite number > 0")
        if self.lam is not None and not (isinstance(self.lam, (int, float)) and self.lam > 0):
            raise ValueError(f"lam={self.lam!r} must be a number > 0 or None")

    def _store(self, X, yy, classes, coef, intercept, params, evaluations, iterations):
        support = np.flatnonzero(coef)
        self.classes_ = classes
        self.support_ = support
        self.support_vectors_ = X[support]
        self.dual_coef_ = coef[support]
        self._support_y = yy[support]
        self.intercept_ = np.array([intercept])
        self.n_kernel_evaluations_ = int(evaluations)
        self.n_iter_ = iterations
        self._params = params

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


class SBPClassifier(_KernelClassifier):
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

    def fit(self, X, y):
        self._check_budget()
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
        self._store(X, yy, classes, coef / divide, b / divide, params, R.evaluations.sum(), T)
        self.level_ = level
        self.nu_ = nu
        return self


class _BaselineClassifier(_KernelClassifier):
    """A response baseline of `methods.baseline_iterations` (the subclass names it)."""

    _method = PEGASOS

    def __init__(self, kernel="gaussian", sigma2="scale", gamma=1.0, coef0=0.0, degree=3, lam=None, epochs=10.0,
                 random_state=None):
        self.kernel = kernel
        self.sigma2 = sigma2
        self.gamma = gamma
        self.coef0 = coef0
        self.degree = degree
        self.lam = lam
        self.epochs = epochs
        self.random_state = random_state

    def fit(self, X, y):
        self._check_budget()
        X, classes, yy = binary_fit_data(self, X, y)
        params = self._kernel(X)
        n = yy.shape[0]
        lam = self.lam if self.lam is not None else 1.0 / n
        seed = 0 if self.random_state is None else int(self.random_state)
        R = responses(kernel_data(X), params, yy)
        S = baseline_scalars(self._method, n, lam, True, stream_keys(seed, STREAM_PROGRAM, 1)[0])
        T = max(1, round(self.epochs * n))
        baseline_iterations(R, S, T)
        renormalise(R)
        self._store(X, yy, classes, R.coef.copy(), 0.0, params, R.evaluations.sum(), T)
        self.n_updates_ = int(S.updates[0])
        return self


class KernelPegasosClassifier(_BaselineClassifier):
    """Kernel Pegasos (step 1/(lam t), projection onto the ball of radius 1/sqrt(lam)); lam defaults to 1/n."""

    _method = PEGASOS


class KernelPerceptron(_BaselineClassifier):
    """The kernel Perceptron over `epochs` random orders of the data (lam unused)."""

    _method = PERCEPTRON


class KernelSDCAClassifier(_BaselineClassifier):
    """Dual coordinate ascent on the no-bias dual (4.1), box [0, C], C = 1/(lam n); lam defaults to 1/n."""

    _method = SDCA
