"""What a sweep reads from its runs (`svmsim.sweep_costs`), column by column, on hand-made runs whose every cost
is known: the first evaluation point at a threshold, the row of sweep.csv, the fitted slopes and the trials table."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from svmsim.sweep_costs import (
    COST_COLUMNS,
    TARGET_COLUMNS,
    against_y,
    aggregate_trials,
    compare_to_first_variant,
    costs_at,
    eps_slopes,
    first_reaching,
    fit_loglog,
    fit_slope,
    parse_target_column,
    scaling_fits,
    sweep_row,
)

METRICS = [
    {"iteration": 10, "round": 20, "scalars": 100, "messages": 8, "virtual_time": 1.5, "wall_time": 0.25,
     "modelled_time": 0.125, "rel_gap": 0.5, "consensus": None},
    {"iteration": 20, "round": 40, "scalars": 250, "messages": 16, "virtual_time": 3.0, "wall_time": 0.5,
     "modelled_time": 0.25, "rel_gap": 0.1, "consensus": 0.2},
    {"iteration": 30, "round": 70, "scalars": 330, "messages": 24, "virtual_time": 4.5, "wall_time": 0.75,
     "rel_gap": 0.01, "consensus": 0.05},
]


def same(a: dict, b: dict) -> bool:
    """Equal dicts, NaN equal to NaN, and the same types for numbers (an int where a float is due is a bug)."""
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if x != y or type(x) is not type(y):
            return False
    return True


def test_first_reaching_takes_the_first_point_at_or_below_the_threshold():
    assert first_reaching(METRICS, 0.1) is METRICS[1]              # default metric: rel_gap; equality counts
    assert first_reaching(METRICS, 0.09) is METRICS[2]
    assert first_reaching(METRICS, 0.5) is METRICS[0]
    assert first_reaching(METRICS, 0.001) is None
    assert first_reaching(METRICS, 1.0, "consensus") is METRICS[1]  # a missing value never reaches
    assert first_reaching([], 1.0) is None


def test_costs_at_reads_every_cost_column_of_the_first_point_reaching():
    assert same(costs_at(METRICS, 0.1, "rel_gap"), {
        "cost_scalars": 250.0, "cost_messages": 16.0, "cost_rounds": 40.0, "cost_virtual_time": 3.0,
        "cost_wall_time": 0.5, "cost_iteration": 20.0, "cost_modelled_time": 0.25, "reached": True})
    assert costs_at(METRICS, 0.5, "consensus")["cost_iteration"] == 20.0      # rel_gap reached 0.5 at 10
    late = costs_at(METRICS, 0.05, "consensus")                     # no modelled time there: NaN
    assert same(late, {"cost_scalars": 330.0, "cost_messages": 24.0, "cost_rounds": 70.0, "cost_virtual_time": 4.5,
                       "cost_wall_time": 0.75, "cost_iteration": 30.0, "cost_modelled_time": math.nan,
                       "reached": True})


def test_costs_at_an_unreached_threshold_is_nan_everywhere_and_says_so():
    out = costs_at(METRICS, 1e-3, "rel_gap")
    assert same(out, {**{c: math.nan for c in COST_COLUMNS}, "reached": False})


def _point(values: dict, variant: str = "A", name: str = "saddle-dsvc"):
    return SimpleNamespace(variant=variant, values=values,
                           scenario=SimpleNamespace(algorithm=SimpleNamespace(name=name)))


def _result(metrics=METRICS, final=None, summary=None, messages=77):
    final = dict(metrics[-1], objective=1.25, margin=None, test_accuracy=0.875) if final is None else final
    ledger = None if messages is None else SimpleNamespace(totals={"messages": messages})
    return SimpleNamespace(final=final, summary=summary or {"rounds": 70}, ledger=ledger, metrics=metrics,
                           stop_reason="gap")


def test_a_plain_row_has_the_totals_and_final_metrics_and_no_cost_columns():
    row = sweep_row(_point({"data.d": 8}), _result())
    assert same(row, {"variant": "A", "data.d": 8, "algorithm": "saddle-dsvc", "stop_reason": "gap",
                      "iterations": 30, "rounds": 70, "scalars": 330, "comm_units": 0.0, "wall_time": 0.75,
                      "messages": 77, "rel_gap": 0.01, "objective": 1.25, "test_accuracy": 0.875})


def test_a_row_without_ledger_totals_or_scalars_falls_back_to_zero():
    row = sweep_row(_point({}), _result(final={"iteration": 3, "comm_units": 2.5}, messages=None))
    assert same(row, {"variant": "A", "algorithm": "saddle-dsvc", "stop_reason": "gap", "iterations": 3,
                      "rounds": 70, "scalars": 0, "comm_units": 2.5, "wall_time": None})


def test_an_eps_row_has_the_costs_at_eps_their_resolution_and_the_bounds():
    summary = {"rounds": 70, "comm_unit": ["d", 50], "bound": {"upper": 900.0, "lower": 12.0}}
    row = sweep_row(_point({"eps": 0.1}), _result(summary=summary))
    expected = {"variant": "A", "eps": 0.1, "algorithm": "saddle-dsvc", "stop_reason": "gap", "iterations": 30,
                "rounds": 70, "scalars": 330, "comm_units": 0.0, "wall_time": 0.75, "messages": 77,
                "rel_gap": 0.01, "objective": 1.25, "test_accuracy": 0.875,
                **costs_at(METRICS, 0.1, "rel_gap"), "cost_units": 5.0,
                "cost_resolution": 150.0, "cost_round_resolution": 30.0, "bound_upper": 900.0, "bound_lower": 12.0}
    assert same(row, expected)


def test_a_target_row_of_a_peer_algorithm_has_its_topology_faults_and_per_node_costs():
    summary = {"rounds": 70, "virtual_time": 4.5,
               "faults": {"model": "drop", "dropped_total": {"messages": 3, "scalars": 30}, "crashed_nodes": [1, 4]},
               "algorithm_info": {"nodes": 8, "spectral_gap": 0.25, "diameter": True, "mixing_time": "fast",
                                  "mean_degree": 2}}
    spec = SimpleNamespace(target_metric="consensus", target=0.5, targets=[], table_metrics=[])
    row = sweep_row(_point({"seed": 1}, name="pushsum"), _result(summary=summary), spec)
    expected = {"variant": "A", "seed": 1, "algorithm": "pushsum", "stop_reason": "gap", "iterations": 30,
                "rounds": 70, "scalars": 330, "comm_units": 0.0, "wall_time": 0.75, "messages": 77,
                "virtual_time": 4.5, "dropped_messages": 3, "dropped_scalars": 30, "crashed_nodes": 2,
                "rel_gap": 0.01, "objective": 1.25, "test_accuracy": 0.875,
                "nodes": 8, "spectral_gap": 0.25, "mean_degree": 2,          # a bool or a string is not a fact
                "target": 0.5, **costs_at(METRICS, 0.5, "consensus"), "cost_messages_per_node": 2.0,
                "cost_resolution": 150.0, "cost_round_resolution": 30.0}
    assert same(row, expected)


def test_a_fault_summary_without_a_model_adds_no_fault_columns():
    summary = {"rounds": 70, "faults": {"model": None, "dropped_total": {"messages": 0, "scalars": 0}}}
    row = sweep_row(_point({}), _result(summary=summary))
    assert "dropped_messages" not in row and "crashed_nodes" not in row
    summary["faults"] = {"model": "drop", "dropped_total": {"messages": 0, "scalars": 0}}
    assert sweep_row(_point({}), _result(summary=summary))["crashed_nodes"] == 0


def test_an_unreached_target_has_no_cost_units_and_a_resolution_without_rounds():
    metrics = [{"iteration": 5, "scalars": 40, "rel_gap": 0.5}, {"iteration": 9, "scalars": 100, "rel_gap": 0.4}]
    summary = {"rounds": 9, "comm_unit": ["d", 10]}
    spec = SimpleNamespace(target_metric="rel_gap", target=1e-3, targets=[], table_metrics=[])
    row = sweep_row(_point({}), _result(metrics=metrics, summary=summary), spec)
    assert row["reached"] is False and "cost_units" not in row and math.isnan(row["cost_scalars"])
    assert row["cost_resolution"] == 60.0 and "cost_round_resolution" not in row
    empty = sweep_row(_point({}), _result(metrics=[], final={}, summary={"rounds": 0}), spec)
    assert math.isnan(empty["cost_resolution"])


def test_resolutions_count_from_zero_and_rows_without_scalars_have_none():
    metrics = [{"iteration": 1, "round": 9, "scalars": 200, "rel_gap": 0.5},
               {"iteration": 2, "round": 12, "scalars": 250, "rel_gap": 0.1}]
    spec = SimpleNamespace(target_metric="rel_gap", target=0.2, targets=[], table_metrics=[])
    row = sweep_row(_point({}), _result(metrics=metrics, summary={"rounds": 12}), spec)
    assert row["cost_resolution"] == 200.0 and row["cost_round_resolution"] == 9.0
    solo = [{"iteration": 1, "rel_gap": 0.5}, {"iteration": 2, "rel_gap": 0.1}]      # a single-machine solver
    row = sweep_row(_point({}), _result(metrics=solo, summary={"rounds": None}), spec)
    assert row["cost_resolution"] == 0.0 and math.isnan(row["cost_scalars"]) and row["cost_iteration"] == 2.0


def test_each_target_of_a_table_gets_its_own_cost_columns():
    spec = SimpleNamespace(target_metric="rel_gap", target=None, targets=[0.5, 0.01, 1e-3], table_metrics=[])
    row = sweep_row(_point({}), _result(), spec)
    assert [row[f"{c}@0.5"] for c in TARGET_COLUMNS] == [10.0, 20.0, 100.0, 0.125, 0.25]
    assert [row[f"{c}@0.01"] for c in TARGET_COLUMNS][:3] == [30.0, 70.0, 330.0]
    assert math.isnan(row["cost_modelled_time@0.01"]) and row["cost_wall_time@0.01"] == 0.75
    assert all(math.isnan(row[f"{c}@0.001"]) for c in TARGET_COLUMNS)
    assert "reached" not in row and "target" not in row                    # targets alone: no single target


def test_table_metrics_tabulate_the_targets_for_each_metric():
    """Paper 001's Table 2 (relative primal) beside Table 3 (relative dual): the sweep's own metric keeps its
    plain column names, another metric's columns name it; the names parse back."""
    spec = SimpleNamespace(target_metric="rel_gap", target=None, targets=[0.5, 0.1],
                           table_metrics=["rel_gap", "consensus"])
    row = sweep_row(_point({}), _result(), spec)
    assert [row[f"{c}@0.1"] for c in TARGET_COLUMNS][:3] == [20.0, 40.0, 250.0]
    assert [row[f"{c}@consensus<=0.1"] for c in TARGET_COLUMNS][:3] == [30.0, 70.0, 330.0]
    assert row["cost_iteration@consensus<=0.5"] == 20.0
    assert parse_target_column("cost_rounds@consensus<=0.1") == ("cost_rounds", "consensus", 0.1)
    assert parse_target_column("cost_rounds@0.001") == ("cost_rounds", None, 1e-3)
    alone = sweep_row(_point({}), _result(), SimpleNamespace(target_metric="rel_gap", target=None, targets=[0.1],
                                                            table_metrics=["consensus"]))
    assert "cost_rounds@0.1" not in alone and alone["cost_rounds@consensus<=0.1"] == 70.0


def test_table_metrics_must_be_distinct_metric_names():
    from svmsim.config import load_scenario
    from svmsim.errors import ScenarioError

    raw = {"name": "t", "data": {"name": "iris"}, "algorithm": {"name": "pragam", "lam": 0.1},
           "sweep": {"targets": [0.1], "table_metrics": ["rel_dual", "rel@primal"]}}
    with pytest.raises(ScenarioError, match="table_metrics must be distinct metric names"):
        load_scenario(raw)
    raw["sweep"]["table_metrics"] = ["rel_dual", "rel_dual"]
    with pytest.raises(ScenarioError, match="table_metrics must be distinct metric names"):
        load_scenario(raw)


def test_scalars_are_compared_to_the_first_variant_at_the_same_grid_point():
    rows = [{"variant": "A", "d": 1, "scalars": 10}, {"variant": "A", "d": 2, "scalars": 20, "cost_scalars": 40.0},
            {"variant": "B", "d": 1, "scalars": 30}, {"variant": "B", "d": 2, "scalars": 5, "cost_scalars": 10.0},
            {"variant": "B", "d": 3, "scalars": 7}, {"variant": "C", "d": 1, "scalars": 0},
            {"variant": "C", "d": 2, "scalars": 1, "cost_scalars": math.nan}]
    compare_to_first_variant(rows, ["d"])
    assert [r.get("scalars_vs_first") for r in rows] == [1.0, 1.0, 3.0, 0.25, None, None, None]
    mixed = [{"variant": "A", "d": 1, "scalars": 10}, {"variant": "B", "d": 1, "scalars": 20}]
    compare_to_first_variant(mixed, ["d"])
    assert [r["scalars_vs_first"] for r in mixed] == [1.0, 2.0]
    compare_to_first_variant([], ["d"])


def test_eps_slopes_fit_cost_and_bound_per_variant_and_other_grid_key():
    rows = []
    for variant, power in (("A", 1.0), ("B", 0.5)):
        for d in (4, 8):
            for eps in (0.1, 0.01, 0.001):
                rows.append({"variant": variant, "eps": eps, "d": d, "cost_scalars": d * (1 / eps) ** power,
                             "bound_upper": (1 / eps) ** 2 if variant == "A" else None})
    rows[0]["cost_scalars"] = math.nan                                     # one unreached point of A, d = 4
    out = eps_slopes(rows, ["eps", "d"])
    assert [(s["variant"], s["d"], s["points"]) for s in out] == [("A", 4, 2), ("A", 8, 3), ("B", 4, 3), ("B", 8, 3)]
    assert [s["slope"] for s in out] == pytest.approx([1.0, 1.0, 0.5, 0.5], abs=1e-12)
    assert [s.get("bound_slope") for s in out[:2]] == pytest.approx([2.0, 2.0], abs=1e-12)
    assert all("bound_slope" not in s for s in out[2:])
    assert eps_slopes(rows, ["d"]) == []
    two = [{"variant": "A", "eps": e, "cost_scalars": 1 / e, "bound_upper": u}
           for e, u in ((0.1, 100.0), (0.01, 1e4), (0.001, None))]
    (only,) = eps_slopes(two, ["eps"])
    assert only["bound_slope"] == pytest.approx(2.0, abs=1e-12)              # two finite bounds are enough


def test_fit_slope_uses_only_finite_positive_points():
    inv = np.array([10.0, 100.0, 1000.0, 1e4, -1.0])
    cost = np.array([3.0, 30.0, 300.0, math.nan, 5.0])
    assert fit_slope(inv, cost) == pytest.approx(1.0, abs=1e-12)
    assert fit_slope(np.array([10.0, 100.0]), np.array([4.0, 16.0])) == pytest.approx(math.log(4) / math.log(10))
    assert math.isnan(fit_slope(np.array([10.0, 100.0]), np.array([4.0, 0.0])))
    assert math.isnan(fit_slope(np.array([10.0]), np.array([4.0])))
    # a zero cost, a zero or missing 1/eps and a missing cost are left out; 1/eps below 1 (eps > 1) is kept
    assert fit_slope([0.5, 5.0, 50.0, 0.0, None, 7.0], [1.0, 10.0, 100.0, 3.0, 4.0, None]) == pytest.approx(1.0)
    assert fit_slope([0.5, 5.0, 9.0], [1.0, 10.0, 0.0]) == pytest.approx(1.0)


def test_fit_loglog_gives_slope_intercept_r2_and_points():
    x = np.array([1.0, 2.0, 4.0, 8.0, 0.0, math.inf])
    y = 3.0 * x ** 1.5
    out = fit_loglog(x, y)
    assert out["points"] == 4
    assert out["slope"] == pytest.approx(1.5, abs=1e-12) and out["intercept"] == pytest.approx(math.log(3.0))
    assert out["r2"] == pytest.approx(1.0, abs=1e-12)
    noisy = fit_loglog([1.0, 2.0, 4.0, 8.0], [1.0, 3.0, 2.0, 9.0])
    lx, ly = np.log([1.0, 2.0, 4.0, 8.0]), np.log([1.0, 3.0, 2.0, 9.0])
    slope, icpt = np.polyfit(lx, ly, 1)
    r2 = 1 - ((ly - slope * lx - icpt) ** 2).sum() / ((ly - ly.mean()) ** 2).sum()
    assert (noisy["slope"], noisy["intercept"], noisy["r2"]) == pytest.approx((slope, icpt, r2), rel=1e-12)
    assert 0.5 < noisy["r2"] < 1.0
    gentle = fit_loglog([1.0, 2.0, 4.0], [1.0, 1.2, 1.3])               # total variance of log y below 1
    assert 0.0 < gentle["r2"] < 1.0
    kept = fit_loglog([0.0, 1.0, 2.0, 3.0, None], [5.0, 2.0, 4.0, 0.0, 1.0])   # x = 0, y = 0, missing: out
    assert kept["points"] == 2 and kept["slope"] == pytest.approx(1.0)
    assert fit_loglog([1.0, 2.0, 4.0], [2.0, 4.0, None])["points"] == 2
    flat = fit_loglog([1.0, 2.0], [5.0, 5.0])                       # y constant: no variance to explain
    assert flat["slope"] == pytest.approx(0.0, abs=1e-12) and math.isnan(flat["r2"])
    for x, y in (([3.0, 3.0], [1.0, 2.0]), ([1.0], [1.0]), ([1.0, -2.0], [1.0, 2.0])):
        out = fit_loglog(x, y)
        assert math.isnan(out["slope"]) and math.isnan(out["intercept"]) and math.isnan(out["r2"])
    assert fit_loglog([3.0, 3.0], [1.0, 2.0])["points"] == 2


def _spec(**kw):
    base = {"against": "nodes", "against_y": [], "against_by": None, "against_fit": "variant"}
    return SimpleNamespace(**{**base, **kw})


def test_against_y_defaults_to_rounds_when_any_run_reached_else_scalars():
    assert against_y(_spec(against_y=["cost_messages"]), []) == ["cost_messages"]
    assert against_y(_spec(), [{"cost_rounds": math.nan}, {"cost_rounds": 4.0}]) == ["cost_rounds"]
    assert against_y(_spec(), [{"cost_rounds": math.nan}, {}]) == ["cost_scalars"]


def test_scaling_fits_one_line_per_variant_or_per_colour():
    rows = []
    for variant, c in (("A", 2.0), ("B", 5.0)):
        for kind, p in (("ring", 2.0), ("grid", 1.0)):
            for n in (4.0, 16.0, 64.0):
                rows.append({"variant": variant, "topology.kind": kind, "nodes": n, "cost_rounds": c * n ** p,
                             "reached": True})
    rows.append({"variant": "B", "topology.kind": "ring", "nodes": 128.0, "cost_rounds": "n/a", "reached": False})
    rows += [{"variant": "A", "topology.kind": "ring", "nodes": x, "cost_rounds": y, "reached": True}
             for x, y in ((0.0, 5.0), (2.0, 0.0), (math.nan, 3.0), (0.5, 0.25))]
    per_variant = scaling_fits(_spec(against_by="topology.kind"), rows)
    assert [(s["variant"], s["points"], s["not_reached"], s["x"], s["y"]) for s in per_variant] == [
        ("A", 7, 0, "nodes", "cost_rounds"), ("B", 6, 1, "nodes", "cost_rounds")]
    assert set(per_variant[0]) == {"variant", "x", "y", "points", "slope", "intercept", "r2", "median_y_over_x",
                                   "not_reached"}
    ratios = [2 * n ** p / n for p in (2, 1) for n in (4, 16, 64)] + [0.5]   # only finite positive points
    assert per_variant[0]["median_y_over_x"] == pytest.approx(float(np.median(ratios)))
    by = scaling_fits(_spec(against_by="topology.kind", against_fit="by"), rows)
    assert [(s["variant"], s["topology.kind"]) for s in by] == [("A", "ring"), ("A", "grid"), ("B", "ring"),
                                                               ("B", "grid")]
    assert [s["slope"] for s in by][1:] == pytest.approx([1.0, 2.0, 1.0], abs=1e-12)
    assert [s["intercept"] for s in by][1:] == pytest.approx([math.log(2), math.log(5), math.log(5)])
    two = scaling_fits(_spec(against_y=["cost_rounds", "cost_scalars"]), rows)
    assert [(s["variant"], s["y"]) for s in two] == [("A", "cost_rounds"), ("B", "cost_rounds"),
                                                     ("A", "cost_scalars"), ("B", "cost_scalars")]
    assert math.isnan(two[2]["median_y_over_x"]) and two[2]["points"] == 0
    variant_by = scaling_fits(_spec(against_by="variant", against_fit="by"), rows)
    assert len(variant_by) == 2 and "variant" in variant_by[0]
    assert scaling_fits(_spec(against=None), rows) == []


def test_trials_split_the_spread_into_nodes_and_trials():
    rows = [{"variant": "A", "seed": s, "d": 8, "algorithm": "gadget", "stop_reason": "rounds", "reached": r,
             "test_accuracy": acc, "test_accuracy_std": nstd, "scalars": sc, "label": "x", "flag": True,
             "wall_time": None}
            for s, r, acc, nstd, sc in ((0, True, 0.8, 0.03, 100), (1, False, 0.9, 0.04, 300))]
    rows.append({"variant": "B", "seed": 0, "d": 8, "test_accuracy": 0.5, "scalars": math.nan, "wall_time": 1.0})
    out = aggregate_trials(rows, ["seed", "d"], "seed")
    a, b = out
    assert a["variant"] == "A" and a["d"] == 8 and a["trials"] == 2 and a["seed_values"] == [0, 1]
    assert a["reached"] == 1
    assert a["test_accuracy_mean"] == pytest.approx(0.85)
    assert a["test_accuracy_std_trials"] == pytest.approx(0.05)
    assert a["test_accuracy_std_nodes"] == pytest.approx(math.sqrt((0.03 ** 2 + 0.04 ** 2) / 2))
    assert a["test_accuracy_std"] == pytest.approx(math.hypot(a["test_accuracy_std_nodes"], 0.05))
    assert a["scalars_mean"] == 200.0 and a["scalars_std"] == 100.0
    for gone in ("label_mean", "flag_mean", "seed_mean", "d_mean", "reached_mean", "stop_reason_mean",
                 "algorithm_mean", "test_accuracy_std_mean", "wall_time_mean", "variant_mean"):
        assert gone not in a
    assert set(a) == {"variant", "d", "trials", "seed_values", "reached", "test_accuracy_mean",
                      "test_accuracy_std_nodes", "test_accuracy_std_trials", "test_accuracy_std", "scalars_mean",
                      "scalars_std"}
    # B has no node std and no `reached`; its NaN scalars give no column
    assert set(b) == {"variant", "d", "trials", "seed_values", "test_accuracy_mean", "test_accuracy_std",
                      "wall_time_mean", "wall_time_std"}
    assert b["test_accuracy_std"] == 0.0 and b["wall_time_mean"] == 1.0


def test_the_median_ratio_uses_only_finite_positive_points():
    pts = [(1.0, 1.0), (2.0, 4.0), (4.0, 16.0),                                  # ratios 1, 2, 4: median 2
           (math.inf, 5.0), (0.0, 5.0), (2.0, 0.0), (3.0, -1.0), (math.nan, 1.0), (1.0, math.nan)]
    rows = [{"variant": "M", "nodes": x, "cost_rounds": y} for x, y in pts]
    (fit,) = scaling_fits(_spec(), rows)
    assert fit["median_y_over_x"] == 2.0 and fit["points"] == 3 and fit["slope"] == pytest.approx(2.0)


def test_trials_average_every_numeric_column_in_any_order():
    rows = [{"variant": "A", "seed": s, "empty": None, "note": "x", "spread_std": 0.5 * s, "rate": 1.0,
             "rate_max": 2.0 + s} for s in (0, 2)]
    (a,) = aggregate_trials(rows, ["seed"], "seed")
    # a column after an empty or a text one is still averaged; a `_std` column without its base is a column
    assert a["rate_max_mean"] == 3.0 and a["spread_std_mean"] == 0.5 and a["rate_mean"] == 1.0
    assert "empty_mean" not in a


def test_trials_with_a_missing_node_std_use_the_std_over_trials():
    rows = [{"variant": "A", "seed": 0, "acc": 0.6, "acc_std": 0.1}, {"variant": "A", "seed": 1, "acc": 0.8}]
    (a,) = aggregate_trials(rows, ["seed"], "seed")
    assert a["acc_mean"] == pytest.approx(0.7) and a["acc_std"] == pytest.approx(0.1)
    assert "acc_std_nodes" not in a and "acc_std_trials" not in a
