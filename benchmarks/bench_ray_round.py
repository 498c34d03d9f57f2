"""Time one synchronous round on Ray: bare actor calls vs svmsim's Ray engines.

Measures, on a local Ray:
  (a) floor:      one round of bare `.remote()` calls to 2 trivial actors (one call each, one `ray.get`);
  (b) ray:        svmsim rounds with k logical clients on 2 host actors (+ the server's host), driven by
                  `SyncScheduler` with a toy program whose messages carry a few floats;
  (c) ray-cgraph: the same with the hosts driven by a compiled graph;
  plus, for context: the in-process engine on the same program (the scheduler's own share of a round), a
  compiled graph of 3 trivial actors (the floor of (c), whose graph spans 3 hosts), (b) with
  ``wire="objects"`` (inboxes and outboxes handed to Ray's serialiser instead of one bytes object each), and
  (c) with all clients on one host (a graph over 2 actors).

The toy server aggregates the replies and broadcasts the next value in one step, so rounds alternate between a
*server round* (one host stepped) and a *client round* (both client hosts stepped, the floor's shape).
Configurations are interleaved in a shuffled order per repetition; every engine is built fresh for its
repetition (a compiled graph left alive keeps its actors polling, which would slow the other configurations).
Reports medians over repetitions of per-repetition medians, in ms, and writes benchmarks/results/ray_round.json.

    python benchmarks/bench_ray_round.py [--clients 20] [--reps 5] [--rounds 300]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)  # Ray's workers import svmsim from the driver's working directory

import ray  # noqa: E402

from svmsim.comm.message import MessageBatch, Outbox  # noqa: E402
from svmsim.comm.meter import Meter  # noqa: E402
from svmsim.engine import InProcessEngine  # noqa: E402
from svmsim.engine.ray_engine import RayEngine  # noqa: E402
from svmsim.program import NodeProgram, RoleSpec  # noqa: E402
from svmsim.schedule.sync import SyncScheduler  # noqa: E402

WARMUP = 40


class BenchServer(NodeProgram):
    role = "server"
    initiator = True

    def __init__(self, client_ids):
        self.client_ids = np.asarray(client_ids, dtype=np.int64)

    def init(self, node_ids, node_data, seed):
        return {"id": int(node_ids[0]), "t": 0, "w": np.zeros(3)}

    def step(self, state, inbox, round_):
        replies = inbox.get_batch("reply")
        signals = None
        if replies is not None:
            state["w"] = 0.5 * state["w"] + 0.1 * replies.payload.mean(axis=0)
            state["t"] += 1
            signals = {"iteration": state["t"]}
        return state, Outbox([MessageBatch.broadcast("w", state["id"], self.client_ids, state["w"])], signals)

    def observe(self, state):
        return state["w"].copy()


class BenchClient(NodeProgram):
    role = "client"

    def init(self, node_ids, node_data, seed):
        return {"ids": np.asarray(node_ids, dtype=np.int64), "x": np.ones((len(node_ids), 3))}

    def step(self, state, inbox, round_):
        b = inbox["w"]
        state["x"] = 0.9 * state["x"] + b.payload * state["ids"][:, None]
        return state, Outbox([MessageBatch.gather("reply", state["ids"], 0, state["x"])])

    def observe(self, state):
        return state["x"].copy()


def roles(k):
    clients = np.arange(1, k + 1)
    return [RoleSpec("server", BenchServer(clients), np.array([0]), [None]),
            RoleSpec("client", BenchClient(), clients, [None] * k)]


@ray.remote(num_cpus=0)
class Trivial:
    def f(self, x):
        return 1.0


def floor_round(n_rounds, n_actors=2, compiled=False):
    """Median round of one trivial call per actor: plain `.remote()` calls, or one compiled-graph execution."""
    actors = [Trivial.remote() for _ in range(n_actors)]
    ray.get([a.f.remote(1.0) for a in actors])
    graph = None
    if compiled:
        from ray.dag import InputNode, MultiOutputNode

        with InputNode() as inp:
            graph = MultiOutputNode([a.f.bind(inp[j]) for j, a in enumerate(actors)]).experimental_compile()
        args = [1.0] * n_actors
        call = lambda: ray.get(graph.execute(*args))  # noqa: E731
    else:
        call = lambda: ray.get([a.f.remote(1.0) for a in actors])  # noqa: E731
    times = []
    try:
        for i in range(WARMUP + n_rounds):
            t0 = time.perf_counter()
            call()
            if i >= WARMUP:
                times.append(time.perf_counter() - t0)
    finally:
        if graph is not None:
            graph.teardown()
        for a in actors:
            ray.kill(a)
    return {"all": statistics.median(times)}


def engine_rounds(engine, k, n_rounds):
    """Run the toy through SyncScheduler; per-round wall times split into server and client rounds."""
    with engine:
        groups = engine.plan(roles(k))
        engine.deploy(groups, 0)
        meter = Meter(k + 1)
        sched = SyncScheduler(engine, groups, meter, k + 1)
        stamps = [time.perf_counter()]
        sched.run(max_rounds=WARMUP + n_rounds, on_round=lambda r: stamps.append(time.perf_counter()))
    dt = np.diff(stamps)[WARMUP:]
    rounds = np.arange(WARMUP, WARMUP + dt.size)
    client = dt[rounds % 2 == 1]  # round 0: server broadcasts; odd rounds: clients reply
    server = dt[rounds % 2 == 0]
    return {"all": float(np.median(dt)), "client_round": float(np.median(client)),
            "server_round": float(np.median(server)), "messages": meter.messages}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ray_round.json"))
    args = ap.parse_args()

    temp_dir = tempfile.mkdtemp(prefix="svmsim-bench-")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=300 * 1024**2, log_to_driver=False,
             _temp_dir=temp_dir, logging_level="WARNING")
    k, n = args.clients, args.rounds
    configs = {
        "floor": lambda: floor_round(n),
        "cgraph-floor-3": lambda: floor_round(n, 3, compiled=True),
        "inproc": lambda: engine_rounds(InProcessEngine(), k, n),
        "ray": lambda: engine_rounds(RayEngine(actors=2), k, n),
        "ray-objects": lambda: engine_rounds(RayEngine(actors=2, wire="objects"), k, n),
        "ray-cgraph": lambda: engine_rounds(RayEngine(compiled=True, actors=2), k, n),
        "ray-cgraph-1": lambda: engine_rounds(RayEngine(compiled=True, actors=1), k, n),
    }
    load_before = os.getloadavg()
    reps: dict[str, list[dict]] = {name: [] for name in configs}
    rng = random.Random(0)
    try:
        for rep in range(args.reps):
            order = list(configs)
            rng.shuffle(order)
            for name in order:
                reps[name].append(configs[name]())
            print(f"repetition {rep + 1}/{args.reps} done ({', '.join(order)})", flush=True)
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)

    ms = {name: {key: 1e3 * statistics.median(r[key] for r in runs) for key in runs[0] if key != "messages"}
          for name, runs in reps.items()}
    floor = ms["floor"]["all"]
    labels = {"floor": "(a) floor: 2 bare calls", "cgraph-floor-3": "compiled floor, 3 actors",
              "inproc": "in-process engine", "ray": "(b) ray", "ray-objects": "ray, wire=objects",
              "ray-cgraph": "(c) ray-cgraph", "ray-cgraph-1": "ray-cgraph, 1 client host"}
    rows = [(labels[name], v["all"], v.get("client_round"), v.get("server_round")) for name, v in ms.items()]
    print(f"\nload average before/after (1 min): {load_before[0]:.2f} / {os.getloadavg()[0]:.2f}")
    print(f"k = {args.clients} clients on 2 client hosts + 1 server host; {args.reps} reps x {args.rounds} rounds;"
          " medians in ms")
    print(f"{'configuration':<28}{'all rounds':>12}{'client rnd':>12}{'server rnd':>12}{'x floor':>10}")
    for label, a, c, s in rows:
        fmt = lambda v: f"{v:12.3f}" if v is not None else f"{'-':>12}"  # noqa: E731
        ratio = (c if c is not None else a) / floor
        print(f"{label:<28}{fmt(a)}{fmt(c)}{fmt(s)}{ratio:10.2f}")
    result = {
        "clients": args.clients, "reps": args.reps, "rounds": args.rounds, "warmup": WARMUP,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__,
                    "loadavg_1_5_15_before": load_before, "loadavg_1_5_15_after": os.getloadavg()},
        "median_ms": ms,
        "ratio_ray_client_round_to_floor": ms["ray"]["client_round"] / floor,
        "ratio_ray_all_rounds_to_floor": ms["ray"]["all"] / floor,
        "cgraph_all_rounds_ms": ms["ray-cgraph"]["all"],
        "cgraph_one_client_host_all_rounds_ms": ms["ray-cgraph-1"]["all"],
        "targets": {"ray_client_round_le_1.3x_floor": ms["ray"]["client_round"] <= 1.3 * floor,
                    "cgraph_round_le_0.5ms": ms["ray-cgraph"]["all"] <= 0.5},
        "per_repetition_s": reps,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
