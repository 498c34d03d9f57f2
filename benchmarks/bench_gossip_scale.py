"""Gossip at scale in process: Push-Sum and GADGET on a random 2-out overlay with N = 10^3 ... 10^6 nodes.

Each run goes through the CLI in a fresh process (`_common.gossip_cli_run`: end-to-end wall time, the run's own
time, set-up = the rest, messages per second end to end and over the run, peak RSS):

* Push-Sum: ``scenarios/pushsum_mixing.toml`` with random values of d = 123 per node, to consensus error 1e-3
  (the scale issue's run);
* GADGET: ``scenarios/gadget_a9a.toml`` for ``--gadget-rounds`` rounds (a fixed budget: its own stopping rule
  needs a number of rounds that depends on N), on a9a while it has a point per node (up to 32 561 nodes), above
  that on a synthetic sparse set shaped like a9a (d = 123, 11 % non-zeros, two points per node).

Memory per node, from the Push-Sum runs: (peak(N) - peak(N0)) / (N - N0) between consecutive sizes, and the same
minus the node's data (its value: d = 123 float64, 984 bytes).

Run: python benchmarks/bench_gossip_scale.py [--nodes 1000 10000 100000 1000000] [--algorithms pushsum gadget]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import gossip_cli_run, save, table

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
A9A_POINTS = 32_561


def pushsum(nodes: int, workdir: Path, max_seconds: float) -> dict:
    sets = {"algorithm.nodes": nodes, "algorithm.values": '"random"', "algorithm.dim": 123,
            "stop.max_seconds": max_seconds}
    return {"algorithm": "pushsum", **gossip_cli_run(SCENARIOS / "pushsum_mixing.toml", sets, workdir)}


def gadget(nodes: int, workdir: Path, rounds: int) -> dict:
    sets = {"algorithm.nodes": nodes, "stop.max_rounds": rounds, "stop.max_iterations": 10 ** 12,
            "schedule.eval_time": rounds, "output.eval_every": 10 ** 9}
    if nodes > A9A_POINTS:
        sets.update({"data.name": '"synthetic"', "data.kind": '"sparse_nonseparable"', "data.n": 2 * nodes,
                     "data.d": 123, "data.density": 0.11, "data.test": '"none"'})
    row = gossip_cli_run(SCENARIOS / "gadget_a9a.toml", sets, workdir)
    return {"algorithm": "gadget", "data": "a9a" if nodes <= A9A_POINTS else "synthetic", **row}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--algorithms", nargs="+", default=["pushsum", "gadget"], choices=["pushsum", "gadget"])
    ap.add_argument("--gadget-rounds", type=int, default=10)
    ap.add_argument("--max-seconds", type=float, default=3000.0, help="stop.max_seconds of the Push-Sum runs")
    ap.add_argument("--name", default="gossip_scale", help="results file name (benchmarks/results/NAME.json)")
    args = ap.parse_args()
    cols = ["algorithm", "nodes", "messages", "rounds", "stop_reason", "wall_s", "setup_s", "run_s",
            "messages_per_s_total", "messages_per_s_run", "peak_rss_gb"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="svmsim-bench-") as tmp:
        for algorithm in args.algorithms:
            for nodes in args.nodes:
                row = (pushsum(nodes, Path(tmp), args.max_seconds) if algorithm == "pushsum"
                       else gadget(nodes, Path(tmp), args.gadget_rounds))
                rows.append(row)
                print(table([row], cols), flush=True)
                save(args.name, {"runs": rows})
    ps = sorted((r for r in rows if r["algorithm"] == "pushsum"), key=lambda r: r["nodes"])
    for a, b in zip(ps, ps[1:]):
        per_node = (b["peak_rss_gb"] - a["peak_rss_gb"]) * 1e9 / (b["nodes"] - a["nodes"])
        b["bytes_per_node"] = per_node
        b["bytes_per_node_without_value"] = per_node - 123 * 8
    print(table(rows, cols + ["bytes_per_node", "bytes_per_node_without_value"]))
    path = save(args.name, {"runs": rows})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
