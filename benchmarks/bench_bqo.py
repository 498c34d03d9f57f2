"""Paper 001's methods: the local solver against LIBLINEAR, and the price of simulating K workers.

1. The local coordinate-descent epoch (CSR, a9a, hinge loss) against a full LIBLINEAR epoch measured in the same run
   (scikit-learn's LinearSVC, dual CD, no bias): LIBLINEAR's time per epoch is the difference between fits of 3 and
   1 epochs over 2 (its set-up, the copy of the data into its own format, cancels out; its shrinking has not yet
   removed points in its second and third epochs, which are full epochs). Both are the fastest of 15 (interleaved):
   the undisturbed times on a shared machine. Target: <= 1.5x.
2. In-process BQO-E with K = 16 on a9a (the scheduler's compiled loop, every message metered) against the same
   arithmetic in a plain loop: 16 local passes (the same numba kernel), the sum of the 16 vectors, the exact step
   and the update. Target: <= 1.3x.

Run: python benchmarks/bench_bqo.py
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from _common import data_dir, save, table
from svmsim.algorithms.bqo.build import BQOParams, build_distributed
from svmsim.algorithms.bqo.local_cd import DualCD, cd_pass, row_sqnorms
from svmsim.algorithms.bqo.objective import as_csr, loss_constants
from svmsim.algorithms.bqo.protocol import EXACT, step_size
from svmsim.comm import Meter
from svmsim.core.streams import STREAM_PROGRAM, stream_keys
from svmsim.data import load_dataset, partition
from svmsim.deployment import Problem
from svmsim.engine import InProcessEngine
from svmsim.schedule import SyncScheduler


def liblinear_epoch(X, y, repeat=15):
    from sklearn.svm import LinearSVC

    def fit(epochs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            LinearSVC(C=1.0, loss="hinge", dual=True, fit_intercept=False, tol=1e-12, max_iter=epochs,
                      random_state=0).fit(X, y)
            return time.perf_counter() - t0

    fit(1)
    ones, threes = [], []
    for _ in range(repeat):                  # interleaved; the fastest of each: the undisturbed times
        ones.append(fit(1))
        threes.append(fit(3))
    return (min(threes) - min(ones)) / 2


def svmsim_epoch(X, y, repeat=15):
    s, upper = loss_constants("hinge", 1.0)
    cd = DualCD(X, y, s, upper)
    cd.epoch()
    times = []
    for _ in range(2 * repeat):
        t0 = time.perf_counter()
        cd.epoch()
        times.append(time.perf_counter() - t0)
    return min(times)


def simulated(ds, iterations, k=16):
    dep = build_distributed("bqo-e", BQOParams(workers=k, allreduce="ring"), Problem(ds, seed=0,
                                                                                      topology_kind="complete"))
    eng = InProcessEngine()
    groups = eng.plan(dep.roles)
    eng.deploy(groups, 0)
    sched = SyncScheduler(eng, groups, Meter(dep.n_nodes, dep.adjacency(), dep.node_names), dep.n_nodes,
                          compiled=True)
    sched.run(max_iterations=20)                     # warm-up (compilation)
    t0 = time.perf_counter()
    sched.run(max_iterations=20 + iterations)
    return time.perf_counter() - t0


def plain_loop(ds, iterations, k=16):
    """The same arithmetic without the simulator: 16 passes, one sum, the exact step, the update."""
    X, y = as_csr(ds.X), np.asarray(ds.y, np.float64)
    parts = partition(y, k, "iid", seed=0)
    s, upper = loss_constants("hinge", 1.0)
    tau = 1e-3
    shards = []
    for idx in parts:
        Xk = X[idx]
        ip, ix, dt = Xk.indptr.astype(np.int64), Xk.indices.astype(np.int32), Xk.data
        shards.append((ip, ix, dt, y[idx], row_sqnorms(ip, dt) + s + tau, np.zeros(len(idx)), np.zeros(len(idx)),
                       np.arange(len(idx), dtype=np.int64)))
    d = ds.d
    w, view, u = np.zeros(d), np.zeros(d), np.zeros(d)
    keys = stream_keys(0, STREAM_PROGRAM, k)
    counters = np.zeros(k, np.int64)
    total = np.zeros(d + 4)
    last = np.zeros(4)

    def iteration():
        total[:] = 0.0
        total[d + 3] = np.inf
        for j, (ip, ix, dt, yk, qd, alpha, step, perm) in enumerate(shards):
            counters[j] = cd_pass(ip, ix, dt, yk, qd, alpha, step, perm, 0, len(yk), w, view, u, 1.0, s, upper, tau,
                                  1, keys[j], counters[j])
            total[:d] += u
            total[d] += step.sum()
            neg, pos = step < 0, step > 0
            lam = min(np.min(-alpha[neg] / step[neg], initial=np.inf),
                      np.min((upper - alpha[pos]) / step[pos], initial=np.inf))
            total[d + 3] = min(total[d + 3], lam)
        eta = step_size(EXACT, total, w, d, s, float(k), 0.5, 0.1, last)
        for (_, _, _, _, _, alpha, step, _) in shards:
            np.clip(alpha + eta * step, 0.0, upper, out=alpha)
        w[:] += eta * total[:d]

    for _ in range(20):
        iteration()
    t0 = time.perf_counter()
    for _ in range(iterations):
        iteration()
    return time.perf_counter() - t0


def main():
    a9a = load_dataset("a9a", data_dir=data_dir())
    X, y = as_csr(a9a.X), np.asarray(a9a.y, np.float64)
    rows = []
    for trial in range(3):                               # alternate, so both see the same machine load
        lib = liblinear_epoch(X, y)
        ours = svmsim_epoch(X, y)
        rows.append({"case": "local CD epoch, a9a (ms)", "trial": trial, "svmsim": ours * 1e3,
                     "reference": lib * 1e3, "ratio": ours / lib})
    T = 400
    for trial in range(3):
        sim = simulated(a9a, T)
        plain = plain_loop(a9a, T)
        rows.append({"case": f"BQO-E K=16 a9a, {T} iterations (s)", "trial": trial, "svmsim": sim,
                     "reference": plain, "ratio": sim / plain})
    print(table(rows, ["case", "trial", "svmsim", "reference", "ratio"]))
    save("bqo", {"rows": rows, "targets": {"local CD epoch / LIBLINEAR epoch": 1.5, "simulated / plain loop": 1.3}})


if __name__ == "__main__":
    main()
