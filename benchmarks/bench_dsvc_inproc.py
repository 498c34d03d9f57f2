"""In-process Saddle-DSVC (k = 20) against single-machine Saddle-SVC: same data, seed and iteration count.

Both follow the same iterates (a test holds them equal); the ratio is the price of simulating the server, the
clients, three rounds per iteration (plus the nu-projection rounds) and metering every message. The rounds run in
the scheduler's compiled loop (`svmsim.schedule.compiled_sync`), as any in-process run of saddle-dsvc does.
Target: <= 1.5x. Run: python benchmarks/bench_dsvc_inproc.py
"""
from __future__ import annotations

import time


from _common import data_dir, save, table
from svmsim.algorithms.saddle import SaddleDSVCParams, SaddleSVC, build_saddle_dsvc
from svmsim.comm import Meter
from svmsim.data import load_dataset
from svmsim.deployment import Problem
from svmsim.engine import InProcessEngine
from svmsim.schedule import SyncScheduler

SYNTHETIC = {"name": "synthetic", "kind": "separable", "n": 20000, "d": 512, "seed": 1}
# (label, Saddle-SVC keys, Saddle-DSVC keys, iterations, data); the single machine's nu-projection is its
# warm-started Newton, so the like-for-like distributed one is projection = "newton"; Rule 3 is the paper's
CASES = [("mushrooms", {}, {}, 6000, {}), ("synthetic d=512", {}, {}, 4000, SYNTHETIC),
         ("a9a", {"alpha": 0.85}, {"projection": "newton"}, 3000, {}),
         ("phishing", {"alpha": 0.85}, {"projection": "newton"}, 3000, {}),
         ("a9a", {"alpha": 0.85}, {"projection": "rule3"}, 3000, {}),
         ("phishing", {"alpha": 0.85}, {"projection": "rule3"}, 3000, {})]


def dsvc_time(ds, kw, T, seed=3):
    dep = build_saddle_dsvc(SaddleDSVCParams(clients=20, **kw), Problem(ds, seed=seed))
    eng = InProcessEngine()
    groups = eng.plan(dep.roles)
    eng.deploy(groups, seed)
    meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names)
    sched = SyncScheduler(eng, groups, meter, dep.n_nodes, compiled=True)
    sched.run(max_iterations=50)                    # warm-up (compilation)
    r0 = sched.round
    t0 = time.perf_counter()
    sched.run(max_iterations=50 + T)
    return time.perf_counter() - t0, (sched.round - r0) / T


def single_time(ds, kw, T, seed=3):
    SaddleSVC(seed=seed, stop="iterations", max_iter=50, check_every=50, **kw).fit(ds.X, ds.y)
    m = SaddleSVC(seed=seed, stop="iterations", max_iter=T, check_every=T, **kw).fit(ds.X, ds.y)
    return m.iteration_time_


def main():
    rows = []
    for label, kw, dkw, T, spec in CASES:
        spec = dict(spec)
        ds = load_dataset(spec.pop("name", label), data_dir=data_dir(), **spec)
        td, rounds = min(dsvc_time(ds, {**kw, **dkw}, T) for _ in range(3))
        ts = min(single_time(ds, kw, T) for _ in range(3))
        rows.append({"data": label, "mode": "nu " + dkw["projection"] if kw else "hard", "n": ds.n, "iterations": T,
                     "rounds_per_iter": rounds, "dsvc_us_per_iter": td / T * 1e6,
                     "single_us_per_iter": ts / T * 1e6, "ratio": td / ts,
                     "overhead_us_per_round": (td - ts) / T / rounds * 1e6})
    print(table(rows, list(rows[0])))
    print("saved", save("dsvc_inproc", {"rows": rows}))


if __name__ == "__main__":
    main()
