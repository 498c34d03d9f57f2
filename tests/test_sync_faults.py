"""Faults on synchronous server-client algorithms: a run that breaks under message loss is a result, reported
in the stop reason and the summary, never a traceback or a hang."""
from __future__ import annotations

import svmsim


def _run(algorithm, faults, max_iterations):
    return svmsim.run({"name": "sync-faults", "seed": 1, "data": {"name": "iris"}, "algorithm": algorithm,
                       "faults": faults, "stop": {"max_iterations": max_iterations},
                       "output": {"eval_every": 50, "progress": False}}, write=False)


def test_an_algorithm_that_needs_every_message_fails_cleanly_under_loss():
    res = _run({"name": "saddle-dsvc", "clients": 5}, {"drop": 0.05}, 5000)
    assert "failed under the fault model" in res.stop_reason and "reliable delivery" in res.stop_reason
    assert res.summary["failed_under_faults"] is True
    assert res.summary["faults"]["dropped_total"]["messages"] >= 1
    assert res.ledger.dropped_by_tag                     # the lost messages are in the ledger, apart


def test_a_stalled_algorithm_says_so():
    res = _run({"name": "hogwild", "clients": 5}, {"drop": 0.05}, 500)
    assert res.stop_reason.startswith("no messages in flight") and "stalled" in res.stop_reason
    assert res.summary["faults"]["dropped_total"]["messages"] >= 1



def test_a_gossip_run_with_faults_must_have_a_budget():
    import pytest

    from svmsim.errors import ScenarioError

    spec = {"name": "gossip-faults", "data": {"name": "iris"}, "topology": {"kind": "ring"},
            "algorithm": {"name": "pushsum", "nodes": 10}, "faults": {"drop": 0.2},
            "stop": {"below": {"consensus_error": 1e-6}}}
    with pytest.raises(ScenarioError, match="needs a budget"):
        svmsim.load_scenario(spec)
    svmsim.load_scenario({**spec, "stop": {"below": {"consensus_error": 1e-6}, "max_rounds": 100}})


def test_a_communication_budget_ends_on_a_whole_iterate(data_env):
    """The budget runs out mid-iteration; the iteration finishes, so the final certificate is a valid one."""
    for budget in (20_011, 50_003, 90_001):
        res = svmsim.run({"name": "budget", "seed": 0, "data": {"name": "heart_scale"},
                          "algorithm": {"name": "saddle-dsvc", "clients": 5, "alpha": 0.85},
                          "stop": {"max_scalars": budget}, "output": {"eval_every": 100, "progress": False}},
                         write=False)
        assert res.stop_reason == "communication budget"
        assert res.final["scalars"] >= budget and res.summary["ledger_matches_declared"] is True
        assert res.final["hull_lower"] <= res.final["hull_distance"] and res.final["rel_gap"] >= 0
