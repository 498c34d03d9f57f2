"""The path a method takes, not only where it ends: a few iterations of paper 001's Algorithm 1 (BQO-E, DisDCA,
DSVM-AVE; L1 and L2 loss) and of paper 004's Pragam, each held against a small implementation of the paper's step
written here from the notes, independently of svmsim's kernels (plain NumPy, dense, one row at a time).

A wrong constant in a step (the L2 loss's diagonal term s left out of a coordinate step's denominator, a Lipschitz
constant halved) still converges to the right optimum, so the end-point tests let it through; the iterates after a
few steps do not match."""
from __future__ import annotations

import math

import numpy as np
import pytest

import svmsim
from svmsim.algorithms.bqo.local_cd import shuffle
from svmsim.core.streams import STREAM_PROGRAM, stream_keys
from svmsim.data import partition

SEED = 4


def _dataset(name: str, monkeypatch, shared_data_dir):
    from svmsim.runner import _problem

    monkeypatch.setenv("SVMSIM_DATA_DIR", str(shared_data_dir))
    return lambda sc: _problem(svmsim.load_scenario(sc), None).dataset


def _bqo_reference(X, y, parts, *, rule, C, loss, tau, k, iterations):
    """Algorithm 1 of paper 001 (notes-001 section 2.4) with K = k blocks, one local pass per iteration:

    step 2.1  on block J_m, a shuffled pass of coordinate descent on the local model
              f_m(d) = grad f(alpha)^T d + 1/2 d^T (sigma Q~ + (s + tau) I) d   (Q~ = Y X X^T Y, view w + sigma u)
    step 2.2  Delta w = sum_m X_m^T Y_m d_m and the scalars e^T d, s ||d||^2, s alpha^T d, min_i lambda_i
    step 2.4  eta: exact line search min(-g/q, lambda) (eqs. 18-21), 1 (DisDCA, sigma = K), 1/K (DSVM-AVE)
    step 2.5  alpha += eta d (clipped to [0, U]), w += eta Delta w
    with s = 1/(2C), U = inf for the squared hinge, s = 0, U = C for the hinge."""
    s, upper = (0.0, C) if loss == "hinge" else (1.0 / (2.0 * C), math.inf)
    sigma = float(k) if rule == "disdca" else 1.0
    n, dim = X.shape
    alpha, w = np.zeros(n), np.zeros(dim)
    keys = stream_keys(SEED, STREAM_PROGRAM, k)
    counters = [0] * k
    for _ in range(iterations):
        d = np.zeros(n)
        dw = np.zeros(dim)
        for m, rows in enumerate(parts):
            perm = np.arange(len(rows), dtype=np.int64)              # the block's shuffled order (the RNG is shared)
            counters[m] = shuffle(perm, 0, len(rows), keys[m], counters[m])
            view = w.copy()
            for j in perm:
                i = rows[j]
                a = alpha[i] + d[i]
                grad = y[i] * (X[i] @ view) - 1.0 + s * a + tau * d[i]
                projected = min(grad, 0.0) if a <= 0.0 else (max(grad, 0.0) if a >= upper else grad)
                if abs(projected) <= 1e-12:
                    continue
                curvature = sigma * (X[i] @ X[i]) + s + tau
                new = min(max(a - grad / curvature, 0.0), upper) if curvature > 0 else (upper if grad < 0 else 0.0)
                d[i] += new - a
                view += sigma * (new - a) * y[i] * X[i]
            dw += (view - w) / sigma
        if rule == "bqo-e":
            q = dw @ dw + s * (d @ d)
            g = w @ dw + s * (alpha @ d) - d.sum()
            limits = [(-alpha[i] / d[i]) if d[i] < 0 else (upper - alpha[i]) / d[i] for i in np.flatnonzero(d)]
            lam = min(limits, default=math.inf)
            eta = min(-g / q, lam) if q > 0 else lam
            eta = eta if 0.0 <= eta < math.inf else 0.0
        else:
            eta = 1.0 if rule == "disdca" else 1.0 / k
        alpha = np.clip(alpha + eta * d, 0.0, upper)
        w = w + eta * dw
    return alpha, w


@pytest.mark.parametrize("rule,loss", [("bqo-e", "hinge"), ("bqo-e", "squared_hinge"), ("dsvm-ave", "squared_hinge"),
                                       ("disdca", "hinge")])
def test_bqo_iterates_follow_the_papers_step(rule, loss, monkeypatch, shared_data_dir):
    """Four iterations of BQO-E / DSVM-AVE / DisDCA on heart_scale with k = 3 workers: the run's alpha and w equal
    the independent implementation's to rounding."""
    k, iterations, C = 3, 4, 0.5
    sc = {"name": "t", "seed": SEED, "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
          "algorithm": {"name": rule, "workers": k, "C": C, "loss": loss},
          "stop": {"max_iterations": iterations}, "output": {"eval_every": iterations, "plots": False}}
    ds = _dataset("heart_scale", monkeypatch, shared_data_dir)(sc)
    r = svmsim.run(sc, write=False, progress=False)
    assert r.final["iteration"] == iterations
    X = np.asarray(ds.X.toarray() if hasattr(ds.X, "toarray") else ds.X, np.float64)
    y = np.asarray(ds.y, np.float64)
    parts = partition(ds.y, k, "iid", seed=SEED)
    tau = r.summary["algorithm_info"]["tau"]                     # the method's tau (0 for L2 and the baselines)
    alpha, w = _bqo_reference(X, y, parts, rule=rule, C=C, loss=loss, tau=tau, k=k, iterations=iterations)
    assert np.abs(alpha).max() > 0
    np.testing.assert_allclose(r.model["alpha"], alpha, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(r.model["w_last"], w, rtol=1e-9, atol=1e-12)


def _pragam_reference(X, y, lam, iterations, safety=1e-6):
    """Algorithm 1 of paper 004 (Pragam) as printed (notes-004 section 3.4) on the box Q2 = [0, 1/n]^n of the
    hinge without bias: w(alpha) = M^T alpha / lam with rows y_i x_i of M, alpha_mu(w) = Proj((1 - M w)/mu),
    v(beta) = Proj(beta + (1 - M w(beta))/L), L = (1 + safety) sigma_max(X)^2 / lam, mu_0 = 2L, alpha_{-1} = 0."""
    n = X.shape[0]
    M = y[:, None] * X
    L = (1.0 + safety) * np.linalg.norm(X, 2) ** 2 / lam

    def proj(v):
        return np.clip(v, 0.0, 1.0 / n)

    def w_of(a):
        return M.T @ a / lam

    start = np.zeros(n)
    mu = 2.0 * L
    alpha = proj(start + (1.0 - M @ w_of(start)) / L)                 # alpha_0 = v(alpha_{-1})
    w = w_of(start)                                                    # w_0 = w(alpha_{-1})
    for k in range(iterations):
        tau = 2.0 / (k + 3)
        beta = (1.0 - tau) * alpha + tau * proj((1.0 - M @ w) / mu)
        w_beta = w_of(beta)
        w = (1.0 - tau) * w + tau * w_beta
        alpha = proj(beta + (1.0 - M @ w_beta) / L)
        mu = (1.0 - tau) * mu
    return w


@pytest.mark.parametrize("workers", [1, 3])
def test_pragam_iterates_follow_the_papers_step(workers, monkeypatch, shared_data_dir):
    """Eight iterations of Pragam on heart_scale (one machine and three workers): w_k equals the independent
    implementation's to rounding (the Lipschitz constant, the smoothing sequence and both projections enter)."""
    lam, iterations = 1e-2, 8
    sc = {"name": "t", "seed": SEED, "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
          "algorithm": {"name": "pragam", "lam": lam, "workers": workers},
          "stop": {"max_iterations": iterations}, "output": {"eval_every": iterations, "plots": False}}
    ds = _dataset("heart_scale", monkeypatch, shared_data_dir)(sc)
    r = svmsim.run(sc, write=False, progress=False)
    assert r.final["iteration"] == iterations
    X = np.asarray(ds.X.toarray() if hasattr(ds.X, "toarray") else ds.X, np.float64)
    w = _pragam_reference(X, np.asarray(ds.y, np.float64), lam, iterations)
    np.testing.assert_allclose(r.model["w_last"], w, rtol=1e-7, atol=1e-12)
    moved = _pragam_reference(X, np.asarray(ds.y, np.float64), lam, iterations - 1)
    assert np.abs(w - moved).max() > 1e-3 * np.abs(w).max()          # the last step is not a rounding error
