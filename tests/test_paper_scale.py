"""Paper-scale runs of the shipped scenarios (minutes each). Skipped by default; run with `pytest -m slow`."""
from __future__ import annotations

from pathlib import Path

import pytest

import svmsim

pytestmark = pytest.mark.slow
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


@pytest.mark.parametrize("name,distance,tol", [
    ("saddle_svc_mushrooms_hard", 0.5139161, 1e-3),
    ("saddle_svc_a9a_nu", 0.12405434, 1e-3),
    ("saddle_svc_phishing_nu", None, None),
    ("saddle_dsvc_mushrooms", 0.5139161, 1e-3),
    ("saddle_dsvc_synthetic_d512", None, None),
])
def test_scenario_reaches_its_certified_gap(data_env, name, distance, tol):
    res = svmsim.run(SCENARIOS / f"{name}.toml", overrides={"output.progress": False}, write=False)
    assert res.stop_reason.startswith("certified"), res.stop_reason
    assert res.final["rel_gap"] <= 1e-3
    if distance is not None:
        assert abs(res.final["hull_distance"] - distance) <= tol * distance
    if res.ledger is not None:
        assert res.summary["ledger_matches_declared"] is True
