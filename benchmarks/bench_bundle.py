"""Paper 004's methods: the price of an iteration, against the two sparse matvecs it is made of.

1. One Pragam iteration and one ls-BMRM iteration (one worker, no transport: `protocol.run_solo`, the workers'
   compiled step) on a9a against two scipy CSR matvecs measured in the same run (X @ w, the n scores, and X.T @ v,
   a d-vector): each iteration is those two products plus O(n + d) work.
   Fastest of 7 interleaved repeats of 200 iterations. Target: <= 1.5x.
2. qp-BMRM's inner QP as its bundle grows: the time of an iteration (oracle + Gram column + SMO/active set + w)
   against the two matvecs, at bundle sizes 50, 200, 800 (a9a, lambda = 2^-18). Reported, no target.

Run: python benchmarks/bench_bundle.py
"""
from __future__ import annotations

import time

import numpy as np
from _common import save, table

from svmsim.algorithms.bqo.objective import as_csr
from svmsim.algorithms.bundle.protocol import (
    DOMAIN_BOX,
    LS_BMRM,
    PRAGAM,
    QP_BMRM,
    run_solo,
)
from svmsim.algorithms.bundle.workers import solo_state
from svmsim.data import load_dataset

LAM = 2.0 ** -18


def state(X, y, method, **kw):
    return solo_state(X, y, method, LAM, domain=DOMAIN_BOX, **kw)


def matvecs(X, y, iterations):
    w = np.random.default_rng(0).normal(size=X.shape[1])
    v = np.random.default_rng(1).normal(size=X.shape[0])
    t0 = time.perf_counter()
    for _ in range(iterations):
        X @ w
        X.T @ v
    return (time.perf_counter() - t0) / iterations


def per_iteration(st, iterations):
    t0 = time.perf_counter()
    run_solo(st, iterations)
    return (time.perf_counter() - t0) / iterations


def main():
    ds = load_dataset("a9a")
    X, y = as_csr(ds.X), np.asarray(ds.y, np.float64)
    rows = []
    for name, method in (("Pragam", PRAGAM), ("ls-BMRM", LS_BMRM)):
        st = state(X, y, method)
        run_solo(st, 5)                                # compiled
        ours, ref = [], []
        for _ in range(7):
            ours.append(per_iteration(st, 200))
            ref.append(matvecs(X, y, 200))
        rows.append({"case": f"{name} iteration / 2 scipy matvecs", "svmsim_ms": 1e3 * min(ours),
                     "reference_ms": 1e3 * min(ref), "ratio": min(ours) / min(ref)})
    st = state(X, y, QP_BMRM, max_bundle=2000)
    run_solo(st, 2)
    done = 2
    for size in (50, 200, 800):
        run_solo(st, size - 1 - done)
        done = size - 1
        t = per_iteration(st, 1)
        done += 1
        ref = min(matvecs(X, y, 20) for _ in range(3))
        rows.append({"case": f"qp-BMRM iteration at bundle {int(st.bundle_size[0])} / 2 scipy matvecs",
                     "svmsim_ms": 1e3 * t, "reference_ms": 1e3 * ref, "ratio": t / ref,
                     "qp_steps": int(st.qp_steps[0])})
    print(table(rows, ["case", "svmsim_ms", "reference_ms", "ratio", "qp_steps"]))
    save("bundle", {"rows": rows, "targets": {"Pragam, ls-BMRM iteration / 2 matvecs": 1.5}})


if __name__ == "__main__":
    main()
