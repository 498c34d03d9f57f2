"""Bit-for-bit check of a refactor: run every scenario in `scenarios/` (each variant of a sweep at its first grid
point) in-process with a small budget, and keep what must not change: `ledger.json`, `ledger_edges.csv`,
`ledger_rounds.csv`, `metrics.csv` without its wall-time columns, `model.npz`, and the run's row of the sweep
table (`sweep_row.json`, the cost columns at the sweep's target, without wall-time columns); columns that an
algorithm estimates from its clock (`TIMED_ESTIMATES`: LIBSVM's kernel evaluations) are left out like wall times.

    python benchmarks/snapshot_runs.py take runs/snap-before          # before the change
    python benchmarks/snapshot_runs.py take runs/snap-after           # after it
    python benchmarks/snapshot_runs.py compare runs/snap-before runs/snap-after

`compare` prints every file that differs and exits 1 if any does. Needs the LIBSVM sets (`SVMSIM_DATA_DIR`).
The bits do not depend on numba's cache (compiled or loaded: `svmsim.core.jit.REPRODUCIBLE_FASTMATH`).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent / "scenarios"
WALL_COLUMNS = {"wall_time", "wall_time_total", "compile_time", "cost_wall_time", "time", "iteration_time",
                "fit_time", "solver_time", "libsvm_ns_per_evaluation"}  # clock seconds (or per-evaluation clock time)
KEPT = ("ledger.json", "ledger_edges.csv", "ledger_rounds.csv")
#: columns an algorithm estimates from its clock: LIBSVM's kernel evaluations are its fit time over its own measured
#: cost per evaluation (paper 003's baseline), so they vary from run to run like a wall time
TIMED_ESTIMATES = {"libsvm": {"kernel_evaluations", "inner_products"}}


def _budget(scenario) -> dict:
    """Small budgets that every scenario reaches deterministically (no wall-clock stop)."""
    gossip = scenario.schedule.kind == "gossip"
    ov = {"output.progress": False, "output.plots": False}
    if gossip:
        ov.update({"stop.max_rounds": 6})
    else:
        ov.update({"stop.max_iterations": 60, "output.eval_every": 20})
    return ov


def _points():
    from svmsim.sweep import plan_sweep

    for path in sorted(SCENARIOS.glob("*.toml")):
        spec, points = plan_sweep(path)
        seen = set()
        for p in points:
            if p.variant in seen:
                continue
            seen.add(p.variant)
            yield f"{path.stem}__{p.slug}", p, spec


def _metrics_without_wall(path: Path, algorithm: str = "") -> str:
    rows = list(csv.reader(io.StringIO(path.read_text())))
    if not rows:
        return ""
    drop = WALL_COLUMNS | TIMED_ESTIMATES.get(algorithm, set())
    keep = [i for i, c in enumerate(rows[0]) if c not in drop]
    return "\n".join(",".join(r[i] for i in keep if i < len(r)) for r in rows) + "\n"


def _model_digest(path: Path) -> dict:
    if not path.exists():
        return {}
    with np.load(path, allow_pickle=False) as z:
        return {k: hashlib.sha256(np.ascontiguousarray(z[k]).tobytes()).hexdigest() + f" {z[k].dtype} {z[k].shape}"
                for k in sorted(z.files)}


def take(out: Path, only: str | None) -> None:
    import svmsim
    from svmsim import load_scenario          # (svmsim's top level: the same name before and after a move)

    out.mkdir(parents=True, exist_ok=True)
    try:
        from svmsim.sweep_costs import sweep_row
    except ImportError:                       # before the sweep's cost extraction had its own module
        from svmsim.sweep import _row as sweep_row
    for name, point, spec in _points():
        if only and not any(o in name for o in only.split(",")):
            continue
        scenario = point.scenario
        raw = scenario.to_dict()
        raw.setdefault("stop", {}).pop("max_seconds", None)
        raw["engine"] = {"name": "inproc"}
        try:
            sc = load_scenario(raw, overrides=_budget(scenario))
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            print(f"{name}: skipped ({exc})", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            res = svmsim.run(sc, out_dir=Path(tmp) / "run", progress=False)
            d = res.run_dir
            target = out / name
            target.mkdir(exist_ok=True)
            for f in KEPT:
                if (d / f).exists():
                    (target / f).write_bytes((d / f).read_bytes())
            algorithm = sc.algorithm.name
            (target / "algorithm.txt").write_text(algorithm + "\n")
            (target / "metrics.csv").write_text(_metrics_without_wall(d / "metrics.csv", algorithm))
            (target / "model.json").write_text(json.dumps(_model_digest(d / "model.npz"), indent=1))
            (target / "stop_reason.txt").write_text(str(res.stop_reason) + "\n")
            drop = WALL_COLUMNS | TIMED_ESTIMATES.get(algorithm, set())
            row = {k: v for k, v in sweep_row(point, res, spec).items() if k.split("@")[0] not in drop}
            (target / "sweep_row.json").write_text(json.dumps(row, indent=1, sort_keys=True, default=str) + "\n")
        print(f"{name}: {res.stop_reason}", flush=True)


def _algorithm(run: Path) -> str:
    """The algorithm a snapshot's run used (snapshots taken before it was recorded: '', or LIBSVM's by name)."""
    path = run / "algorithm.txt"
    if path.exists():
        return path.read_text().strip()
    return "libsvm" if "__LIBSVM" in run.name else ""


def _row_without_timed(path: Path, algorithm: str) -> dict:
    drop = TIMED_ESTIMATES.get(algorithm, set())
    return {k: v for k, v in json.loads(path.read_text()).items() if k.split("@")[0] not in drop}


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    bad = 0
    for name in names:
        for f in KEPT + ("metrics.csv", "model.json", "stop_reason.txt", "sweep_row.json"):
            fa, fb = a / name / f, b / name / f
            algorithm = _algorithm(a / name) or _algorithm(b / name)
            if f == "metrics.csv" and fa.exists() and fb.exists():     # snapshots taken with fewer wall columns
                same = _metrics_without_wall(fa, algorithm) == _metrics_without_wall(fb, algorithm)
            elif f == "sweep_row.json" and fa.exists() and fb.exists():
                same = _row_without_timed(fa, algorithm) == _row_without_timed(fb, algorithm)
            else:
                same = fa.exists() == fb.exists() and (not fa.exists() or fa.read_bytes() == fb.read_bytes())
            if not same:
                print(f"differs: {name}/{f}")
                bad += 1
    print(f"{len(names)} runs compared, {bad} files differ")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("take")
    t.add_argument("out", type=Path)
    t.add_argument("--only", default=None, help="only runs whose name contains one of these (comma-separated)")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("SVMSIM_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    if args.cmd == "take":
        take(args.out, args.only)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
