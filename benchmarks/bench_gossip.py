"""Gossip messages per second of wall time: Push-Sum, 1000 nodes on a random 2-out topology, d = 100.

Each message is one clock tick (target choice, the push), one latency and fault draw, one delivery (the add at the
receiver) and its meter record: the whole per-message cost of the in-process gossip scheduler. Measured for the
compiled event loop (the default for programs with a `GossipKernel`) and for the Python loop (every event through
the program's Python methods), with and without faults (10% loss, 5% duplicates, 10% of the nodes crashing), and
with every share compressed (`CODECS`: the codec kernels and error feedback's residual per edge in the compiled
loop, the `Compressor` in the Python loop); `vs_plain` is a row's time per message over the uncompressed compiled
loop's, measured in the same run. Target: >= 1e5 messages/s on the compiled path, compressed or not.
Run: python benchmarks/bench_gossip.py
"""
from __future__ import annotations

import time

from _common import save, table
from svmsim.algorithms.pushsum import PushSumParams, build_pushsum
from svmsim.comm import Meter
from svmsim.comm.codecs import CodecChoice, CompressionSpec
from svmsim.comm.compression import Compressor
from svmsim.core.timing import Distribution, LatencyModel
from svmsim.data import make_dataset
from svmsim.deployment import Problem
from svmsim.engine import InProcessEngine
from svmsim.faults import FaultModel
from svmsim.schedule.gossip import GossipScheduler

NODES, DIM = 1000, 100
FAULTS = FaultModel(drop=0.1, duplicate=0.05, crash=0.1, crash_time=20.0)
#: the compressed rows: Push-Sum's shares (the weight an exact tail, as the family declares)
CODECS = {"topk 1% + ef": CodecChoice("topk", {"fraction": 0.01, "k": None, "value_bits": 32}, "ef"),
          "qsgd 4 bits": CodecChoice("qsgd", {"bits": 4})}


def scheduler(compiled: bool, faults: FaultModel | None, variant: str = "pushsum", seed: int = 0,
              codec: str | None = None):
    ds = make_dataset({"name": "iris"})
    params = PushSumParams(nodes=NODES, values="random", dim=DIM, variant=variant)
    dep = build_pushsum(params, Problem(ds, seed=seed, topology_kind="random_k_out", topology_params={"k": 2}))
    engine = InProcessEngine()
    groups = engine.plan(dep.roles)
    engine.deploy(groups, seed)
    meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names)
    compression = None if codec is None else Compressor(
        CompressionSpec(default=CODECS[codec], tails={"push": 1}), dep.n_nodes, seed)
    sched = GossipScheduler(engine, groups, meter, dep.topology, seed=seed, compiled=compiled, faults=faults,
                            latency=LatencyModel(Distribution.lognormal(0.05, 0.5)), compression=compression)
    return sched, meter


def rate(compiled: bool, faults: FaultModel | None, messages: int, variant: str = "pushsum",
         codec: str | None = None) -> dict:
    sched, meter = scheduler(compiled, faults, variant, codec=codec)
    sched.run(max_messages=2000)                          # warm-up: compilation, first flushes
    sent0 = sched.progress().sent
    t0 = time.perf_counter()
    sched.run(max_messages=sent0 + messages)
    sched.finish()
    meter.ledger()                                        # the meter's own bookkeeping is part of the cost
    wall = time.perf_counter() - t0
    p = sched.progress()
    return {"loop": "compiled" if compiled else "python", "variant": variant, "faults": faults is not None,
            "codec": codec or "none", "nodes": NODES, "d": DIM, "messages": p.sent - sent0, "virtual_time": round(p.time, 2),
            "wall_s": wall, "messages_per_s": (p.sent - sent0) / wall, "us_per_message": wall / (p.sent - sent0) * 1e6}


def main():
    rows = [rate(True, None, 2_000_000), rate(True, FAULTS, 2_000_000), rate(True, None, 2_000_000, "running-sum"),
            rate(True, None, 2_000_000, "pairwise"), rate(False, None, 100_000), rate(False, FAULTS, 100_000)]
    rows += [rate(True, None, 2_000_000, codec=c) for c in CODECS] + [rate(False, None, 50_000, codec=c)
                                                                       for c in CODECS]
    for r in rows:
        r["vs_plain"] = r["us_per_message"] / rows[0]["us_per_message"]
    print(table(rows, list(rows[0])))
    print("saved", save("gossip", {"target_messages_per_s": 1e5, "rows": rows}))


if __name__ == "__main__":
    main()
