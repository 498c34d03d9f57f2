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

