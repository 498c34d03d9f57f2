"""Bad gossip set-ups through `svmsim run` and the Python API: a disconnected topology, a node with no data, a fault
probability out of range, and faults that could stall a run. Each is a clear error (exit status 2, one message, no
traceback, no run directory) or a documented warning, never a hang."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

import svmsim
from svmsim.algorithms.gadget import GadgetPeer
from svmsim.cli import main
from svmsim.errors import DataError, InfeasibleParameterError, ScenarioError, TopologyError
from svmsim.faults import FaultModel
from svmsim.config import dump_toml
from svmsim.schedule.gossip import GossipStopReason

PUSHSUM = {"name": "ps-errors", "seed": 0, "data": {"name": "iris"}, "topology": {"kind": "ring"},
           "algorithm": {"name": "pushsum", "nodes": 10}, "schedule": {"latency": 0.0},
           "stop": {"max_rounds": 200}, "output": {"progress": False, "plots": False}}
GADGET = {"name": "gadget-errors", "seed": 0, "data": {"name": "iris", "holdout": 0.3},
          "topology": {"kind": "random_k_out", "k": 2},
          "algorithm": {"name": "gadget", "nodes": 10, "lam": 1e-2, "eps": 0.0, "iterations": 200},
          "schedule": {"latency": 0.0, "eval_time": 50.0},
          "stop": {"max_iterations": 100000}, "output": {"progress": False, "plots": False}}
SCENARIOS = {"pushsum": PUSHSUM, "gadget": GADGET}


def with_(base: dict, **sections) -> dict:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, value in sections.items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def cli_run(tmp_path, scenario: dict, *extra: str):
    """`svmsim run` on `scenario` written to a file in tmp_path; returns (exit status, run directory)."""
    path = tmp_path / "scenario.toml"
    path.write_text(dump_toml(scenario))
    out = tmp_path / "run"
    code = main(["run", str(path), "--out", str(out), "--no-progress", *extra])
    return code, out


def assert_clear_error(code, out, capsys, *needles):
    captured = capsys.readouterr()
    assert code == 2, captured
    assert "Traceback" not in captured.err and captured.err.startswith("svmsim: error: ")
    text = " ".join(captured.err.split())                 # the message is wrapped at 110 columns
    for needle in needles:
        assert needle in text, captured.err
    assert not out.exists()


# ----------------------------------------------------------------------------------------------------------------
# a disconnected topology


@pytest.mark.parametrize("algorithm", ["pushsum", "gadget"])
def test_disconnected_edge_list_is_a_clear_error_through_the_cli(tmp_path, capsys, algorithm):
    edges = tmp_path / "two_parts.txt"
    edges.write_text("0 1\n1 2\n2 0\n3 4\n4 5\n5 3\n")
    scenario = with_(SCENARIOS[algorithm], algorithm={"nodes": 6})
    scenario["topology"] = {"kind": "edge_list", "path": str(edges)}
    code, out = cli_run(tmp_path, scenario)
    assert_clear_error(code, out, capsys, "disconnected: 2 connected components", "every node must be reachable")


@pytest.mark.parametrize("algorithm", ["pushsum", "gadget"])
def test_disconnected_or_isolated_python_graph_is_a_clear_error(algorithm):
    two_parts = nx.Graph([(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)])
    scenario = with_(SCENARIOS[algorithm], algorithm={"nodes": 6})
    with pytest.raises(TopologyError, match="disconnected: 2 connected components"):
        svmsim.run(scenario, topology=two_parts, write=False)
    isolated = nx.cycle_graph(5)
    isolated.add_node(5)
    with pytest.raises(TopologyError, match="isolated node|disconnected"):
        svmsim.run(scenario, topology=isolated, write=False)


def test_a_random_topology_that_stays_disconnected_is_a_clear_error(tmp_path, capsys):
    scenario = with_(PUSHSUM, algorithm={"nodes": 100})
    scenario["topology"] = {"kind": "erdos_renyi", "p": 0.001}
    code, out = cli_run(tmp_path, scenario)
    assert_clear_error(code, out, capsys, "disconnected for all 100 seeds", "use a larger p")


# ----------------------------------------------------------------------------------------------------------------
# a node with no data


@pytest.mark.parametrize("algorithm, needle", [("pushsum", "at most 150 nodes"),
                                               ("gadget", "exceeds the number of training points (105)")])
def test_more_nodes_than_points_is_a_clear_error_through_the_cli(tmp_path, capsys, algorithm, needle):
    code, out = cli_run(tmp_path, with_(SCENARIOS[algorithm], algorithm={"nodes": 200}))
    assert_clear_error(code, out, capsys, needle)


def test_a_gadget_node_with_an_empty_shard_is_a_data_error():
    """A shard built by hand (the scenario's partitions never give a node nothing) must not reach the kernels,
    which would sample a row of another node's shard."""
    ds = svmsim.data.make_dataset({"name": "iris"})
    data = [{"X": ds.X[idx], "y": ds.y[idx], "neighbours": [(i + 1) % 3, (i + 2) % 3], "probs": [0.5, 0.5]}
            for i, idx in enumerate([np.arange(0, 5), np.arange(5, 5), np.arange(5, 9)])]
    with pytest.raises(DataError, match="node 1 has no data points"):
        GadgetPeer(ds.d, lam=1e-2).init(np.arange(3), data, 0)


def test_more_nodes_than_points_is_a_clear_error_in_python():
    with pytest.raises(InfeasibleParameterError, match="exceeds the number of training points"):
        svmsim.run(with_(GADGET, algorithm={"nodes": 151}), write=False)


# ----------------------------------------------------------------------------------------------------------------
# fault probabilities out of range


@pytest.mark.parametrize("key, value, allowed", [
    ("drop", "1.0", "a number in [0, 1)"), ("drop", "1.5", "a number in [0, 1)"),
    ("drop", "-0.1", "a number in [0, 1)"), ("drop", "nan", "not a finite number"),
    ("duplicate", "1.0", "a number in [0, 1)"), ("crash", "1.5", "a number in [0, 1]"),
])
@pytest.mark.parametrize("algorithm", ["pushsum", "gadget"])
def test_fault_probability_out_of_range_is_a_clear_error_through_the_cli(tmp_path, capsys, algorithm, key, value,
                                                                         allowed):
    code, out = cli_run(tmp_path, SCENARIOS[algorithm], "--set", f"faults.{key}={value}")
    assert_clear_error(code, out, capsys, f"[faults] {key} = ", allowed)


@pytest.mark.parametrize("value", [1.0, 2.0, -0.5, math.nan, math.inf])
def test_fault_probability_out_of_range_is_a_clear_error_in_python(value):
    with pytest.raises(ScenarioError, match=r"faults.drop = .* is out of range; allowed: a number in \[0, 1\)"):
        FaultModel(drop=value)
    with pytest.raises(ScenarioError, match="drop"):
        svmsim.load_scenario(with_(GADGET, faults={"drop": value}))


# ----------------------------------------------------------------------------------------------------------------
# faults that could stall a run


@pytest.mark.parametrize("algorithm", ["pushsum", "gadget"])
def test_crashing_every_node_ends_the_run(algorithm):
    res = svmsim.run(with_(SCENARIOS[algorithm], faults={"crash": 1.0}), write=False)
    assert res.stop_reason.startswith(GossipStopReason.QUIESCENT)      # GADGET's then says how far from J* it is
    assert res.summary["faults"]["crashed_nodes"] == list(range(10))
    assert res.ledger.totals["messages"] == 0


@pytest.mark.parametrize("compiled", [True, False])
def test_a_permanent_crash_does_not_hold_gadget_up(compiled):
    """GADGET's run ends when every node has finished; a crashed node never can, so it counts as finished while it
    is down. The metrics are then over the nodes that are up."""
    scenario = with_(GADGET, faults={"crash": 0.2}, schedule={"compiled": compiled})
    res = svmsim.run(scenario, write=False)
    assert res.stop_reason.startswith(GossipStopReason.DONE)
    assert res.summary["virtual_time"] < 400            # 200 steps at rate 1, not the 100000-round budget
    crashed = res.summary["faults"]["crashed_nodes"]
    assert len(crashed) == 2 and res.summary["faults"]["down_at_end"] == crashed
    final = res.final
    assert final["nodes_up"] == 8 and final["finished_nodes"] == 8
    assert final["test_accuracy_all_nodes"] < final["test_accuracy"]      # the crashed nodes' models are w = 0
    assert res.model["node_down"].sum() == 2
    assert res.summary["ledger_matches_declared"] is True
    if compiled:
        other = svmsim.run(with_(scenario, schedule={"compiled": False}), write=False)
        assert other.final["test_accuracy"] == final["test_accuracy"] and other.ledger.equals(res.ledger)


def test_gadget_waits_for_crashed_nodes_that_come_back():
    res = svmsim.run(with_(GADGET, faults={"crash": 0.2, "crash_time": 20.0, "recover_time": 60.0}), write=False)
    assert res.stop_reason.startswith(GossipStopReason.DONE)
    assert res.final["finished_nodes"] == 10 and "nodes_up" not in res.final
    assert res.summary["faults"]["node_events"] == {"crash": 2, "recover": 2}
    assert res.summary["faults"]["down_at_end"] == []


def test_cli_warns_before_a_gossip_run_without_a_budget(tmp_path, capsys):
    """A gossip run whose only stopping rule is a metric threshold runs until that is met or every node has
    finished; with faults the first may never happen, so `svmsim run` says so (this GADGET run finishes: T = 200
    steps)."""
    scenario = with_(GADGET, faults={"drop": 0.1})
    scenario["stop"] = {"below": {"model_disagreement_max": 1e-12}}
    code, out = cli_run(tmp_path, scenario)
    captured = capsys.readouterr()
    assert code == 0
    assert "svmsim: warning: this gossip run has no budget" in captured.err
    assert "with faults" in captured.err and "set a budget" in captured.err
    assert "stopped    algorithm finished" in captured.out
    (tmp_path / "budget").mkdir()
    code, out = cli_run(tmp_path / "budget", with_(GADGET, faults={"drop": 0.1}))       # max_iterations is set
    assert code == 0 and "warning" not in capsys.readouterr().err


def test_eval_messages_on_ray_is_refused_before_ray_starts(tmp_path, capsys):
    """Ray hosts evaluate on their own clocks: counting messages for evaluation points needs one process, so the
    scenario is refused at validation (exit 2, no run directory, no Ray started)."""
    bad = with_(PUSHSUM, engine={"name": "ray"}, schedule={"eval_messages": 100})
    code, out = cli_run(tmp_path, bad)
    assert_clear_error(code, out, capsys, "eval_messages = 100", "allowed on engine ray: eval_time")
