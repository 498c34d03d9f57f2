"""Gossip at scale, on Ray and in-process: the same Push-Sum run with N nodes on each engine.

The run is the scale issue's: ``scenarios/pushsum_mixing.toml`` (Push-Sum on a random 2-out overlay, stop at
consensus error 1e-3) with ``--set algorithm.nodes=N --set algorithm.values=random --set algorithm.dim=123``,
run through the CLI in a fresh process per engine: in-process (``inproc``), then the Ray gossip engine
(``--engine ray``) with 2 host actors (and the counts of ``--actors``). Live metrics and plots are off (they
measure nothing here); a Ray run gets ``stop.max_seconds`` (``--max-seconds``) and says so if it stops there.

Reported per run, from the run directory's summary: messages and rounds to the stop, the stop reason and the
final consensus error; the process's wall time end to end; the run's own wall time (the gossip loop from its start
to the stop decision, the evaluations included: the last metrics row's ``wall_time``); set-up (end to end minus
the run: imports, data, topology and its facts, deployment, Ray's start, writing the run directory); messages
per second end to end and over the run; the driver process's peak memory (RSS; a Ray host actor is not its child,
so its memory is not in it). The ratio ``vs_inproc`` is the Ray run's messages/s over the in-process run's, both
over the run.

Run: python benchmarks/bench_ray_gossip_scale.py [--nodes 100000] [--actors 2 ...] [--max-seconds 300]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import gossip_cli_run, save, table

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "pushsum_mixing.toml"


def run_one(nodes: int, engine: str, actors: int, max_seconds: float, workdir: Path) -> dict:
    sets = {"algorithm.nodes": nodes, "algorithm.values": '"random"', "algorithm.dim": 123,
            "stop.max_seconds": max_seconds}
    return gossip_cli_run(SCENARIO, sets, workdir, engine=engine, actors=actors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--actors", type=int, nargs="+", default=[2])
    ap.add_argument("--max-seconds", type=float, default=300.0, help="stop.max_seconds of every run")
    ap.add_argument("--name", default="ray_gossip_scale", help="results file name (benchmarks/results/NAME.json)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="svmsim-bench-") as tmp:
        rows.append(run_one(args.nodes, "inproc", 1, args.max_seconds, Path(tmp)))
        print(table(rows[-1:], list(rows[-1])), flush=True)
        for actors in args.actors:
            rows.append(run_one(args.nodes, "ray", actors, args.max_seconds, Path(tmp)))
            rows[-1]["vs_inproc"] = rows[-1]["messages_per_s_run"] / rows[0]["messages_per_s_run"]
            print(table(rows[-1:], list(rows[-1])), flush=True)
    cols = ["engine", "actors", "nodes", "messages", "rounds", "stop_reason", "wall_s", "setup_s", "run_s",
            "messages_per_s_total", "messages_per_s_run", "vs_inproc", "peak_rss_gb"]
    print(table(rows, cols))
    path = save(args.name, {"scenario": "pushsum_mixing.toml, values random, d = 123", "rows": rows})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
