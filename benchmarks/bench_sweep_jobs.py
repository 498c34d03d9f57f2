"""A 12-point sweep one point after the other against `--jobs 2`, end to end (`svmsim sweep` in a fresh process).

The sweep: Saddle-DSVC with 8 clients on separable synthetic data (n = 8000 or --n, d = 64) to a certified gap of 3e-3,
one point per seed 0..11 (each point a few seconds). The two commands run in turn, pair by pair (sequential, then
--jobs 2), and the ratio is taken per pair, so that a machine whose load drifts still gives a fair ratio; the load
average is recorded before and after. The target is a ratio <= 0.6 on 2 free cores (the workers' start-up, about
as long as one point, is what keeps it above 0.5). The two sweeps' files are then compared with their wall-time
values left out: they must be the same.

Run: python benchmarks/bench_sweep_jobs.py [--repeat 3] [--jobs 2]
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import save
from svmsim.core.metrics import WALL_CLOCK_METRICS

ROOT = Path(__file__).resolve().parent.parent

SWEEP = """\
name = "bench-sweep-jobs"
seed = 0
[data]
name = "synthetic"
kind = "separable"
n = {n}
d = 64
beta = 0.1
[partition]
scheme = "iid"
[algorithm]
name = "saddle-dsvc"
clients = 8
eps = 3e-3
beta = 0.1
[stop]
gap = 3e-3
max_iterations = 2000000
[output]
eval_every = 500
progress = false
[sweep.grid]
seed = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
"""
#: the training points of each sweep point (--n): a point of about 2 s on the project machine; the points must
#: outlast the workers' start-up (about 2 s) for --jobs to pay (at n = 2000, points of about a second, the ratio was
#: 0.70)
DEFAULT_N = 8000


def timed_sweep(scenario: Path, out: Path, jobs: int) -> float:
    cmd = [sys.executable, "-m", "svmsim.cli", "sweep", str(scenario), "--out", str(out), "--no-progress",
           "--jobs", str(jobs)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started


def _timed(name: str) -> bool:
    """A column or key that measures wall-clock time (wall_time, compile_time, ...) or holds such measures
    (summary.json's timing): they differ from run to run."""
    name = name.strip()
    return "wall_time" in name or name in WALL_CLOCK_METRICS or name == "timing"


def masked(path: Path):
    """A file's content without its wall-clock values."""
    if path.suffix == ".json":
        def mask(v):
            if isinstance(v, dict):
                return {k: None if _timed(k) else mask(x) for k, x in v.items()}
            return [mask(x) for x in v] if isinstance(v, list) else v
        return mask(json.loads(path.read_text()))
    if path.suffix in (".csv", ".md"):
        sep = "," if path.suffix == ".csv" else " | "
        lines = path.read_text().splitlines()
        rows = list(csv.reader(io.StringIO("\n".join(lines)))) if sep == "," else [ln.split(sep) for ln in lines]
        out, wall = [], set()
        for r in rows:
            if any(_timed(c) for c in r):
                wall = {i for i, c in enumerate(r) if _timed(c)}
            out.append(["" if i in wall and not any(_timed(c) for c in r) else c for i, c in enumerate(r)])
        return out
    if path.name == "summary.txt":
        lines = path.read_text().splitlines()
        cut = lines[0].find("wall_time")
        return [ln[:cut] for ln in lines] if cut >= 0 else lines
    return path.read_bytes()


def same_files(a: Path, b: Path) -> list[str]:
    """The files that differ between two sweep directories (wall times aside), or are in one only."""
    fa = {str(p.relative_to(a)) for p in a.rglob("*") if p.is_file()}
    fb = {str(p.relative_to(b)) for p in b.rglob("*") if p.is_file()}
    return sorted((fa ^ fb) | {f for f in fa & fb if masked(a / f) != masked(b / f)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--n", type=int, default=DEFAULT_N, help="training points of each sweep point")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="svmsim-bench-sweep-") as tmp:
        tmp = Path(tmp)
        scenario = tmp / "sweep.toml"
        scenario.write_text(SWEEP.format(n=args.n))
        load_before = os.getloadavg()
        timed_sweep(scenario, tmp / "warm", 1)          # numba's cache filled, files in the page cache
        pairs = []
        for r in range(args.repeat):
            seq = timed_sweep(scenario, tmp / f"seq-{r}", 1)
            par = timed_sweep(scenario, tmp / f"par-{r}", args.jobs)
            pairs.append({"sequential_s": seq, "jobs_s": par, "ratio": par / seq})
            print(f"pair {r}: sequential {seq:.1f} s, --jobs {args.jobs} {par:.1f} s, ratio {par / seq:.3f}",
                  flush=True)
        load_after = os.getloadavg()
        differ = same_files(tmp / "seq-0", tmp / "par-0")
    ratio = statistics.median(p["ratio"] for p in pairs)
    print(f"median ratio --jobs {args.jobs} / sequential: {ratio:.3f} (target <= 0.6); load average before "
          f"{load_before[0]:.1f}, after {load_after[0]:.1f}; files identical apart from wall times: {not differ}")
    if differ:
        print("differing files: " + ", ".join(differ))
    path = save("sweep_jobs", {"points": 12, "n": args.n, "jobs": args.jobs, "pairs": pairs, "median_ratio": ratio,
                               "loadavg_before": load_before, "loadavg_after": load_after,
                               "files_identical": not differ, "differing_files": differ})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
