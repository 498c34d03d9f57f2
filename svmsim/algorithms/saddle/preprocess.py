"""Preprocessing of Saddle-SVC / Saddle-DSVC (paper 000, Algorithm 1; Algorithm 3 for the clients): the
randomized Hadamard rotation, the constants of Algorithm 1 line 4, the weight cap of the nu-SVM and the shared
coordinate stream of Algorithm 2 line 1.

Algorithm 1 scales by 1/max|x| (not 1/max|x|^2, notes section 7.2), zero-pads d to a power of two and rotates
by the *normalised* randomized Hadamard transform H D.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import DataError, InfeasibleParameterError
from ...numerics.hadamard import fwht_rows, next_power_of_two, rotate_into_columns
from ...numerics.sparse import issparse


def row_norms(X) -> np.ndarray:
    if issparse(X):
        return np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return np.sqrt(np.einsum("ij,ij->i", X, X))


def _dense_rows(X, rows: np.ndarray, width: int) -> np.ndarray:
    """Rows of X as a dense (len(rows), width) float64 array, zero-padded."""
    out = np.zeros((rows.shape[0], width), dtype=np.float64)
    if issparse(X):
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


#: iterations between re-reads of u = S^T w (the one-coordinate updates of u drift; the single machine re-reads at
#: the first certificate check this many iterations after the last, and so do Saddle-DSVC's clients with checks)
U_REFRESH_EVERY = 20_000


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


def q_value(q, d_pad: int, n: int, max_abs_scaled: float) -> float:
    """q = O(sqrt(log n)) (notes section 2): "data" uses sqrt(d)*max|X_ij| after rotation, "log" sqrt(ln n)."""
    if q == "data":
        return max(1.0, math.sqrt(d_pad) * max_abs_scaled)
    if q == "log":
        return math.sqrt(math.log(n))
    return float(q)
