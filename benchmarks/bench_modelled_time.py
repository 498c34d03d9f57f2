"""The modelled cluster time held against a real run on the same machine.

`svmsim calibrate` measures this machine's Ray (one actor calling another: the alpha-beta fit, and the compute rate
of a sparse pass), and its `[network]` table then models three runs on the Ray engine: the quickstart (Saddle-DSVC
on iris, 5 clients), BQO-E on a9a and Pragam-b on a9a (4 workers each). For each run: the modelled time against
the measured wall time of its rounds (numba compilation left out, as `wall_time` leaves it out), in total and over
the run's second half (per round, once start-up effects are past), and their ratio (modelled / measured; 1 is a
perfect model). The numbers say where the alpha-beta model stands against Ray's own costs, which it does not
model: the driver's per-round coordination, Python steps, serialisation.

Run: python benchmarks/bench_modelled_time.py [--iterations N]
"""
from __future__ import annotations

import argparse
import sys
import tomllib

from _common import data_dir, save, table

import svmsim
from svmsim.calibrate import calibrate


def _runs(network: dict, iterations: int) -> dict:
    ray = {"name": "ray", "actors": 2}
    out = {"progress": False, "plots": False}
    a9a = {"name": "a9a", "data_dir": str(data_dir())}
    return {
        "quickstart (Saddle-DSVC, iris, k = 5)": svmsim.load_scenario(
            "scenarios/quickstart.toml", overrides={"engine.name": "ray", "engine.actors": 2,
                                                   "output.progress": False, "output.plots": False,
                                                   "output.eval_every": 250, **{f"network.{k}": v for k, v in
                                                                                network.items()}}),
        "BQO-E on a9a (K = 4)": {"name": "bqo", "seed": 0, "data": a9a, "engine": ray,
                                 "algorithm": {"name": "bqo-e", "workers": 4}, "network": network,
                                 "stop": {"max_iterations": iterations}, "output": {**out, "eval_every": 5}},
        "Pragam-b on a9a (K = 4)": {"name": "pragam", "seed": 0, "data": a9a, "engine": ray,
                                    "algorithm": {"name": "pragam-b", "workers": 4}, "network": network,
                                    "stop": {"max_iterations": iterations}, "output": {**out, "eval_every": 5}},
    }


def _measure(scenario) -> dict:
    svmsim.run(scenario, write=False)                         # compile (numba's cache) before the measured run
    res = svmsim.run(scenario, write=False)
    rows = [m for m in res.metrics if m.get("modelled_time") is not None]
    last, mid = rows[-1], rows[len(rows) // 2]
    wall, modelled = float(last["wall_time"]), float(last["modelled_time"])
    d_wall = wall - float(mid["wall_time"])
    d_model = modelled - float(mid["modelled_time"])
    rounds = int(last["round"]) - int(mid["round"])
    return {"rounds": int(last["round"]), "wall_s": wall, "modelled_s": modelled, "ratio": modelled / wall,
            "wall_ms_per_round": 1e3 * d_wall / max(rounds, 1), "modelled_ms_per_round": 1e3 * d_model / max(rounds, 1),
            "ratio_second_half": d_model / d_wall if d_wall > 0 else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=60, help="iterations of the a9a runs (default 60)")
    args = p.parse_args(argv)
    cal = calibrate()
    network = tomllib.loads(cal.table())["network"]
    rows = []
    for name, scenario in _runs(network, args.iterations).items():
        rows.append({"run": name, **_measure(scenario)})
        print(rows[-1], file=sys.stderr, flush=True)
    cols = ["run", "rounds", "wall_s", "modelled_s", "ratio", "wall_ms_per_round", "modelled_ms_per_round",
            "ratio_second_half"]
    print(cal.table())
    print(table(rows, cols))
    save("modelled_time", {"network": network, "calibration": {"sizes": list(cal.sizes), "seconds": cal.seconds,
                                                               "residual": cal.residual,
                                                               "node_rates": cal.node_rates},
                           "runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
