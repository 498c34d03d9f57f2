"""Sweeps: one scenario run over a grid of parameter values (and several algorithm variants), one table.

A sweep is a scenario file with an optional ``[sweep]`` table, plus ``--param`` lists on the command line::

    svmsim sweep scenarios/quickstart.toml --param eps=1e-1,1e-2,1e-3

    [sweep]
    plot = "margin"                 # the metric drawn against communication, one curve per run
    x = "comm_units"                # or scalars, wall_time, iteration
    [sweep.grid]
    "data.d" = [128, 256, 512]      # any dotted scenario key, or a short name (eps, d, n, k, seed)
    [[sweep.variants]]              # algorithms compared on every grid point (default: the scenario's own)
    label = "Saddle-DSVC"
    algorithm = { name = "saddle-dsvc", clients = 20, beta = 0.01 }
    [[sweep.variants]]
    label = "distributed Gilbert"
    algorithm = { name = "dgilbert", clients = 20 }
    set = { "output.eval_every" = 1 }

``eps`` is special: it sets the algorithm's accuracy parameter (when it has one) and the stopping rule
``stop.gap``, and each point's *cost* is the ledger's scalars up to the first evaluated iterate whose
certified relative gap is <= eps (evaluation points are every ``output.eval_every`` iterations, which sets
the resolution; the table reports it). For an eps grid the sweep fits the log-log slope of cost against 1/eps
per variant and draws the measured costs with the bound k(d + sqrt(d/eps)) and the lower bound
k*min(d, 1/eps) (paper 000, Theorems 8-9).

Every point is validated before the first one runs, so a bad grid fails at once; the sweep directory is
written atomically like a run directory.
"""
from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from . import rundir
from .errors import ScenarioError
from .scenario import Scenario, _read_toml, apply_overrides, check_sweep_table, load_scenario

__all__ = ["SweepSpec", "Variant", "SweepPoint", "SweepResult", "parse_param", "plan_sweep", "run_sweep",
           "fit_slope", "SHORT_NAMES"]

#: short parameter names and the scenario keys they stand for (eps also sets stop.gap)
SHORT_NAMES = {"eps": "algorithm.eps", "d": "data.d", "n": "data.n", "k": "algorithm.clients",
               "clients": "algorithm.clients", "seed": "seed"}
_X_AXES = ("comm_units", "scalars", "wall_time", "iteration")
_SCALAR = (bool, int, float, str)


class Variant(BaseModel):
    """One algorithm compared on every grid point: its ``[algorithm]`` table and other dotted overrides."""

    model_config = ConfigDict(extra="forbid")
    label: str = Field(min_length=1)
    algorithm: dict[str, Any] | None = None
    set: dict[str, Any] = Field(default_factory=dict)


class SweepSpec(BaseModel):
    """The ``[sweep]`` table of a scenario file."""

    model_config = ConfigDict(extra="forbid")
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    variants: list[Variant] = Field(default_factory=list)
    plot: str = "objective"
    x: Literal["comm_units", "scalars", "wall_time", "iteration"] = "comm_units"
    title: str = ""

    @field_validator("grid")
    @classmethod
    def _check_grid(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            check_param(key, values)
        return grid


def _describe_allowed() -> str:
    return ", ".join(SHORT_NAMES) + ", or a dotted scenario key such as algorithm.beta or data.d"


def check_param(key: str, values: list[Any]) -> None:
    """A grid entry must name a known parameter and give a non-empty list of plain values of one kind."""
    if key not in SHORT_NAMES and "." not in key:
        raise ScenarioError(f"sweep parameter {key!r} is unknown; allowed: {_describe_allowed()}")
    if not isinstance(values, list) or not values:
        raise ScenarioError(f"sweep parameter {key} has an empty list of values; allowed: one or more values, "
                            f"e.g. --param {key}=1,2,3")
    for v in values:
        if not isinstance(v, _SCALAR):
            raise ScenarioError(f"sweep parameter {key} has value {v!r} of type {type(v).__name__}; allowed: "
                                "numbers, booleans or strings")
    if key == "eps":
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                raise ScenarioError(f"sweep parameter eps has value {v!r}; allowed: numbers in (0, 1), e.g. "
                                    "--param eps=1e-2,1e-3")
    if key in ("d", "n", "k", "clients", "seed"):
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ScenarioError(f"sweep parameter {key} has value {v!r}; allowed: integers, e.g. "
                                    f"--param {key}=8,32,128")
    if len(set(map(repr, values))) != len(values):
        raise ScenarioError(f"sweep parameter {key} lists a value twice: {values}")


def parse_param(text: str) -> tuple[str, list[Any]]:
    """``"eps=1e-1,1e-2"`` -> ``("eps", [0.1, 0.01])``; every value is read as a TOML value."""
    from .scenario import parse_override

    if not isinstance(text, str) or "=" not in text:
        raise ScenarioError(f"--param {text!r} is invalid; allowed: NAME=V1,V2,... e.g. eps=1e-1,1e-2,1e-3")
    key, _, rest = text.partition("=")
    key = key.strip()
    items = [s.strip() for s in rest.split(",")] if rest.strip() else []
    if any(not s for s in items):
        raise ScenarioError(f"--param {text!r} has an empty value; allowed: NAME=V1,V2,... with no empty item")
    values = [parse_override(f"{key}={s}")[1] for s in items] if key else []
    if not key:
        raise ScenarioError(f"--param {text!r} has no name; allowed: {_describe_allowed()}")
    check_param(key, values)
    return key, values


@dataclass
class SweepPoint:
    """One run of the sweep: a variant at one grid point."""

    variant: str
    values: dict[str, Any]          # grid key -> value
    scenario: Scenario
    slug: str


@dataclass
class SweepResult:
    directory: Path | None
    rows: list[dict]
    slopes: list[dict]
    runs: list = field(default_factory=list)


def _slug(label: str, values: dict[str, Any]) -> str:
    parts = [label] + [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()]
    text = "__".join(parts)
    return "".join(c if (c.isalnum() or c in "-_=.") else "-" for c in text)


def _grid_overrides(raw_algorithm: dict | None, key: str, value: Any) -> dict[str, Any]:
    if key != "eps":
        return {SHORT_NAMES.get(key, key): value}
    out: dict[str, Any] = {"stop.gap": value}
    from .algorithms.registry import get_algorithm

    name = (raw_algorithm or {}).get("name")
    try:
        info = get_algorithm(name) if isinstance(name, str) else None
    except ScenarioError:
        info = None                 # an unknown algorithm is reported by the scenario validation
    if info is not None and "eps" in info.Params.model_fields:
        out["algorithm.eps"] = value
    return out


def plan_sweep(source: str | Path | dict, params: list[tuple[str, list]] | None = None,
               overrides: dict[str, Any] | None = None) -> tuple[SweepSpec, list[SweepPoint]]:
    """Read a sweep (a scenario file with an optional ``[sweep]`` table; ``params`` add or replace grid
    entries) and validate every point. Raises ScenarioError naming the first bad point's problem."""
    if isinstance(source, dict):
        raw = dict(source)
        where = "scenario"
    else:
        where = str(source)
        raw = _read_toml(Path(source), where)
    spec = check_sweep_table(raw.pop("sweep", {}), where)
    grid = dict(spec.grid)
    for key, values in params or []:
        grid[key] = values
    spec.grid = grid
    variants = spec.variants or [Variant(label=str((raw.get("algorithm") or {}).get("name", "run")))]
    labels = [v.label for v in variants]
    if len(set(labels)) != len(labels):
        raise ScenarioError(f"{where}: sweep.variants have repeated labels {labels}; allowed: distinct labels")
    keys = list(grid)
    points: list[SweepPoint] = []
    for variant in variants:
        base = dict(raw)
        if variant.algorithm is not None:
            base["algorithm"] = dict(variant.algorithm)
        base = apply_overrides(base, variant.set, where)
        for combo in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
            values = dict(zip(keys, combo))
            ov: dict[str, Any] = {}
            for k, v in values.items():
                ov.update(_grid_overrides(base.get("algorithm"), k, v))
            ov.update(overrides or {})
            slug = _slug(variant.label, values)
            try:
                scenario = load_scenario(apply_overrides(base, ov, where))
            except ScenarioError as exc:
                at = ", ".join(f"{k}={v}" for k, v in values.items())
                raise ScenarioError(f"{where}: sweep point [{variant.label}{': ' + at if at else ''}]: {exc}") \
                    from None
            points.append(SweepPoint(variant.label, values, scenario, slug))
    return spec, points


def fit_slope(inv_eps: np.ndarray, cost: np.ndarray) -> float:
    """Least-squares slope of log(cost) against log(1/eps) (NaN with fewer than two usable points)."""
    inv_eps, cost = np.asarray(inv_eps, dtype=float), np.asarray(cost, dtype=float)
    ok = np.isfinite(cost) & (cost > 0) & np.isfinite(inv_eps) & (inv_eps > 0)
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(inv_eps[ok]), np.log(cost[ok]), 1)[0])


def _cost_at(metrics: list[dict], eps: float) -> tuple[float, float]:
    """(scalars, iteration) at the first evaluated iterate with certified relative gap <= eps (NaN if none)."""
    for m in metrics:
        gap = m.get("rel_gap")
        if gap is not None and gap <= eps:
            return float(m.get("scalars", math.nan)), float(m.get("iteration", math.nan))
    return math.nan, math.nan


_FINAL_COLUMNS = ("objective", "hull_distance", "margin", "rel_gap", "train_accuracy", "test_accuracy",
                  "test_accuracy_std")


def _row(point: SweepPoint, result) -> dict:
    final = result.final
    row: dict[str, Any] = {"variant": point.variant, **point.values, "algorithm": point.scenario.algorithm.name,
                           "stop_reason": result.stop_reason, "iterations": final.get("iteration"),
                           "rounds": result.summary.get("rounds"), "scalars": final.get("scalars", 0),
                           "comm_units": final.get("comm_units", 0.0), "wall_time": final.get("wall_time")}
    for c in _FINAL_COLUMNS:
        if final.get(c) is not None:
            row[c] = final[c]
    if "eps" in point.values:
        eps = float(point.values["eps"])
        cost, at = _cost_at(result.metrics, eps)
        row.update(cost_scalars=cost, cost_iteration=at, reached=bool(np.isfinite(cost)))
        unit = result.summary.get("comm_unit")
        if unit and np.isfinite(cost):
            row["cost_units"] = cost / unit[1]
        bound = result.summary.get("bound")
        if bound:
            row.update(bound_upper=bound.get("upper"), bound_lower=bound.get("lower"))
        evals = [m.get("scalars", 0) for m in result.metrics]
        row["cost_resolution"] = float(np.max(np.diff([0] + evals))) if evals else math.nan
    return row


def _compare_to_first_variant(rows: list[dict], keys: list[str]) -> None:
    """Add `scalars_vs_first`: a run's scalars over the first variant's at the same grid point (e.g. 3.0 means
    three times the communication of the first variant; at eps points the cost to eps is compared)."""
    first: dict[tuple, float] = {}
    label = rows[0]["variant"] if rows else None
    for r in rows:
        if r["variant"] == label:
            first[tuple(r.get(k) for k in keys)] = r.get("cost_scalars", r["scalars"])
    for r in rows:
        ref = first.get(tuple(r.get(k) for k in keys))
        mine = r.get("cost_scalars", r["scalars"])
        if ref and mine and np.isfinite(ref) and np.isfinite(mine):
            r["scalars_vs_first"] = mine / ref


def _tag_table(points: list[SweepPoint], runs: list) -> str:
    """Where the communication went: scalars per message tag of every distributed run."""
    lines = []
    for p, r in zip(points, runs):
        if r.ledger is None or not r.ledger.by_tag:
            continue
        total = max(r.ledger.totals["scalars"], 1)
        parts = ", ".join(f"{tag} {v[1]} ({100.0 * v[1] / total:.1f}%)"
                          for tag, v in sorted(r.ledger.by_tag.items(), key=lambda kv: -kv[1][1]))
        lines.append(f"| {p.slug} | {r.ledger.totals['scalars']} | {parts} |")
    if not lines:
        return ""
    return "\n".join(["| run | scalars | by tag (scalars, share) |", "|---|---|---|"] + lines)


def _slopes(rows: list[dict], keys: list[str]) -> list[dict]:
    """Slope of cost against 1/eps per variant and per combination of the other grid keys."""
    if "eps" not in keys:
        return []
    others = [k for k in keys if k != "eps"]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["variant"],) + tuple(r[k] for k in others), []).append(r)
    out = []
    for key, rs in groups.items():
        inv = np.array([1.0 / r["eps"] for r in rs])
        cost = np.array([r.get("cost_scalars", math.nan) for r in rs], dtype=float)
        entry = {"variant": key[0], **dict(zip(others, key[1:])), "slope": fit_slope(inv, cost),
                 "points": int(np.isfinite(cost).sum())}
        upper = np.array([r.get("bound_upper") or math.nan for r in rs], dtype=float)
        if np.isfinite(upper).sum() >= 2:
            entry["bound_slope"] = fit_slope(inv, upper)
        out.append(entry)
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return str(v)


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def _columns(rows: list[dict], keys: list[str]) -> list[str]:
    first = ["variant"] + keys
    preferred = ["iterations", "scalars", "comm_units", "scalars_vs_first", "cost_scalars", "cost_units", "cost_resolution",
                 "bound_upper", "bound_lower", "wall_time", *_FINAL_COLUMNS, "stop_reason"]
    present = {k for r in rows for k in r}
    return first + [c for c in preferred if c in present]


def _sweep_dir(name: str, out: str | Path | None, base_dir: str, overwrite: bool) -> tuple[Path, Path]:
    final = Path(out) if out is not None else Path(base_dir) / f"sweep-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    return final, rundir.begin(final, overwrite, "sweep directory", "pass --overwrite or choose another --out")


def run_sweep(source: str | Path | dict, params: list[tuple[str, list]] | None = None,
              overrides: dict[str, Any] | None = None, out: str | Path | None = None, write: bool = True,
              overwrite: bool = False, progress: bool = True, keep_runs: bool = True) -> SweepResult:
    """Run every point of a sweep and write ``sweep.csv``, ``sweep.md``, ``slopes.json`` and the figures."""
    from .runner import run

    spec, points = plan_sweep(source, params, overrides)
    keys = list(spec.grid)
    final_dir = tmp_dir = None
    if write:
        first = points[0].scenario
        final_dir, tmp_dir = _sweep_dir(first.name, out, first.output.dir, overwrite)
    rows: list[dict] = []
    runs = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(points), desc="sweep", unit="run", dynamic_ncols=True)
    try:
        for p in points:
            if bar is not None:
                bar.set_postfix_str(p.slug, refresh=True)
            run_dir = (tmp_dir / "runs" / p.slug) if (write and keep_runs) else None
            res = run(p.scenario, out_dir=run_dir, write=run_dir is not None, progress=False)
            rows.append(_row(p, res))
            runs.append(res)
            if bar is not None:
                bar.update(1)
        _compare_to_first_variant(rows, keys)
        slopes = _slopes(rows, keys)
        result = SweepResult(final_dir, rows, slopes, runs)
        if write:
            _write(tmp_dir, spec, points, result, keys)
            rundir.commit(tmp_dir, final_dir)
        return result
    except BaseException:
        rundir.discard(tmp_dir)
        raise
    finally:
        if bar is not None:
            bar.close()


def _write(directory: Path, spec: SweepSpec, points: list[SweepPoint], result: SweepResult, keys: list[str]):
    from .report import plot_cost_vs_eps, plot_sweep_curves

    cols = _columns(result.rows, keys)
    extra = sorted({k for r in result.rows for k in r} - set(cols))
    with open(directory / "sweep.csv", "w") as f:
        f.write(",".join(cols + extra) + "\n")
        for r in result.rows:
            f.write(",".join(_csv(r.get(c)) for c in cols + extra) + "\n")
    text = [f"# sweep {points[0].scenario.name}" + (f": {spec.title}" if spec.title else ""), "",
            markdown_table(result.rows, cols)]
    if result.slopes:
        scols = list(dict.fromkeys(k for s in result.slopes for k in s))
        text += ["", "## slope of communication against 1/eps (log-log least squares)", "",
                 markdown_table(result.slopes, scols)]
    tags = _tag_table(points, result.runs)
    if tags:
        text += ["", "## communication by message tag", "", tags]
    (directory / "sweep.md").write_text("\n".join(text) + "\n")
    (directory / "sweep.json").write_text(json.dumps(
        {"spec": spec.model_dump(), "slopes": result.slopes, "rows": result.rows}, indent=2, default=_plain))
    if "eps" in keys:
        plot_cost_vs_eps(result.rows, result.slopes, directory / "cost_vs_eps.png",
                         title=spec.title or points[0].scenario.name)
    plot_sweep_curves([(p, r.metrics, r.summary.get("comm_unit")) for p, r in zip(points, result.runs)],
                      directory / "curves.png", y=spec.plot, x=spec.x, title=spec.title or points[0].scenario.name)


def _csv(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return '"' + v.replace('"', '""') + '"' if ("," in v or '"' in v) else v
    return repr(v) if isinstance(v, float) else str(v)


def _plain(o: Any):
    if isinstance(o, np.generic):
        return o.item()
    return str(o)
