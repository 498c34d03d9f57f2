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
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sklearn.base import BaseEstimator, ClassifierMixin

from ..comm.message import MessageBatch, Outbox
from ..errors import DataError, InfeasibleParameterError
from ..numerics.hadamard import fwht_rows, next_power_of_two
from ..program import NodeProgram, RoleSpec
from . import saddle_kernels as K
from .registry import AlgorithmInfo, register

__all__ = [
    "SaddleSVC", "Rotation", "SaddleConstants", "saddle_constants", "resolve_cap", "CoordinateStream",
    "SaddleEvaluator", "SaddleServer", "SaddleClient", "dsvc_scalars_per_iteration", "dsvc_setup_scalars",
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

    def take(self, m: int) -> np.ndarray:
        out = np.empty(m, dtype=np.int64)
        filled = 0
        while filled < m:
            if self.pos >= self.buf.shape[0]:
                self.buf = self.rng.integers(0, self.d, size=self.BLOCK, dtype=np.int64)
                self.pos = 0
            c = min(m - filled, self.buf.shape[0] - self.pos)
            out[filled: filled + c] = self.buf[self.pos: self.pos + c]
            self.pos += c
            filled += c
        return out

    def peek(self, m: int) -> np.ndarray:
        """The next m coordinates without consuming them."""
        saved = (self.rng.bit_generator.state, self.buf.copy(), self.pos)
        out = self.take(m)
        self.rng.bit_generator.state, self.buf, self.pos = saved
        return out


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


def hull_lower_bound(X, y: np.ndarray, direction: np.ndarray, cap: float) -> tuple[float, float]:
    """(gap, b) of a direction v: gap = capmin_P(v.x) - capmax_Q(v.x), b the bisecting offset (notes section 1).

    gap/|v| is a lower bound on the (reduced) hull distance.
    """
    proj = np.asarray(X @ direction).ravel()
    pos = proj[y > 0]
    neg = -proj[y < 0]
    lo_p = capped_min(pos, cap)
    hi_q = -capped_min(neg, cap)
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
    rotation: Rotation
    X_test: object = None
    y_test: np.ndarray | None = None

    def model(self, w: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Direction in original coordinates, offset b (predict sign(v.x - b)) and gap."""
        v = self.rotation.to_original(w)
        gap, b = hull_lower_bound(self.X, self.y, v, self.cap)
        return v, b, gap

    def __call__(self, w: np.ndarray, p: np.ndarray) -> dict:
        v, b, gap = self.model(w)
        z = np.asarray(self.X.T @ (self.y * p)).ravel()
        upper = float(np.linalg.norm(z))
        vnorm = float(np.linalg.norm(v))
        lower = max(gap / vnorm, 0.0) if vnorm > 0 else 0.0
        out = {
            "hull_distance": upper,
            "hull_lower": lower,
            "margin": 0.5 * lower,
            "rel_gap": (upper - lower) / upper if upper > 0 else math.inf,
            "w_norm": float(np.linalg.norm(w)),
        }
        if self.cap < 1.0:
            out["objective"] = -lower * lower / 8.0   # problem (5) at the best scaling of v
            out["dual_objective"] = -upper * upper / 8.0
        else:
            out["objective"] = upper                  # the paper's Table 1 "obj": distance between the hulls
        out["duality_gap"] = (upper * upper - lower * lower) / 8.0 if self.cap < 1.0 else upper - lower
        score = np.asarray(self.X @ v).ravel() - b
        out["train_accuracy"] = float(np.mean(np.where(score >= 0, 1.0, -1.0) == self.y))
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
        Y = rot.rotate_rows(X, order)
        Y *= ypm[order, None] / scale
        S = np.ascontiguousarray(Y.T)
        q = _q_value(self.q, rot.d_pad, order.size, float(np.abs(S).max()))
        const = saddle_constants(rot.d_pad, order.size, self.eps, self.beta, q)
        return classes, ypm, order, S, rot, scale, cap, const, pos.size

    def fit(self, X, y, callback=None):
        """Fit on X (dense or sparse, n x d) and binary labels y. `callback(info: dict) -> bool` is called at
        every check with the certificate; returning True stops the run."""
        if self.stop not in ("gap", "paper", "iterations"):
            raise ValueError(f"stop = {self.stop!r}; allowed: 'gap', 'paper', 'iterations'")
        if self.projection not in ("newton", "rule3", "sort"):
            raise ValueError(f"projection = {self.projection!r}; allowed: 'newton', 'rule3', 'sort'")
        t_start = time.perf_counter()
        classes, ypm, order, S, rot, scale, cap, const, n1 = self._prepare(X, y)
        n = order.size
        d = rot.d_pad
        evaluator = SaddleEvaluator(X, ypm, cap, rot)
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
            p = self._weights(pr, cls_mult, seg_lo, seg_hi, cap, order)
            info = evaluator(w, p)
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
        last = history[-1] if history else evaluator(w, p)
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
