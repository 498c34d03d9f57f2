"""BQO-E (K = 16 workers, a9a, ring all-reduce) on the Ray engine with 2 host actors: the time of a round against
the bare-Ray floor measured in the same run (one trivial `.remote()` call per actor and one `ray.get`,
`bench_ray_round.floor_round`), and against the same rounds in process (the workers' own arithmetic plus the
scheduler, without Ray). The Ray overhead of a round is (Ray round - in-process round); the report gives it as a
multiple of the floor. Configurations alternate over repetitions; medians.

    python benchmarks/bench_bqo_ray.py [--reps 5] [--rounds 300]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from _common import data_dir, save, table
from bench_ray_round import floor_round, ray
from svmsim.algorithms.bqo.build import BQOParams, build_distributed
from svmsim.comm import Meter
from svmsim.data import load_dataset
from svmsim.deployment import Problem
from svmsim.engine import InProcessEngine
from svmsim.engine.ray_engine import RayEngine
from svmsim.schedule import SyncScheduler


def rounds_time(engine, dep, n_rounds):
    groups = engine.plan(dep.roles)
    engine.deploy(groups, 0)
    sched = SyncScheduler(engine, groups, Meter(dep.n_nodes, dep.adjacency(), dep.node_names), dep.n_nodes,
                          compiled=False)
    sched.run(max_rounds=40)                           # warm-up
    t0 = time.perf_counter()
    sched.run(max_rounds=40 + n_rounds)
    return (time.perf_counter() - t0) / n_rounds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    ds = load_dataset("a9a", data_dir=data_dir())
    dep = build_distributed("bqo-e", BQOParams(workers=16, allreduce="ring"), Problem(ds, seed=0,
                                                                                    topology_kind="complete"))
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="svmsim-ray-"),
             log_to_driver=False)
    out = {"floor": [], "ray": [], "inproc": []}
    try:
        for _ in range(args.reps):
            out["floor"].append(floor_round(args.rounds)["all"])
            eng = RayEngine(actors=2, round_timeout=120)
            try:
                out["ray"].append(rounds_time(eng, dep, args.rounds))
            finally:
                eng.close()
            out["inproc"].append(rounds_time(InProcessEngine(), dep, args.rounds))
    finally:
        ray.shutdown()
    med = {k: statistics.median(v) * 1e3 for k, v in out.items()}
    overhead = med["ray"] - med["inproc"]
    rows = [{"what": "bare Ray floor (2 actors)", "ms per round": med["floor"]},
            {"what": "BQO-E K=16 on Ray, 2 actors", "ms per round": med["ray"]},
            {"what": "BQO-E K=16 in process (Python rounds)", "ms per round": med["inproc"]},
            {"what": "Ray overhead (Ray - in process)", "ms per round": overhead,
             "x floor": overhead / med["floor"]}]
    print(table(rows, ["what", "ms per round", "x floor"]))
    save("bqo_ray", {"rounds": args.rounds, "reps": args.reps, "median_ms": med, "overhead_ms": overhead,
                     "overhead_over_floor": overhead / med["floor"]})


if __name__ == "__main__":
    main()
