"""Every shipped scenario is valid and runs (briefly) end to end."""
from __future__ import annotations

from pathlib import Path

import pytest

import svmsim

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.toml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_validates_and_runs(path, data_env):
    scenario = svmsim.load_scenario(path)
    assert scenario.name
    res = svmsim.run(scenario, overrides={"stop.max_iterations": 300, "output.eval_every": 100,
                                          "output.progress": False}, write=False)
    assert res.final["iteration"] == 300 or res.stop_reason.startswith("certified")
    assert 0.0 <= res.final["train_accuracy"] <= 1.0
    if res.ledger is not None:
        assert res.summary["ledger_matches_declared"] is True
