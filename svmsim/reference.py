"""Reference solutions from scikit-learn (LIBSVM) to hold svmsim's solvers against.

* hard margin: `SVC(kernel="linear")` with a huge C and a tight tolerance solves the hard-margin QP; the hull
  distance is 2/|w| and it certifies itself through its dual coefficients;
* nu-SVM: paper 000's nu (a cap on each point's weight in the reduced hulls) is scikit-learn's
  ``NuSVC(nu=mu)`` with mu = 2/(n*nu) (notes-000.md section 1); the normalised per-class dual coefficients
  are the hull weights eta, xi, and |A eta - B xi| is the reduced-hull distance.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["ReferenceSolution", "exact_hull_distance", "nusvc_reduced_hull", "sklearn_nu"]


@dataclass
class ReferenceSolution:
    distance: float          # (reduced) hull distance in the data's units
    coef: np.ndarray         # scikit-learn coef_ (decision = X @ coef + intercept)
    intercept: float
    fit_time: float          # seconds of the fit (wall clock)
    nu: float | None = None  # scikit-learn's nu, for NuSVC


def _labels(y) -> np.ndarray:
    y = np.asarray(y)
    classes = np.unique(y)
    if classes.size != 2:
        raise ValueError(f"binary labels expected, found {classes.size} classes")
    return np.where(y == classes[1], 1.0, -1.0)


def _hull_from_dual(X, ypm: np.ndarray, support: np.ndarray, dual: np.ndarray) -> float:
    if sp.issparse(dual):
        dual = dual.toarray()
    a = np.abs(np.asarray(dual).ravel())
    ys = ypm[support]
    eta = np.where(ys > 0, a, 0.0)
    xi = np.where(ys < 0, a, 0.0)
    eta /= eta.sum()
    xi /= xi.sum()
    z = X[support].T @ (eta - xi)
    return float(np.linalg.norm(np.asarray(z).ravel()))


def exact_hull_distance(X, y, C: float = 1e10, tol: float = 1e-10) -> ReferenceSolution:
    """Distance between the convex hulls of two separable classes, from scikit-learn's hard-margin SVC."""
    from sklearn.svm import SVC

    ypm = _labels(y)
    t0 = time.perf_counter()
    svc = SVC(kernel="linear", C=C, tol=tol).fit(X, ypm)
    fit_time = time.perf_counter() - t0
    coef = svc.coef_.toarray().ravel() if sp.issparse(svc.coef_) else np.asarray(svc.coef_).ravel()
    return ReferenceSolution(2.0 / float(np.linalg.norm(coef)), coef, float(svc.intercept_[0]), fit_time)


def sklearn_nu(nu_paper: float, n: int) -> float:
    """scikit-learn NuSVC's nu for paper 000's cap nu: mu = 2/(n*nu)."""
    return 2.0 / (n * nu_paper)


def nusvc_reduced_hull(X, y, alpha: float | None = None, nu: float | None = None,
                       dense: bool | None = None) -> ReferenceSolution:
    """Reduced-hull distance of the nu-SVM with paper 000's cap nu (or nu = 1/(alpha*min(n1,n2))), by NuSVC.

    `dense` converts sparse input to a dense array first (faster for dense-ish data such as phishing); by
    default it does so when more than 30% of the entries are non-zero.
    """
    from sklearn.svm import NuSVC

    ypm = _labels(y)
    n1, n2 = int((ypm > 0).sum()), int((ypm < 0).sum())
    if nu is None:
        nu = 1.0 / (alpha * min(n1, n2))
    mu = sklearn_nu(nu, n1 + n2)
    if dense is None:
        dense = sp.issparse(X) and X.nnz > 0.3 * X.shape[0] * X.shape[1]
    Xf = X.toarray() if (dense and sp.issparse(X)) else X
    t0 = time.perf_counter()
    model = NuSVC(nu=mu, kernel="linear").fit(Xf, ypm)
    fit_time = time.perf_counter() - t0
    dist = _hull_from_dual(X, ypm, model.support_, model.dual_coef_)
    coef = model.coef_.toarray().ravel() if sp.issparse(model.coef_) else np.asarray(model.coef_).ravel()
    return ReferenceSolution(dist, coef, float(model.intercept_[0]), fit_time, nu=mu)
