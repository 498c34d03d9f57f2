"""Many clients on the synchronous side: the compiled loop's cost per iteration as the number of clients grows.

1. Saddle-DSVC (nu-SVM, alpha = 0.85, the warm-started Newton projection) on a9a-sized synthetic data
   (n = 32 561, d = 123, overlapping classes), k = 20, 100, 1 000 and 10 000 clients.
2. BQO-E on a9a, K = 16, 1 000 and 10 000 workers, all-reduce over a star.

Each configuration runs in a fresh process (its peak memory is its own): set-up (build, plan, deploy), then 20
iterations to compile and warm, then the timed iterations, every message metered. Reported: seconds per
iteration, rounds and metered messages per iteration, time per message, set-up time and peak memory (RSS).
The total data is the same at every k, so what grows with k is the messages; the target is a cost linear in the
points plus the messages — the log-log slope of the time per iteration against k, between the two largest k,
at most 1 (not k^2). Run: python benchmarks/bench_sync_clients.py
"""
from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time

from _common import data_dir, save, table

DSVC_CLIENTS = (20, 100, 1000, 10000)
BQO_WORKERS = (16, 1000, 10000)
SYNTHETIC = {"kind": "nonseparable", "n": 32561, "d": 123, "seed": 1}


def _deploy(algorithm: str, k: int):
    from svmsim.data import load_dataset
    from svmsim.deployment import Problem

    if algorithm == "saddle-dsvc":
        from svmsim.algorithms.saddle import SaddleDSVCParams, build_saddle_dsvc

        ds = load_dataset("synthetic", **SYNTHETIC)
        return build_saddle_dsvc(SaddleDSVCParams(clients=k, alpha=0.85, projection="newton"), Problem(ds, seed=3))
    from svmsim.algorithms.bqo.build import BQOParams, build_distributed

    ds = load_dataset("a9a", data_dir=data_dir())
    return build_distributed("bqo-e", BQOParams(workers=k, allreduce="star"),
                             Problem(ds, seed=0, topology_kind="star"))


def one(algorithm: str, k: int, iterations: int) -> dict:
    """One configuration, in this process."""
    from svmsim.comm import Meter
    from svmsim.engine import InProcessEngine
    from svmsim.schedule import SyncScheduler

    t0 = time.perf_counter()
    dep = _deploy(algorithm, k)
    eng = InProcessEngine()
    groups = eng.plan(dep.roles)
    eng.deploy(groups, 0)
    meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names)
    sched = SyncScheduler(eng, groups, meter, dep.n_nodes, compiled=True)
    setup = time.perf_counter() - t0
    warm = 20
    sched.run(max_iterations=warm)
    sched.meter.sync()
    r0, m0 = sched.round, meter.messages
    t1 = time.perf_counter()
    sched.run(max_iterations=warm + iterations)
    dt = time.perf_counter() - t1
    sched.meter.sync()
    messages = (meter.messages - m0) / iterations
    return {"algorithm": algorithm, "k": k, "iterations": iterations, "setup_s": setup,
            "ms_per_iteration": 1e3 * dt / iterations, "rounds_per_iteration": (sched.round - r0) / iterations,
            "messages_per_iteration": messages, "ns_per_message": 1e9 * dt / iterations / max(messages, 1.0),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def _in_child(algorithm: str, k: int, iterations: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", algorithm, str(k), str(iterations)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _slope(rows: list[dict]) -> float:
    a, b = rows[-2], rows[-1]
    return math.log(b["ms_per_iteration"] / a["ms_per_iteration"]) / math.log(b["k"] / a["k"])


def main():
    rows = [_in_child("saddle-dsvc", k, 200) for k in DSVC_CLIENTS]
    rows += [_in_child("bqo-e", k, 20) for k in BQO_WORKERS]
    print(table(rows, ["algorithm", "k", "setup_s", "ms_per_iteration", "rounds_per_iteration",
                       "messages_per_iteration", "ns_per_message", "peak_rss_gb"]))
    summary = {}
    for name in ("saddle-dsvc", "bqo-e"):
        mine = [r for r in rows if r["algorithm"] == name]
        summary[name] = {"slope_between_largest_k": _slope(mine),
                         "largest_over_smallest": mine[-1]["ms_per_iteration"] / mine[0]["ms_per_iteration"]}
        print(f"{name}: time per iteration ~ k^{summary[name]['slope_between_largest_k']:.2f} between "
              f"k = {mine[-2]['k']} and {mine[-1]['k']}; k = {mine[-1]['k']} costs "
              f"{summary[name]['largest_over_smallest']:.1f}x k = {mine[0]['k']}")
    print("saved", save("sync_clients", {"rows": rows, "summary": summary,
                                         "target": "slope <= 1 (linear in clients, not quadratic)"}))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        main()
