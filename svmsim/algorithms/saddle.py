"""Saddle-SVC and Saddle-DSVC: SVM via saddle-point optimisation (paper 000, Jin, Huang & Li).

Read beside `000_ff8faf4b278c4a32.txt` and its digest `notes-000.md` (which corrects the printed mistakes):

* hard margin: max_w min_{eta, xi in simplices} w'A eta - w'B xi - |w|^2/2 (eq. 3), regularised by the entropy
  gamma*H (eq. 4); nu-SVM: the same over capped simplices, weights <= nu (eqs. 7-8, RC-Hull eq. 6);
* Algorithm 1 (preprocessing): scale by 1/max|x| (not 1/max|x|^2, notes section 7.2), zero-pad d to a power of
  two, rotate by the *normalised* randomized Hadamard transform H D;
* Algorithm 2 (one iteration): a random coordinate prox step on w (line 4, eq. 9) and a multiplicative-weights
  step on eta and xi (lines 5-6, closed form eqs. 10-11) with extrapolation theta on eta, xi and factor d on w;
  nu-projection by Rule 2 (sort, Lemma 11) or Rule 3 (the while-loop of eqs. 12-13);
* Algorithm 4 (Saddle-DSVC): one server and k clients, three rounds per iteration (+ Rule 3 rounds for nu).

The numeric core (`saddle_kernels.py`) is shared: the single-machine estimator runs it fused over all points,
the clients run it per segment over their shards, and both produce the same iterates for the same seed.
This paper's nu is the cap on each point's weight (nu in [1/min(n1,n2), 1]); scikit-learn's NuSVC `nu` is
mu = 2/(n*nu) (notes section 1).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sklearn.base import BaseEstimator, ClassifierMixin

from ..comm.message import Inbox, MessageBatch, Outbox, frozen_ids
from ..errors import DataError, InfeasibleParameterError
from ..numerics.hadamard import fwht_rows, next_power_of_two, rotate_into_columns
from ..program import NodeProgram, RoleSpec, SyncKernel, kernel_step
from . import saddle_kernels as K
from .registry import AlgorithmInfo, register

__all__ = [
    "SaddleSVC", "Rotation", "SaddleConstants", "saddle_constants", "resolve_cap", "CoordinateStream",
    "SaddleEvaluator", "SaddleServer", "SaddleClient", "dsvc_scalars_per_iteration", "dsvc_scalars",
    "dsvc_setup_scalars",
    "dsvc_bound", "hull_lower_bound",
]


# ---------------------------------------------------------------------------------------------------------------
# Preprocessing (Algorithm 1) and constants
# ---------------------------------------------------------------------------------------------------------------

def _row_norms(X) -> np.ndarray:
    if sp.issparse(X):
        return np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return np.sqrt(np.einsum("ij,ij->i", X, X))


def _dense_rows(X, rows: np.ndarray, width: int) -> np.ndarray:
    """Rows of X as a dense (len(rows), width) float64 array, zero-padded."""
    out = np.zeros((rows.shape[0], width), dtype=np.float64)
    if sp.issparse(X):
        out[:, : X.shape[1]] = X[rows].toarray()
    else:
        out[:, : X.shape[1]] = X[rows]
    return out


@dataclass
class Rotation:
    """The randomized Hadamard rotation H D of Algorithm 1 (H = W/sqrt(d) orthogonal, D random signs)."""

    d: int
    d_pad: int
    signs: np.ndarray

    @classmethod
    def from_seed(cls, d: int, seed: int) -> "Rotation":
        d_pad = next_power_of_two(d)
        rng = np.random.default_rng([seed, 0xD1A6])
        return cls(d, d_pad, rng.choice(np.array([-1.0, 1.0]), size=d_pad))

    def rotate_rows(self, X, rows: np.ndarray) -> np.ndarray:
        """H D x for the given rows of X (unscaled), shape (len(rows), d_pad)."""
        Y = _dense_rows(X, rows, self.d_pad)
        Y *= self.signs
        return fwht_rows(Y)

    def rotate_columns(self, X, rows: np.ndarray, factors: np.ndarray) -> np.ndarray:
        """The (d_pad, len(rows)) matrix whose column j is factors[j] * H D x_rows[j] (one numba pass)."""
        Y = _dense_rows(X, rows, self.d_pad)
        out = np.empty((self.d_pad, rows.shape[0]))
        return rotate_into_columns(Y, self.signs, np.ascontiguousarray(factors, dtype=np.float64), out)

    def to_original(self, w: np.ndarray) -> np.ndarray:
        """Map a rotated direction back: (H D)^T w = D H w, restricted to the original coordinates."""
        v = fwht_rows(np.array(w, dtype=np.float64).reshape(1, -1))[0]
        return (self.signs * v)[: self.d]


@dataclass(frozen=True)
class SaddleConstants:
    """gamma, q, tau, sigma, theta and kappa = d/tau of Algorithm 1 line 4 (notes section 2)."""

    d: int
    n: int
    eps: float
    beta: float
    q: float
    gamma: float
    tau: float
    sigma: float
    theta: float
    kappa: float

    def iterations_estimate(self) -> int:
        """T = d + sqrt(d/(eps*beta)), the paper's iteration scale (Theorem 6, up to logarithms)."""
        return int(math.ceil(self.d + math.sqrt(self.d / (self.eps * self.beta))))


def saddle_constants(d: int, n: int, eps: float, beta: float, q: float) -> SaddleConstants:
    gamma = eps * beta / (2.0 * math.log(n))
    tau = math.sqrt(d / gamma) / (2.0 * q)
    sigma = math.sqrt(d * gamma) / (2.0 * q)
    theta = 1.0 - 1.0 / (d + q * math.sqrt(d) / math.sqrt(gamma))
    return SaddleConstants(d, n, eps, beta, q, gamma, tau, sigma, theta, d / tau)


def resolve_cap(n_pos: int, n_neg: int, nu: float | None, alpha: float | None) -> float:
    """The per-point weight cap: inf for the hard margin, nu (or 1/(alpha*min(n1,n2))) for the nu-SVM."""
    if n_pos == 0 or n_neg == 0:
        raise DataError(f"the training data has {n_pos} points labelled +1 and {n_neg} labelled -1; an SVM "
                        f"needs both classes")
    if nu is None and alpha is None:
        return math.inf
    m = min(n_pos, n_neg)
    if nu is None:
        nu = 1.0 / (alpha * m)
    if not (nu * m >= 1.0 - 1e-12):
        raise InfeasibleParameterError(
            f"nu = {nu:g} is infeasible: the capped simplices need nu >= 1/min(n1, n2) = 1/{m} = {1.0 / m:.6g} "
            f"(equivalently alpha <= 1); choose nu in [{1.0 / m:.6g}, 1] or alpha in (0, 1]")
    return math.inf if nu >= 1.0 else float(nu)


class CoordinateStream:
    """The sequence of sampled coordinates i* (Algorithm 2 line 1), drawn in fixed blocks so that a server that
    takes them one at a time and a solver that takes them in chunks see the same sequence."""

    BLOCK = 8192

    def __init__(self, d: int, seed: int):
        self.d = d
        self.rng = np.random.default_rng([seed, 0x5ADD1E])
        self.buf = np.empty(0, dtype=np.int64)
        self.pos = 0

    def _ensure(self, m: int) -> None:
        """Make sure at least m coordinates are buffered (blocks are drawn in order, so when they are drawn
        does not change the sequence)."""
        while self.buf.shape[0] - self.pos < m:
            block = self.rng.integers(0, self.d, size=self.BLOCK, dtype=np.int64)
            self.buf = np.concatenate([self.buf[self.pos:], block])
            self.pos = 0

    def take(self, m: int) -> np.ndarray:
        self._ensure(m)
        out = self.buf[self.pos: self.pos + m].copy()
        self.pos += m
        return out

    def peek(self, m: int) -> np.ndarray:
        """The next m coordinates without consuming them."""
        self._ensure(m)
        return self.buf[self.pos: self.pos + m].copy()

    def advance(self) -> tuple[int, int]:
        """Consume one coordinate; return it and the one after it."""
        if self.buf.shape[0] - self.pos < 2:
            self._ensure(2)
        i, nxt = int(self.buf[self.pos]), int(self.buf[self.pos + 1])
        self.pos += 1
        return i, nxt

    def next_after(self, j: int = 0) -> int:
        """The coordinate j places ahead, without consuming (cheap scalar form of peek)."""
        self._ensure(j + 1)
        return int(self.buf[self.pos + j])


def _q_value(q, d_pad: int, n: int, max_abs_scaled: float) -> float:
    """q = O(sqrt(log n)) (notes section 2): "data" uses sqrt(d)*max|X_ij| after rotation, "log" sqrt(ln n)."""
    if q == "data":
        return max(1.0, math.sqrt(d_pad) * max_abs_scaled)
    if q == "log":
        return math.sqrt(math.log(n))
    return float(q)


# ---------------------------------------------------------------------------------------------------------------
# Certificates and evaluation (in the data's own units)
# ---------------------------------------------------------------------------------------------------------------

def capped_min(values: np.ndarray, cap: float) -> float:
    """min over the capped simplex of sum p_j v_j: weight cap on the floor(1/cap) smallest values, the rest on
    the next one (notes section 1, capmin). cap >= 1 gives the plain minimum."""
    if values.size == 0:
        return math.nan
    if not cap < 1.0:
        return float(values.min())
    k = int(math.floor(1.0 / cap + 1e-12))
    k = min(k, values.size)
    m = min(k + 1, values.size)
    smallest = np.sort(np.partition(values, m - 1)[:m])
    total = cap * smallest[:k].sum()
    rest = 1.0 - cap * k
    if k < smallest.size and rest > 0:
        total += rest * smallest[k]
    return float(total)


def hull_lower_bound(X, y: np.ndarray, direction: np.ndarray, cap: float, proj: np.ndarray | None = None
                     ) -> tuple[float, float]:
    """(gap, b) of a direction v: gap = capmin_P(v.x) - capmax_Q(v.x), b the bisecting offset (notes section 1).

    gap/|v| is a lower bound on the (reduced) hull distance. `proj` = X @ v when already computed.
    """
    if proj is None:
        proj = np.asarray(X @ direction).ravel()
    lo_p = capped_min(proj[y > 0], cap)
    hi_q = -capped_min(-proj[y < 0], cap)
    return lo_p - hi_q, 0.5 * (lo_p + hi_q)


@dataclass
class SaddleEvaluator:
    """Certificates and accuracies of an iterate (w, p), computed from the original data (not the rotation).

    upper bound: |z| with z = sum_j y_j p_j x_j (a point of the Minkowski difference of the (reduced) hulls);
    lower bound: gap(v)/|v| for the mapped-back direction v; certified relative gap (upper - lower)/upper.
    For the nu-SVM, problem (5)'s value at the best scaling of v is -lower^2/8 and its dual value -upper^2/8.
    """

    X: object
    y: np.ndarray
    cap: float
    rotation: Rotation | None = None     # only needed for iterates w in the rotated coordinates
    X_test: object = None
    y_test: np.ndarray | None = None

    def model(self, w: np.ndarray, proj: np.ndarray | None = None) -> tuple[np.ndarray, float, float]:
        """Direction in original coordinates, offset b (predict sign(v.x - b)) and gap."""
        v = self.rotation.to_original(w)
        gap, b = hull_lower_bound(self.X, self.y, v, self.cap, proj)
        return v, b, gap

    def __call__(self, w: np.ndarray, p: np.ndarray) -> dict:
        out = self.certify(self.rotation.to_original(w), p)
        out["w_norm"] = float(np.linalg.norm(w))
        return out

    def certify(self, v: np.ndarray, p: np.ndarray) -> dict:
        """The certificate of a direction v in the data's own coordinates and hull weights p (any solver's)."""
        proj = np.asarray(self.X @ v).ravel()
        gap, b = hull_lower_bound(self.X, self.y, v, self.cap, proj)
        z = np.asarray(self.X.T @ (self.y * p)).ravel()
        upper = float(np.linalg.norm(z))
        vnorm = float(np.linalg.norm(v))
        lower = max(gap / vnorm, 0.0) if vnorm > 0 else 0.0
        out = {
            "hull_distance": upper,
            "hull_lower": lower,
            "margin": 0.5 * lower,
            "rel_gap": (upper - lower) / upper if upper > 0 else math.inf,
        }
        if self.cap < 1.0:
            out["objective"] = -lower * lower / 8.0   # problem (5) at the best scaling of v
            out["dual_objective"] = -upper * upper / 8.0
        else:
            out["objective"] = upper                  # the paper's Table 1 "obj": distance between the hulls
        out["duality_gap"] = (upper * upper - lower * lower) / 8.0 if self.cap < 1.0 else upper - lower
        out["train_accuracy"] = float(np.mean(np.where(proj >= b, 1.0, -1.0) == self.y))
        if self.X_test is not None and self.y_test is not None and len(self.y_test):
            st = np.asarray(self.X_test @ v).ravel() - b
            out["test_accuracy"] = float(np.mean(np.where(st >= 0, 1.0, -1.0) == self.y_test))
        return out


# ---------------------------------------------------------------------------------------------------------------
# Single machine: Saddle-SVC as a scikit-learn estimator
# ---------------------------------------------------------------------------------------------------------------

class SaddleSVC(ClassifierMixin, BaseEstimator):
    """Saddle-SVC (paper 000, Algorithms 1-2): hard-margin SVM or nu-SVM by randomized primal-dual saddle steps.

    Parameters
    ----------
    nu: weight cap of the nu-SVM (this paper's nu, in [1/min(n1,n2), 1]); None with alpha None = hard margin.
    alpha: alternative to nu: nu = 1/(alpha*min(n1,n2)) (the paper uses alpha = 0.85).
    eps, beta: accuracy and the paper's beta; they set gamma = eps*beta/(2 ln n) and the step sizes.
    q: "data" (sqrt(d)*max|X_ij| after rotation), "log" (sqrt(ln n)) or a number.
    tol: stop when the certified relative gap (upper-lower)/upper of the hull distance is <= tol.
    stop: "gap" (certified, default), "paper" (every T iterations, stop when the objective moved less than
        eps; section 5) or "iterations" (run max_iter).
    max_iter: iteration budget. check_every: iterations between certificate checks (default: T, at least 250).
    projection: "newton" (exact KL projection, warm-started; same output as the rules), "rule3" (the paper's
        while loop from c = 1), "sort" (Rule 2, O(n log n) per projection).
    seed: seeds D and the coordinate stream (Saddle-DSVC with the same seed follows the same iterates).

    Fitted attributes: coef_, intercept_ (sklearn convention: decision = X @ coef_ + intercept_), classes_,
    hull_distance_, hull_lower_, margin_, rel_gap_, objective_, n_iter_, history_, w_ (rotated iterate),
    weights_ (eta and xi in the training order), constants_.
    """

    def __init__(self, nu=None, alpha=None, eps=1e-3, beta=1.0, q="data", tol=1e-3, stop="gap",
                 max_iter=1_000_000, check_every=None, projection="newton", seed=0, refresh_every=20000):
        self.nu = nu
        self.alpha = alpha
        self.eps = eps
        self.beta = beta
        self.q = q
        self.tol = tol
        self.stop = stop
        self.max_iter = max_iter
        self.check_every = check_every
        self.projection = projection
        self.seed = seed
        self.refresh_every = refresh_every

    # -- preparation ---------------------------------------------------------------------------------------------
    def _prepare(self, X, y):
        classes = np.unique(y)
        if classes.size != 2:
            raise DataError(f"SaddleSVC needs exactly two classes; found {classes.size}: {classes[:10].tolist()}")
        ypm = np.where(y == classes[1], 1.0, -1.0)
        pos = np.flatnonzero(ypm > 0)
        neg = np.flatnonzero(ypm < 0)
        cap = resolve_cap(pos.size, neg.size, self.nu, self.alpha)
        rot = Rotation.from_seed(X.shape[1], self.seed)
        order = np.concatenate([pos, neg])
        scale = float(_row_norms(X).max())
        if not scale > 0:
            raise DataError("every training point is zero; there is nothing to separate")
        S = rot.rotate_columns(X, order, ypm[order] / scale)
        q = _q_value(self.q, rot.d_pad, order.size, float(np.abs(S).max()))
        const = saddle_constants(rot.d_pad, order.size, self.eps, self.beta, q)
        return classes, ypm, order, S, rot, scale, cap, const, pos.size

    def fit(self, X, y, callback=None, eval_set=None):
        """Fit on X (dense or sparse, n x d) and binary labels y.

        callback: ``callback(info: dict) -> bool`` is called at every check with the certificate; True stops.
        eval_set: optional (X_test, y_test) whose accuracy is added to every check record.
        """
        if self.stop not in ("gap", "paper", "iterations"):
            raise ValueError(f"stop = {self.stop!r}; allowed: 'gap', 'paper', 'iterations'")
        if self.projection not in ("newton", "rule3", "sort"):
            raise ValueError(f"projection = {self.projection!r}; allowed: 'newton', 'rule3', 'sort'")
        t_start = time.perf_counter()
        classes, ypm, order, S, rot, scale, cap, const, n1 = self._prepare(X, y)
        n = order.size
        d = rot.d_pad
        evaluator = SaddleEvaluator(X, ypm, cap, rot)
        if eval_set is not None:
            evaluator.X_test = eval_set[0]
            evaluator.y_test = np.where(np.asarray(eval_set[1]) == classes[1], 1.0, -1.0)
        seg_lo = np.array([0, n1], dtype=np.int64)
        seg_hi = np.array([n1, n], dtype=np.int64)
        counts = np.array([n1, n - n1], dtype=np.float64)
        # state (Algorithm 1 line 5): w = 0, eta = 1/n1, xi = 1/n2 (log domain, lazily normalised)
        w = np.zeros(d)
        u = np.zeros(n)
        Lr = np.concatenate([np.full(n1, -math.log(n1)), np.full(n - n1, -math.log(n - n1))])
        pr = np.exp(Lr)
        cls_off = np.zeros(2)
        cls_mult = np.ones(2)
        cls_c = np.ones(2)
        cls_shift = const.kappa * (-np.log(counts)) / (const.gamma + const.kappa) + np.log(counts)
        coords = CoordinateStream(d, self.seed)
        first = coords.peek(1)[0]
        delta = float(S[first, :n1].sum() / n1 + S[first, n1:].sum() / (n - n1))
        T = const.iterations_estimate()
        check = int(self.check_every or max(250, min(T, 5000)))
        mode = {"newton": 0, "rule3": 1, "sort": 2}[self.projection]
        max_passes = n + 2
        history = []
        prev_obj = None
        t_iter = 0.0
        done = 0
        since_refresh = 0
        self.stop_reason_ = "iteration budget"
        while done < self.max_iter:
            m = min(check, self.max_iter - done)
            block = coords.peek(m + 1)
            coords.take(m)
            t0 = time.perf_counter()
            delta = K.run_iterations(S, w, u, Lr, pr, seg_lo, seg_hi, block, m, delta, const.sigma, const.kappa,
                                     const.gamma, const.theta, cap, cls_off, cls_mult, cls_shift, cls_c,
                                     max_passes, mode)
            t_iter += time.perf_counter() - t0
            done += m
            since_refresh += m
            if since_refresh >= self.refresh_every:
                u[:] = w @ S                        # remove the drift of the one-coordinate updates
                since_refresh = 0
            info = self._certificate(S, w, u, pr, cls_mult, n1, cap, scale, evaluator)
            info.update(iteration=done, time=time.perf_counter() - t_start, iteration_time=t_iter)
            history.append(info)
            if callback is not None and callback(info):
                self.stop_reason_ = "callback"
                break
            if self.stop == "gap" and info["rel_gap"] <= self.tol:
                self.stop_reason_ = "certified gap"
                break
            if self.stop == "paper" and done % T < check:
                if prev_obj is not None and abs(info["objective"] - prev_obj) < self.eps:
                    self.stop_reason_ = "objective change below eps"
                    break
                prev_obj = info["objective"]
        # fitted attributes
        p = self._weights(pr, cls_mult, seg_lo, seg_hi, cap, order)
        v, b, gap = evaluator.model(w)
        self.classes_ = classes
        self.w_ = w
        self.weights_ = p
        self.rotation_ = rot
        self.scale_ = scale
        self.cap_ = cap
        self.constants_ = const
        self.n_iter_ = done
        self.history_ = history
        last = history[-1] if history else self._certificate(S, w, u, pr, cls_mult, n1, cap, scale, evaluator)
        self.hull_distance_ = last["hull_distance"]
        self.hull_lower_ = last["hull_lower"]
        self.margin_ = last["margin"]
        self.rel_gap_ = last["rel_gap"]
        self.objective_ = last["objective"]
        self.iteration_time_ = t_iter
        self.fit_time_ = time.perf_counter() - t_start
        if cap < 1.0:
            # problem (5) with w_svm = (best scale) * v/|v|: w_svm = gap/2 * v/|v|^2 (notes section 1)
            factor = 0.5 * gap / float(v @ v) if gap > 0 else 1.0
        else:
            # hard margin in the scaling of (1): min y (w.x - b) = 1
            factor = 2.0 / gap if gap > 0 else 1.0
        self.coef_ = (factor * v).reshape(1, -1)
        self.intercept_ = np.array([-factor * b])
        return self

    @staticmethod
    def _certificate(S, w, u, pr, cls_mult, n1, cap, scale, evaluator) -> dict:
        """The same certificate as `SaddleEvaluator`, from the solver's own state: the lower bound and the
        offset from the maintained projections u = S^T w (no pass over the data), the upper bound |S p|
        (the rotation keeps norms). Distances in the data's units (times the scale s)."""
        p = np.concatenate([np.minimum(cap, cls_mult[0] * pr[:n1]), np.minimum(cap, cls_mult[1] * pr[n1:])])
        upper = scale * float(np.linalg.norm(S @ p))
        lo_p = capped_min(u[:n1], cap)                 # capmin over +1 of <w, x'>
        lo_q = capped_min(u[n1:], cap)                 # capmin over -1 of -<w, x'>
        v = evaluator.rotation.to_original(w)          # the direction in the data's own coordinates: padding
        wn = float(np.linalg.norm(v))                  # dimensions of w carry no signal and are left out
        gap_u = lo_p + lo_q
        lower = scale * max(gap_u, 0.0) / wn if wn > 0 else 0.0
        b = 0.5 * (lo_p - lo_q)                        # predict sign(<w, x'> - b)
        out = {"hull_distance": upper, "hull_lower": lower, "margin": 0.5 * lower,
               "rel_gap": (upper - lower) / upper if upper > 0 else math.inf, "w_norm": float(np.linalg.norm(w))}
        if cap < 1.0:
            out["objective"] = -lower * lower / 8.0
            out["dual_objective"] = -upper * upper / 8.0
            out["duality_gap"] = (upper * upper - lower * lower) / 8.0
        else:
            out["objective"] = upper
            out["duality_gap"] = upper - lower
        correct = np.count_nonzero(u[:n1] >= b) + np.count_nonzero(u[n1:] >= -b)
        out["train_accuracy"] = correct / u.shape[0]
        if evaluator.X_test is not None and evaluator.y_test is not None and len(evaluator.y_test):
            st = np.asarray(evaluator.X_test @ (v / scale)).ravel() - b
            out["test_accuracy"] = float(np.mean(np.where(st >= 0, 1.0, -1.0) == evaluator.y_test))
        return out

    @staticmethod
    def _weights(pr, cls_mult, seg_lo, seg_hi, cap, order):
        p_sorted = np.empty_like(pr)
        for c in range(2):
            sl = slice(seg_lo[c], seg_hi[c])
            p_sorted[sl] = np.minimum(cap, cls_mult[c] * pr[sl])
        p = np.empty_like(pr)
        p[order] = p_sorted
        return p

    # -- prediction ---------------------------------------------------------------------------------------------
    def decision_function(self, X):
        return np.asarray(X @ self.coef_[0]).ravel() + self.intercept_[0]

    def predict(self, X):
        return np.where(self.decision_function(X) >= 0, self.classes_[1], self.classes_[0])


# ---------------------------------------------------------------------------------------------------------------
# Saddle-DSVC (Algorithms 3-4): one server, k clients
# ---------------------------------------------------------------------------------------------------------------
#
# Messages (every scalar counted; a broadcast counts once per recipient; the index i* is one scalar):
#   setup   (Algorithm 3, once)  client -> server "stats" [n1_c, n2_c, max|x|_c, max|HDx|_c]   4k
#                                server -> client "setup" [n1, n2, s, q]                         4k
#   round 1 server -> client "coord" [i*]                 k     client -> server "delta" [d+_c, d-_c]   2k
#   round 2 server -> client "delta_sum" [S.d+, S.d-]    2k     client -> server "z" [Z+_c, Z-_c]       2k
#   round 3 server -> client "z_sum" [S.Z+, S.Z-]        2k
#   round 4 (nu only, repeated P times): client -> server "cap" [s+_c, s-_c, O+_c, O-_c]   4k each time;
#           server -> client "cap_sum" [S.s+, S.s-, S.O+, S.O-] 4k, except after the last report (sums zero)
#   with projection = "newton" instead, round 2's "z" is "z_guess" [Z, capped count, mass below and row i* times
#           the mass below a predicted threshold, per class] 8k, round 3's "z_sum" is "z_scale" [S.Z+, S.Z-, c0+,
#           c0-] 4k, then P ~ 1 times: client -> server "mass" [capped count, mass below, largest weight below and
#           smallest at or above the threshold, row i*(t+1) times the mass below, per class] 10k; server -> client
#           "scale" [c+, c-, final, the four trends of the next guess] 7k

CAP_TOLERANCE = K.CAP_TOLERANCE
MAX_CAP_PASSES = 10_000


def dsvc_scalars_per_iteration(k: int, nu_mode: bool, cap_reports: int = 1) -> int:
    """Scalars one Saddle-DSVC iteration sends: 9k (hard margin), plus 4k(2P - 1) with P Rule 3 reports."""
    return 9 * k + (4 * k * (2 * cap_reports - 1) if nu_mode else 0)


def dsvc_scalars(k: int, iterations: int, reports: int, nu_mode: bool, projection: str = "rule3") -> int:
    """Scalars of `iterations` Saddle-DSVC iterations with `reports` projection reports in all (after set-up):
    9k each, plus for the nu-SVM per report 4k ("cap") and 4k more ("cap_sum") except the last of an iteration
    (Rule 3), or with Newton 6k more on "z_guess" than on "z" and 2k more on "z_scale" than on "z_sum", and
    10k ("mass") and 7k ("scale") per report."""
    total = 9 * k * iterations
    if nu_mode:
        total += 4 * k * (2 * reports - iterations) if projection == "rule3" else 8 * k * iterations + 17 * k * reports
    return total


def dsvc_setup_scalars(k: int) -> int:
    return 8 * k


def dsvc_bound(k: int, d: int, eps: float) -> dict:
    """Theorem 8 upper bound k(d + sqrt(d/eps)) and the Omega(k min(d, 1/eps)) lower bound (Theorem 9), in
    scalars without their constants and logarithms."""
    return {"upper": k * (d + math.sqrt(d / eps)), "lower": k * min(d, 1.0 / eps)}


class _CoordinateWindow:
    """The shared coordinate stream as the compiled steps read it: a buffer and a position (in `ints[pos]`),
    refilled from the stream in Python whenever a step reports it running low (a pause)."""

    def __init__(self, d_pad: int, seed: int, ints: np.ndarray, pos: int):
        self.stream = CoordinateStream(d_pad, seed)
        self.ints, self.pos = ints, pos
        self.buf = np.zeros(0, dtype=np.int64)

    def refill(self) -> np.ndarray:
        p = int(self.ints[self.pos])
        if self.buf.shape[0] - p < 4 * K.COORD_LOW_WATER:
            self.buf = np.concatenate([self.buf[p:], self.stream.take(CoordinateStream.BLOCK)])
            self.ints[self.pos] = 0
        return self.buf


class _ServerState:
    def __init__(self, clients: np.ndarray, d_pad: int, seed: int, me: int, cap: float, newton: bool):
        self.clients = clients
        self.ints = np.zeros(9, dtype=np.int64)
        self.ints[K.S_ID] = me
        self.ints[K.S_NU] = int(cap < math.inf)
        self.ints[K.S_NEWTON] = int(newton)
        self.floats = np.zeros(K.SF_SIZE)         # Z, c, cap, trends, then the sums' scratch
        self.floats[K.SF_C:K.SF_C + 2] = 1.0
        self.floats[K.SF_CAP] = cap
        self.ints[K.S_MAXPASS] = MAX_CAP_PASSES
        self.ints[K.S_PHASE] = K.PHASE_SETUP
        self.coords = _CoordinateWindow(d_pad, seed, self.ints, K.S_POS)


class SaddleServer(NodeProgram):
    """The server of Algorithm 4: draws i*, sums the clients' scalars and broadcasts the sums.

    After set-up (Algorithm 3, here in Python) every round is `saddle_kernels.dsvc_server_step`, run from
    Python by `kernel_step` or by the compiled loop."""

    role = "server"

    def __init__(self, d: int, n: int, eps: float, beta: float, q, cap: float, projection: str = "rule3"):
        self.d_pad = next_power_of_two(d)
        self.n = n
        self.eps = eps
        self.beta = beta
        self.q = q
        self.cap = cap
        self.newton = projection == "newton"

    def init(self, node_ids, node_data, seed):
        clients = frozen_ids(node_data[0]["clients"])
        return _ServerState(clients, self.d_pad, seed, int(node_ids[0]), self.cap, self.newton)

    def kernel(self, st: _ServerState) -> SyncKernel | None:
        if st.ints[K.S_PHASE] == K.PHASE_SETUP:
            return None
        return SyncKernel((st.clients, st.coords.refill(), st.ints, st.floats), K.dsvc_server_step, K.DSVC_TAGS,
                          K.DSVC_WIDTHS, max_out=st.clients.shape[0])

    def step(self, st: _ServerState, inbox, round_):
        if "stats" not in inbox:
            return st, kernel_step(self.kernel(st), inbox, round_)
        out = Outbox()                                        # Algorithm 3: global n1, n2, scale and q
        rows = np.asarray(inbox["stats"].payload)
        n1, n2 = rows[:, 0].sum(), rows[:, 1].sum()
        scale = rows[:, 2].max()
        q = _q_value(self.q, self.d_pad, int(n1 + n2), rows[:, 3].max() / scale)
        out.send(MessageBatch.broadcast("setup", 0, st.clients, np.array([n1, n2, scale, q])))
        buf = st.coords.refill()
        i = buf[st.ints[K.S_POS]]
        st.ints[K.S_POS] += 1
        out.send(MessageBatch.broadcast("coord", 0, st.clients, np.array([float(i)])))
        st.ints[K.S_PHASE] = K.PHASE_DELTA
        return st, out

    def observe(self, st):
        return {"iteration": int(st.ints[K.S_ITER]), "cap_reports": int(st.ints[K.S_REPORTS])}


class _ClientState:
    """Struct of arrays for a group of clients: their points in segments [c0 +1, c0 -1, c1 +1, ...]."""

    def __init__(self, node_ids, S, seg_lo, seg_hi, seg_class, index, stats, server: int, seed: int, newton: bool):
        self.node_ids = frozen_ids(node_ids)
        self.S = S
        self.seg_lo, self.seg_hi, self.seg_class = seg_lo, seg_hi, seg_class
        self.index = index
        self.stats = stats
        self.const: SaddleConstants | None = None
        self.cap = math.inf
        m = S.shape[1]
        self.w = np.zeros(S.shape[0])
        self.wnorm2 = np.zeros(1)
        self.u = np.zeros(m)
        self.Lr = np.zeros(m)
        self.pr = np.zeros(m)
        self.p_prev = np.zeros(m)
        self.mult = np.ones(2)
        self.mult_capped = np.zeros(2)   # multiplier at the last Rule 3 capping (0: nothing capped yet)
        self.off = np.zeros(2)
        self.shift = np.zeros(2)
        self.started = False
        self.acc_new = np.zeros(seg_lo.shape[0])     # per segment: <S_i*(t+1), p[t+1]>, prepared in rounds 2-4
        self.acc_old = np.zeros(seg_lo.shape[0])     # per segment: <S_i*(t+1), p[t]>
        self.acc_after = np.zeros(seg_lo.shape[0])   # hard margin, per segment: <S_i*(t+2), p[t+1]>
        k = seg_lo.shape[0] // 2
        self.rows2 = np.zeros((k, 2))                   # reply buffers
        self.rows4 = np.zeros((k, 4))
        self.rows6 = np.zeros((k, 10))
        self.ints = np.zeros(9, dtype=np.int64)
        self.ints[K.C_FIRST] = 1
        self.ints[K.C_SERVER] = server
        self.ints[K.C_ISTAR] = -1
        self.ints[K.C_NEWTON] = int(newton)
        self.floats = np.zeros(17)
        self.floats[K.F_C:K.F_C + 2] = 1.0
        # the shared coordinate stream (Algorithm 3's shared seed): the clients know i*(t+1) in advance
        self.coords = _CoordinateWindow(S.shape[0], seed, self.ints, K.C_POS)


class SaddleClient(NodeProgram):
    """A client of Algorithm 4 (and its preprocessing, Algorithm 3), run over a group of clients at once.

    The clients share the server's seed (Algorithm 3 shares W and D that way), so they know the coordinate
    stream: round 2's pass over the shard also accumulates the sums that round 1 of the next iteration needs,
    and when i* arrives the reply is ready. The messages are exactly Algorithm 4's; a coordinate that differs
    from the shared stream is a protocol error. After set-up every round is `saddle_kernels.dsvc_client_step`.
    """

    role = "client"
    initiator = True   # sends its statistics in round 0 (Algorithm 3)

    def __init__(self, d: int, eps: float, beta: float, cap: float, server: int = 0, projection: str = "rule3"):
        self.d = d
        self.eps = eps
        self.beta = beta
        self.cap = cap
        self.server = server
        self.newton = projection == "newton"

    def init(self, node_ids, node_data, seed):
        rot = Rotation.from_seed(self.d, seed)                 # shared seed: every client has the same H D
        blocks, lo, hi, cls, index, stats = [], [], [], [], [], []
        start = 0
        for data in node_data:
            X, y, idx = data["X"], np.asarray(data["y"]), np.asarray(data["index"])
            pos, neg = np.flatnonzero(y > 0), np.flatnonzero(y < 0)
            order = np.concatenate([pos, neg])
            Y = rot.rotate_rows(X, order) if order.size else np.zeros((0, rot.d_pad))
            norms = _row_norms(X) if order.size else np.zeros(1)
            stats.append([pos.size, neg.size, float(norms.max()) if norms.size else 0.0,
                          float(np.abs(Y).max()) if Y.size else 0.0])
            Y *= y[order, None]
            blocks.append(Y)
            index.append(idx[order])
            for c, count in ((0, pos.size), (1, neg.size)):
                lo.append(start)
                hi.append(start + count)
                cls.append(c)
                start += count
        S = np.ascontiguousarray(np.vstack(blocks).T) if blocks else np.zeros((rot.d_pad, 0))
        return _ClientState(node_ids, S, np.array(lo, np.int64), np.array(hi, np.int64), np.array(cls, np.int64),
                            np.concatenate(index) if index else np.zeros(0, np.int64), np.array(stats, float),
                            self.server, seed, self.newton)

    def _setup(self, st: _ClientState, row: np.ndarray) -> None:
        n1, n2, scale, q = float(row[0]), float(row[1]), float(row[2]), float(row[3])
        st.S /= scale
        n = int(n1 + n2)
        st.const = c = saddle_constants(st.S.shape[0], n, self.eps, self.beta, q)
        st.cap = self.cap
        logcap = math.log(self.cap) if self.cap < math.inf else math.inf
        st.floats[:6] = [c.sigma, c.kappa, c.gamma, c.theta, self.cap, logcap]
        counts = np.array([n1, n2])
        for s in range(st.seg_lo.shape[0]):                   # eta = 1/n1, xi = 1/n2 (global counts)
            sl = slice(st.seg_lo[s], st.seg_hi[s])
            st.Lr[sl] = -math.log(counts[st.seg_class[s]])
        st.pr[:] = np.exp(st.Lr)
        st.p_prev[:] = st.pr
        st.shift[:] = c.kappa * (-np.log(counts)) / (c.gamma + c.kappa) + np.log(counts)
        st.floats[K.F_LOGNORM:K.F_LOGNORM + 2] = st.shift

    def kernel(self, st: _ClientState) -> SyncKernel | None:
        if st.const is None:
            return None
        arrays = (st.S, st.seg_lo, st.seg_hi, st.seg_class, st.node_ids, st.w, st.wnorm2, st.u, st.Lr, st.pr,
                  st.p_prev, st.mult, st.mult_capped, st.off, st.shift, st.acc_new, st.acc_old, st.acc_after, st.rows2,
                  st.rows4, st.rows6,
                  st.coords.refill(), st.ints, st.floats)
        return SyncKernel(arrays, K.dsvc_client_step, K.DSVC_TAGS, K.DSVC_WIDTHS, max_out=st.node_ids.shape[0],
                          error=lambda: self._coordinate_error(st))

    @staticmethod
    def _coordinate_error(st: _ClientState) -> str:
        return (f"the server sent coordinate {st.ints[K.C_ERR_GOT]} where the shared coordinate stream has "
                f"{st.ints[K.C_ERR_EXPECTED]}")

    def step(self, st: _ClientState, inbox, round_):
        if not st.started:
            st.started = True
            out = Outbox()
            out.send(MessageBatch.gather("stats", st.node_ids, self.server, st.stats))
            return st, out
        if "setup" in inbox:
            self._setup(st, inbox["setup"].row(0))
            inbox = Inbox({t: b for t, b in inbox.items() if t != "setup"})
        return st, kernel_step(self.kernel(st), inbox, round_)

    def observe(self, st: _ClientState):
        p = np.empty(st.pr.shape[0])
        hard = st.cap == math.inf and st.ints[K.C_PRIMED]     # the hard margin keeps log-weights only
        for s in range(st.seg_lo.shape[0]):
            sl = slice(st.seg_lo[s], st.seg_hi[s])
            c = st.seg_class[s]
            p[sl] = np.exp(st.Lr[sl] - st.off[c]) if hard else np.minimum(st.cap, st.mult[c] * st.pr[sl])
        return {"w": st.w.copy(), "index": st.index, "p": p}


# ---------------------------------------------------------------------------------------------------------------
# Scenario parameters and registration
# ---------------------------------------------------------------------------------------------------------------

class SaddleParams(BaseModel):
    """``[algorithm]`` keys of saddle-svc. Leave nu and alpha unset for the hard margin."""

    model_config = ConfigDict(extra="forbid")
    nu: float | None = Field(None, gt=0, le=1, description="weight cap of the nu-SVM (this paper's nu)")
    alpha: float | None = Field(None, gt=0, le=1, description="nu = 1/(alpha*min(n1,n2)); the paper uses 0.85")
    eps: float = Field(1e-3, gt=0, lt=1, description="accuracy epsilon (sets gamma = eps*beta/(2 ln n))")
    beta: float = Field(1.0, gt=0, description="the paper's beta (tune over 10^-k)")
    q: Literal["data", "log"] | float = Field("data", description="q = sqrt(d)max|X| ('data'), sqrt(ln n) or a number")
    projection: Literal["newton", "rule3", "sort"] = Field("newton", description="nu-projection rule")

    @model_validator(mode="after")
    def _one_of_nu_alpha(self):
        if self.nu is not None and self.alpha is not None:
            raise ValueError("set either nu or alpha, not both")
        return self


class SaddleDSVCParams(SaddleParams):
    """``[algorithm]`` keys of saddle-dsvc: those of saddle-svc plus the number of clients k."""

    clients: int = Field(20, ge=1, description="number of clients k")
    projection: Literal["rule3", "newton"] = Field(
        "rule3", description="distributed nu-projection: Rule 3 rounds from c = 1 (Algorithm 4), or Newton steps "
                             "from the previous iteration's multiplier (the single machine's rule)")


def _cap_for(params: SaddleParams, y: np.ndarray) -> float:
    return resolve_cap(int((y > 0).sum()), int((y < 0).sum()), params.nu, params.alpha)


def _evaluator(problem, cap: float) -> SaddleEvaluator:
    ds = problem.dataset
    return SaddleEvaluator(ds.X, ds.y, cap, Rotation.from_seed(ds.d, problem.seed), ds.X_test, ds.y_test)


def _svm_model(evaluator: SaddleEvaluator, w: np.ndarray, p: np.ndarray) -> dict:
    v, b, gap = evaluator.model(w)
    if evaluator.cap < 1.0:
        factor = 0.5 * gap / float(v @ v) if gap > 0 else 1.0
    else:
        factor = 2.0 / gap if gap > 0 else 1.0
    return {"w_rotated": w, "coef": factor * v, "intercept": -factor * b, "weights": p}


def build_saddle_svc(params: SaddleParams, problem):
    from ..deployment import SingleMachineRun

    ds = problem.dataset
    cap = _cap_for(params, ds.y)
    evaluator = _evaluator(problem, cap)

    def fit(on_check, eval_every):
        est = SaddleSVC(nu=params.nu, alpha=params.alpha, eps=params.eps, beta=params.beta, q=params.q,
                        stop="iterations", max_iter=10**12, check_every=eval_every,
                        projection=params.projection, seed=problem.seed)
        eval_set = (ds.X_test, ds.y_test) if ds.X_test is not None else None
        est.fit(ds.X, ds.y, callback=on_check, eval_set=eval_set)
        model = _svm_model(evaluator, est.w_, est.weights_)
        model["estimator"] = est
        return model

    d_pad = next_power_of_two(ds.d)
    return SingleMachineRun(fit=fit, info={"cap": cap, "d_pad": d_pad, "n": ds.n})


def build_saddle_dsvc(params: SaddleDSVCParams, problem):
    from ..deployment import Deployment, server_client_layout

    ds = problem.dataset
    k = params.clients
    layout = server_client_layout(problem, k, "saddle-dsvc")
    cap = _cap_for(params, ds.y)
    parts, G, clients = layout.parts, layout.topology, layout.clients
    X = ds.X
    node_data = [{"X": X[idx], "y": ds.y[idx], "index": idx} for idx in parts]
    server = SaddleServer(ds.d, ds.n, params.eps, params.beta, params.q, cap, params.projection)
    client = SaddleClient(ds.d, params.eps, params.beta, cap, projection=params.projection)
    roles = [RoleSpec("server", server, np.array([0], dtype=np.int64), [{"clients": clients}]),
             RoleSpec("client", client, clients, node_data)]
    evaluator = _evaluator(problem, cap)
    d_pad = next_power_of_two(ds.d)

    def gather(obs):
        p = np.zeros(ds.n)
        w = None
        for o in obs["client"]:
            p[o["index"]] = o["p"]
            w = o["w"] if w is None else w
        return w, p

    def evaluate(obs):
        w, p = gather(obs)
        out = evaluator(w, p)
        out["iteration"] = obs["server"][0]["iteration"]
        out["cap_reports"] = obs["server"][0]["cap_reports"]
        return out

    def declared(obs):
        srv = obs["server"][0]
        T, R = srv["iteration"], srv["cap_reports"]
        return dsvc_setup_scalars(k) + dsvc_scalars(k, T, R, cap < math.inf, params.projection)

    def model(obs):
        return _svm_model(evaluator, *gather(obs))

    return Deployment(roles=roles, topology=G, node_names=layout.node_names, evaluate=evaluate,
                      declared_scalars=declared, bound=lambda eps: dsvc_bound(k, d_pad, eps),
                      comm_unit=("kd", float(k * ds.d)),
                      model=model, info={"k": k, "cap": cap, "d_pad": d_pad, "n": ds.n,
                                         "scalars_per_iteration_hard": dsvc_scalars_per_iteration(k, False)})


register(AlgorithmInfo(
    name="saddle-svc", family="saddle", paper="000_ff8faf4b278c4a32.txt, Algorithms 1-2", distributed=False,
    Params=SaddleParams, build=build_saddle_svc,
    description="Saddle-SVC: hard-margin / nu-SVM by randomized primal-dual saddle steps (single machine)",
    topologies=("star",)))
register(AlgorithmInfo(
    name="saddle-dsvc", family="saddle", paper="000_ff8faf4b278c4a32.txt, Algorithms 3-4", distributed=True,
    Params=SaddleDSVCParams, build=build_saddle_dsvc,
    description="Saddle-DSVC: one server, k clients, 9k scalars per iteration (+8k per nu-projection pass)",
    topologies=("star",)))
