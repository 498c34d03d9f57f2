"""Time to an answer: how long `svmsim validate`, `svmsim list` and `svmsim --help` take in a fresh process, against
the floor of the interpreter itself and of what every command needs (pydantic and tomllib), measured in the same
run.

Each command and each reference runs in a fresh interpreter (the whole process: start-up, imports, the answer),
in turn, repeatedly (A, B, C, ... A, B, C, ...), so that a drift of the machine's speed moves them alike. Per
command: the median wall and CPU seconds over the repetitions, and the median of the per-repetition ratios to the
references `python -c pass` and `python -c "import pydantic, tomllib"`. Targets (issue "Time to an answer", warm,
medians): validate <= 0.5 s, list algorithms <= 1 s; a shared machine's wall time is noisy, the CPU seconds and
the ratios less so. Writes benchmarks/results/startup.json.

    python benchmarks/bench_startup.py [--reps 15]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import save, table

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from svmsim.cli import main; sys.exit(main())"
REFERENCES = {"python -c pass": "pass", "python -c 'import pydantic, tomllib'": "import pydantic, tomllib"}
COMMANDS = {
    "svmsim validate scenarios/quickstart.toml": ["validate", "scenarios/quickstart.toml"],
    "svmsim list algorithms": ["list", "algorithms"],
    "svmsim list": ["list"],
    "svmsim --help": ["--help"],
}
TARGETS = {"svmsim validate scenarios/quickstart.toml": 0.5, "svmsim list algorithms": 1.0}


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one fresh process running `argv` (cpu: user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15, help="repetitions of every command (default 15)")
    args = ap.parse_args()
    os.environ.pop("SVMSIM_DATA_DIR", None)         # `svmsim list` reads no data directory
    runs = {**{k: [sys.executable, "-c", code] for k, code in REFERENCES.items()},
            **{k: [sys.executable, "-c", CLI, *argv] for k, argv in COMMANDS.items()}}
    for argv in runs.values():                      # warm the file cache and the bytecode caches
        timed(argv)
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    for _ in range(args.reps):
        for label, argv in runs.items():
            samples[label].append(timed(argv))
    floor, base = (samples[k] for k in REFERENCES)
    rows = []
    for label, got in samples.items():
        walls, cpus = [w for w, _ in got], [c for _, c in got]
        row = {"command": label, "wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
               "x_python": statistics.median(w / f for (w, _), (f, _) in zip(got, floor)),
               "x_pydantic": statistics.median(w / b for (w, _), (b, _) in zip(got, base))}
        if label in TARGETS:
            row["target_s"] = TARGETS[label]
            row["met"] = row["wall_s"] <= TARGETS[label]
        rows.append(row)
    print(table(rows, ["command", "wall_s", "cpu_s", "x_python", "x_pydantic", "target_s", "met"]))
    path = save("startup", {"reps": args.reps, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
