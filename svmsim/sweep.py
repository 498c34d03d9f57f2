"""Sweeps: one scenario run over a grid of parameter values (and several algorithm variants), one table.

A sweep is a scenario file with an optional ``[sweep]`` table, plus ``--param`` lists on the command line::

    svmsim sweep scenarios/quickstart.toml --param eps=1e-1,1e-2,1e-3

    [sweep]
    plot = "margin"                 # the metric drawn against communication, one curve per run
    x = "comm_units"                # or scalars, wall_time, iteration
    figures = [{y = "test_accuracy", x = "wall_time"}]   # more curve figures: curves_<y>_vs_<x>.png
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

Without an eps grid, ``target`` gives the same cost columns for a fixed threshold on any metric
(``target_metric``, default ``rel_gap``; e.g. Push-Sum's consensus error): each row gets the scalars
(``cost_scalars``), metered messages (``cost_messages``), rounds (``cost_rounds``), virtual time
(``cost_virtual_time``, gossip runs) and wall time (``cost_wall_time``) at the first evaluation point whose metric
is <= the threshold (``reached`` says whether one was). Runs of peer algorithms (pushsum, gadget) also carry their
topology's facts in every row: ``spectral_gap`` of the gossip chain, ``inv_spectral_gap``, ``mixing_time``,
``diameter``, ``mean_degree`` (see `svmsim.algorithms.pushsum.gossip_topology_info`).

``targets = [1e-2, 1e-3, 1e-4]`` adds the cost columns ``cost_iteration``, ``cost_rounds``, ``cost_scalars``,
``cost_modelled_time`` (runs with a ``[network]`` table) and ``cost_wall_time`` at each of several thresholds of
``target_metric``, as ``cost_rounds@0.001`` and so on (paper 001's Tables 2-3: the cost to each accuracy);
``table_metrics = ["rel_dual", "rel_primal"]`` tabulates them for several metrics at once, the others than
``target_metric`` named ``cost_rounds@rel_primal<=0.001`` and so on.

Scaling against a column::

    [sweep]
    target = 1e-3                   # cost = first evaluation point with rel_gap <= 1e-3
    against = "inv_spectral_gap"    # x of a log-log plot (a row column or a grid key)
    against_y = ["cost_rounds", "cost_messages"]    # default: cost_rounds (else cost_scalars)
    against_by = "topology.kind"    # a grid key whose values get their own colour
    against_fit = "variant"         # one line per variant (default), or "by": one per colour as well
    exclude = [{"topology.kind" = "ring", "algorithm.nodes" = 1000}]   # grid points left out

draws ``scaling.png`` (one panel per y column: the points, a least-squares line per variant, a slope-1 guide) and
writes the slopes (log y against log x, with intercept, r^2 and the median ratio y/x) to ``sweep.md`` and
``sweep.json``. ``exclude`` drops grid points that match every key of one of its tables (``variant`` may be used).

Seeded trials::

    [sweep]
    trials = "seed"                 # a grid key whose values are repetitions
    [sweep.grid]
    seed = [0, 1, 2, 3, 4]

adds a table of mean +- std over the trials per variant and remaining grid point (``trials.csv``, a section of
``sweep.md``, ``SweepResult.trials``). For a metric that a run reports as a mean over nodes with a ``<metric>_std``
companion (GADGET's test accuracy, objective, ...), the spread is split into ``<metric>_std_nodes`` (root mean
square over trials of the std over nodes), ``<metric>_std_trials`` (std over trials of the node means) and
``<metric>_std`` = sqrt(std_nodes^2 + std_trials^2), the std over all (node, trial) pairs (notes-002: std =
sqrt(Var_nodes + Var_trials); population stds, so the split is exact). Other columns get ``<c>_mean`` and
``<c>_std`` over trials. ``trials_columns`` chooses the columns shown in sweep.md (accuracies in percent).

``warmup = true`` runs each variant's first point for one iteration before the sweep and discards it, so that
one-time compilation and cache loading do not inflate the first run's ``wall_time_total`` (its ``wall_time`` leaves
numba's compilation out in any case; ``svmsim warmup`` fills numba's disk cache ahead for every process).

Every point is validated before the first one runs, so a bad grid fails at once; the sweep directory is
written atomically like a run directory.

Where the points run: one after the other in this process (default), in ``jobs`` spawned worker processes, or as
Ray tasks (``ray=True``); the files are the same every way, in grid order (wall-time values aside), because the
table is made from each run as its run directory records it (`runner.recorded`). A point that fails is a row with
``status = failed`` and its ``error``; the others go on. An interrupt keeps the finished runs in the hidden working
directory; ``resume=True`` reads back every point whose run directory is a finished run of the same scenario
(`runner.read_run`) and runs the rest.
"""
from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import rundir
from .core import jsonio
from .config import (
    Scenario,
    apply_overrides,
    check_sweep_table,
    load_scenario,
    parse_override,
    read_toml,
)
from .config.sweep_table import (
    SHORT_NAMES,
    SweepSpec,
    Variant,
    check_param,
    describe_allowed,
)
from .errors import ScenarioError
from .sweep_tables import markdown_table, summary_table, table_columns, tag_table, trials_markdown
from .sweep_costs import (
    AGAINST_COLUMNS,
    COST_COLUMNS,
    FINAL_COLUMNS,
    INFO_COLUMNS,
    OPTIONAL_COST_COLUMNS,
    against_y,
    aggregate_trials,
    compare_to_first_variant,
    eps_slopes,
    fit_loglog,
    fit_slope,
    scaling_fits,
    sweep_row,
)

__all__ = [
    "COST_COLUMNS",
    "INFO_COLUMNS",
    "SHORT_NAMES",
    "SweepInterrupted",
    "SweepPoint",
    "SweepResult",
    "SweepSpec",
    "Variant",
    "aggregate_trials",
    "fit_loglog",
    "fit_slope",
    "parse_param",
    "plan_sweep",
    "run_sweep",
]


def parse_param(text: str) -> tuple[str, list[Any]]:
    """``"eps=1e-1,1e-2"`` -> ``("eps", [0.1, 0.01])``; every value is read as a TOML value."""
    if not isinstance(text, str) or "=" not in text:
        raise ScenarioError(f"--param {text!r} is invalid; allowed: NAME=V1,V2,... e.g. eps=1e-1,1e-2,1e-3")
    key, _, rest = text.partition("=")
    key = key.strip()
    items = [s.strip() for s in rest.split(",")] if rest.strip() else []
    if any(not s for s in items):
        raise ScenarioError(f"--param {text!r} has an empty value; allowed: NAME=V1,V2,... with no empty item")
    values = [parse_override(f"{key}={s}")[1] for s in items] if key else []
    if not key:
        raise ScenarioError(f"--param {text!r} has no name; allowed: {describe_allowed()}")
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
    scaling: list[dict] = field(default_factory=list)      # fits of against_y against `against`, per variant
    trials: list[dict] = field(default_factory=list)       # mean +- std over the `trials` grid key
    nodes: list = field(default_factory=list)               # per point: the Ray node it ran on (--ray), else None

    @property
    def failed(self) -> list[dict]:
        """The rows of the points that failed (``status = failed``, with the ``error``); `runs` has None for them."""
        return [r for r in self.rows if r.get("status") == "failed"]


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
        where, folder = "scenario", None
    else:
        where, folder = str(source), Path(source).parent
        raw = read_toml(Path(source), where)
    spec = check_sweep_table(raw.pop("sweep", {}), where)
    grid = dict(spec.grid)
    for key, values in params or []:
        grid[key] = values
    spec.grid = grid
    variants = spec.variants or [Variant(label=str((raw.get("algorithm") or {}).get("name", "run")))]
    labels = [v.label for v in variants]
    if len(set(labels)) != len(labels):
        raise ScenarioError(f"{where}: sweep.variants have repeated labels {labels}; allowed: distinct labels")
    _check_spec(spec, labels, where)
    keys = list(grid)
    points: list[SweepPoint] = []
    for variant in variants:
        base = _unset(raw, variant, where)
        if variant.algorithm is not None:
            base["algorithm"] = dict(variant.algorithm)
        base = apply_overrides(base, variant.set, where)
        for combo in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
            values = dict(zip(keys, combo))
            if _excluded(spec.exclude, variant.label, values):
                continue
            ov: dict[str, Any] = {}
            for k, v in values.items():
                ov.update(_grid_overrides(base.get("algorithm"), k, v))
            ov.update(overrides or {})
            slug = _slug(variant.label, values)
            try:
                scenario = load_scenario(apply_overrides(base, ov, where), base=folder)
            except ScenarioError as exc:
                at = ", ".join(f"{k}={v}" for k, v in values.items())
                raise ScenarioError(f"{where}: sweep point [{variant.label}{': ' + at if at else ''}]: {exc}") \
                    from None
            points.append(SweepPoint(variant.label, values, scenario, slug))
    if not points:
        raise ScenarioError(f"{where}: sweep.exclude leaves no point to run; allowed: exclude some points, not all")
    return spec, points


def _unset(raw: dict, variant: Variant, where: str) -> dict:
    """A copy of the raw scenario without the variant's `unset` keys (dotted; a table goes whole)."""
    import copy

    out = copy.deepcopy(raw)
    for dotted in variant.unset:
        parts = dotted.split(".")
        node = out
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or parts[-1] not in node or dotted in ("name", "data", "algorithm"):
            raise ScenarioError(f"{where}: sweep variant {variant.label!r}: unset names {dotted!r}, which "
                                + ("a scenario cannot do without" if dotted in ("name", "data", "algorithm") else
                                   "the scenario does not set") + "; allowed: keys or tables the file sets, such as "
                                "topology or schedule.eval_time")
        del node[parts[-1]]
    return out


def _same(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _excluded(exclude: list[dict[str, Any]], label: str, values: dict[str, Any]) -> bool:
    """Whether a point matches every key of one of the `exclude` tables."""
    here = {"variant": label, **values}
    return any(all(k in here and _same(here[k], v) for k, v in entry.items()) for entry in exclude)


def _check_spec(spec: SweepSpec, labels: list[str], where: str) -> None:
    """Cross-checks of the [sweep] keys against the (merged) grid; a ScenarioError names the key and what is
    allowed."""
    keys = list(spec.grid)
    if spec.target is not None and "eps" in keys:
        raise ScenarioError(f"{where}: sweep.target = {spec.target!r} and an eps grid both set the cost threshold; "
                            "allowed: one of them (eps sets the algorithm's eps and stop.gap too)")
    has_cost = spec.target is not None or "eps" in keys
    if spec.target_metric != "rel_gap" and not (has_cost or spec.targets):
        raise ScenarioError(f"{where}: sweep.target_metric = {spec.target_metric!r} needs a threshold; allowed: set "
                            "sweep.target, or an eps grid")
    if spec.table_metrics and not spec.targets:
        raise ScenarioError(f"{where}: sweep.table_metrics = {spec.table_metrics} needs thresholds; allowed: set "
                            "sweep.targets, e.g. [1e-2, 1e-3, 1e-4]")
    if spec.against is not None:
        allowed_x = keys + list(AGAINST_COLUMNS)
        if spec.against not in allowed_x and spec.against not in FINAL_COLUMNS:
            raise ScenarioError(f"{where}: sweep.against = {spec.against!r} is not a column; allowed: a grid key "
                                f"({', '.join(keys) or 'none'}) or one of {', '.join(AGAINST_COLUMNS)}")
        for y in spec.against_y:
            if (y in COST_COLUMNS or y in OPTIONAL_COST_COLUMNS) and not has_cost:
                raise ScenarioError(f"{where}: sweep.against_y names {y!r}, which needs a threshold; allowed: set "
                                    "sweep.target (or an eps grid)")
        if spec.against_by is not None and spec.against_by not in keys + ["variant"]:
            raise ScenarioError(f"{where}: sweep.against_by = {spec.against_by!r} is not a grid key; allowed: "
                                f"{', '.join(keys + ['variant'])}")
    elif spec.against_y or spec.against_by:
        raise ScenarioError(f"{where}: sweep.against_y/against_by are given without sweep.against; allowed: set "
                            "against (the x column of the scaling plot)")
    for i, entry in enumerate(spec.exclude):
        if not entry:
            raise ScenarioError(f"{where}: sweep.exclude[{i}] is empty; allowed: a table of grid keys and values")
        for k, v in entry.items():
            if k == "variant":
                if v not in labels:
                    raise ScenarioError(f"{where}: sweep.exclude[{i}]: variant = {v!r} is not a variant; allowed: "
                                        f"{', '.join(map(repr, labels))}")
            elif k not in keys:
                raise ScenarioError(f"{where}: sweep.exclude[{i}]: {k!r} is not a grid key; allowed: "
                                    f"{', '.join(keys + ['variant'])}")
            elif not any(_same(v, g) for g in spec.grid[k]):
                raise ScenarioError(f"{where}: sweep.exclude[{i}]: {k} = {v!r} is not one of the grid's values "
                                    f"{spec.grid[k]}")
    if spec.trials is not None and spec.trials not in keys:
        raise ScenarioError(f"{where}: sweep.trials = {spec.trials!r} is not a grid key; allowed: "
                            f"{', '.join(keys) or 'none (add e.g. seed = [0, 1, 2] to [sweep.grid])'}")


def _sweep_dir(name: str, out: str | Path | None, base_dir: str, overwrite: bool, resume: bool) -> tuple[Path, Path]:
    if resume:
        if out is None:
            raise ScenarioError("--resume needs the sweep directory to continue; allowed: --resume with --out DIR, "
                                "the directory the interrupted sweep was writing")
        return Path(out), rundir.resume(Path(out))
    final = Path(out) if out is not None else Path(base_dir) / f"sweep-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    return final, rundir.begin(final, overwrite, "sweep directory",
                               "allowed: svmsim sweep --overwrite to replace it, --resume to continue it (its "
                               "finished runs are kept), --out DIR for another directory, or remove it")


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by an interrupt (Ctrl-C); `directory` is the hidden working directory that keeps the points
    finished so far (None when nothing was kept), `final` the sweep directory ``--resume --out`` continues."""

    def __init__(self, directory: Path | None, final: Path | None, done: int, total: int):
        super().__init__(f"sweep interrupted after {done} of {total} points")
        self.directory, self.final, self.done, self.total = directory, final, done, total


@dataclass
class _Outcome:
    """What one point gave: its run as returned (fresh) or read back (resumed), the same run as its directory records
    it (`runner.recorded`: what the table, slopes and figures are made from, whichever way the point got here), the
    scalars per message tag, or the error that stopped it."""

    result: Any = None
    record: Any = None
    tags: tuple | None = None             # (total scalars, [(tag, scalars), ...]) from the ledger
    error: str | None = None
    resumed: bool = False
    node: str | None = None               # the Ray node of a --ray point


def _ledger_tags(ledger) -> tuple | None:
    if ledger is None or not ledger.by_tag:
        return None
    return int(ledger.totals["scalars"]), [(tag, int(v[1])) for tag, v in ledger.by_tag.items()]


def _run_point(scenario: Scenario, variant: str, run_dir: Path | None, warmup: bool, warmed: set) -> _Outcome:
    """Run one point (in this process or a worker's): its result, or the error that stopped it (an interrupt is
    not an error: it goes up)."""
    from .errors import SvmsimError
    from .runner import run

    try:
        if warmup and variant not in warmed:
            warmed.add(variant)
            _warm_up(scenario, run)
        res = run(scenario, out_dir=run_dir, write=run_dir is not None, progress=False, track=False)
    except Exception as exc:  # noqa: BLE001 - one point's failure is that point's result; the others go on
        return _Outcome(error=str(exc) if isinstance(exc, SvmsimError) else f"{type(exc).__name__}: {exc}")
    return _Outcome(result=res, tags=_ledger_tags(res.ledger))


def _resumed(point: SweepPoint, run_dir: Path) -> _Outcome | None:
    """The outcome of a point whose run directory is finished and was written for the point's scenario (None
    otherwise; a directory that is there but not such a run is removed, so that the point runs again)."""
    from .runner import read_run

    if not run_dir.exists():
        return None
    try:
        res = read_run(run_dir, point.scenario)
        tags = None
        if (run_dir / "ledger.json").is_file():
            ledger = json.loads((run_dir / "ledger.json").read_text())
            if ledger.get("by_tag"):
                tags = (int(ledger["totals"]["scalars"]),
                        [(tag, int(v["scalars"])) for tag, v in ledger["by_tag"].items()])
    except (ValueError, OSError, KeyError):
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
        return None
    return _Outcome(result=res, record=res, tags=tags, resumed=True)


def _keep_only_runs(directory: Path, slugs: set[str]) -> None:
    """Clear a sweep directory being resumed of all but the run directories of this sweep's points (tables and
    figures are written again; runs of points no longer in the grid, and unfinished or failed runs, go)."""
    import shutil

    for entry in directory.iterdir():
        if entry.name != "runs":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for entry in (directory / "runs").iterdir() if (directory / "runs").is_dir() else []:
        if entry.name not in slugs or not entry.is_dir():
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


_WARMED: set = set()                  # variants warmed up in this process (a worker's: `warmup = true`)


def _init_worker(events, blas_threads: int) -> None:
    """A worker process of `run_sweep(jobs=N)`: an interrupt reaches it only while it runs a point (the sweep
    forwards its own), so that an idle worker waits for the sweep to end it. Its BLAS uses `blas_threads` threads
    (the machine's cores shared among the workers: N workers each with a thread per core were slower together
    than one point after another)."""
    import signal

    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=blas_threads)
    global _EVENTS
    _EVENTS = events
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    events.put(("worker", os.getpid(), None))


_EVENTS = None


def _worker_point(index: int, scenario: Scenario, variant: str, run_dir: Path | None, warmup: bool) -> _Outcome:
    import signal

    _EVENTS.put(("start", os.getpid(), (index, time.time())))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _run_point(scenario, variant, run_dir, warmup, _WARMED)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _EVENTS.put(("end", os.getpid(), (index, time.time())))


class _Display:
    """The sweep's progress: points done of all (resumed ones count as done from the start), failures, and which
    running point has been running longest, with its time so far."""

    def __init__(self, enabled: bool, points: list[SweepPoint], done: int):
        self.points = points
        self.bar = None
        self.failed = 0
        self.text = ""
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(points), initial=done, desc="sweep", unit="run", dynamic_ncols=True)

    def show(self, running: dict[int, float]) -> None:
        """`running`: index of each running point -> when it started (time.time()), or None for the one point this
        process is running (the display is not refreshed while it runs, so it shows no time)."""
        if self.bar is None:
            return
        parts = []
        if running:
            if len(running) == 1 and None in running.values():     # this process runs it: nothing refreshes
                parts.append(f"running {self.points[next(iter(running))].slug}")
            else:
                index, since = min(running.items(), key=lambda kv: (kv[1], kv[0]))
                parts.append(f"{len(running)} running, longest: {self.points[index].slug} "
                             f"({time.time() - since:.0f} s)")
        if self.failed:
            parts.append(f"{self.failed} failed")
        text = "; ".join(parts)
        if text != self.text:
            self.text = text
            self.bar.set_postfix_str(text, refresh=True)

    def finished(self, outcome: _Outcome) -> None:
        self.failed += outcome.error is not None
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_sweep(source: str | Path | dict, params: list[tuple[str, list]] | None = None,
              overrides: dict[str, Any] | None = None, out: str | Path | None = None, write: bool = True,
              overwrite: bool = False, progress: bool = True, keep_runs: bool = True, jobs: int = 1,
              resume: bool = False, ray: bool = False, address: str | None = None) -> SweepResult:
    """Run every point of a sweep and write ``sweep.csv``, ``sweep.md``, ``slopes.json`` and the figures.

    jobs: points run in this many worker processes at once (1: one after the other, in this process); the files are
    the same either way, in grid order. A point that fails is a row with ``status = failed`` and its ``error``; the
    others go on (`SweepResult.failed`). resume: continue the sweep directory `out` (an interrupted sweep's, or a
    finished one's): points whose run directories are finished runs of the same scenario are read back, not run
    again. An interrupt keeps the finished points for ``resume`` and raises `SweepInterrupted`.
    ray: run each point as a Ray task (`_point_cpus` CPUs) on a private local Ray, or on the cluster at `address`
    (started or joined here, and let go at the end, unless Ray is initialised in this process already); the run
    directories are written here, from the runs the tasks return, so the files are those of a sweep run here."""
    spec, points = plan_sweep(source, params, overrides)
    keys = list(spec.grid)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ScenarioError(f"jobs = {jobs!r} is invalid; allowed: an integer >= 1 (worker processes)")
    if jobs > 1:
        ray_points = [p.slug for p in points if p.scenario.engine.is_ray]
        if ray_points:
            raise ScenarioError(f"sweep point {ray_points[0]} runs on a Ray engine, which --jobs would start once per "
                                "worker process; allowed: --jobs 1 (a Ray run's actors are parallel already) or "
                                "engine inproc")
    if ray and jobs != 1:
        raise ScenarioError(f"--ray and --jobs {jobs} both say where the points run; allowed: one of them (Ray runs "
                            "as many points at once as the cluster has CPUs)")
    if address is not None and not ray:
        raise ScenarioError(f"--address {address!r} names a Ray cluster for the points; allowed: --address with "
                            "--ray")
    if resume and not (write and keep_runs):
        raise ScenarioError("--resume reads the finished points from their run directories; allowed: --resume "
                            "without --no-runs")
    final_dir = tmp_dir = None
    first = points[0].scenario
    tracker = None
    if first.output.tracking != "none":     # the tracker is reached before any work (a parent run, a child a point)
        from .tracking import tracker_for

        tracker = tracker_for(first.output, first.name)
    if write:
        final_dir, tmp_dir = _sweep_dir(first.name, out, first.output.dir, overwrite, resume)
    run_dirs = [(tmp_dir / "runs" / p.slug) if (write and keep_runs) else None for p in points]
    outcomes: list[_Outcome | None] = [None] * len(points)
    if resume:
        _keep_only_runs(tmp_dir, {p.slug for p in points})
        for i, p in enumerate(points):
            outcomes[i] = _resumed(p, run_dirs[i])
    display = _Display(progress, points, sum(o is not None for o in outcomes))
    todo = [i for i, o in enumerate(outcomes) if o is None]
    try:
        if ray and todo:
            _run_on_ray(points, todo, run_dirs, spec.warmup, address, outcomes, display)
        elif jobs == 1 or len(todo) <= 1:
            warmed: set = set()
            for i in todo:
                display.show({i: None})
                outcomes[i] = _run_point(points[i].scenario, points[i].variant, run_dirs[i], spec.warmup, warmed)
                display.finished(outcomes[i])
        else:
            _run_in_workers(points, todo, run_dirs, spec.warmup, min(jobs, len(todo)), outcomes, display)
    except BaseException as exc:
        display.close()
        _give_up(exc, tmp_dir, final_dir, keep_runs, resume, outcomes)
        raise
    display.close()
    try:
        result = _collect(spec, points, outcomes, keys, final_dir, tmp_dir)
        if write:
            _write(tmp_dir, spec, points, result, keys, outcomes)
            rundir.commit(tmp_dir, final_dir)
            for p, o in zip(points, outcomes):      # the runs were written inside the working directory
                if o.result is not None and o.result.run_dir is not None:
                    o.result.run_dir = final_dir / "runs" / p.slug
    except BaseException as exc:
        _give_up(exc, tmp_dir, final_dir, keep_runs, resume, outcomes)
        raise
    if tracker is not None:
        from .tracking import TrackingError, finished_anyway

        try:
            tracker.log_sweep(first.name, spec.grid, [(p.slug, p.scenario, o.result, o.error)
                                                      for p, o in zip(points, outcomes)], final_dir)
        except TrackingError as exc:
            raise finished_anyway(exc, "sweep", final_dir) from None
    return result


def _give_up(exc: BaseException, tmp_dir: Path | None, final_dir: Path | None, keep_runs: bool, resume: bool,
             outcomes: list) -> None:
    """After an interrupt or an error: keep the working directory when it holds finished runs and the sweep was
    interrupted or resumed (``--resume`` continues it; a resumed directory may be a finished sweep's, not to be
    lost), else remove it. An interrupt goes on as `SweepInterrupted`."""
    runs = tmp_dir / "runs" if tmp_dir is not None else None
    keep = keep_runs and runs is not None and runs.is_dir() and any(runs.iterdir())
    interrupted = isinstance(exc, KeyboardInterrupt) and not isinstance(exc, SweepInterrupted)
    if not (keep and (interrupted or resume)):
        rundir.discard(tmp_dir)
    if interrupted:
        done = sum(o is not None for o in outcomes)
        raise SweepInterrupted(tmp_dir if keep else None, final_dir, done, len(outcomes)) from None


def _run_in_workers(points: list[SweepPoint], todo: list[int], run_dirs: list, warmup: bool, jobs: int,
                    outcomes: list, display: _Display) -> None:
    """Run the points `todo` in `jobs` spawned worker processes (not forked: a process with numba's or Ray's state
    is not copied), filling `outcomes` as they finish in any order. On an interrupt the points not started are
    cancelled, the running ones interrupted (their runs leave nothing that looks finished), the workers ended."""
    import multiprocessing
    import signal
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = multiprocessing.get_context("spawn")
    events = ctx.SimpleQueue()
    pids: set[int] = set()
    running: dict[int, float] = {}          # points a worker said it started and has not said it ended
    ended: set[int] = set()

    def drain() -> None:
        while not events.empty():
            kind, pid, what = events.get()
            pids.add(pid)
            if kind == "start" and what[0] not in ended:
                running[what[0]] = what[1]
            elif kind == "end":
                ended.add(what[0])
                running.pop(what[0], None)

    blas_threads = max(1, (os.cpu_count() or 1) // jobs)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                               initargs=(events, blas_threads))
    try:
        pending = {pool.submit(_worker_point, i, points[i].scenario, points[i].variant, run_dirs[i], warmup): i
                   for i in todo}
        while pending:
            done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            drain()
            for f in done:
                i = pending.pop(f)
                outcomes[i] = f.result()          # an interrupt a worker got while running comes up here
                ended.add(i)
                running.pop(i, None)
                display.finished(outcomes[i])
            display.show(running)
    except BaseException:
        for f in pending:
            f.cancel()
        drain()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        pool.shutdown(wait=True, cancel_futures=True)
        for f, i in pending.items():            # points that finished while the others were being stopped
            if f.done() and not f.cancelled() and f.exception() is None:
                outcomes[i] = f.result()
        raise
    pool.shutdown(wait=True)


def _point_cpus(scenario: Scenario) -> int:
    """The CPUs a point's Ray task asks for: one (an in-process run is one thread; a Ray engine's host actors ask
    for none of their own)."""
    return 1


def _ray_point(index: int, scenario: Scenario, variant: str, warmup: bool, events) -> _Outcome:
    """One point as a Ray task: the run, not written (the sweep writes its directory), or the error."""
    import ray

    events.put(("start", index, time.time()))
    try:
        outcome = _run_point(scenario, variant, None, warmup, _WARMED)
        outcome.node = ray.get_runtime_context().get_node_id()
        return outcome
    finally:
        events.put(("end", index, time.time()))


def _run_on_ray(points: list[SweepPoint], todo: list[int], run_dirs: list, warmup: bool, address: str | None,
                outcomes: list, display: _Display) -> None:
    """Run the points `todo` as Ray tasks, writing each finished run's directory here; on an interrupt the tasks
    left are cancelled. Ray is started (or `address` joined) and let go here unless it was initialised already."""
    import ray as ray_module
    from ray.util.queue import Queue

    from .engine.ray_actors import ensure_ray
    from .runner import write_run

    started = ensure_ray(address, {})
    refs: dict = {}
    try:
        events = Queue()
        task = ray_module.remote(_ray_point)
        # SPREAD: the points go to every node of a cluster in turn, not first to fill the node of the driver
        refs = {task.options(num_cpus=_point_cpus(points[i].scenario), scheduling_strategy="SPREAD").remote(
            i, points[i].scenario, points[i].variant, warmup, events): i for i in todo}
        running: dict[int, float] = {}
        ended: set[int] = set()
        while refs:
            ready, _ = ray_module.wait(list(refs), num_returns=1, timeout=0.5)
            n = events.qsize()
            for kind, i, when in events.get_nowait_batch(n) if n else []:
                if kind == "start" and i not in ended:
                    running[i] = when
                elif kind == "end":
                    ended.add(i)
                    running.pop(i, None)
            for ref in ready:
                i = refs.pop(ref)
                try:
                    outcome = ray_module.get(ref)
                except ray_module.exceptions.TaskCancelledError:
                    raise KeyboardInterrupt from None
                except Exception as exc:  # noqa: BLE001 - the task's worker died, say: that point failed
                    outcome = _Outcome(error=f"{type(exc).__name__}: {exc}")
                if outcome.error is None:
                    outcome.tags = _ledger_tags(outcome.result.ledger)
                    if run_dirs[i] is not None:
                        write_run(outcome.result, run_dirs[i])
                outcomes[i] = outcome
                ended.add(i)
                running.pop(i, None)
                display.finished(outcome)
            display.show(running)
    except BaseException:
        for ref in refs:
            ray_module.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray_module.shutdown()


def _collect(spec: SweepSpec, points: list[SweepPoint], outcomes: list[_Outcome], keys: list[str],
             final_dir: Path | None, tmp_dir: Path | None) -> SweepResult:
    """The sweep's rows, slopes, fits and trials, in grid order, from the points' recorded runs; a failed point is a
    row with its error (and the others' rows say ``status = ok`` then)."""
    from .runner import recorded

    failed = any(o.error is not None for o in outcomes)
    rows = []
    for p, o in zip(points, outcomes):
        if o.error is None:
            if o.record is None:
                o.record = recorded(o.result)
            row = sweep_row(p, o.record, spec)
            if failed:
                row["status"] = "ok"
        else:
            error = o.error.replace(str(tmp_dir), str(final_dir)) if tmp_dir is not None else o.error
            row = {"variant": p.variant, **p.values, "algorithm": p.scenario.algorithm.name, "status": "failed",
                   "error": error}
        rows.append(row)
    ok = [r for r, o in zip(rows, outcomes) if o.error is None]
    compare_to_first_variant(ok, keys)
    slopes = eps_slopes(ok, keys)
    return SweepResult(final_dir, rows, slopes, [o.result for o in outcomes], scaling=scaling_fits(spec, ok),
                       trials=aggregate_trials(ok, keys, spec.trials) if spec.trials else [],
                       nodes=[o.node for o in outcomes])


def _warm_up(scenario: Scenario, run) -> None:
    """``warmup = true``: before a process runs a variant's first point, run that point for one iteration (one round
    of virtual time for gossip) and discard it, so that one-time compilation (numba's event loop is compiled once per
    process) is not counted in the wall time of the recorded run."""
    short = load_scenario(scenario.to_dict(), overrides={"stop.max_iterations": 1})
    run(short, write=False, progress=False, track=False)


def _write(directory: Path, spec: SweepSpec, points: list[SweepPoint], result: SweepResult, keys: list[str],
           outcomes: list[_Outcome]):
    from .report import plot_cost_vs_eps, plot_scaling, plot_sweep_curves

    ok = [i for i, o in enumerate(outcomes) if o.error is None]
    ok_rows = [result.rows[i] for i in ok]
    cols = table_columns(result.rows, keys)
    extra = sorted({k for r in result.rows for k in r} - set(cols))
    with open(directory / "sweep.csv", "w") as f:
        f.write(",".join(cols + extra) + "\n")
        f.writelines(",".join(_csv(r.get(c)) for c in cols + extra) + "\n" for r in result.rows)
    text = [f"# sweep {points[0].scenario.name}" + (f": {spec.title}" if spec.title else ""), ""]
    if len(ok) < len(points):
        text += [f"{len(points) - len(ok)} of {len(points)} points failed: their rows have status = failed and the "
                 "error; the slopes, fits and figures are made from the others.", ""]
    text += [markdown_table(result.rows, cols)]
    if result.slopes:
        scols = list(dict.fromkeys(k for s in result.slopes for k in s))
        text += ["", "## slope of communication against 1/eps (log-log least squares)", "",
                 markdown_table(result.slopes, scols)]
        few = [s["variant"] for s in result.slopes if s.get("points", 0) == 2]
        if few:
            text += ["", (f"Fitted from two points only ({', '.join(map(str, dict.fromkeys(few)))}): a line through "
                          "two points has no residual, so such a slope is a ratio, not evidence of a power law; add "
                          "eps values to test one.")]
    if result.scaling:
        what = ""
        if spec.target is not None or "eps" in keys:
            what = (f"; cost columns at the first evaluation with {spec.target_metric} <= "
                    + (f"{spec.target:g}" if spec.target is not None else "eps"))
        text += ["", (f"## scaling against {spec.against} (log-log least squares: y ~ exp(intercept) x^slope"
                 f"{what})"), "",
                 markdown_table(result.scaling, ["variant"] + ([spec.against_by] if spec.against_fit == "by" and
                                                                spec.against_by not in (None, "variant") else [])
                                + ["y", "x", "slope", "intercept", "r2", "points", "not_reached",
                                   "median_y_over_x"])]
    if result.trials:
        n = max(t["trials"] for t in result.trials)
        text += ["", (f"## mean ± std over {spec.trials} ({n} trials; std over nodes and trials where the run "
                 "reports a std over nodes)"), "",
                 trials_markdown(result.trials, keys, spec.trials, spec.trials_columns)]
        tcols = list(dict.fromkeys(k for t in result.trials for k in t))
        with open(directory / "trials.csv", "w") as f:
            f.write(",".join(tcols) + "\n")
            f.writelines(",".join(_csv(t.get(c)) if not isinstance(t.get(c), list) else
                                 _csv(" ".join(map(str, t[c]))) for c in tcols) + "\n" for t in result.trials)
    tags = tag_table(points, [o.tags for o in outcomes])
    if tags:
        text += ["", "## communication by message tag", "", tags]
    (directory / "sweep.md").write_text("\n".join(text) + "\n")
    (directory / "summary.txt").write_text(summary_table(result.rows, keys) + "\n")
    (directory / "sweep.json").write_text(jsonio.dumps(
        {"spec": spec.model_dump(), "slopes": result.slopes, "scaling": result.scaling, "trials": result.trials,
         "rows": result.rows}, default=_plain))
    if not ok:
        return
    # a run whose certificates do not hold (compressed messages) makes the sweep's labels drop "certified"
    certified = all(outcomes[i].record.summary.get("certified", True) for i in ok)
    if "eps" in keys:
        plot_cost_vs_eps(ok_rows, result.slopes, directory / "cost_vs_eps.png",
                         title=spec.title or points[0].scenario.name, group_keys=[k for k in keys if k != "eps"],
                         metric=spec.target_metric, certified=certified)
    if result.scaling:
        plot_scaling(ok_rows, result.scaling, directory / "scaling.png", x=spec.against,
                     ys=against_y(spec, ok_rows), by=spec.against_by,
                     title=spec.title or points[0].scenario.name)
    runs = [(points[i], outcomes[i].record.metrics, outcomes[i].record.summary.get("comm_unit")) for i in ok]
    plot_sweep_curves(runs, directory / "curves.png", y=spec.plot, x=spec.x, title=spec.title or points[0].scenario.name,
                      trials=spec.trials, certified=certified)
    for fig in spec.figures:
        plot_sweep_curves(runs, directory / f"curves_{fig.y}_vs_{fig.x}.png", y=fig.y, x=fig.x,
                          title=spec.title or points[0].scenario.name, trials=spec.trials, certified=certified)


def _csv(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return '"' + v.replace('"', '""') + '"' if ("," in v or '"' in v) else v
    if isinstance(v, np.generic):
        v = v.item()
    return repr(v) if isinstance(v, float) else str(v)


def _plain(o: Any):
    if isinstance(o, np.generic):
        return o.item()
    return str(o)
