"""`[stop] max_seconds` bounds the whole run: set-up (the reference optimum above all) spends it too, a reference
solver that would run past it gives up naming the budget (and is neither cached nor used as a target), and the
run then stops on the time budget at its first evaluation."""
from __future__ import annotations

import time
import warnings

import pytest

import svmsim
from svmsim.core import deadline


def test_a_long_reference_solve_stops_at_the_runs_time_budget(monkeypatch, tmp_path):
    monkeypatch.setenv("SVMSIM_CACHE_DIR", str(tmp_path))          # nothing kept from another run
    budget = 3.0
    sc = {"name": "t", "seed": 11, "data": {"name": "synthetic", "kind": "nonseparable", "n": 30000, "d": 30},
          "algorithm": {"name": "pegasos", "lam": 1e-7}, "stop": {"max_seconds": budget},
          "output": {"plots": False}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = svmsim.run(sc, write=False, progress=False)
    said = [str(w.message) for w in caught if "reference optimum" in str(w.message)]
    assert said and "max_seconds" in said[0] and "not certified" in said[0]
    assert r.summary["timing"]["setup_seconds"] < budget + 1.0     # the solve gave up at the budget (it needs minutes)
    assert r.stop_reason == "time budget"
    assert r.final["rel_primal"] != r.final["rel_primal"]           # NaN: an uncertified reference is no target
    assert not list(tmp_path.glob("references/*.npz"))


def test_the_budget_is_open_only_during_a_run():
    assert not deadline.is_open() and not deadline.expired()
    token = deadline.open_budget(0.05)
    try:
        assert deadline.is_open() and 0 < deadline.remaining() <= 0.05
        time.sleep(0.06)
        assert deadline.expired()
    finally:
        deadline.close_budget(token)
    assert not deadline.is_open()
    token = deadline.open_budget(None)
    try:
        assert not deadline.is_open() and deadline.remaining() == pytest.approx(float("inf"))
    finally:
        deadline.close_budget(token)
