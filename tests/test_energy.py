"""Energy per message, one derived quantity of the registry: ``[network] energy_per_message`` and
``energy_per_byte`` (with per-link overrides) give every metrics row an ``energy`` column equal to the sum over the
ledger's edges of messages x J/message + bytes x J/byte, on the compiled rounds and the Python rounds alike; a
scenario without them writes the files it wrote before."""
from __future__ import annotations

import csv
import json
import math
from types import SimpleNamespace

import pytest

import svmsim
from svmsim.sweep_costs import sweep_row
from svmsim.core.metrics import WALL_CLOCK_METRICS

J_MESSAGE, J_BYTE = 2e-6, 1e-9
LINKS = [{"a": 0, "b": 1, "energy_per_byte": 5e-9}, {"a": 1, "b": 2, "energy_per_message": 7e-6, "latency": 1e-3}]


def _scenario(network: dict, compiled: bool = True) -> dict:
    return {"name": "net", "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
            "algorithm": {"name": "bqo-e", "workers": 4, "allreduce": "binomial"}, "stop": {"max_iterations": 12},
            "schedule": {"compiled": compiled}, "output": {"eval_every": 3, "progress": False, "plots": False},
            "network": {"latency": 1e-4, "bandwidth": 1e8, "compute_rate": 1e8, **network}}


def _costs(src: int, dst: int) -> tuple[float, float]:
    """(J/message, J/byte) of the directed edge src -> dst, from the overrides of either direction."""
    per_message, per_byte = J_MESSAGE, J_BYTE
    for link in LINKS:
        if {link["a"], link["b"]} == {src, dst}:
            per_message = link.get("energy_per_message", per_message)
            per_byte = link.get("energy_per_byte", per_byte)
    return per_message, per_byte


def _metrics(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _run(tmp_path, name, scenario):
    return svmsim.run(scenario, out_dir=tmp_path / name, progress=False)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_energy_column_is_the_sum_over_the_ledger_edges(data_env, tmp_path, monkeypatch, compiled):
    from svmsim.schedule import compiled_sync, sync

    calls = []
    run_rounds = compiled_sync.run_compiled_rounds
    monkeypatch.setattr(sync, "COMPILE_AFTER_SECONDS", 0.0)
    monkeypatch.setattr(compiled_sync, "run_compiled_rounds", lambda *a, **k: calls.append(1) or run_rounds(*a, **k))
    res = _run(tmp_path, "run", _scenario({"energy_per_message": J_MESSAGE, "energy_per_byte": J_BYTE,
                                           "links": LINKS}, compiled))
    assert bool(calls) == compiled
    expected = 0.0
    with open(res.run_dir / "ledger_edges.csv") as f:
        for row in csv.DictReader(f):
            per_message, per_byte = _costs(int(row["src"]), int(row["dst"]))
            expected += int(row["messages"]) * per_message + int(row["bytes"]) * per_byte
    summary = json.loads((res.run_dir / "summary.json").read_text())
    assert summary["energy"]["unit"] == "J"
    assert summary["energy"]["total"] == pytest.approx(expected, rel=1e-12) and expected > 0
    rows = _metrics(res.run_dir)
    energy = [float(r["energy"]) for r in rows]
    assert energy == sorted(energy) and energy[0] > 0
    final = rows[-1]
    if int(final["messages"]) == res.ledger.totals["messages"]:
        assert energy[-1] == pytest.approx(expected, rel=1e-12)
    # every row: messages and bytes cost at least the cheapest link's price and at most the dearest one's
    for r, e in zip(rows, energy):
        low = int(r["messages"]) * J_MESSAGE + int(r["bytes"]) * J_BYTE
        high = int(r["messages"]) * 7e-6 + int(r["bytes"]) * 5e-9
        assert low * (1 - 1e-12) <= e <= high * (1 + 1e-12)
    point = SimpleNamespace(variant="A", values={}, scenario=res.scenario)
    row = sweep_row(point, res, SimpleNamespace(target_metric="rel_gap", target=math.inf, table_metrics=None,
                                                targets=[]))
    assert row["cost_energy"] == res.metrics[0]["energy"] and row["energy"] == res.metrics[-1]["energy"]


def test_the_compiled_and_python_rounds_give_the_same_energy(data_env, tmp_path, monkeypatch):
    from svmsim.schedule import sync

    monkeypatch.setattr(sync, "COMPILE_AFTER_SECONDS", 0.0)
    network = {"energy_per_message": J_MESSAGE, "energy_per_byte": J_BYTE, "links": LINKS}
    runs = [_run(tmp_path, f"c{c}", _scenario(network, c)) for c in (True, False)]
    assert [m["energy"] for m in runs[0].metrics] == [m["energy"] for m in runs[1].metrics]
    assert runs[0].summary["energy"] == runs[1].summary["energy"]


def test_without_energy_settings_the_files_are_those_of_before(data_env, tmp_path):
    """No energy key: no column, no summary entry, no key in the resolved scenario; with them only the energy
    column (and its total) is added: the ledger files are byte for byte the same."""
    plain = _run(tmp_path, "plain", _scenario({"links": [{"a": 0, "b": 1, "latency": 1e-3}]}))
    priced = _run(tmp_path, "priced", _scenario({"links": [{"a": 0, "b": 1, "latency": 1e-3,
                                                            "energy_per_byte": 5e-9}]}))
    header = (plain.run_dir / "metrics.csv").read_text().splitlines()[0]
    assert "energy" not in header.split(",")
    assert "energy" not in (plain.run_dir / "scenario.resolved.toml").read_text()
    summary = json.loads((plain.run_dir / "summary.json").read_text())
    assert "energy" not in summary
    assert summary["modelled_time"]["model"]["links"] == [{"a": 0, "b": 1, "latency": 1e-3, "bandwidth": None}]
    assert "cost_energy" not in sweep_row(SimpleNamespace(variant="A", values={}, scenario=plain.scenario), plain,
                                          SimpleNamespace(target_metric="rel_gap", target=math.inf,
                                                          table_metrics=None, targets=[]))
    for name in ("ledger.json", "ledger_edges.csv", "ledger_rounds.csv"):
        assert (plain.run_dir / name).read_bytes() == (priced.run_dir / name).read_bytes()

    def without(rows, drop):
        return [{k: v for k, v in r.items() if k not in drop} for r in rows]

    assert without(_metrics(plain.run_dir), WALL_CLOCK_METRICS) == without(_metrics(priced.run_dir),
                                                                         WALL_CLOCK_METRICS | {"energy"})
    assert "energy_per_byte = 5e-09" in (priced.run_dir / "scenario.resolved.toml").read_text()
    assert priced.summary["energy"]["total"] > 0
