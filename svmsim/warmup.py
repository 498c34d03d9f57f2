"""Compile ahead of time what runs of an algorithm compile: ``svmsim warmup [ALGORITHM ...]``.

A first run compiles its numba functions: tens of seconds to minutes on a small machine, before and between its
first iterations. numba keeps what it compiled on disk (every svmsim kernel is ``cache=True``; the cache sits in
``__pycache__`` beside the sources, or under ``$NUMBA_CACHE_DIR``), and svmsim keeps its compiled loops
(`schedule.loop_cache`, under ``$SVMSIM_CACHE_DIR/loops``), so every later process loads them in a fraction of a
second. `warm_up` fills both caches ahead: for each named algorithm it runs the small conformance scenario
(`conformance.small_scenario`: the declared small parameters, and each declared variant, on the declared small data
and budget) through the runner, as ``svmsim run`` runs a scenario (the run directory written to a temporary folder,
then removed: the ledger and model writers compile too), and for an algorithm of synchronous rounds once more on the
compiled rounds (`SyncScheduler(compiled=True)`), which a long run switches to; a gossip run takes its compiled
event loop already.

What it cannot reach: specialisations for data of another kind than the small scenario's and code paths that only
other parameters take; those compile on their first run and are cached then. A run records what it compiled
(``compile_time`` in metrics.csv, ``timing`` in summary.json), and its ``wall_time`` leaves it out either way.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .algorithms.registry import algorithm_names, get_algorithm
from .core.compile_clock import Stopwatch
from .errors import ScenarioError

__all__ = ["WarmupResult", "check_names", "warm_up", "warm_up_algorithm"]


@dataclass
class WarmupResult:
    """What warming one algorithm took: ``seconds`` in all, ``compile_seconds`` of them in numba's compiler
    (``compile_new_seconds`` compiling afresh, the rest loading from the disk cache), over ``runs`` small runs;
    ``error``: why a small run failed (None when all ran)."""

    algorithm: str
    seconds: float
    compile_seconds: float
    compile_new_seconds: float
    runs: int
    error: str | None = None


def check_names(names: list[str] | tuple[str, ...]) -> list[str]:
    """The names to warm up (all registered algorithms when none is named); ScenarioError naming the allowed ones
    for a name that is not registered."""
    known = algorithm_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ScenarioError(f"warmup: {', '.join(map(repr, unknown))} "
                            f"{'is not a registered algorithm' if len(unknown) == 1 else 'are not registered algorithms'}"
                            f"; allowed: {', '.join(known)} (or an algorithm of your own, with --module MODULE)")
    return list(dict.fromkeys(names)) if names else known


def warm_up_algorithm(name: str, with_variants: bool = True) -> WarmupResult:
    """Run `name`'s small conformance scenario (and each declared variant) as a run does, and for synchronous
    rounds once more on the compiled rounds, so that numba's disk cache and svmsim's loop cache hold what a run of it
    compiles."""
    from .conformance import run_small, small_params, small_problem, small_scenario, variants
    from .runner import run

    info = get_algorithm(name)
    clock = Stopwatch()
    runs, error = 0, None
    try:
        for variant in [{}] + (variants(info) if with_variants else []):
            params = {**small_params(info), **variant}
            with tempfile.TemporaryDirectory(prefix="svmsim-warmup-") as tmp:
                run(small_scenario(info, params), out_dir=Path(tmp) / "run", progress=False)
            runs += 1
            if info.distributed and info.scheduler == "sync":
                run_small(info, small_problem(info), params=params, compiled=True)
                runs += 1
    except Exception as exc:  # noqa: BLE001 - reported with the algorithm; the others are warmed up still
        error = f"{type(exc).__name__}: {exc}"
    total, _ = clock.read()
    split = clock.compile_split()
    return WarmupResult(name, total, split["compile_seconds"], split["compile_new_seconds"], runs, error)


def warm_up(names: list[str] | tuple[str, ...] = (), *, with_variants: bool = True,
            on_start: Callable[[int, int, str], None] | None = None,
            on_result: Callable[[int, int, WarmupResult], None] | None = None) -> list[WarmupResult]:
    """Warm up the named algorithms (all registered ones when none is named), one after the other
    (`warm_up_algorithm`). `on_start(i, n, name)` and `on_result(i, n, result)` are called around each (a progress
    line). A small run that fails is recorded in its result (``error``) and the others go on: the small runs are those
    the conformance suite runs, so one that fails is a defect of the algorithm (``svmsim check NAME`` says more)."""
    todo = check_names(names)
    out = []
    for i, name in enumerate(todo, 1):
        if on_start is not None:
            on_start(i, len(todo), name)
        result = warm_up_algorithm(name, with_variants=with_variants)
        out.append(result)
        if on_result is not None:
            on_result(i, len(todo), result)
    return out
