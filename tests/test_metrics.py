"""One meaning per metric name: the registry (`svmsim.core.metrics`), rel_gap recomputed from each run's own bounds
in every family that reports it, and stop reasons that say "certified" only of a certificate."""
from __future__ import annotations

import math

import pytest

import svmsim
from svmsim.cli import main
from svmsim.core.metrics import METRICS, label, metric, relative_gap, stop_reason
from svmsim.data import make_dataset
from svmsim.errors import ScenarioError

OUT = {"progress": False, "plots": False}

#: one small run per family that reports rel_gap, each stopped by [stop] gap (on rel_gap), and the columns its
#: gap_upper and gap_lower are in the family's own terms: (column, sign)
RUNS = {
    "saddle": ({"name": "m-saddle", "data": {"name": "iris"}, "algorithm": {"name": "saddle-dsvc", "clients": 3},
                "stop": {"gap": 1e-2, "max_iterations": 200_000}, "output": {"eval_every": 200, **OUT}},
               {"gap_upper": ("hull_distance", 1), "gap_lower": ("hull_lower", 1)}),
    "gilbert": ({"name": "m-gilbert", "data": {"name": "iris"}, "algorithm": {"name": "dgilbert", "clients": 3},
                 "stop": {"gap": 1e-3, "max_iterations": 100_000}, "output": {"eval_every": 10, **OUT}},
                {"gap_upper": ("hull_distance", 1), "gap_lower": ("hull_lower", 1)}),
    "references": ({"name": "m-ref", "data": {"name": "iris"}, "algorithm": {"name": "sklearn-svc"},
                    "stop": {"max_iterations": 1}, "output": OUT},
                   {"gap_upper": ("hull_distance", 1), "gap_lower": ("hull_lower", 1)}),
    "bqo": ({"name": "m-bqo", "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
             "algorithm": {"name": "bqo-e", "workers": 4}, "stop": {"gap": 1e-2, "max_iterations": 400},
             "output": {"eval_every": 1, **OUT}},
            {"gap_upper": ("objective", 1), "gap_lower": ("dual", -1)}),      # the dual column is f(alpha) = -D
    "bundle": ({"name": "m-pragam", "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
                "algorithm": {"name": "pragam", "lam": 1e-2, "workers": 2}, "stop": {"gap": 1e-3,
                                                                                      "max_iterations": 2000},
                "output": {"eval_every": 5, **OUT}},
               {"gap_lower": ("lower", 1)}),
}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=0.0)


def test_the_registry_has_one_entry_per_name_and_only_certificates_say_certified():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for m in METRICS:
        assert m.description and m.definition and m.unit and m.label
        if not m.certificate:
            assert "certif" not in m.label.lower() and "certif" not in stop_reason(m.name, 1e-3).lower()
    assert stop_reason("rel_gap", 1e-3) == "certified relative gap (rel_gap) <= 0.001"
    assert stop_reason("consensus_error", 1e-3) == "consensus error (consensus_error) <= 0.001"
    assert stop_reason("some_column", 0.5) == "some_column <= 0.5" and label("some_column") == "some_column"
    assert metric("gap_per_cn").certificate and not metric("consensus_error").certificate
    with pytest.raises(KeyError, match="not registered; known: rel_gap"):
        metric("certified_gap")
    assert relative_gap(2.0, 1.5) == 0.25 and relative_gap(0.0, 0.0) == math.inf
    assert math.isnan(relative_gap(1.0, math.nan))


@pytest.mark.parametrize("family", sorted(RUNS))
def test_every_reported_rel_gap_is_p_minus_d_over_p_of_the_runs_own_bounds(data_env, family):
    scenario, columns = RUNS[family]
    res = svmsim.run(scenario, write=False)
    info = res.scenario.algorithm.info
    assert {"rel_gap", "gap_upper", "gap_lower"} <= set(info.metrics)
    assert res.metrics
    for row in res.metrics:
        p, d = row["gap_upper"], row["gap_lower"]
        assert _same(row["rel_gap"], (p - d) / abs(p)), row
        if not math.isnan(d):
            assert d <= p * (1 + 1e-12)                                  # a lower bound below the primal value
        for name, (column, sign) in columns.items():
            assert _same(row[name], sign * row[column]), (name, column)
    if scenario.get("stop", {}).get("gap"):
        assert res.stop_reason.startswith("certified relative gap (rel_gap) <= "), res.stop_reason
        assert res.final["rel_gap"] <= scenario["stop"]["gap"]


def test_bqo_reports_eq_27_as_gap_per_cn_and_its_stop_reason_is_its_own(data_env):
    scenario, _ = RUNS["bqo"]
    res = svmsim.run({**scenario, "stop": {"below": {"gap_per_cn": 1e-3}, "max_iterations": 400}}, write=False)
    assert res.stop_reason == "duality gap / (C n) (gap_per_cn) <= 0.001"
    n, C = make_dataset({"name": "heart_scale"}).n, res.summary["algorithm_info"]["C"]
    for row in res.metrics:
        assert _same(row["gap_per_cn"], row["duality_gap"] / (C * n))
        assert _same(row["duality_gap"], row["gap_upper"] - row["gap_lower"])
    # eq. 27 is not relative to the objective: the certified relative gap is the larger one here
    assert res.final["rel_gap"] > res.final["gap_per_cn"]


PUSHSUM = {"name": "m-pushsum", "data": {"name": "iris"}, "topology": {"kind": "ring"},
           "algorithm": {"name": "pushsum", "nodes": 8}, "schedule": {"latency": 0.0},
           "stop": {"below": {"consensus_error": 1e-2}, "max_rounds": 20_000}, "output": OUT}


def test_pushsum_reports_a_consensus_error_and_never_says_certified(data_env):
    res = svmsim.run(PUSHSUM, write=False)
    assert res.stop_reason == "consensus error (consensus_error) <= 0.01"
    assert "certified" not in res.stop_reason
    assert all("rel_gap" not in row for row in res.metrics)


@pytest.mark.parametrize("stop, named", [({"gap": 1e-3}, "gap = 0.001 stops on rel_gap"),
                                         ({"below": {"rel_gap": 1e-3}}, "below names metric 'rel_gap'"),
                                         ({"below": {"gap_per_cn": 1e-3}}, "below names metric 'gap_per_cn'")])
def test_a_metric_the_algorithm_does_not_report_is_refused_naming_those_it_does(stop, named):
    with pytest.raises(ScenarioError) as exc:
        svmsim.load_scenario({**PUSHSUM, "stop": {**stop, "max_rounds": 100}})
    text = str(exc.value)
    assert named in text and "'pushsum' never reports" in text
    assert "on a metric it reports: consensus_error, consensus_rms, objective, weight_at_nodes; or the run's: " \
        "bytes, comm_units, " in text


def test_an_old_name_for_bqo_is_refused_and_an_unregistered_column_is_left_to_the_run():
    scenario, _ = RUNS["bqo"]
    svmsim.load_scenario({**scenario, "stop": {"below": {"gap_per_cn": 1e-3}, "max_iterations": 5}})
    svmsim.load_scenario({**scenario, "stop": {"below": {"eta": 1e-3}, "max_iterations": 5}})   # not registered
    with pytest.raises(ScenarioError, match="'pegasos-n' never reports"):
        svmsim.load_scenario({**RUNS["bundle"][0], "algorithm": {"name": "pegasos-n", "lam": 1e-2}})


def test_a_gap_stop_on_an_algorithm_that_declares_nothing_is_refused_at_the_first_row(data_env, monkeypatch):
    """GADGET made to declare no metrics: the runner finds at its first evaluation point that rel_gap is missing;
    as declared, validation refuses it."""
    import dataclasses

    from svmsim.algorithms import registry

    declared = registry.get_algorithm("gadget")
    scenario = {"name": "m-gadget", "data": {"name": "iris", "holdout": 0.3}, "topology": {"kind": "ring"},
                "algorithm": {"name": "gadget", "nodes": 6, "lam": 1e-2, "iterations": 20},
                "schedule": {"latency": 0.0}, "stop": {"gap": 1e-3, "max_rounds": 50}, "output": OUT}
    with pytest.raises(ScenarioError, match="stops on rel_gap, which algorithm 'gadget' never reports"):
        svmsim.load_scenario(scenario)
    monkeypatch.setitem(registry.ALGORITHMS, "gadget", dataclasses.replace(declared, metrics=None))
    with pytest.raises(ScenarioError, match="stops on rel_gap .* which algorithm 'gadget' does not report"):
        svmsim.run(scenario, write=False)


def test_list_metrics_prints_the_registry(capsys):
    assert main(["list", "metrics"]) == 0
    out = capsys.readouterr().out
    for m in METRICS:
        assert f"  {m.name} " in out
    line = next(ln for ln in out.splitlines() if ln.startswith("  consensus_error "))
    assert " measure " in line and "certificate" not in line
    assert "certificate" in next(ln for ln in out.splitlines() if ln.startswith("  rel_gap "))
