"""Real scenarios on the Ray engine against the bare-call floor: what a round costs over a whole run.

`bench_ray_round.py` times the round of a toy program. A real run also evaluates (pulls the nodes' state and
computes the certificate), exports live metrics, keeps checkpoints for recovery and runs the algorithm's own steps.
This benchmark runs shipped scenarios as `svmsim run --engine ray` does (2 host actors, live metrics on, the
default checkpoints), on one private Ray started once, and reports a round over the whole run: the time from the
end of the deployment to the end of the run (every round, evaluation, checkpoint and the final observation) over
the rounds run (the run's fixed end, its wait for the final export of live metrics, is reported apart as "end s"),
against the floor measured in the same session (one trivial `.remote()` call to each of 2 actors and one
`ray.get`: `bench_ray_round.floor_round`). Each repetition runs the configurations in turn, in reverse order every
other repetition; medians.

Scenarios: quickstart (Saddle-DSVC, iris, k = 5, to its gap), and Saddle-DSVC on mushrooms (k = 20) with a budget
of iterations. Target: <= 1.2x the floor per round.

    python benchmarks/bench_ray_scenarios.py [--reps 5] [--mushrooms-iterations 4000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from _common import data_dir, save, table
from bench_ray_round import floor_round, ray   # (puts the checkout first on sys.path and works from its root)
import svmsim  # noqa: E402
from svmsim.engine.ray_engine import RayEngine  # noqa: E402


class TimedRayEngine(RayEngine):
    """A Ray engine that stamps the end of its deployment, the end of its last round or observation (the run
    between them: every round, evaluation and checkpoint) and its close (after the run's wait for the final
    export of its live metrics, a fixed cost of a run on Ray, reported apart)."""

    def deploy(self, groups, seed):
        super().deploy(groups, seed)
        self.deployed_at = self.last_call_at = time.perf_counter()

    def step(self, round_, inboxes):
        out = super().step(round_, inboxes)
        self.last_call_at = time.perf_counter()
        return out

    def observe(self, gids=None):
        out = super().observe(gids)
        self.last_call_at = time.perf_counter()
        return out

    def close(self):
        if not self._closed and hasattr(self, "deployed_at"):
            self.run_seconds = self.last_call_at - self.deployed_at
            self.teardown_seconds = time.perf_counter() - self.last_call_at
        super().close()


def scenario_round(path: str, overrides: dict, **engine_options) -> dict:
    eng = TimedRayEngine(actors=2, **engine_options)
    t0 = time.perf_counter()
    try:
        result = svmsim.run(path, engine=eng, write=False, progress=False,
                            overrides={"engine.name": "ray", **overrides})
    finally:
        eng.close()
    total = time.perf_counter() - t0
    rounds = int(result.summary["rounds"])
    rec = result.summary.get("ray_recovery") or {}
    return {"round": eng.run_seconds / rounds, "rounds": rounds, "run_s": eng.run_seconds,
            "end_s": eng.teardown_seconds, "total_s": total,
            "iterations": int(result.summary["iterations"]), "evaluations": len(result.metrics),
            "checkpoints": rec.get("checkpoints", 0), "checkpoint_s": rec.get("checkpoint_s", 0.0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--floor-rounds", type=int, default=2000)
    ap.add_argument("--mushrooms-iterations", type=int, default=4000)
    args = ap.parse_args()
    os.environ.setdefault("SVMSIM_DATA_DIR", str(data_dir()))
    scenarios = {
        "quickstart": ("scenarios/quickstart.toml", {}),
        "dsvc-mushrooms": ("scenarios/saddle_dsvc_mushrooms.toml",
                           {"stop.max_iterations": args.mushrooms_iterations, "output.eval_every": 500}),
    }
    configs = {"floor": lambda: {"round": floor_round(args.floor_rounds)["mean"]}}
    for name, (path, over) in scenarios.items():
        configs[name] = lambda path=path, over=over: scenario_round(path, over)
        configs[f"{name}-bare"] = lambda path=path, over=over: scenario_round(path, over, recover=False)
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=300 * 1024**2, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="svmsim-bench-"), logging_level="WARNING",
             _system_config={"metrics_report_interval_ms": 1000})
    load_before = os.getloadavg()
    reps: dict[str, list[dict]] = {name: [] for name in configs}
    try:
        scenario_round(*scenarios["quickstart"])            # warm-up: numba caches, imports, worker processes
        for rep in range(args.reps):
            order = list(configs) if rep % 2 == 0 else list(reversed(configs))
            for name in order:
                reps[name].append(configs[name]())
            print(f"repetition {rep + 1}/{args.reps} done", flush=True)
    finally:
        ray.shutdown()
    med = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for name, runs in reps.items()}
    floor_ms = 1e3 * med["floor"]["round"]
    rows = [{"what": "floor: 2 bare calls (mean)", "ms per round": floor_ms, "x floor": 1.0}]
    for name in configs:
        if name == "floor":
            continue
        m = med[name]
        rows.append({"what": name + ("" if name.endswith("-bare") else " (checkpoints every 100)"),
                     "ms per round": 1e3 * m["round"], "x floor": 1e3 * m["round"] / floor_ms,
                     "rounds": int(m["rounds"]), "evaluations": int(m["evaluations"]),
                     "checkpoints": int(m["checkpoints"]), "run s": m["run_s"], "end s": m["end_s"],
                     "with start s": m["total_s"]})
    print(f"\nload average before/after (1 min): {load_before[0]:.2f} / {os.getloadavg()[0]:.2f}")
    print(table(rows, ["what", "ms per round", "x floor", "rounds", "evaluations", "checkpoints", "run s", "end s",
                       "with start s"]))
    ratios = {name: 1e3 * med[name]["round"] / floor_ms for name in configs if name != "floor"}
    path = save("ray_scenarios", {
        "reps": args.reps, "floor_rounds": args.floor_rounds, "mushrooms_iterations": args.mushrooms_iterations,
        "loadavg_1min_before_after": [load_before[0], os.getloadavg()[0]], "median": med,
        "ratio_round_to_floor": ratios,
        "targets": {"round_le_1.2x_floor": {name: r <= 1.2 for name, r in ratios.items()}},
        "per_repetition": reps})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
