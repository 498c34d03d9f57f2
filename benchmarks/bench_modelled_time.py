"""The modelled cluster time held against a real run on the same machine.

For each of three runs on the Ray engine -- the quickstart (Saddle-DSVC on iris, 5 clients), BQO-E on a9a and
Pragam-b on a9a (2 workers each: one worker per core of a two-core machine, as a cluster gives each node its own
machine) -- `svmsim calibrate --hop engine --scenario` measures this machine (a message hop as svmsim's Ray engine
relays it, through its driver: the alpha-beta fit; the scenario's own steps on its Ray hosts: the compute rate of
the work its programs declare and the fixed cost of a step) and its `[network]` table then models the run. The runs
evaluate only at their end (evaluation is the simulator's cost, not the cluster's), and each is measured at N and 2N
iterations after a warm-up run (numba's cache loaded): the modelled time against the measured wall time per round
(the difference of the two, so start-up is left out; the median of several repetitions) and in total (the 2N run),
and their ratio (modelled / measured; 1 is a perfect model). With ``--hop direct`` (one actor calling another, the
network between hosts) the model would leave out what the engine's relay through its driver adds to every hop. The
engine runs without recovery (``recover = false``: no checkpoints of the hosts, no log of rounds), which the model
has no term for; what the default recovery adds is measured beside it (``ratio_per_round_recover``).

Run: python benchmarks/bench_modelled_time.py [--iterations N]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tomllib

from _common import data_dir, save, table

import svmsim
from svmsim.calibrate import calibrate

LAST = 10**9       # an evaluation interval past the end of every run: one evaluation point, at the end


def _runs(iterations: int) -> dict:
    ray = {"name": "ray", "actors": 2, "recover": False}
    out = {"progress": False, "plots": False, "eval_every": LAST}
    a9a = {"name": "a9a", "data_dir": str(data_dir())}
    quick = svmsim.load_scenario("scenarios/quickstart.toml").to_dict()
    quick.update(engine=ray, output=out, stop={"max_iterations": 20 * iterations})
    return {
        "quickstart (Saddle-DSVC, iris, k = 5)": quick,
        "BQO-E on a9a (K = 2)": {"name": "bqo", "seed": 0, "data": a9a, "engine": ray,
                                 "algorithm": {"name": "bqo-e", "workers": 2}, "stop": {"max_iterations": iterations},
                                 "output": out},
        "Pragam-b on a9a (K = 2)": {"name": "pragam", "seed": 0, "data": a9a, "engine": ray,
                                    "algorithm": {"name": "pragam-b", "workers": 2},
                                    "stop": {"max_iterations": iterations}, "output": out},
    }


def _final(scenario: dict, iterations: int) -> tuple[int, float, float]:
    res = svmsim.run(svmsim.load_scenario(scenario, overrides={"stop.max_iterations": iterations}), write=False)
    last = res.metrics[-1]
    return int(last["round"]), float(last["wall_time"]), float(last["modelled_time"])


def _per_round(scenario: dict, repeats: int) -> tuple:
    """The 2N run's rounds, wall and modelled seconds, and the median over `repeats` of the seconds per round
    between N and 2N iterations (wall, modelled)."""
    n = int(scenario["stop"]["max_iterations"])
    _final(scenario, n)                                      # warm-up: numba's cache loaded on every host
    per_round = []
    for _ in range(repeats):
        r1, w1, m1 = _final(scenario, n)
        r2, w2, m2 = _final(scenario, 2 * n)
        per_round.append(((w2 - w1) / (r2 - r1), (m2 - m1) / (r2 - r1)))
    wall_round = statistics.median(w for w, _ in per_round)
    return r2, w2, m2, wall_round, per_round[0][1]


def _measure(scenario: dict, repeats: int) -> dict:
    rounds, wall, model, wall_round, model_round = _per_round(scenario, repeats)
    recovering = dict(scenario, engine=dict(scenario["engine"], recover=True))    # the engine's default
    wall_round_recover = _per_round(recovering, repeats)[3]
    return {"rounds": rounds, "wall_s": wall, "modelled_s": model, "ratio": model / wall,
            "wall_ms_per_round": 1e3 * wall_round, "modelled_ms_per_round": 1e3 * model_round,
            "ratio_per_round": model_round / wall_round,
            "wall_ms_per_round_recover": 1e3 * wall_round_recover,
            "ratio_per_round_recover": model_round / wall_round_recover}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=100, help="iterations of the a9a runs' shorter measurement "
                                                              "(default 100; the quickstart's: 20 times as many)")
    p.add_argument("--repeats", type=int, default=3, help="measurements per run; the median per round is reported "
                                                          "(default 3; the machine is shared and noisy)")
    args = p.parse_args(argv)
    from svmsim.engine.ray_actors import ensure_ray

    ensure_ray(None, {})                 # one local Ray for every measurement and run (each would start its own)
    rows, tables = [], {}
    for name, scenario in _runs(args.iterations).items():
        cal = calibrate(scenario=svmsim.load_scenario(scenario), hop="engine")
        network = tomllib.loads(cal.table())["network"]
        tables[name] = {"network": network, "calibration": {"sizes": list(cal.sizes), "seconds": cal.seconds,
                                                            "residual": cal.residual, "hop": cal.hop,
                                                            "steps": cal.steps,
                                                            "steps_residual": cal.steps_residual}}
        rows.append({"run": name, **network, **_measure(dict(scenario, network=network), args.repeats)})
        print(cal.table(), file=sys.stderr)
        print(rows[-1], file=sys.stderr, flush=True)
    cols = ["run", "latency", "compute_rate", "step_overhead", "rounds", "wall_s", "modelled_s", "ratio",
            "wall_ms_per_round", "modelled_ms_per_round", "ratio_per_round", "wall_ms_per_round_recover",
            "ratio_per_round_recover"]
    print(table(rows, cols))
    save("modelled_time", {"runs": rows, "calibrations": tables})
    return 0


if __name__ == "__main__":
    sys.exit(main())
