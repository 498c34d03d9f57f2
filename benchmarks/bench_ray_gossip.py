"""Gossip on Ray: messages per second of wall time, Push-Sum, 1000 nodes on a random 2-out topology, d = 100, 2 host
actors that send to each other directly (svmsim.engine.ray_gossip).

Measured, in one process and one Ray instance:

* the Ray gossip run: messages the programs sent / wall time from the start of the hosts' loops to the driver's
  stop decision (``run``), and including the drain, the seal and the collection of the hosts' ledgers (``total``);
  the fraction of messages that crossed between the hosts, how many Ray calls carried them, and how late they
  arrived, for several values of max_skew (the default, 0.5 rounds, first) and once with faults;
* baseline 1, the in-process compiled event loop on the same deployment (`GossipScheduler`, one process);
* baseline 2, the transport floor: two bare Ray actors sending each other fire-and-forget calls that carry as many
  bytes as the gossip hosts' average call, timed until every call has been handled; its calls/s times the gossip
  run's messages per call is the rate at which Ray alone could move the cross-host messages.

Deterministic mode (``--deterministic``; `schedule.windows`): the same deployment with a latency of uniform(L, 2L)
for several L (the window is L), a virtual-time budget of 200, free-running and deterministic side by side, and the
in-process run of the same scenario; each deterministic ledger must equal the in-process one (the benchmark stops
otherwise). The rate is what the windows cost: one call per host per window, and a window holds about 2 N L events.

Target: >= 5e4 messages/s on the Ray engine. Run: python benchmarks/bench_ray_gossip.py [--deterministic]
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time

import ray
from _common import save, table
from svmsim.algorithms.pushsum import PushSumParams, build_pushsum
from svmsim.comm import Meter
from svmsim.data import make_dataset
from svmsim.deployment import Problem
from svmsim.engine import InProcessEngine
from svmsim.engine.ray_gossip import RayGossipRun
from svmsim.faults import FaultModel
from svmsim.core.timing import Distribution, LatencyModel
from svmsim.schedule.gossip import GossipScheduler

NODES, DIM, ACTORS = 1000, 100, 2
MESSAGES = 1_000_000
LATENCY = LatencyModel(Distribution.lognormal(0.05, 0.5))
FAULTS = FaultModel(drop=0.1, duplicate=0.05, crash=0.1, crash_time=20.0)
TARGET = 5e4


def deployment(seed: int = 0):
    ds = make_dataset({"name": "iris"})
    params = PushSumParams(nodes=NODES, values="random", dim=DIM)
    return build_pushsum(params, Problem(ds, seed=seed, topology_kind="random_k_out", topology_params={"k": 2}))


def ray_gossip(dep, max_skew, faults=None, seed: int = 0) -> dict:
    with RayGossipRun(actors=ACTORS, max_skew=max_skew, call_timeout=300.0) as eng:
        t0 = time.perf_counter()
        eng.deploy(eng.plan(dep.roles), seed, dep.topology, latency=LATENCY, faults=faults,
                   node_names=dep.node_names)
        deploy = time.perf_counter() - t0
        eng.run(max_messages=MESSAGES)
        res = eng.outcome()
    st, p = res.stats, res.progress
    assert res.ledger.totals["messages"] + res.faults["dropped_total"]["messages"] >= p.sent
    return {"engine": "ray", "max_skew_rounds": max_skew, "faults": faults is not None, "nodes": NODES, "d": DIM,
            "actors": ACTORS, "messages": p.sent, "deploy_s": deploy, "run_s": st["run_wall_s"],
            "total_s": st["wall_s"], "messages_per_s": p.sent / st["run_wall_s"],
            "messages_per_s_total": p.sent / st["wall_s"], "cross_fraction": st["cross_host_fraction"],
            "cross_calls": st["cross_host_calls"], "messages_per_call": st["cross_host_messages"] /
            max(1, st["cross_host_calls"]), "bytes_per_call": st["cross_host_bytes"] / max(1, st["cross_host_calls"]),
            "late_fraction": st["late_fraction"], "mean_lateness_rounds": st["mean_lateness"],
            "virtual_time": round(p.time, 2), "ledger_messages": res.ledger.totals["messages"]}


def windows_vs_free(dep, lows=(0.05, 0.25, 0.5), max_time: float = 200.0, seed: int = 0) -> list[dict]:
    """Free-running and deterministic Ray runs and the in-process run with latency uniform(L, 2L), to max_time."""
    rows = []
    inproc(dep, messages=1000)                                     # compile the in-process loop first
    for low in lows:
        latency = LatencyModel(Distribution.uniform(low, 2 * low))
        engine = InProcessEngine()
        groups = engine.plan(dep.roles)
        engine.deploy(groups, seed)
        meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names)
        sched = GossipScheduler(engine, groups, meter, dep.topology, seed=seed, latency=latency)
        t0 = time.perf_counter()
        sched.run(max_time=max_time)
        sched.finish()
        ref = meter.ledger()
        rows.append({"latency_low": low, "mode": "inproc", "messages": sched.progress().sent,
                     "run_s": time.perf_counter() - t0})
        for deterministic in (False, True):
            with RayGossipRun(actors=ACTORS, call_timeout=300.0, deterministic=deterministic) as eng:
                t0 = time.perf_counter()
                eng.deploy(eng.plan(dep.roles), seed, dep.topology, latency=latency, node_names=dep.node_names)
                deploy = time.perf_counter() - t0
                eng.run(max_time=max_time)
                res = eng.outcome()
            st = res.stats
            if deterministic and not res.ledger.equals(ref):
                raise SystemExit(f"deterministic mode at L = {low}: the ledger differs from the in-process run's")
            rows.append({"latency_low": low, "mode": "deterministic" if deterministic else "free",
                         "messages": res.progress.sent, "deploy_s": deploy, "run_s": st["run_wall_s"],
                         "windows": st.get("windows"), "late_fraction": st["late_fraction"],
                         "checkpoints": st.get("checkpoints"), "checkpoint_s": st.get("checkpoint_s"),
                         "checkpoint_mb": (st.get("checkpoint_bytes") or 0) / 1e6,
                         "same_ledger_as_inproc": res.ledger.equals(ref)})
        base = rows[-3]["messages"] / rows[-3]["run_s"]
        for r in rows[-3:]:
            r["messages_per_s"] = r["messages"] / r["run_s"]
            r["vs_inproc"] = r["messages_per_s"] / base
        rows[-1]["vs_free"] = rows[-1]["messages_per_s"] / rows[-2]["messages_per_s"]
    return rows


def inproc(dep, messages: int = 2_000_000, seed: int = 0) -> dict:
    engine = InProcessEngine()
    groups = engine.plan(dep.roles)
    engine.deploy(groups, seed)
    meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names)
    sched = GossipScheduler(engine, groups, meter, dep.topology, seed=seed, latency=LATENCY)
    sched.run(max_messages=2000)                                   # compile, first flushes
    sent0 = sched.progress().sent
    t0 = time.perf_counter()
    sched.run(max_messages=sent0 + messages)
    sched.finish()
    meter.ledger()
    wall = time.perf_counter() - t0
    sent = sched.progress().sent - sent0
    return {"engine": "inproc (compiled loop, 1 process)", "nodes": NODES, "d": DIM, "messages": sent,
            "run_s": wall, "messages_per_s": sent / wall}


@ray.remote(num_cpus=0)
class Peer:
    """A bare actor: fire-and-forget calls to another, and a counter of the calls it received."""

    def __init__(self):
        self.received = 0

    def deliver(self, sender, count, published, data):
        self.received += 1

    def blast(self, other, calls: int, data: bytes) -> bool:
        for _ in range(calls):
            other.deliver.remote(0, 1, 0.0, data)
        return True

    def count(self) -> int:
        return self.received


def bare_calls(nbytes: int, calls: int = 3000) -> dict:
    """Two actors each send the other `calls` fire-and-forget calls of `nbytes`; time until all are handled."""
    a, b = Peer.remote(), Peer.remote()
    ray.get([a.count.remote(), b.count.remote()])
    data = bytes(nbytes)
    t0 = time.perf_counter()
    ray.get([a.blast.remote(b, calls, data), b.blast.remote(a, calls, data)])
    while sum(ray.get([a.count.remote(), b.count.remote()])) < 2 * calls:
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    for h in (a, b):
        ray.kill(h)
    return {"engine": "bare Ray calls (2 actors, fire-and-forget)", "calls": 2 * calls, "bytes_per_call": nbytes,
            "run_s": wall, "calls_per_s": 2 * calls / wall}


def main():
    temp = tempfile.mkdtemp(prefix="svmsim-bench-")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=300 * 1024**2,
             _temp_dir=temp)
    if "--deterministic" in sys.argv[1:]:
        try:
            rows = windows_vs_free(deployment())
        finally:
            ray.shutdown()
            shutil.rmtree(temp, ignore_errors=True)
        print(table(rows, ["latency_low", "mode", "messages", "run_s", "windows", "messages_per_s", "vs_inproc",
                           "vs_free", "late_fraction", "checkpoints", "checkpoint_s", "checkpoint_mb",
                           "same_ledger_as_inproc"]))
        print("saved", save("ray_gossip_deterministic", {"nodes": NODES, "d": DIM, "actors": ACTORS, "rows": rows}))
        return
    try:
        dep = deployment()
        rows = [ray_gossip(dep, 0.5), ray_gossip(dep, 0.25), ray_gossip(dep, 1.0), ray_gossip(dep, None),
                ray_gossip(dep, 0.5, FAULTS)]
        base = inproc(dep)
        floor = bare_calls(int(rows[0]["bytes_per_call"]))
        floor["messages_per_s_equivalent"] = floor["calls_per_s"] * rows[0]["messages_per_call"]
        for r in rows:
            r["vs_inproc"] = r["messages_per_s"] / base["messages_per_s"]
            r["cross_vs_floor"] = r["messages_per_s"] * r["cross_fraction"] / floor["messages_per_s_equivalent"]
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    cols = ["max_skew_rounds", "faults", "messages", "deploy_s", "run_s", "total_s", "messages_per_s",
            "messages_per_s_total", "cross_fraction", "messages_per_call", "late_fraction", "mean_lateness_rounds",
            "vs_inproc", "cross_vs_floor"]
    print(table(rows, cols))
    print(table([base], list(base)))
    print(table([floor], list(floor)))
    print("saved", save("ray_gossip", {"target_messages_per_s": TARGET, "rows": rows, "inproc": base,
                                       "bare_calls": floor}))


if __name__ == "__main__":
    main()
