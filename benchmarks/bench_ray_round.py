"""Time one synchronous round on Ray: bare actor calls vs svmsim's Ray engines, separate vs co-located hosts.

Measures, on a local Ray, with k logical clients split over 2 client groups plus the server's group:
  floor:                one round of bare `.remote()` calls to 2 trivial actors (one call each, one `ray.get`);
  cgraph floor 2 / 3:   one execution of a compiled graph over 2 / 3 trivial actors;
  ray separate:         svmsim rounds on plain actors, the server in an actor of its own (3 actors);
  ray co-located:       the same with the server in the first client actor (2 actors);
  ray-cgraph separate / co-located: the same driven by a compiled graph (a graph over 3 / 2 actors);
  ... bare:             co-located, plain and compiled, with recovery off (no checkpoints, no log of rounds);
                        every other configuration runs with the defaults: a checkpoint of every host every 100
                        rounds and each round's requests logged, so that a lost host can be replaced;
  plus, for context: the in-process engine on the same program (the scheduler's own share of a round), plain
  actors with ``wire="objects"``, and a compiled graph with everything on 1 actor.
The rounds are driven by `SyncScheduler` with a toy program whose messages carry a few floats.

The toy server aggregates the replies and broadcasts the next value in one step, so rounds alternate between a
*server round* (one group stepped) and a *client round* (both client groups stepped, the floor's shape).
Configurations are interleaved in a shuffled order per repetition; every engine is built fresh for its
repetition (a compiled graph left alive keeps its actors polling, which would slow the other configurations).
Reports medians over repetitions of per-repetition medians, in ms, and writes benchmarks/results/ray_round.json.
A checkpoint every 100 rounds does not move a median round: what checkpoints cost is compared on the mean round
(`mean_ms`, medians over repetitions of per-repetition means; the floor's mean likewise): the target is the
co-located plain round with checkpoints on <= 1.1x the floor.

For the co-located compiled graph it also splits a round into the driver's parts (the scheduler outside
`engine.step`, encoding the inboxes, `execute`, waiting in `ray.get`, decoding the outboxes) and measures the
CPU that idle compiled-graph actors burn while they poll their input channels.

    python benchmarks/bench_ray_round.py [--clients 20] [--reps 15] [--rounds 300]
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

import svmsim.engine.ray_engine as ray_engine  # noqa: E402
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
    return {"all": statistics.median(times), "mean": statistics.fmean(times)}


def engine_rounds(engine, k, n_rounds, breakdown=False):
    """Run the toy through SyncScheduler; per-round wall times split into server and client rounds.

    With `breakdown` (compiled graphs only), also the median per-round time of the driver's parts of a round."""
    parts = {"step": [], "encode": [], "execute": [], "decode": []}
    restore = {}
    with engine:
        groups = engine.plan(roles(k))
        engine.deploy(groups, 0)
        if breakdown:
            restore = {"encode_inboxes": ray_engine.encode_inboxes, "decode_outboxes": ray_engine.decode_outboxes}
            engine.step = _timed(engine.step, parts["step"])
            engine._graph.execute = _timed(engine._graph.execute, parts["execute"])
            ray_engine.encode_inboxes = _timed(restore["encode_inboxes"], parts["encode"])
            ray_engine.decode_outboxes = _timed(restore["decode_outboxes"], parts["decode"])
        meter = Meter(k + 1)
        sched = SyncScheduler(engine, groups, meter, k + 1)
        stamps = [time.perf_counter()]
        try:
            sched.run(max_rounds=WARMUP + n_rounds, on_round=lambda r: stamps.append(time.perf_counter()))
        finally:
            for name, fn in restore.items():
                setattr(ray_engine, name, fn)
    dt = np.diff(stamps)[WARMUP:]
    rounds = np.arange(WARMUP, WARMUP + dt.size)
    client = dt[rounds % 2 == 1]  # round 0: server broadcasts; odd rounds: clients reply
    server = dt[rounds % 2 == 0]
    res = {"all": float(np.median(dt)), "client_round": float(np.median(client)),
           "server_round": float(np.median(server)), "mean": float(np.mean(dt)), "messages": meter.messages}
    if breakdown:
        per_round = {}
        for name, times in parts.items():  # encode / decode run once per actor with mail: sum per round
            calls_per_round = len(times) / len(parts["step"])
            per_round[name] = float(np.median(times[WARMUP:])) * calls_per_round
        per_round["ray_get"] = per_round["step"] - per_round["encode"] - per_round["execute"] - per_round["decode"]
        per_round["scheduler"] = res["all"] - per_round["step"]
        res["breakdown"] = per_round
    return res


def _timed(fn, sink):
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - t0)
    return timed


def _cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_polling(k, seconds=2.0):
    """CPU (in cores) that the actors of an idle co-located compiled graph burn, and the same with no graph."""
    from ray._private import state

    out = {}
    for compiled in (True, False):
        with RayEngine(compiled=compiled, actors=2, colocate=True) as eng:
            eng.deploy(eng.plan(roles(k)), 0)
            ids = {h._actor_id.hex() for h in eng._hosts}
            pids = [a["Pid"] for a in state.actors().values() if a["ActorID"] in ids and a["State"] == "ALIVE"]
            time.sleep(0.5)
            before = [_cpu_seconds(p) for p in pids]
            time.sleep(seconds)
            out["cgraph" if compiled else "plain"] = [round((_cpu_seconds(p) - c) / seconds, 3)
                                                      for p, c in zip(pids, before)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--no-polling", dest="polling", action="store_false",
                    help="do not measure the CPU that idle compiled-graph actors burn")
    ap.add_argument("--no-breakdown", dest="breakdown", action="store_false",
                    help="do not time the driver's parts of a co-located compiled round")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--only", default="", help="comma-separated configurations to run (default: all; the "
                    "floor is always run)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ray_round.json"))
    args = ap.parse_args()

    temp_dir = tempfile.mkdtemp(prefix="svmsim-bench-")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=300 * 1024**2, log_to_driver=False,
             _temp_dir=temp_dir, logging_level="WARNING")
    k, n = args.clients, args.rounds
    configs = {
        "floor": lambda: floor_round(n),
        "cgraph-floor-2": lambda: floor_round(n, 2, compiled=True),
        "cgraph-floor-3": lambda: floor_round(n, 3, compiled=True),
        "inproc": lambda: engine_rounds(InProcessEngine(), k, n),
        "ray-separate": lambda: engine_rounds(RayEngine(actors=2, colocate=False), k, n),
        "ray-colocated": lambda: engine_rounds(RayEngine(actors=2, colocate=True), k, n),
        "ray-colocated-bare": lambda: engine_rounds(RayEngine(actors=2, colocate=True, recover=False), k, n),
        "ray-objects": lambda: engine_rounds(RayEngine(actors=2, wire="objects", colocate=False), k, n),
        "ray-cgraph-separate": lambda: engine_rounds(RayEngine(compiled=True, actors=2, colocate=False), k, n),
        "ray-cgraph-colocated": lambda: engine_rounds(RayEngine(compiled=True, actors=2, colocate=True), k, n,
                                                      breakdown=args.breakdown),
        "ray-cgraph-1": lambda: engine_rounds(RayEngine(compiled=True, actors=1, colocate=True), k, n),
        "ray-cgraph-colocated-bare": lambda: engine_rounds(RayEngine(compiled=True, actors=2, colocate=True,
                                                                     recover=False), k, n),
    }
    if args.only:
        wanted = {"floor", *args.only.split(",")}
        unknown = wanted - set(configs)
        if unknown:
            ap.error(f"unknown configurations {sorted(unknown)}; allowed: {', '.join(configs)}")
        configs = {name: fn for name, fn in configs.items() if name in wanted}
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
        polling = idle_polling(k) if args.polling else None
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)

    keys = ("all", "client_round", "server_round")
    ms = {name: {key: 1e3 * statistics.median(r[key] for r in runs) for key in keys if key in runs[0]}
          for name, runs in reps.items()}
    mean_ms = {name: 1e3 * statistics.median(r["mean"] for r in runs) for name, runs in reps.items()}
    with_parts = [r["breakdown"] for r in reps.get("ray-cgraph-colocated", []) if "breakdown" in r]
    parts_ms = ({key: 1e3 * statistics.median(p[key] for p in with_parts) for key in with_parts[0]}
                if with_parts else None)
    floor = ms["floor"]["all"]
    labels = {"floor": "floor: 2 bare calls", "cgraph-floor-2": "cgraph floor, 2 actors",
              "cgraph-floor-3": "cgraph floor, 3 actors", "inproc": "in-process engine",
              "ray-separate": "ray, separate (3 act.)", "ray-colocated": "ray, co-located (2 act.)",
              "ray-objects": "ray, wire=objects, sep.", "ray-cgraph-separate": "ray-cgraph, separate (3)",
              "ray-cgraph-colocated": "ray-cgraph, co-located (2)", "ray-cgraph-1": "ray-cgraph, 1 actor",
              "ray-colocated-bare": "ray, co-located, bare", "ray-cgraph-colocated-bare": "ray-cgraph, co-loc., bare"}
    rows = [(labels[name], v["all"], v.get("client_round"), v.get("server_round"), mean_ms[name])
            for name, v in ms.items()]
    print(f"\nload average before/after (1 min): {load_before[0]:.2f} / {os.getloadavg()[0]:.2f}")
    print(f"k = {args.clients} clients in 2 client groups + 1 server group; {args.reps} reps x {args.rounds} "
          "rounds; medians in ms")
    print(f"{'configuration':<30}{'all rounds':>12}{'client rnd':>12}{'server rnd':>12}{'x floor':>10}"
          f"{'mean rnd':>10}{'mean x fl.':>11}")
    for label, a, c, s, mean in rows:
        fmt = lambda v: f"{v:12.3f}" if v is not None else f"{'-':>12}"  # noqa: E731
        ratio = (c if c is not None else a) / floor
        print(f"{label:<30}{fmt(a)}{fmt(c)}{fmt(s)}{ratio:10.2f}{mean:10.3f}{mean / mean_ms['floor']:11.2f}")
    if parts_ms:
        print("\nray-cgraph co-located, one round split on the driver (ms): "
              + ", ".join(f"{k} {v:.3f}" for k, v in parts_ms.items()))
    if polling:
        print(f"idle actors' CPU (cores), co-located, graph alive vs plain actors: {polling}")
    get = lambda name, key="all": ms[name][key] if name in ms else None  # noqa: E731
    cg = get("ray-cgraph-colocated")
    result = {
        "clients": args.clients, "reps": args.reps, "rounds": args.rounds, "warmup": WARMUP,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__,
                    "loadavg_1_5_15_before": load_before, "loadavg_1_5_15_after": os.getloadavg()},
        "median_ms": ms,
        "mean_ms": mean_ms,
        "checkpoints": {"every_rounds": 100,
                        "ratio_mean_round_to_floor": {name: mean_ms[name] / mean_ms["floor"] for name in
                                                      ("ray-colocated", "ray-colocated-bare") if name in mean_ms},
                        "ratio_with_to_bare_mean_round": {
                            name: mean_ms[name] / mean_ms[f"{name}-bare"]
                            for name in ("ray-colocated", "ray-cgraph-colocated")
                            if name in mean_ms and f"{name}-bare" in mean_ms}},
        "cgraph_colocated_round_parts_ms": parts_ms,
        "idle_actor_cpu_cores": polling,
        "ratio_ray_client_round_to_floor": {name: ms[name]["client_round"] / floor
                                            for name in ("ray-separate", "ray-colocated") if name in ms},
        "cgraph_all_rounds_ms": {name: ms[name]["all"] for name in
                                 ("ray-cgraph-separate", "ray-cgraph-colocated", "ray-cgraph-1") if name in ms},
        "targets": {"ray_client_round_le_1.3x_floor": (None if "ray-separate" not in ms else
                                                       get("ray-separate", "client_round") <= 1.3 * floor),
                    "cgraph_colocated_round_le_0.5ms": None if cg is None else cg <= 0.5,
                    "checkpointed_mean_round_le_1.1x_floor": (None if "ray-colocated" not in mean_ms else
                                                              mean_ms["ray-colocated"] <= 1.1 * mean_ms["floor"])},
        "per_repetition_s": reps,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
