"""Centralized primal SGD baselines of paper 002: Pegasos (Shalev-Shwartz et al. 2007) and Bottou's SVM-SGD.

Read beside notes-002.md sections 1, 3 and 5.2. Both minimise the primal objective of Eq. 1 (no bias, as in GADGET)

    f(w) = lam/2 |w|^2 + 1/N sum_j max(0, 1 - y_j <w, x_j>)

Pegasos, iteration t (mini-batch A_t of k points drawn uniformly, with replacement):

    A_t^+ = {(x, y) in A_t : y <w_t, x> < 1}                       (margin violators, with the current w_t)
    w_{t+1/2} = (1 - 1/t) w_t + 1/(lam t k) sum_{A_t^+} y x         (step 1/(lam t))
    w_{t+1} = min(1, (1/sqrt(lam)) / |w_{t+1/2}|) w_{t+1/2}         (optional projection onto the ball 1/sqrt(lam))

SVM-SGD (Bottou's svmsgd): one pass per epoch over a shuffled order, eta_t = 1/(lam (t + t0)) with
t0 = 1/(lam eta0) and eta0 chosen on a sample of 1000 points by doubling/halving (Bottou's `determineEta0`);
w <- (1 - eta lam) w + eta y x for a violator; an optional unregularised bias moves with 0.01 eta.

The paper's stopping rule (notes-002 section 3, from the authors' code) is shared with GADGET: after every step
F = 1[y <w, x> < 1] + lam/2 |w|^2 on the step's sample (the indicator from the margin test, the norm after the
step); a counter counts consecutive steps with |F - F_prev| <= eps and the run stops when it reaches `patience`
(10). eps = 0 (or None in the estimators) switches it off.

Hot loops are numba kernels over many steps per call; w is kept as scale * v so the shrink is O(1) and a step
costs O(nnz(x)) on sparse rows. Dense arrays and CSR matrices are both accepted (`row_dot`/`row_axpy` pick the
row access by type at compile time).
"""
from __future__ import annotations

import math
import time
import warnings

import numba
import numpy as np
import scipy.sparse as sp
from numba import types
from numba.extending import overload
from sklearn.exceptions import ConvergenceWarning

from ..sklearn_api import LinearBinaryClassifier, binary_fit_data
from .params import PAPER_EPS, PAPER_PATIENCE, PegasosParams, SGDParams

__all__ = ["PegasosSVC", "SGDSVC", "primal_objective", "hinge_accuracy", "as_rows", "PegasosParams",
           "SGDParams", "PAPER_EPS", "PAPER_PATIENCE", "eq1_optimum", "optimum_info", "rel_primal"]


# ---------------------------------------------------------------------------------------------------------------
# Eq. 1 and accuracies
# ---------------------------------------------------------------------------------------------------------------

def primal_objective(w, X, y, lam: float, intercept: float = 0.0) -> float:
    """Eq. 1 of paper 002: lam/2 |w|^2 + mean hinge loss of (X, y) (labels in {-1, +1})."""
    w = np.asarray(w, dtype=np.float64).ravel()
    margins = np.asarray(y, dtype=np.float64) * (np.asarray(X @ w).ravel() + intercept)
    return float(0.5 * lam * (w @ w) + np.mean(np.maximum(0.0, 1.0 - margins)))


def hinge_accuracy(w, X, y, intercept: float = 0.0) -> float:
    """Fraction of points with sign(<w, x> + b) == y (a score of 0 counts as +1)."""
    scores = np.asarray(X @ np.asarray(w, dtype=np.float64).ravel()).ravel() + intercept
    return float(np.mean(np.where(scores >= 0, 1.0, -1.0) == np.asarray(y)))


# ---------------------------------------------------------------------------------------------------------------
# Row access shared by every kernel: X is a dense C-contiguous array or a CSR triple (data, indices, indptr)
# ---------------------------------------------------------------------------------------------------------------

def as_rows(X):
    """X as the kernels take it: a C-contiguous float64 array, or the CSR triple (data, indices, indptr)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        X.sort_indices()
        return (X.data, X.indices, X.indptr)
    return np.ascontiguousarray(X, dtype=np.float64)


def row_sqnorms(X) -> np.ndarray:
    """|x_i|^2 of every row."""
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


def row_dot(X, i, v):  # pragma: no cover - replaced by the numba overload inside kernels
    """<x_i, v>."""
    raise NotImplementedError


def row_axpy(X, i, a, v):  # pragma: no cover - replaced by the numba overload inside kernels
    """v += a x_i."""
    raise NotImplementedError


@overload(row_dot)
def _row_dot_impl(X, i, v):
    if isinstance(X, types.Array):
        def dense(X, i, v):
            s = 0.0
            for j in range(X.shape[1]):
                s += X[i, j] * v[j]
            return s
        return dense
    if isinstance(X, types.BaseTuple):
        def csr(X, i, v):
            s = 0.0
            for p in range(X[2][i], X[2][i + 1]):
                s += X[0][p] * v[X[1][p]]
            return s
        return csr
    return None


@overload(row_axpy)
def _row_axpy_impl(X, i, a, v):
    if isinstance(X, types.Array):
        def dense(X, i, a, v):
            for j in range(X.shape[1]):
                v[j] += a * X[i, j]
        return dense
    if isinstance(X, types.BaseTuple):
        def csr(X, i, a, v):
            for p in range(X[2][i], X[2][i + 1]):
                v[X[1][p]] += a * X[0][p]
        return csr
    return None


# ---------------------------------------------------------------------------------------------------------------
# Seeded random streams (splitmix64): one uint64 word of state per stream, so that per-node streams in GADGET
# are independent of how nodes are grouped
# ---------------------------------------------------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_TO_UNIT = 1.0 / 9007199254740992.0   # 2^-53


@numba.njit(inline="always", cache=True)
def next_uniform(rng_state, k):
    """A uniform double in [0, 1) from stream k of `rng_state` (splitmix64), advancing it."""
    z = rng_state[k] + _GOLDEN
    rng_state[k] = z
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    z = z ^ (z >> _S31)
    return float(z >> _S11) * _TO_UNIT


@numba.njit(inline="always", cache=True)
def next_index(rng_state, k, n):
    """A uniform integer in [0, n) from stream k."""
    i = int(next_uniform(rng_state, k) * n)
    return i if i < n else n - 1


def seed_streams(seed: int, keys) -> np.ndarray:
    """One splitmix64 state word per key, derived from (seed, key) with numpy's SeedSequence."""
    return np.array([np.random.SeedSequence([int(seed), int(k)]).generate_state(1, np.uint64)[0] for k in keys],
                    dtype=np.uint64)


@numba.njit(inline="always", cache=True)
def stopping_update(F, F_prev, hits, eps):
    """The paper's counter: consecutive steps with |F - F_prev| <= eps (reset otherwise)."""
    if abs(F - F_prev) <= eps:
        return hits + 1
    return 0


# ---------------------------------------------------------------------------------------------------------------
# Pegasos kernel
# ---------------------------------------------------------------------------------------------------------------

#: a Pegasos run's scalars (one record; w = scale * v, |v|^2 = vv, averaged w = (U + beta v) / n_avg; f_prev and
#: hits: the paper's stopping counter)
PEGASOS_STATE = np.dtype([("scale", np.float64), ("t", np.float64), ("vv", np.float64), ("beta", np.float64),
                          ("n_avg", np.float64), ("f_prev", np.float64), ("hits", np.int64)], align=True)


@numba.njit(cache=True)
def _pegasos_steps(X, y, sqnorm, v, U, st, idx, viol, rng_state, lam, radius, project, average, n_steps, eps,
                   patience):
    """Run up to n_steps Pegasos iterations (mini-batch k = idx.shape[0]); return the number done.

    Stops early when the paper's counter reaches `patience` (eps > 0)."""
    n = y.shape[0]
    k = idx.shape[0]
    d = v.shape[0]
    s = st[0]
    scale, t, vv, beta, n_avg = s.scale, s.t, s.vv, s.beta, s.n_avg
    F_prev, hits = s.f_prev, s.hits
    done = 0
    for _ in range(n_steps):
        t += 1.0
        # (a) choose A_t, and (b) its margin violators under w_t
        n_viol = 0
        for b in range(k):
            i = next_index(rng_state, 0, n)
            idx[b] = i
            viol[b] = y[i] * scale * row_dot(X, i, v) < 1.0
            if viol[b]:
                n_viol += 1
        # (e) w <- (1 - 1/t) w + 1/(lam t k) sum y x
        shrink = 1.0 - 1.0 / t
        if shrink <= 0.0:                           # t = 1 wipes w: start v afresh
            if average:
                for j in range(d):
                    U[j] += beta * v[j]
            v[:] = 0.0
            vv = 0.0
            scale = 1.0
            beta = 0.0
        else:
            scale *= shrink
        if n_viol > 0:
            step = 1.0 / (lam * t * k) / scale
            for b in range(k):
                if viol[b]:
                    i = idx[b]
                    c = step * y[i]
                    vv += 2.0 * c * row_dot(X, i, v) + c * c * sqnorm[i]
                    row_axpy(X, i, c, v)
                    if average:
                        row_axpy(X, i, -beta * c, U)
        if vv < 0.0:
            vv = 0.0
        # (f) projection onto the ball of radius 1/sqrt(lam)
        if project:
            norm = scale * math.sqrt(vv)
            if norm > radius:
                scale *= radius / norm
        if scale < 1e-9:                            # fold the scale into v (exact |v|^2 recomputed) and
            vv = 0.0                                # beta v into U
            for j in range(d):
                U[j] += beta * v[j]
                v[j] *= scale
                vv += v[j] * v[j]
            beta = 0.0
            scale = 1.0
        if average:                                 # sum of iterates = U + beta v
            beta += scale
            n_avg += 1.0
        done += 1
        if eps > 0.0:
            F = n_viol / k + 0.5 * lam * scale * scale * vv
            hits = stopping_update(F, F_prev, hits, eps)
            F_prev = F
            if hits >= patience:
                break
    s.scale, s.t, s.vv, s.beta, s.n_avg = scale, t, vv, beta, n_avg
    s.f_prev, s.hits = F_prev, hits
    return done


# ---------------------------------------------------------------------------------------------------------------
# SVM-SGD kernel (Bottou)
# ---------------------------------------------------------------------------------------------------------------

#: an SVM-SGD run's scalars (one record; w = scale * v, the bias, the step count t, the stopping counter)
SGD_STATE = np.dtype([("scale", np.float64), ("t", np.float64), ("bias", np.float64), ("f_prev", np.float64),
                      ("hits", np.int64)], align=True)


def _sgd_state() -> np.ndarray:
    """A fresh `SGD_STATE` record: w = 0 (scale 1), t = 0, no bias, no previous objective."""
    st = np.zeros(1, SGD_STATE)
    st[0] = (1.0, 0.0, 0.0, math.nan, 0)
    return st


@numba.njit(cache=True)
def _sgd_steps(X, y, order, v, st, lam, eta0, decay, bias_rate, eps, patience):
    """One SVM-SGD step per index in `order`; eta = eta0 / (1 + lam eta0 t) (constant eta0 when not decay).
    Returns the number of steps done (fewer when the paper's counter reaches `patience`)."""
    d = v.shape[0]
    s = st[0]
    scale, t, bias = s.scale, s.t, s.bias
    F_prev, hits = s.f_prev, s.hits
    done = 0
    for p in range(order.shape[0]):
        i = order[p]
        eta = eta0 / (1.0 + lam * eta0 * t) if decay else eta0
        margin = y[i] * (scale * row_dot(X, i, v) + bias)
        shrink = 1.0 - eta * lam
        if shrink <= 0.0:
            v[:] = 0.0
            scale = 1.0
        else:
            scale *= shrink
        violated = margin < 1.0
        if violated:
            row_axpy(X, i, eta * y[i] / scale, v)
            bias += bias_rate * eta * y[i]
        if scale < 1e-9:
            for j in range(d):
                v[j] *= scale
            scale = 1.0
        t += 1.0
        done += 1
        if eps > 0.0:
            vv = 0.0
            for j in range(d):
                vv += v[j] * v[j]
            F = (1.0 if violated else 0.0) + 0.5 * lam * scale * scale * vv
            hits = stopping_update(F, F_prev, hits, eps)
            F_prev = F
            if hits >= patience:
                break
    s.scale, s.t, s.bias, s.f_prev, s.hits = scale, t, bias, F_prev, hits
    return done


# ---------------------------------------------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------------------------------------------

class _PrimalLinearSVC(LinearBinaryClassifier):
    """Shared parts: validation, evaluation records and the warning of a stopping rule that did not fire."""

    ties_to_positive = True

    def _check_params(self):
        if not (isinstance(self.lam, (int, float)) and self.lam > 0 and math.isfinite(self.lam)):
            raise ValueError(f"lam = {self.lam!r}; allowed: a finite number > 0")
        if self.eps is not None and not (isinstance(self.eps, (int, float)) and self.eps >= 0):
            raise ValueError(f"eps = {self.eps!r}; allowed: None or a number >= 0")
        for name in ("patience", "check_every", "max_iter"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, np.integer)) and value >= 1):
                raise ValueError(f"{name} = {value!r}; allowed: None or an integer >= 1")
        batch = getattr(self, "batch_size", 1)                                 # Pegasos only
        if not (isinstance(batch, (int, np.integer)) and batch >= 1):
            raise ValueError(f"batch_size = {batch!r}; allowed: an integer >= 1")
        eta0 = getattr(self, "eta0", None)                                     # SVM-SGD only
        if eta0 is not None and not (isinstance(eta0, (int, float)) and 0 < eta0 < math.inf):
            raise ValueError(f"eta0 = {eta0!r}; allowed: None (Bottou's heuristic) or a finite number > 0")
        rate = getattr(self, "bias_rate", 0.0)
        if not (isinstance(rate, (int, float)) and 0 <= rate < math.inf):
            raise ValueError(f"bias_rate = {rate!r}; allowed: a finite number >= 0")

    def _warn_if_unconverged(self):
        if self.eps and self.stop_reason_ == "iteration budget":
            warnings.warn(f"{type(self).__name__} used its whole budget (max_iter = {self.max_iter}) without meeting "
                          f"its stopping rule (eps = {self.eps:g}); allowed: a larger max_iter or eps",
                          ConvergenceWarning, stacklevel=3)

    def _record(self, iteration, w, b, X, ypm, eval_set, t_start):
        info = {"iteration": int(iteration), "objective": primal_objective(w, X, ypm, self.lam, b),
                "train_accuracy": hinge_accuracy(w, X, ypm, b), "time": time.perf_counter() - t_start}
        if eval_set is not None:
            yt = np.where(np.asarray(eval_set[1]) == self.classes_[1], 1.0, -1.0)
            info["test_accuracy"] = hinge_accuracy(w, eval_set[0], yt, b)
        return info


class PegasosSVC(_PrimalLinearSVC):
    """Pegasos: primal estimated sub-gradient solver for Eq. 1 (no bias), step 1/(lam t).

    lam: regularisation lambda of Eq. 1 (C-SVM's C = 1/(lam N)).
    max_iter: iterations T (each one mini-batch); None: 10 epochs, i.e. ceil(10 N / batch_size).
    batch_size: k points per iteration (drawn uniformly with replacement). projection: project onto |w| <= 1/sqrt(lam).
    average: return the average of the last half of the iterates (suffix averaging) instead of the last one.
    eps, patience: the paper's stopping rule (None or 0 switches it off). check_every: iterations between records
    (and callback calls); None: only at the end. random_state: seed of the sample stream.

    Fitted: coef_, intercept_ (0), classes_, n_iter_, converged_ (stopping rule met), history_, stop_reason_.
    """

    def __init__(self, lam=1e-4, max_iter=None, batch_size=1, projection=True, average=False, eps=None,
                 patience=PAPER_PATIENCE, check_every=None, random_state=None):
        self.lam = lam
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.projection = projection
        self.average = average
        self.eps = eps
        self.patience = patience
        self.check_every = check_every
        self.random_state = random_state

    def fit(self, X, y, callback=None, eval_set=None):
        self._check_params()
        t_start = time.perf_counter()
        X, self.classes_, ypm = binary_fit_data(self, X, y)
        n, d = X.shape
        k = int(self.batch_size)
        T = int(self.max_iter) if self.max_iter is not None else int(math.ceil(10 * n / k))
        rows, sqnorm = as_rows(X), row_sqnorms(X)
        v, U = np.zeros(d), np.zeros(d)
        st = np.zeros(1, PEGASOS_STATE)
        st[0] = (1.0, 0.0, 0.0, 0.0, 0.0, math.nan, 0)
        rng = seed_streams(0 if self.random_state is None else self.random_state, [0])
        idx, viol = np.empty(k, dtype=np.int64), np.empty(k, dtype=np.bool_)
        lam, radius = float(self.lam), 1.0 / math.sqrt(self.lam)
        eps = float(self.eps or 0.0)
        chunk = int(self.check_every) if self.check_every else T
        history, it = [], 0
        self.converged_, self.stop_reason_ = False, "iteration budget"
        average_from = T // 2 if self.average else T        # suffix averaging: the last half of the iterates
        while it < T:
            todo = min(chunk, T - it)
            if it < average_from < it + todo:
                todo = average_from - it
            done = _pegasos_steps(rows, ypm, sqnorm, v, U, st, idx, viol, rng, lam, radius, bool(self.projection),
                                  it >= average_from, todo, eps, int(self.patience))
            it += done
            self.converged_ = done < todo
            w = self._current(v, U, st)
            if (self.check_every and it % chunk == 0) or self.converged_ or it >= T:
                info = self._record(it, w, 0.0, X, ypm, eval_set, t_start)
                history.append(info)
                if callback is not None and callback(info):
                    self.stop_reason_ = "callback"
                    break
            if self.converged_:
                self.stop_reason_ = "stopping rule"
                break
        self.coef_ = self._current(v, U, st).reshape(1, -1)
        self.intercept_ = np.zeros(1)
        self.n_iter_, self.history_ = it, history
        self.fit_time_ = time.perf_counter() - t_start
        self._warn_if_unconverged()
        return self

    def _current(self, v, U, st):
        s = st[0]
        if self.average and s["n_avg"] > 0:
            return (U + s["beta"] * v) / s["n_avg"]
        return s["scale"] * v


def _determine_eta0(rows, y, sample, lam, bias_rate, fit_intercept, X):
    """Bottou's determineEta0: the eta (powers of 2 from 1) whose one constant-eta pass over `sample` gives the
    lowest cost lam/2 |w|^2 + mean hinge on that sample."""
    d = X.shape[1]
    Xs, ys = X[sample], y[sample]

    def cost(eta):
        v, st = np.zeros(d), _sgd_state()
        _sgd_steps(rows, y, sample, v, st, lam, eta, False, bias_rate if fit_intercept else 0.0, 0.0, 1)
        return primal_objective(st[0]["scale"] * v, Xs, ys, lam, st[0]["bias"])

    lo_eta, factor = 1.0, 2.0
    lo_cost, hi_eta = cost(lo_eta), lo_eta * factor
    hi_cost = cost(hi_eta)
    if lo_cost < hi_cost:
        while lo_cost < hi_cost and lo_eta > 1e-12:
            hi_eta, hi_cost = lo_eta, lo_cost
            lo_eta = hi_eta / factor
            lo_cost = cost(lo_eta)
    elif hi_cost < lo_cost:
        while hi_cost < lo_cost and hi_eta < 1e12:
            lo_eta, lo_cost = hi_eta, hi_cost
            hi_eta = lo_eta * factor
            hi_cost = cost(hi_eta)
    return lo_eta


class SGDSVC(_PrimalLinearSVC):
    """Bottou's SVM-SGD for Eq. 1: eta_t = 1/(lam (t + t0)), t0 = 1/(lam eta0), one shuffled pass per epoch.

    lam: regularisation lambda. max_iter: epochs. fit_intercept: learn an unregularised bias (moved with
    bias_rate * eta, 0.01 in svmsgd). eta0: initial step; None: Bottou's heuristic on the first 1000 points of
    the first epoch's order. shuffle: reshuffle every epoch (else file order). eps, patience: the paper's
    stopping rule (None or 0: off). check_every: steps between records (None: once per epoch).

    Fitted: coef_, intercept_, classes_, eta0_, t0_, n_iter_ (steps), n_epochs_, converged_, history_.
    """

    def __init__(self, lam=1e-4, max_iter=5, fit_intercept=True, bias_rate=0.01, eta0=None, shuffle=True,
                 eps=None, patience=PAPER_PATIENCE, check_every=None, random_state=None):
        self.lam = lam
        self.max_iter = max_iter
        self.fit_intercept = fit_intercept
        self.bias_rate = bias_rate
        self.eta0 = eta0
        self.shuffle = shuffle
        self.eps = eps
        self.patience = patience
        self.check_every = check_every
        self.random_state = random_state

    def fit(self, X, y, callback=None, eval_set=None):
        self._check_params()
        if self.max_iter is None:
            raise ValueError("max_iter = None; allowed: an integer >= 1 (epochs)")
        t_start = time.perf_counter()
        X, self.classes_, ypm = binary_fit_data(self, X, y)
        n, d = X.shape
        rows = as_rows(X)
        rng = np.random.default_rng(self.random_state)
        lam = float(self.lam)
        bias_rate = float(self.bias_rate) if self.fit_intercept else 0.0
        orders = (rng.permutation(n) if self.shuffle else np.arange(n) for _ in range(int(self.max_iter)))
        first = next(orders)                  # max_iter >= 1 epochs (checked above)
        self.eta0_ = float(self.eta0) if self.eta0 else _determine_eta0(rows, ypm, first[:min(1000, n)], lam,
                                                                        bias_rate, self.fit_intercept, X)
        self.t0_ = 1.0 / (lam * self.eta0_)
        v, st = np.zeros(d), _sgd_state()
        eps = float(self.eps or 0.0)
        chunk = int(self.check_every) if self.check_every else n
        history, steps, epochs = [], 0, 0
        self.converged_, self.stop_reason_ = False, "iteration budget"
        order = first
        stop = False
        while order is not None and not stop:
            for lo in range(0, n, chunk):
                part = order[lo:lo + chunk]
                done = _sgd_steps(rows, ypm, part, v, st, lam, self.eta0_, True, bias_rate, eps, int(self.patience))
                steps += done
                self.converged_ = done < part.shape[0]
                info = self._record(steps, st[0]["scale"] * v, st[0]["bias"], X, ypm, eval_set, t_start)
                info["epoch"] = epochs + (lo + done) / n
                history.append(info)
                if callback is not None and callback(info):
                    self.stop_reason_, stop = "callback", True
                    break
                if self.converged_:
                    self.stop_reason_, stop = "stopping rule", True
                    break
            epochs += 1
            order = next(orders, None)
        self.coef_ = (st[0]["scale"] * v).reshape(1, -1)
        self.intercept_ = np.array([st[0]["bias"]])
        self.n_iter_, self.n_epochs_, self.history_ = steps, epochs, history
        self.fit_time_ = time.perf_counter() - t_start
        self._warn_if_unconverged()
        return self


# ---------------------------------------------------------------------------------------------------------------
# Scenario algorithms
# ---------------------------------------------------------------------------------------------------------------


def eq1_optimum(dataset, lam: float, wanted: bool = True):
    """The certified optimum J* of Eq. 1 (no bias) on the training set, as a `bundle.objective.Optimum` (its value
    NaN when the reference failed its certificate), or None when not `wanted`."""
    if not wanted:
        return None
    from ..bundle.objective import optimum

    return optimum(dataset.X, np.asarray(dataset.y, np.float64), lam)


def rel_primal(objective: float, best) -> float:
    """(J(w) - J*) / |J*| (NaN without a certified J*)."""
    if best is None or not math.isfinite(best.value) or best.value == 0:
        return math.nan
    return (objective - best.value) / abs(best.value)


def optimum_info(best) -> dict:
    """The run's information on J* (summary.json's algorithm_info)."""
    return {} if best is None else {"optimum": best.value, "optimum_source": best.source}


def _single_machine(problem, make_estimator, best=None):
    from ...deployment import SingleMachineRun

    ds = problem.dataset

    def fit(on_check, eval_every):
        est = make_estimator(eval_every)
        eval_set = (ds.X_test, ds.y_test) if ds.X_test is not None else None

        def check(info):
            if best is not None:
                info["rel_primal"] = rel_primal(info["objective"], best)
            return on_check(info)

        est.fit(ds.X, ds.y, callback=check, eval_set=eval_set)
        return {"coef": est.coef_[0], "intercept": float(est.intercept_[0]), "estimator": est}

    return SingleMachineRun(fit=fit, info={"n": ds.n, "d": ds.d, **optimum_info(best)})


def build_pegasos(params: PegasosParams, problem):
    n = problem.dataset.n
    T = params.iterations or int(math.ceil(params.epochs * n / params.batch_size))
    return _single_machine(problem, lambda every: PegasosSVC(
        lam=params.lam, max_iter=T, batch_size=params.batch_size, projection=params.projection,
        average=params.average, eps=params.eps, patience=params.patience, check_every=every,
        random_state=problem.seed), eq1_optimum(problem.dataset, params.lam, params.reference))


def build_svm_sgd(params: SGDParams, problem):
    return _single_machine(problem, lambda every: SGDSVC(
        lam=params.lam, max_iter=params.epochs, fit_intercept=params.fit_intercept, eta0=params.eta0,
        eps=params.eps, patience=params.patience, check_every=every, random_state=problem.seed))
