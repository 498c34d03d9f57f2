"""The kernel problem every paper-003 method is built on: the kernel from scenario keys, the data as `KernelData`,
lambda (default 1/n, the paper's no-bias setting), nu (given, or from lambda by the certified reference), the
iteration budget in epochs, and the log-spaced evaluation points of the paper's plots."""
from __future__ import annotations

import math
import numpy as np
import scipy.sparse as sp

from ...errors import DataError, InfeasibleParameterError
from ...numerics.kernels import KernelData, KernelParams, kernel_data, kernel_params
from .params import KernelParamsModel

__all__ = ["KernelParamsModel", "KernelProblem", "evaluation_points", "kernel_problem"]


class KernelProblem:
    """The data and constants a paper-003 method runs on."""

    def __init__(self, params: KernelParamsModel, dataset):
        self.dataset = ds = dataset
        if ds.X_test is not None and ds.X_test.shape[1] != ds.X.shape[1]:
            raise DataError(f"data set '{ds.name}': the test set has {ds.X_test.shape[1]} features and the "
                            f"training set {ds.X.shape[1]}; allowed: the same dimension")
        self.y = np.asarray(ds.y, np.float64)
        self.n = ds.n
        self.lam = float(params.lam) if params.lam is not None else 1.0 / self.n
        self.C = 1.0 / (self.lam * self.n)
        sigma2 = params.sigma2
        if sigma2 == "scale":
            sigma2 = scale_sigma2(ds.X)
        self.sigma2 = float(sigma2) if params.kernel == "gaussian" else math.nan
        try:
            self.kernel: KernelParams = kernel_params(params.kernel, sigma2=self.sigma2 if params.kernel ==
                                                      "gaussian" else None,
                                                      gamma=None if params.kernel == "gaussian" else params.gamma,
                                                      coef0=params.coef0, degree=params.degree)
        except ValueError as exc:
            raise InfeasibleParameterError(str(exc)) from None
        self.data: KernelData = kernel_data(ds.X)
        self.test: KernelData | None = None
        if ds.X_test is not None and params.track_test and len(ds.y_test):
            self.test = kernel_data(self.test_matrix())
        self.y_test = np.asarray(ds.y_test, np.float64) if self.test is not None else None
        self.iterations = max(1, round(params.epochs * self.n))
        self.eval_points = params.eval_points

    def test_matrix(self):
        """The test points in the training set's storage (CSR or dense)."""
        Xt = self.dataset.X_test
        if self.data.sparse and not sp.issparse(Xt):
            return sp.csr_matrix(Xt)
        return Xt.toarray() if (not self.data.sparse and sp.issparse(Xt)) else Xt

    def info(self) -> dict:
        return {"n": self.n, "d": self.dataset.d, "lam": self.lam, "C": self.C, "kernel": int(self.kernel.kind),
                "kernel_gamma": self.kernel.gamma, "sigma2": self.sigma2, "iterations_budget": self.iterations,
                "n_test": 0 if self.y_test is None else int(self.y_test.shape[0])}

    def accuracy(self, scores: np.ndarray, y: np.ndarray) -> float:
        """A zero score counts as an error (notes-003 1.1)."""
        return float(np.mean(scores * y > 0))


def kernel_problem(params: KernelParamsModel, dataset) -> KernelProblem:
    return KernelProblem(params, dataset)


def scale_sigma2(X) -> float:
    """sigma^2 = d Var(X) / 2, the Gaussian of scikit-learn's gamma = 'scale' (gamma = 1/(d Var X))."""
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        mean = float(X.sum()) / (X.shape[0] * X.shape[1])
        var = float(X.multiply(X).sum()) / (X.shape[0] * X.shape[1]) - mean * mean
    else:
        var = float(np.var(X))
    if not var > 0:
        raise DataError("sigma2 = 'scale' needs features with a positive variance; the data are constant; "
                        "allowed: give sigma2 directly")
    return 0.5 * X.shape[1] * var


def evaluation_points(total: int, count: int, first: int | None = None) -> np.ndarray:
    """`count` iteration counts, log-spaced from `first` (default total/1000, at least 1) up to `total` (always the
    last; one point: `total` alone)."""
    if count <= 1:
        return np.array([total], np.int64)
    first = max(1, min(total, first if first is not None else total // 1000))
    pts = np.unique(np.round(np.geomspace(first, total, count)).astype(np.int64))
    pts[-1] = total
    return pts[pts >= 1]
