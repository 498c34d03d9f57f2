"""`svmsim sweep`: grids, variants, the cost-to-eps measurement, slopes, and clear errors for bad specs."""
from __future__ import annotations

import csv
import math

import pytest

from svmsim.cli import main
from svmsim.errors import ScenarioError
from svmsim.sweep import fit_slope, parse_param, plan_sweep, run_sweep

IRIS = {"name": "sweep-iris", "seed": 0, "data": {"name": "iris"}, "partition": {"scheme": "stratified"},
        "algorithm": {"name": "saddle-dsvc", "clients": 3},
        "stop": {"max_iterations": 200000}, "output": {"eval_every": 25, "progress": False}}


def test_parse_param_reads_toml_values():
    assert parse_param("eps=1e-1,1e-2") == ("eps", [0.1, 0.01])
    assert parse_param("data.d=8, 32") == ("data.d", [8, 32])
    assert parse_param("algorithm.q=data,log") == ("algorithm.q", ["data", "log"])


@pytest.mark.parametrize("text, match", [
    ("foo=1,2", "unknown; allowed: eps, d, n"),
    ("eps=", "empty list"),
    ("eps=1e-1,,1e-2", "empty value"),
    ("eps=abc", "eps has value 'abc'; allowed: numbers in \\(0, 1\\)"),
    ("eps=2", "numbers in \\(0, 1\\)"),
    ("d=8.5", "d has value 8.5; allowed: integers"),
    ("eps", "NAME=V1,V2"),
    ("eps=1e-2,1e-2", "lists a value twice"),
])
def test_bad_sweep_specs_get_clear_errors(text, match):
    with pytest.raises(ScenarioError, match=match):
        parse_param(text)


def test_every_point_is_validated_before_anything_runs(tmp_path):
    with pytest.raises(ScenarioError, match=r"sweep point \[saddle-dsvc: algorithm.beta=-1\].*beta"):
        plan_sweep(IRIS, [("algorithm.beta", [1.0, -1])])
    with pytest.raises(ScenarioError, match="sweep.grid"):
        plan_sweep({**IRIS, "sweep": {"grid": {"eps": []}}})
    with pytest.raises(ScenarioError, match="sweep.*plot_every|sweep: .*extra|Extra inputs"):
        plan_sweep({**IRIS, "sweep": {"plot_every": 3}})


def test_cli_sweep_errors_exit_2_and_leave_nothing(tmp_path, capsys):
    out = tmp_path / "sw"
    code = main(["sweep", "scenarios/quickstart.toml", "--param", "epsilon=1e-2", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "sweep parameter 'epsilon' is unknown" in err and "Traceback" not in err
    assert not out.exists() and not any(tmp_path.iterdir())


def test_eps_sweep_measures_cost_to_the_certified_gap_and_fits_a_slope(tmp_path):
    res = run_sweep(IRIS, [("eps", [1e-1, 1e-2, 1e-3])], out=tmp_path / "sw", progress=False)
    assert [r["eps"] for r in res.rows] == [0.1, 0.01, 0.001]
    for r, run in zip(res.rows, res.runs):
        assert r["reached"] and r["rel_gap"] <= r["eps"]
        # the cost is the ledger's scalars at the first evaluated iterate with gap <= eps: here the last one,
        # since the run stops there, so it equals the ledger total and the algorithm's declared count
        assert r["cost_scalars"] == run.ledger.totals["scalars"] == run.summary["declared_scalars"]
        first = next(m for m in run.metrics if m["rel_gap"] <= r["eps"])
        assert first["scalars"] == r["cost_scalars"]
    costs = [r["cost_scalars"] for r in res.rows]
    assert costs[0] < costs[1] < costs[2]
    (slope,) = res.slopes
    assert slope["slope"] == pytest.approx(fit_slope([10, 100, 1000], costs))
    assert 0 < slope["slope"] < 1.0
    d = tmp_path / "sw"
    for f in ("sweep.csv", "sweep.md", "sweep.json", "cost_vs_eps.png", "curves.png"):
        assert (d / f).stat().st_size > 0
    rows = list(csv.DictReader(open(d / "sweep.csv")))
    assert [float(r["cost_scalars"]) for r in rows] == costs
    assert len(list((d / "runs").iterdir())) == 3
    md = (d / "sweep.md").read_text()
    assert "## communication by message tag" in md and "saddle-dsvc__eps=0.001" in md
    assert "two points only" not in md                   # three eps values: a fit, no caveat
    summary = (d / "summary.txt").read_text().splitlines()
    assert summary[0].split()[:3] == ["variant", "eps", "reached"] and max(map(len, summary)) <= 100


def test_a_slope_from_two_points_says_so(tmp_path):
    run_sweep(IRIS, [("eps", [1e-1, 1e-2])], out=tmp_path / "sw", progress=False)
    assert "Fitted from two points only" in (tmp_path / "sw" / "sweep.md").read_text()


def test_variants_compare_algorithms_on_each_grid_point(tmp_path):
    spec = {**IRIS, "sweep": {"grid": {"k": [2, 4]}, "plot": "margin", "variants": [
        {"label": "dsvc", "algorithm": {"name": "saddle-dsvc", "clients": 2}},
        {"label": "gilbert", "algorithm": {"name": "dgilbert", "clients": 2}, "set": {"output.eval_every": 5}}]}}
    spec["stop"] = {"gap": 1e-2, "max_iterations": 100000}
    res = run_sweep(spec, write=False, progress=False)
    assert [(r["variant"], r["k"]) for r in res.rows] == [("dsvc", 2), ("dsvc", 4), ("gilbert", 2), ("gilbert", 4)]
    assert all(r["rel_gap"] <= 1e-2 for r in res.rows)
    assert [run.scenario.algorithm.params.clients for run in res.runs] == [2, 4, 2, 4]
    assert res.runs[2].scenario.output.eval_every == 5
    for mine, first in ((2, 0), (3, 1)):
        assert res.rows[mine]["scalars_vs_first"] == pytest.approx(res.rows[mine]["scalars"] / res.rows[first]["scalars"])


def test_fit_slope_ignores_points_that_did_not_reach_eps():
    assert fit_slope([10, 100, 1000], [1.0, 10.0, math.nan]) == pytest.approx(1.0)
    assert math.isnan(fit_slope([10, 100], [1.0, math.nan]))


def test_the_terminal_summary_fits_100_columns_and_keeps_what_matters_first():
    from svmsim.sweep import summary_table

    rows = [{"variant": f"variant-{i}", "algorithm.loss": "squared_hinge", "reached": i % 2 == 0,
             "cost_scalars": 1234567.0 * i, "cost_units": 12.5 * i, "scalars": 9876543, "iterations": 1000 + i,
             "rel_gap": 1e-4 / (i + 1), "objective": 1769.35, "test_accuracy": 0.9398, "wall_time": 12.3,
             "stop_reason": "certified relative gap <= 0.001 and a long explanation"} for i in range(4)]
    text = summary_table(rows, ["algorithm.loss"])
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100 and len(lines) == 2 + len(rows)
    assert lines[0].split()[:4] == ["variant", "algorithm.loss", "reached", "cost_scalars"]
    assert "stop_reason" not in lines[0]                 # the columns that do not fit are left to sweep.md
    assert summary_table(rows, ["algorithm.loss"], width=400).splitlines()[0].split()[-1] == "stop_reason"
