"""The experiments of paper 002's gossip issue as sweep features and scenarios: topology facts in every run,
rounds to consensus against 1/spectral gap (`[sweep] target`, `against`), GADGET under message loss and crashed
nodes (and what the run reports as lost), and mean +- std over nodes and seeded trials (`[sweep] trials`)."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

import svmsim
from svmsim.algorithms.gadget import GadgetParams, build_gadget
from svmsim.algorithms.pushsum import MIXING_TIME_EPS, PushSumParams, build_pushsum
from svmsim.cli import main
from svmsim.data import make_dataset
from svmsim.deployment import Problem
from svmsim.errors import ScenarioError
from svmsim.sweep import aggregate_trials, fit_loglog, plan_sweep, run_sweep

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

PUSHSUM = {"name": "ps-mixing", "seed": 0, "data": {"name": "iris"}, "topology": {"kind": "ring"},
           "algorithm": {"name": "pushsum", "nodes": 16}, "schedule": {"latency": 0.0},
           "stop": {"below": {"consensus_error": 1e-2}, "max_rounds": 20000},
           "output": {"progress": False, "plots": False}}


@pytest.fixture(scope="module")
def iris():
    return make_dataset({"name": "iris"})


# ----------------------------------------------------------------------------------------------------------------
# topology facts in every run


@pytest.mark.parametrize("n", [8, 15])
def test_algorithm_info_carries_the_gossip_chains_spectral_gap(iris, n):
    """W = I/2 + B/2 with B the random walk: on a ring B's eigenvalues are cos(2 pi k/n), so the gap is
    (1 - cos(2 pi/n))/2; on a complete graph they are -1/(n-1), so it is 1/2 + 1/(2(n-1))."""
    for kind, gap, diameter in (("ring", (1 - math.cos(2 * math.pi / n)) / 2, n // 2),
                                ("complete", 0.5 + 0.5 / (n - 1), 1)):
        dep = build_pushsum(PushSumParams(nodes=n), Problem(iris, seed=0, topology_kind=kind))
        info = dep.info
        assert info["spectral_gap"] == pytest.approx(gap, rel=1e-9)
        assert info["inv_spectral_gap"] == pytest.approx(1 / gap, rel=1e-9)
        assert info["mixing_time"] == pytest.approx(math.log(1 / MIXING_TIME_EPS) / gap, rel=1e-9)
        assert info["diameter"] == diameter and info["edges"] == (n if kind == "ring" else n * (n - 1) // 2)
        assert 0 < info["spectral_gap_metropolis"] <= 1
    # GADGET's deployment carries the same facts (its gossip also moves half per exchange)
    dep = build_gadget(GadgetParams(nodes=n, iterations=5), Problem(iris, seed=0, topology_kind="ring"))
    assert dep.info["spectral_gap"] == pytest.approx((1 - math.cos(2 * math.pi / n)) / 2, rel=1e-9)
    # the lazier uniform choice (self included) has a smaller gap than the random walk's on the same graph
    lazy = build_pushsum(PushSumParams(nodes=n, mixing="uniform"), Problem(iris, seed=0, topology_kind="ring"))
    assert lazy.info["spectral_gap"] < dep.info["spectral_gap"]


# ----------------------------------------------------------------------------------------------------------------
# rounds to consensus against 1/spectral gap


def test_mixing_sweep_puts_rounds_to_target_against_the_inverse_spectral_gap(tmp_path):
    spec = {**PUSHSUM, "sweep": {
        "target": 1e-2, "target_metric": "consensus_error", "against": "inv_spectral_gap",
        "against_by": "topology.kind",
        "against_y": ["cost_rounds", "cost_messages_per_node", "cost_virtual_time"],
        "exclude": [{"topology.kind": "complete", "algorithm.nodes": 48}],
        "grid": {"topology.kind": ["ring", "grid", "complete", "expander", "random_k_out", "small_world"],
                 "algorithm.nodes": [16, 48]}}}
    res = run_sweep(spec, out=tmp_path / "sw", progress=False)
    assert len(res.rows) == 11                                   # 12 points, one excluded
    for r, run in zip(res.rows, res.runs):
        assert r["reached"] and r["target"] == 1e-2
        info = run.summary["algorithm_info"]
        assert r["inv_spectral_gap"] == info["inv_spectral_gap"] and r["nodes"] == r["algorithm.nodes"]
        first = next(m for m in run.metrics if m["consensus_error"] <= 1e-2)   # the cost point: the first below
        assert r["cost_rounds"] == first["round"] and r["cost_messages"] == first["messages"]
        assert r["cost_virtual_time"] == first["virtual_time"] and r["cost_scalars"] == first["scalars"]
        assert r["cost_messages_per_node"] == pytest.approx(first["messages"] / r["nodes"])
    rounds = {(r["topology.kind"], r["nodes"]): r["cost_rounds"] for r in res.rows}
    assert rounds[("ring", 48)] > 5 * rounds[("ring", 16)] > 5 * rounds[("complete", 16)]
    fits = {f["y"]: f for f in res.scaling}
    assert set(fits) == {"cost_rounds", "cost_messages_per_node", "cost_virtual_time"}
    fit = fits["cost_rounds"]
    assert fit["points"] == 11 and fit["not_reached"] == 0
    assert 0.6 <= fit["slope"] <= 1.2 and fit["r2"] >= 0.9
    xs = [r["inv_spectral_gap"] for r in res.rows]
    assert fit == {**fit, **fit_loglog(xs, [r["cost_rounds"] for r in res.rows])}
    # rounds ~ log(1/gamma) / gap: the median of rounds * gap is of the order of log(100) = 4.6
    assert 2 <= fit["median_y_over_x"] <= 10
    d = tmp_path / "sw"
    assert (d / "scaling.png").stat().st_size > 0
    md = (d / "sweep.md").read_text()
    assert "## scaling against inv_spectral_gap" in md and "| inv_spectral_gap |" in md
    saved = json.loads((d / "sweep.json").read_text())
    assert saved["scaling"][0]["slope"] == pytest.approx(res.scaling[0]["slope"])
    rows = list(csv.DictReader(open(d / "sweep.csv")))
    assert [float(r["cost_rounds"]) for r in rows] == [r["cost_rounds"] for r in res.rows]


def test_target_marks_runs_that_never_reach_it(tmp_path):
    spec = {**PUSHSUM, "stop": {"max_rounds": 5}, "sweep": {"target": 1e-6, "against": "nodes",
                                                             "grid": {"algorithm.nodes": [8, 16]}}}
    res = run_sweep(spec, write=False, progress=False)
    assert [r["reached"] for r in res.rows] == [False, False]
    assert all(math.isnan(r["cost_rounds"]) for r in res.rows)
    (fit,) = res.scaling
    assert fit["points"] == 0 and fit["not_reached"] == 2 and math.isnan(fit["slope"])


@pytest.mark.parametrize("sweep, match", [
    ({"target": 1e-3, "grid": {"eps": [1e-2]}}, "target = 0.001 and an eps grid both set the cost threshold"),
    ({"against": "spectral_gapp"}, "sweep.against = 'spectral_gapp' is not a column; allowed: a grid key"),
    ({"against": "nodes", "against_y": ["cost_rounds"]}, "against_y names 'cost_rounds', which needs a threshold"),
    ({"against": "nodes", "against_by": "topology.kind"}, "against_by = 'topology.kind' is not a grid key"),
    ({"against_y": "rounds"}, "without sweep.against"),
    ({"target_metric": "consensus_rms"}, "target_metric = 'consensus_rms' needs a threshold"),
    ({"table_metrics": ["consensus_rms"]}, r"table_metrics = \['consensus_rms'\] needs thresholds; allowed: set "
                                           "sweep.targets"),
    ({"exclude": [{"topology.kind": "ring"}]}, r"exclude\[0\]: 'topology.kind' is not a grid key"),
    ({"exclude": [{"algorithm.nodes": 7}]}, r"exclude\[0\]: algorithm.nodes = 7 is not one of the grid's values"),
    ({"exclude": [{"algorithm.nodes": 8}, {"algorithm.nodes": 16}]}, "exclude leaves no point to run"),
    ({"exclude": [{}]}, r"exclude\[0\] is empty"),
    ({"trials": "seed"}, "sweep.trials = 'seed' is not a grid key"),
    ({"variants": [{"label": "a", "unset": ["faults"]}]}, "unset names 'faults', which the scenario does not set"),
    ({"variants": [{"label": "a", "unset": ["data"]}]}, "unset names 'data', which a scenario cannot do without"),
    ({"target": -1.0}, "sweep.target"),
])
def test_bad_sweep_options_are_clear_errors(sweep, match):
    grid = {"algorithm.nodes": [8, 16], **sweep.pop("grid", {})}
    with pytest.raises(ScenarioError, match=match):
        plan_sweep({**PUSHSUM, "sweep": {"grid": grid, **sweep}})


# ----------------------------------------------------------------------------------------------------------------
# mean +- std over nodes and seeded trials


def test_trials_split_the_spread_into_nodes_and_trials():
    rows = [{"variant": "v", "seed": s, "test_accuracy": m, "test_accuracy_std": sd, "wall_time": w,
             "stop_reason": "done", "reached": True}
            for s, m, sd, w in ((0, 0.80, 0.03, 1.0), (1, 0.90, 0.04, 3.0))]
    (t,) = aggregate_trials(rows, ["seed"], "seed")
    assert t["trials"] == 2 and t["seed_values"] == [0, 1] and t["reached"] == 2
    assert t["test_accuracy_mean"] == pytest.approx(0.85)
    assert t["test_accuracy_std_trials"] == pytest.approx(0.05)
    assert t["test_accuracy_std_nodes"] == pytest.approx(math.sqrt((0.03 ** 2 + 0.04 ** 2) / 2))
    # the std over all (node, trial) pairs: nodes at mean +- node std in each trial
    values = np.concatenate([[0.80 - 0.03, 0.80 + 0.03], [0.90 - 0.04, 0.90 + 0.04]])
    assert t["test_accuracy_std"] == pytest.approx(values.std())
    assert t["wall_time_mean"] == 2.0 and t["wall_time_std"] == 1.0 and "wall_time_std_nodes" not in t
    assert "test_accuracy_std_mean" not in t and "stop_reason_mean" not in t


def test_trials_sweep_compares_gadget_with_pegasos_over_seeds(tmp_path):
    """Paper 002's Table 3 shape on a small set: GADGET (its accuracy's std over nodes and seeds) against
    centralized Pegasos (std over seeds), the Pegasos variant leaving out GADGET's topology and schedule."""
    spec = {"name": "table3-small", "seed": 0, "data": {"name": "iris", "holdout": 0.3},
            "topology": {"kind": "random_k_out", "k": 2},
            "algorithm": {"name": "gadget", "nodes": 5, "lam": 1e-2, "eps": 0.0, "iterations": 300, "average": True},
            "schedule": {"latency": 0.0, "eval_time": 100.0}, "stop": {"max_iterations": 100000},
            "output": {"progress": False, "plots": False, "eval_every": 500},
            "sweep": {"trials": "seed", "warmup": True, "grid": {"seed": [0, 1, 2]},
                      "trials_columns": ["test_accuracy", "wall_time"],
                      "variants": [{"label": "GADGET"},
                                   {"label": "Pegasos", "algorithm": {"name": "pegasos", "lam": 1e-2, "epochs": 10,
                                                                      "eps": 0.0},
                                    "unset": ["topology", "schedule"]}]}}
    res = run_sweep(spec, out=tmp_path / "sw", progress=False)
    assert [r["variant"] for r in res.rows] == ["GADGET"] * 3 + ["Pegasos"] * 3
    assert res.runs[3].scenario.topology.kind == "star"                    # unset: back to the default
    gadget, pegasos = res.trials
    assert gadget["variant"] == "GADGET" and gadget["trials"] == 3 and pegasos["trials"] == 3
    accs = np.array([r["test_accuracy"] for r in res.rows[:3]])
    node_std = np.array([r["test_accuracy_std"] for r in res.rows[:3]])
    assert gadget["test_accuracy_mean"] == pytest.approx(accs.mean())
    assert gadget["test_accuracy_std"] == pytest.approx(math.sqrt(np.mean(node_std ** 2) + accs.var()))
    assert "test_accuracy_std_nodes" not in pegasos
    assert pegasos["test_accuracy_std"] == pytest.approx(np.std([r["test_accuracy"] for r in res.rows[3:]]))
    assert gadget["test_accuracy_mean"] > 0.9 and pegasos["test_accuracy_mean"] > 0.9
    md = (tmp_path / "sw" / "sweep.md").read_text()
    assert "## mean ± std over seed (3 trials" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| GADGET | 3 |"))
    assert f"{100 * gadget['test_accuracy_mean']:.2f} ± {100 * gadget['test_accuracy_std']:.2f}" in line
    trials = list(csv.DictReader(open(tmp_path / "sw" / "trials.csv")))
    assert [t["variant"] for t in trials] == ["GADGET", "Pegasos"] and trials[0]["seed_values"] == "0 1 2"


# ----------------------------------------------------------------------------------------------------------------
# GADGET under message loss and crashed nodes, and what the run reports as lost


def test_gadget_on_a9a_keeps_its_accuracy_under_loss_and_crashes_and_reports_what_was_lost(data_env, tmp_path,
                                                                                           capsys):
    """The issue's claim at the scenario's size (10 nodes, T = 3000): with 20% of the messages lost and 10% of
    the nodes crashed, the mean test accuracy over the nodes that are up is within 2 points of the fault-free
    twin's, the run finishes by itself, and `svmsim run` and summary.json say what was lost."""
    out = tmp_path / "faulty"
    assert main(["run", str(SCENARIOS / "gadget_a9a_faults.toml"), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    free = svmsim.run(SCENARIOS / "gadget_a9a_fault_free.toml", write=False, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    final = summary["final"]
    assert summary["stop_reason"].startswith("algorithm finished") and free.stop_reason.startswith("algorithm finished")
    assert abs(final["test_accuracy"] - free.final["test_accuracy"]) < 0.02
    assert free.final["test_accuracy"] > 0.84
    faults = summary["faults"]
    assert faults["model"] == {"drop": 0.2, "crash": 0.1}
    assert len(faults["crashed_nodes"]) == 1 and faults["down_at_end"] == faults["crashed_nodes"]
    assert final["nodes_up"] == 9 and final["finished_nodes"] == 9
    lost = faults["dropped"]["lost"]["push"]["messages"]
    dead = faults["dropped"]["dead_receiver"]["push"]["messages"]
    sent = final["sent_messages"]
    assert 0.18 * sent <= lost <= 0.22 * sent and dead > 0
    assert faults["dropped_total"]["messages"] == lost + dead
    assert summary["ledger_matches_declared"] is True
    assert free.summary["faults"]["dropped_total"] == {"messages": 0, "scalars": 0}
    assert "faults     drop = 0.2, crash = 0.1" in printed
    assert f"lost       {lost + dead} messages" in printed
    assert f"{lost} push lost in the network" in printed and f"{dead} push sent to a node that was down" in printed
    assert "1 crashed" in printed and "metrics over the 9 up" in printed


def test_scenario_files_are_valid_sweeps():
    files = sorted(SCENARIOS.glob("gadget_*.toml")) + sorted(SCENARIOS.glob("pushsum_*.toml"))
    assert {"gadget_a9a_faults.toml", "gadget_a9a_fault_free.toml", "gadget_a9a_table3.toml",
            "pushsum_mixing.toml"} <= {f.name for f in files}
    for f in files:
        spec, points = plan_sweep(f)
        assert points, f


# ----------------------------------------------------------------------------------------------------------------
# paper scale


@pytest.mark.slow
def test_pushsum_rounds_to_consensus_scale_with_the_mixing_time(data_env, tmp_path):
    """scenarios/pushsum_mixing.toml: six topologies, 10/100/1000 nodes; rounds to consensus error 1e-3 grow like
    1/spectral gap (slope near 1 in log-log; well-mixing graphs are held up by the log factors)."""
    res = run_sweep(SCENARIOS / "pushsum_mixing.toml", out=tmp_path / "sw", progress=False, keep_runs=False)
    assert len(res.rows) == 17 and all(r["reached"] for r in res.rows)
    fit = next(f for f in res.scaling if f["y"] == "cost_rounds")
    assert 0.7 <= fit["slope"] <= 1.1 and fit["r2"] >= 0.95


@pytest.mark.slow
def test_gadget_faults_over_five_seeds(data_env, tmp_path):
    res = run_sweep(SCENARIOS / "gadget_a9a_faults.toml", out=tmp_path / "sw", progress=False, keep_runs=False)
    faulty, free = res.trials
    assert faulty["trials"] == free["trials"] == 5
    assert all(r["stop_reason"].startswith("algorithm finished") for r in res.rows)
    assert abs(faulty["test_accuracy_mean"] - free["test_accuracy_mean"]) < 0.02
    for a, b in zip(res.rows[:5], res.rows[5:]):
        assert abs(a["test_accuracy"] - b["test_accuracy"]) < 0.02 and a["dropped_messages"] > 0


@pytest.mark.slow
def test_table3_shape_on_a9a(data_env, tmp_path):
    res = run_sweep(SCENARIOS / "gadget_a9a_table3.toml", out=tmp_path / "sw", progress=False, keep_runs=False)
    t = {r["variant"]: r for r in res.trials}
    assert set(t) == {"GADGET (paper rule)", "Pegasos (paper rule)", "GADGET (T = 30000, averaged)",
                      "Pegasos (100 epochs)"}
    assert all(r["trials"] == 5 for r in res.trials)
    long_g, long_p = t["GADGET (T = 30000, averaged)"], t["Pegasos (100 epochs)"]
    assert abs(long_g["test_accuracy_mean"] - long_p["test_accuracy_mean"]) <= 0.01
    assert long_g["test_accuracy_std"] <= 0.005
    assert t["GADGET (paper rule)"]["test_accuracy_mean"] >= 0.75
    assert "## mean ± std over seed (5 trials" in (tmp_path / "sw" / "sweep.md").read_text()
