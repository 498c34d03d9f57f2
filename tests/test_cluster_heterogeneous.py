"""Heterogeneous modelled clusters: per-node compute rates and per-link speeds from a log-normal spread (drawn from
the seed), from a trace file, one by one, or from a named profile. A star all-reduce with one slow node takes its
closed form; a scenario's spread reaches the modelled time on both round loops; bad trace files get one clear
error each."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

import svmsim
from svmsim.comm import Meter
from svmsim.comm.edges import edge_index
from svmsim.comm.message import MessageBatch, Outbox
from svmsim.engine import InProcessEngine
from svmsim.engine.base import split_roles
from svmsim.errors import ScenarioError
from svmsim.program import NodeProgram, RoleSpec
from svmsim.schedule import SyncScheduler
from svmsim.schedule.cluster_time import ClusterClock, NetworkModel
from svmsim.core.metrics import WALL_CLOCK_METRICS

ALPHA, BETA, WORK, D = 50e-6, 1e9, 1e6, 10


class Leaf(NodeProgram):
    """Round 0: compute WORK operations, send a D-vector to the hub; then take the sum back."""

    role = "leaf"
    initiator = True

    def init(self, node_ids, node_data, seed):
        return {"ids": np.asarray(node_ids), "sum": None}

    def step(self, st, inbox, round_):
        out = Outbox()
        if round_ == 0:
            out.send(MessageBatch.gather("up", st["ids"], 0, np.ones((st["ids"].size, D))))
            out.signals = {"work": np.full(st["ids"].size, WORK)}
        elif "down" in inbox:
            st["sum"] = inbox["down"].rows()[0].copy()
            out.signals = {"done": True}
        return st, out


class Hub(NodeProgram):
    role = "hub"

    def init(self, node_ids, node_data, seed):
        return {"leaves": node_data[0]["leaves"]}

    def step(self, st, inbox, round_):
        out = Outbox()
        total = inbox["up"].rows().sum(axis=0)
        out.send(MessageBatch.broadcast("down", 0, st["leaves"], total))
        return st, out


def _star_allreduce_time(model: NetworkModel, k: int) -> ClusterClock:
    leaves = np.arange(1, k, dtype=np.int64)
    roles = [RoleSpec("hub", Hub(), np.array([0]), [{"leaves": leaves}]),
             RoleSpec("leaf", Leaf(), leaves, [None] * leaves.size)]
    eng = InProcessEngine()
    groups = split_roles(roles, {"leaf": 3})
    eng.deploy(groups, 0)
    adjacency = nx.to_numpy_array(nx.star_graph(k - 1), nodelist=range(k)) > 0
    clock = ClusterClock(model, k, *edge_index(adjacency, k))
    SyncScheduler(eng, groups, Meter(k, adjacency), k, clock=clock).run()
    return clock


@pytest.mark.parametrize("seed", range(5))
def test_a_star_allreduce_waits_for_its_slowest_node(seed):
    """Closed form: the slowest leaf s computes WORK / r_s, its vector crosses its link (b = 8D / beta, alpha); the
    hub's send port then serialises K - 1 vectors: WORK / r_s + 2 alpha + K b. The rates are the spread's draws for
    the seed: the same seed gives the same cluster, and another seed another one."""
    k = 8
    model = NetworkModel(latency=ALPHA, bandwidth=BETA, compute_rate=1e9, compute_spread=1.0, seed=seed)
    rates = model.node_rate_array(k)
    assert np.array_equal(rates, NetworkModel(compute_spread=1.0, seed=seed).node_rate_array(k))
    assert not np.array_equal(rates, NetworkModel(compute_spread=1.0, seed=seed + 1).node_rate_array(k))
    assert np.unique(rates).size == k and 0.05 < np.median(rates / 1e9) < 20
    b = 8 * D / BETA
    clock = _star_allreduce_time(model, k)
    assert np.array_equal(clock.rates, rates)
    assert math.isclose(clock.now, WORK / rates[1:].min() + 2 * ALPHA + k * b, rel_tol=1e-12)
    # the same cluster given node by node: one slow node, the others at the table's rate
    slow = NetworkModel(latency=ALPHA, bandwidth=BETA, compute_rate=1e9, node_rates={5: 1e7})
    assert math.isclose(_star_allreduce_time(slow, k).now, WORK / 1e7 + 2 * ALPHA + k * b, rel_tol=1e-12)


def test_a_link_spread_slows_each_link_by_its_own_factor_both_ways():
    k = 6
    adjacency = nx.to_numpy_array(nx.complete_graph(k), nodelist=range(k)) > 0
    ptr, nbr = edge_index(adjacency, k)
    plain = NetworkModel(latency=ALPHA, bandwidth=BETA)
    alpha, per_byte = NetworkModel(latency=ALPHA, bandwidth=BETA, link_spread=0.7, seed=3).link_arrays(ptr, nbr)
    factor = alpha / plain.link_arrays(ptr, nbr)[0]
    np.testing.assert_allclose(per_byte * BETA, factor, rtol=1e-12)      # latency x f, bandwidth / f
    assert 0.1 < np.median(factor) < 10 and factor.min() < 1 < factor.max()
    spread = NetworkModel(latency=ALPHA, bandwidth=BETA, link_spread=0.7, seed=3,
                          links={(0, 1): (1e-3, None)})                  # an exact override wins over the spread
    alpha, per_byte = spread.link_arrays(ptr, nbr)
    src = np.repeat(np.arange(k), np.diff(ptr))
    edge = {(int(s), int(d)): e for e, (s, d) in enumerate(zip(src, nbr))}
    for (s, d), e in edge.items():
        assert alpha[e] == alpha[edge[(d, s)]]                         # one factor per link
    assert alpha[edge[(0, 1)]] == alpha[edge[(1, 0)]] == 1e-3                # the override's latency, both ways
    assert per_byte[edge[(0, 1)]] == per_byte[edge[(1, 0)]] != 1 / BETA      # and the spread's bandwidth
    others = np.array([alpha[e] for (s, d), e in edge.items() if {s, d} != {0, 1}])
    assert np.unique(others).size == (k * (k - 1)) // 2 - 1


SCENARIO = {"name": "het", "seed": 4, "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
            "algorithm": {"name": "bqo-e", "workers": 6, "allreduce": "star"}, "stop": {"max_iterations": 12},
            "output": {"eval_every": 3, "progress": False, "plots": False}}


def _rows(res):
    return [{k: v for k, v in m.items() if k not in WALL_CLOCK_METRICS} for m in res.metrics]


def test_a_scenarios_spread_reaches_the_modelled_time_on_both_round_loops(data_env, monkeypatch):
    from svmsim.schedule import sync

    monkeypatch.setattr(sync, "COMPILE_AFTER_SECONDS", 0.0)
    network = {"latency": 1e-4, "bandwidth": 1e8, "compute_rate": 1e7}
    plain = svmsim.run({**SCENARIO, "network": network}, write=False)
    spread = {c: svmsim.run({**SCENARIO, "network": {**network, "compute_spread": 1.5},
                             "schedule": {"compiled": c}}, write=False) for c in (False, True)}
    assert _rows(spread[True]) == _rows(spread[False])                 # bit for bit on both loops
    s = spread[True].summary["modelled_time"]
    drawn = NetworkModel(compute_rate=1e7, compute_spread=1.5, seed=4).node_rate_array(6)   # 6 workers
    assert s["compute_rate_range"] == [drawn.min(), drawn.max()]
    assert s["model"]["compute_spread"] == 1.5
    assert s["seconds"] != plain.summary["modelled_time"]["seconds"]
    assert plain.summary["modelled_time"]["compute_rate_range"] == [1e7, 1e7]
    assert spread[True].ledger.equals(plain.ledger)                       # time, not traffic
    other = svmsim.run({**SCENARIO, "seed": 5, "network": {**network, "compute_spread": 1.5}}, write=False)
    assert other.summary["modelled_time"]["compute_rate_range"] != s["compute_rate_range"]


def test_a_trace_file_gives_nodes_and_links(data_env, tmp_path):
    trace = tmp_path / "cluster.csv"
    trace.write_text("kind,node,peer,compute_rate,latency,bandwidth\n"
                     + "".join(f"node,{i},,{1e7 * (i + 1):g},,\n" for i in range(6))
                     + "link,0,1,,0.01,\n")
    path = tmp_path / "het.toml"
    path.write_text('name = "het"\nseed = 4\n[data]\nname = "heart_scale"\n[topology]\nkind = "complete"\n'
                    '[algorithm]\nname = "bqo-e"\nworkers = 6\nallreduce = "star"\n[stop]\nmax_iterations = 6\n'
                    '[output]\nplots = false\nprogress = false\n[network]\ntrace = "cluster.csv"\n'
                    '[[network.nodes]]\nid = 3\ncompute_rate = 5.0\n')
    res = svmsim.run(str(path), out_dir=tmp_path / "run")
    assert res.summary["modelled_time"]["compute_rate_range"] == [5.0, 6e7]     # the table's node 3 wins
    # the resolved scenario reads back to the same cluster
    again = svmsim.run(str(tmp_path / "run" / "scenario.resolved.toml"), write=False)
    assert again.summary["modelled_time"]["seconds"] == res.summary["modelled_time"]["seconds"]


@pytest.mark.parametrize("text,message", [
    ("kind,node,compute_rate\nnode,0,1e9\n", r"\[network\] node 1 is missing from trace"),
    ("kind,node,peer,bandwidth\nlink,0,1,-5\n", r"line 2: bandwidth = -5 is out of range; allowed: a finite number > 0"),
    ("kind,node,speed\nnode,0,1e9\n", r"line 1: unknown column 'speed'; allowed columns: kind, node, peer, "
                                      r"compute_rate, latency, bandwidth"),
    ("kind,node,compute_rate\nnode,x,1e9\n", r"line 2: node = 'x' is not a node id; allowed: an integer >= 0"),
    ("kind,node,compute_rate\nserver,0,1e9\n", r"line 2: kind = 'server' is unknown; allowed: 'node' or 'link'"),
    ("kind,node,compute_rate\nnode,0\n", r"line 2: 2 cells for the header's 3 columns"),
    ("", r"is empty"),
])
def test_a_bad_trace_gets_one_clear_error(tmp_path, data_env, text, message):
    trace = tmp_path / "t.csv"
    trace.write_text(text)
    sc = {**SCENARIO, "algorithm": {"name": "bqo-e", "workers": 2, "allreduce": "star"},
          "network": {"trace": str(trace)}}
    with pytest.raises(ScenarioError, match=message):
        svmsim.run(sc, write=False)


def test_profiles_set_the_defaults_and_bad_keys_are_refused():
    base = {k: v for k, v in SCENARIO.items() if k != "output"}
    wan = svmsim.load_scenario({**base, "network": {"profile": "wan", "latency": 1e-3}}).network
    assert wan.settings() == {"latency": 1e-3, "bandwidth": 12.5e6, "compute_rate": 1e9, "compute_spread": 0.0,
                              "link_spread": 0.5}
    edge = svmsim.load_scenario({**base, "network": {"profile": "edge", "compute_spread": 0.0}}).network
    assert svmsim.load_scenario({**base, "network": edge.model_dump()}).network.settings() == edge.settings()
    assert edge.settings()["compute_spread"] == 0.0
    for network, message in (({"profile": "cloud"}, r"profile = 'cloud' is unknown; allowed: 'datacenter-10g', "
                                                     r"'wan', 'edge'"),
                             ({"compute_spread": -1}, r"compute_spread"),
                             ({"nodes": [{"id": 1}]}, r"compute_rate"),
                             ({"trace": "no/such/file.csv"}, r"trace 'no/such/file.csv' cannot be read")):
        with pytest.raises(ScenarioError, match=message):
            svmsim.load_scenario({**base, "network": network})
