"""Paper 003's methods as compiled loops over `Responses`, each run in chunks between evaluation points.

* SBP (Algorithm 1; section 3): eta_t = eta0 / sqrt(t), eta0 = 1 / sqrt(max_i K(x_i, x_i)); the water level of the
  responses (Newton from the last level, `water.water_level_newton`); i uniform among the covered points (the k lowest responses, ties at the minimum included when nu = 0,
  notes-003 gotcha 2); ||w||^2 <- ||w||^2 + 2 eta c_i + eta^2 K_ii (the
  response before the update; section 3.3 writes ||w|| for ||w||^2, gotcha 1); one kernel row; the projection onto
  the unit ball rescales coef and c; the running sums give the averaged iterate (t = 1..T; T0 is unused, gotcha 3).
* SBP with a bias (section 3.6, Algorithm 3 corrected: `water.water_level_bias_select`, by selection around the
  last step's count): i uniform among the 2k covered points (mass 1/2 per class: notes-003 2.4 option (a), one row
  per iteration).
* kernel Pegasos (Shalev-Shwartz et al.; notes-003 section 3): i uniform; eta_t = 1/(lam t);
  w <- (1 - 1/t) w + eta_t y_i Phi(x_i) [y_i f(x_i) < 1]; then onto the ball of radius 1/sqrt(lam). A step with no
  violation costs no kernel evaluation (the responses are maintained).
* the Perceptron: a random order per epoch; w <- w + y_i Phi(x_i) when y_i f(x_i) <= 0.
* SDCA (Hsieh et al. 2008) on the no-bias dual (4.1) with box [0, C], C = 1/(lam n): a random order per epoch;
  alpha_i <- clip(alpha_i - (c_i - 1) / K_ii, 0, C) (c_i = y_i f(x_i)); a row only when alpha_i moved.

Randomness is the counter-based stream of `core.streams`: draw t of a run depends only on (seed, t).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from ...core.streams import counter_uniform
from .responses import add_row, renormalise
from .water import pick_lowest, water_level_bias_select, water_level_newton

__all__ = [
    "PEGASOS",
    "PERCEPTRON",
    "SDCA",
    "BaselineScalars",
    "SBPScalars",
    "baseline_iterations",
    "baseline_scalars",
    "nth_below",
    "pick_below",
    "sbp_iterations",
    "sbp_scalars",
]


class SBPScalars(NamedTuple):
    """SBP's scalars (one-element arrays: the loop writes them in place), its orders and constants."""

    t: np.ndarray          # iterations done
    r2: np.ndarray         # ||w||^2
    level: np.ndarray      # the last water level (the next warm start)
    passes: np.ndarray     # water-level passes over the responses, in all
    pos_order: np.ndarray  # with a bias: each class's indices
    neg_order: np.ndarray
    k_last: np.ndarray     # with a bias: the last step's covered count (the next guess)
    brackets: np.ndarray   # with a bias: the last values that bracketed the window of ranks in each class
    eta0: float
    volume: float          # n nu
    bias: bool
    key: np.uint64         # the sampling stream


def sbp_scalars(kdiag: np.ndarray, y: np.ndarray, nu: float, bias: bool, key) -> SBPScalars:
    n = kdiag.shape[0]
    pos = np.flatnonzero(y > 0) if bias else np.zeros(0, np.int64)
    neg = np.flatnonzero(y <= 0) if bias else np.zeros(0, np.int64)
    return SBPScalars(np.zeros(1, np.int64), np.zeros(1), np.zeros(1),
                      np.zeros(1, np.int64), pos.astype(np.int64), neg.astype(np.int64), np.ones(1, np.int64),
                      np.full(4, np.nan),
                      1.0 / math.sqrt(float(kdiag.max())), float(n * nu), bool(bias), np.uint64(key))


@numba.njit(cache=True, nogil=True)
def pick_below(c, bound, count, u):
    """The floor(u count)-th (in index order) of the `count` indices with c_j < bound."""
    return nth_below(c, bound, min(int(u * count), count - 1))


@numba.njit(cache=True, nogil=True)
def nth_below(c, bound, r):
    """The r-th (from 0, in index order) index with c_j < bound, or -1: blocks of 64 are counted without branches
    until the block that holds it, which is then scanned."""
    seen = 0
    j = 0
    n = c.shape[0]
    while j + 64 <= n:
        b = 0
        for q in range(j, j + 64):
            b += c[q] < bound
        if seen + b > r:
            break
        seen += b
        j += 64
    for q in range(j, n):
        if c[q] < bound:
            if seen == r:
                return q
            seen += 1
    return -1


@numba.njit(cache=True, nogil=True)
def sbp_iterations(R, S, iterations, work):
    """Run `iterations` SBP steps (Algorithm 1, or with the bias). `work` is scratch of n."""
    for _ in range(iterations):
        t = S.t[0] + 1
        eta = S.eta0 / math.sqrt(t)
        if S.bias:
            g, _, k, a_k, d_k = water_level_bias_select(R.c, S.volume, S.pos_order, S.neg_order, S.k_last[0],
                                                        S.brackets)
            S.passes[0] += 1
            S.k_last[0] = k
            positive = counter_uniform(S.key, 2 * t) < 0.5
            i = pick_lowest(R.c, S.pos_order if positive else S.neg_order, k, a_k if positive else d_k,
                            counter_uniform(S.key, 2 * t + 1))
        else:
            g, bound, k, passes = water_level_newton(R.c, S.volume, S.level[0], work)
            S.passes[0] += passes
            i = pick_below(R.c, bound, k, counter_uniform(S.key, t))
        S.level[0] = g
        r2 = S.r2[0] + 2.0 * eta * R.c[i] + eta * eta * R.kdiag[i]
        shrink = 1.0 / math.sqrt(r2) if r2 > 1.0 else 1.0        # the projection onto the unit ball
        add_row(R, i, eta, shrink)
        S.r2[0] = r2 * shrink * shrink
        S.t[0] = t


PEGASOS, PERCEPTRON, SDCA = 0, 1, 2


class BaselineScalars(NamedTuple):
    t: np.ndarray          # steps done
    r2: np.ndarray         # ||w||^2 (Pegasos' projection)
    updates: np.ndarray    # steps that changed the model (each cost one kernel row)
    order: np.ndarray      # this epoch's order (Perceptron, SDCA)
    method: int
    lam: float
    box: float             # SDCA's upper bound C = 1/(lam n)
    project: bool          # Pegasos: project onto the ball of radius 1/sqrt(lam)
    key: np.uint64


def baseline_scalars(method: int, n: int, lam: float, project: bool, key) -> BaselineScalars:
    return BaselineScalars(np.zeros(1, np.int64), np.zeros(1), np.zeros(1, np.int64), np.arange(n, dtype=np.int64),
                           int(method), float(lam), 1.0 / (lam * n), bool(project), np.uint64(key))


@numba.njit(cache=True, nogil=True)
def _shuffle(order, key, epoch):
    """A Fisher-Yates permutation of order, from the stream's draws for this epoch."""
    n = order.shape[0]
    for j in range(n):
        order[j] = j
    base = np.uint64(epoch) * np.uint64(n + 1)
    for j in range(n - 1, 0, -1):
        r = min(int(counter_uniform(key, base + np.uint64(j)) * (j + 1)), j)
        tmp = order[j]
        order[j] = order[r]
        order[r] = tmp


@numba.njit(cache=True, nogil=True)
def baseline_iterations(R, S, iterations):
    """Run `iterations` steps of kernel Pegasos, the Perceptron or SDCA (SDCA's coef are the dual alpha)."""
    n = R.c.shape[0]
    for _ in range(iterations):
        t = S.t[0] + 1
        if S.method == 0:                                    # Pegasos: i uniform
            i = min(int(counter_uniform(S.key, t) * n), n - 1)
        else:                                                # a fresh random order every epoch
            pos = (t - 1) % n
            if pos == 0:
                _shuffle(S.order, S.key, (t - 1) // n)
            i = S.order[pos]
        ci = R.c[i] * R.scale[0]
        if S.method == 0:
            eta = 1.0 / (S.lam * t)
            keep = 1.0 - 1.0 / t
            if keep == 0.0:                                  # t = 1: w <- 0 + eta y_i Phi(x_i)
                R.coef[:] = 0.0
                R.c[:] = 0.0
                R.test_c[:] = 0.0
                R.scale[0] = 1.0
                S.r2[0] = 0.0
                ci = 0.0
            r2 = keep * keep * S.r2[0]
            if ci < 1.0:
                r2 += 2.0 * keep * eta * ci + eta * eta * R.kdiag[i]
                if keep == 0.0:
                    add_row(R, i, eta, 1.0)
                else:
                    add_row(R, i, eta / keep, keep)
                S.updates[0] += 1
            else:
                R.scale[0] *= keep
            shrink = 1.0
            if S.project and r2 * S.lam > 1.0:
                shrink = 1.0 / math.sqrt(r2 * S.lam)
            R.scale[0] *= shrink
            S.r2[0] = r2 * shrink * shrink
            if R.scale[0] < 1e-100:
                renormalise(R)
        elif S.method == 1:                                  # Perceptron
            if ci <= 0.0:
                add_row(R, i, 1.0, 1.0)
                S.updates[0] += 1
        else:                                                # SDCA
            a = R.coef[i] * R.scale[0]
            new = a - (ci - 1.0) / R.kdiag[i] if R.kdiag[i] > 0.0 else a
            new = min(max(new, 0.0), S.box)
            if new != a:
                add_row(R, i, new - a, 1.0)
                S.updates[0] += 1
        S.t[0] = t
