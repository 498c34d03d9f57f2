"""Wall time without compilation: numba's compiler time is measured as it happens (`svmsim.core.compile_clock`,
through numba's event API) and left out of every row's ``wall_time``; ``wall_time_total`` keeps it and
``compile_time`` says how much it was; summary.json splits the run's seconds (``timing``)."""
from __future__ import annotations

import threading
import time

import numba
import pytest
from numba.core import event

import svmsim
from svmsim import runner
from svmsim.algorithms.registry import RUN_METRICS
from svmsim.core import compile_clock
from svmsim.core.metrics import WALL_CLOCK_METRICS, is_registered

SYNC = {"name": "ct-sync", "seed": 2, "data": {"name": "iris"}, "topology": {"kind": "star"},
        "algorithm": {"name": "saddle-dsvc", "clients": 3, "eps": 0.1},
        "stop": {"max_iterations": 40}, "output": {"eval_every": 10, "progress": False, "plots": False}}
GOSSIP = {"name": "ct-gossip", "seed": 2, "data": {"name": "iris", "test": "none"},
          "topology": {"kind": "random_k_out"}, "algorithm": {"name": "pushsum", "nodes": 12},
          "schedule": {"kind": "gossip"}, "stop": {"max_rounds": 8}, "output": {"progress": False, "plots": False}}
SINGLE = {"name": "ct-single", "seed": 2, "data": {"name": "iris"}, "algorithm": {"name": "pegasos", "lam": 0.01},
          "stop": {"max_iterations": 300}, "output": {"eval_every": 100, "progress": False, "plots": False}}


def _fake_compile(seconds: float) -> None:
    """What numba announces while it compiles a function afresh that calls another it compiles too: the compiler
    lock taken (and taken again by the same thread), a compilation inside."""
    with event.trigger_event("numba:compiler_lock"):
        with event.trigger_event("numba:compile"):
            with event.trigger_event("numba:compiler_lock"):
                with event.trigger_event("numba:compile"):
                    time.sleep(seconds)


def _real_compile(_seconds: float) -> None:
    """A function no cache holds, compiled here."""
    fresh = numba.njit(lambda x: x * 2.0 + 1.0)
    assert fresh(1.0) == 3.0


def test_the_clock_counts_nested_spans_once_and_per_thread():
    assert compile_clock.install() and compile_clock.install()        # once per process; the second does nothing
    lock, new = compile_clock.seconds(), compile_clock.seconds("new")
    _fake_compile(0.2)
    d_lock, d_new = compile_clock.seconds() - lock, compile_clock.seconds("new") - new
    assert 0.2 <= d_new <= d_lock < 0.4, (d_lock, d_new)                  # nested spans counted once, not twice
    # two threads compiling at once each count their own span (numba's lock serialises real compilations)
    lock = compile_clock.seconds()
    threads = [threading.Thread(target=_fake_compile, args=(0.15,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 0.3 <= compile_clock.seconds() - lock < 0.6


def test_a_real_compilation_is_measured_and_left_out_of_the_stopwatchs_wall_time():
    clock = compile_clock.Stopwatch()
    _real_compile(0)
    times, split = clock.times(), clock.compile_split()
    assert times["compile_time"] > 0 and split["compile_new_seconds"] > 0
    assert split["compile_new_seconds"] <= split["compile_seconds"] == times["compile_time"]
    assert times["wall_time"] == pytest.approx(times["wall_time_total"] - times["compile_time"], abs=1e-12)
    assert 0 <= times["wall_time"] < times["wall_time_total"]


def test_the_timing_columns_are_registered_metrics_of_every_run():
    for name in WALL_CLOCK_METRICS:
        assert is_registered(name) and name in RUN_METRICS and name in runner.METRIC_COLUMNS


@pytest.mark.parametrize("compile_", [_fake_compile, _real_compile], ids=["announced", "real"])
@pytest.mark.parametrize("scenario", [SYNC, GOSSIP], ids=["sync", "gossip"])
def test_compilation_during_a_run_is_left_out_of_its_wall_time(monkeypatch, scenario, compile_):
    """A compilation between two evaluation points (here: while the second one reads the nodes) shows in
    compile_time from then on and not in wall_time; wall_time_total = wall_time + compile_time in every row."""
    seconds = 0.3
    calls = []
    observe = runner.observations_by_role

    def observing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            compile_(seconds)
        return observe(*args, **kwargs)

    monkeypatch.setattr(runner, "observations_by_role", observing)
    res = svmsim.run(scenario, write=False)
    rows = res.metrics
    assert len(rows) >= 3 and len(calls) >= 2
    for r in rows:
        assert set(WALL_CLOCK_METRICS) <= set(r)
        assert r["wall_time"] == pytest.approx(r["wall_time_total"] - r["compile_time"], abs=1e-9)
        assert 0 <= r["wall_time"] <= r["wall_time_total"]
    assert [r["compile_time"] for r in rows] == sorted(r["compile_time"] for r in rows)
    grew = rows[-1]["compile_time"] - rows[0]["compile_time"]
    assert grew > 0 and rows[-1]["wall_time"] < rows[-1]["wall_time_total"]
    if compile_ is _fake_compile:
        assert seconds <= grew < seconds + 0.2
    timing = res.summary["timing"]
    assert timing["run_compile_seconds"] >= grew and timing["compile_new_seconds"] > 0
    assert timing["compile_seconds"] >= timing["run_compile_seconds"]
    assert timing["seconds"] == pytest.approx(timing["setup_seconds"] + timing["run_seconds"]
                                              + timing["compile_seconds"], rel=1e-9)
    assert res.summary["wall_time"] == timing["run_seconds"]


def test_a_single_machine_run_has_the_timing_columns_too():
    res = svmsim.run(SINGLE, write=False)
    for r in res.metrics:
        assert r["wall_time"] == pytest.approx(r["wall_time_total"] - r["compile_time"], abs=1e-9)
    assert {"seconds", "setup_seconds", "run_seconds", "compile_seconds", "compile_new_seconds",
            "run_compile_seconds"} == set(res.summary["timing"])


@pytest.mark.parametrize("scenario", [SYNC, GOSSIP], ids=["sync", "gossip"])
def test_the_same_seed_gives_the_same_rows_whatever_was_compiled(monkeypatch, scenario):
    """The first run compiles (announced), the second does not: every column but the wall-clock ones is the same,
    bit for bit."""
    observe = runner.observations_by_role
    first = []

    def observing(*args, **kwargs):
        if not first:
            first.append(1)
            _fake_compile(0.1)
        return observe(*args, **kwargs)

    monkeypatch.setattr(runner, "observations_by_role", observing)
    a = svmsim.run(scenario, write=False)
    monkeypatch.setattr(runner, "observations_by_role", observe)
    b = svmsim.run(scenario, write=False)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in WALL_CLOCK_METRICS} for r in rows]
    assert strip(a.metrics) == strip(b.metrics)
    assert a.ledger.equals(b.ledger)
    assert a.final["compile_time"] >= 0.1 > b.final["compile_time"]
