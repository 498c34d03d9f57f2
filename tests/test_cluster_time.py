"""Modelled cluster time of synchronous rounds: all-reduces over star, ring and tree take their alpha-beta closed
forms, the known crossover (tree for small vectors, ring for large ones) appears, link overrides and compute work
count, and a scenario's [network] table adds modelled_time to every metrics row."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

import svmsim
from svmsim.algorithms.collective import CollectiveProgram
from svmsim.comm import Meter
from svmsim.comm.collectives import plan
from svmsim.comm.edges import edge_index
from svmsim.engine import InProcessEngine
from svmsim.errors import ProtocolError, ScenarioError
from svmsim.program import RoleSpec
from svmsim.schedule import SyncScheduler
from svmsim.schedule.cluster_time import ClusterClock, NetworkModel
from svmsim.topology import build_topology
from svmsim.core.metrics import WALL_CLOCK_METRICS

ALPHA, BETA = 50e-6, 1.25e9


def _allreduce_time(pattern, k, d, model=None, compiled=False):
    p = plan("allreduce", pattern, np.arange(k), d)
    G = build_topology("complete", k)
    roles = [RoleSpec("peer", CollectiveProgram(p), p.nodes, [{"value": np.ones(d)} for _ in range(k)])]
    eng = InProcessEngine()
    groups = eng.plan(roles)
    eng.deploy(groups, 0)
    adjacency = nx.to_numpy_array(G, nodelist=range(k)) > 0
    clock = ClusterClock(model or NetworkModel(latency=ALPHA, bandwidth=BETA), k, *edge_index(adjacency, k))
    SyncScheduler(eng, groups, Meter(k, adjacency), k, clock=clock, compiled=compiled).run()
    return clock.now


@pytest.mark.parametrize("k", [3, 7, 15])
@pytest.mark.parametrize("per_node", [1, 100, 10_000])
def test_allreduce_times_equal_their_closed_forms(k, per_node):
    d = k * per_node
    b = 8 * d / BETA                      # seconds to send the whole vector over one link
    star = 2 * ALPHA + 2 * (k - 1) * b   # the hub's receive, then its send port, serialise K - 1 messages
    assert math.isclose(_allreduce_time("star", k, d), star, rel_tol=1e-12)
    ring = 2 * (k - 1) * (ALPHA + b / k)  # d is a multiple of k here: chunks of d / k
    assert math.isclose(_allreduce_time("ring", k, d), ring, rel_tol=1e-12)
    h = int(math.log2(k + 1))             # a full binary tree: two children per inner node, h levels below the root
    h = h - 1
    tree = 2 * h * (ALPHA + 2 * b)
    assert math.isclose(_allreduce_time("tree", k, d), tree, rel_tol=1e-12)


@pytest.mark.parametrize("k", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("per_node", [1, 100, 10_000])
def test_the_binomial_allreduce_takes_log2_k_message_times_each_way(k, per_node):
    """K a power of two: log2 K levels up, and log2 K down with the tallest subtree served first through the one
    send port: 2 log2 K (alpha + 8d / beta). For other K the tree is lower and the time no longer."""
    d = k * per_node
    b = 8 * d / BETA
    levels = k.bit_length() - 1
    assert math.isclose(_allreduce_time("binomial", k, d), 2 * levels * (ALPHA + b), rel_tol=1e-12)
    other = k + k // 2 + 1                    # between two powers of two
    assert _allreduce_time("binomial", other, d) <= 2 * other.bit_length() * (ALPHA + b) * (1 + 1e-12)


@pytest.mark.parametrize("k", [7, 15, 16])
def test_the_binomial_tree_is_never_slower_than_the_binary_tree(k):
    """Both have about log2 K levels, but a binary parent's two children serialise at its receive port
    (alpha + 2b a level) where a binomial parent mostly hears one child at a time (alpha + b): never slower, and
    at least a fifth faster for large vectors (K = 7, 15, 16: 0.75, 0.67, 0.73 of the binary tree's time as d grows;
    d = 10^4 K is past 20 link latencies' worth of bytes)."""
    for d in (k, 100 * k):
        assert _allreduce_time("binomial", k, d) <= _allreduce_time("tree", k, d) * (1 + 1e-12)
    assert _allreduce_time("binomial", k, 10_000 * k) < 0.8 * _allreduce_time("tree", k, 10_000 * k)


def test_tree_wins_small_vectors_and_ring_wins_large_ones():
    k = 15
    small = {p: _allreduce_time(p, k, 15) for p in ("star", "ring", "tree")}
    large = {p: _allreduce_time(p, k, 150_000) for p in ("star", "ring", "tree")}   # 9x the crossover's d
    assert small["tree"] < small["ring"] and small["star"] < small["ring"]
    assert large["ring"] < large["tree"] < large["star"]


def test_a_slow_link_and_compute_work_count():
    k, d = 5, 50
    slow = NetworkModel(latency=ALPHA, bandwidth=BETA, links={(0, 1): (1e-3, BETA / 10)})
    assert _allreduce_time("ring", k, d, slow) > _allreduce_time("ring", k, d) + 1.5e-3   # crossed twice
    clock = ClusterClock(NetworkModel(latency=0.0, bandwidth=1e9, compute_rate=1e6), 2,
                         np.array([0, 1, 2]), np.array([1, 0]))
    clock.advance(np.array([0, 1]), np.array([1e-3, 3e-3]), np.array([0]), np.array([1]), np.array([8000.0]))
    assert math.isclose(clock.now, 3e-3) and math.isclose(clock.ready[1], 3e-3)   # node 1's own compute
    clock.advance(np.array([1]), np.array([0.0]), np.array([1]), np.array([0]), np.array([1e9]))
    assert math.isclose(clock.ready[0], 3e-3 + 1.0)                               # 1 GB at 1 GB/s


@pytest.mark.parametrize("k", [3, 8])
def test_a_step_overhead_is_paid_once_per_step_on_the_critical_path(k):
    """Every step costs `step_overhead` beside its work: a star all-reduce has three steps in a row (the leaves
    send, the hub sums and sends, the leaves take the total), a ring 2 (K - 1) + 1; the same seconds, to the bit, on
    the compiled rounds; and no overhead gives the time of a model without the key."""
    d, o = 10 * k, 1e-3
    b = 8 * d / BETA
    model = NetworkModel(latency=ALPHA, bandwidth=BETA, step_overhead=o)
    star = 2 * ALPHA + 2 * (k - 1) * b + 3 * o
    ring = 2 * (k - 1) * (ALPHA + b / k) + (2 * (k - 1) + 1) * o
    for pattern, closed in (("star", star), ("ring", ring)):
        python = _allreduce_time(pattern, k, d, model)
        assert math.isclose(python, closed, rel_tol=1e-12)
        assert _allreduce_time(pattern, k, d, model, compiled=True) == python
        assert _allreduce_time(pattern, k, d, NetworkModel(latency=ALPHA, bandwidth=BETA, step_overhead=0.0),
                               compiled=True) == _allreduce_time(pattern, k, d)
    with pytest.raises(ScenarioError, match="step_overhead = -1.0 is out of range"):
        NetworkModel(step_overhead=-1.0)


@pytest.mark.parametrize("pattern", ["star", "ring", "tree", "binomial"])
def test_the_compiled_rounds_keep_the_same_time_bit_for_bit(pattern):
    """The compiled loop keeps the modelled time with the Python rounds' functions: the same seconds, to the bit,
    also with a slow link (whose messages queue at the receive ports in another order)."""
    slow = NetworkModel(latency=ALPHA, bandwidth=BETA, links={(0, 1): (1e-3, BETA / 10)})
    for model in (None, slow):
        for k, d in ((5, 50), (16, 1600)):
            assert _allreduce_time(pattern, k, d, model, compiled=True) == _allreduce_time(pattern, k, d, model)


def test_work_the_compiled_loop_cannot_read_keeps_a_clocked_run_on_the_python_rounds(monkeypatch):
    """A kernel whose declared work is not an item of its state: with a clock, the run stays on the Python rounds
    (which read the work from the step's signals), so its compute time still counts."""
    from svmsim.program import SyncKernel

    def kernel(self, state):
        st, max_out = state
        return SyncKernel(st, collective_kernel_step, self.tags, self.widths, max_out,
                          work=np.full(st.value.shape[0], 1e6))      # per member

    from svmsim.algorithms.collective import collective_kernel_step

    monkeypatch.setattr(CollectiveProgram, "kernel", kernel)
    model = NetworkModel(latency=ALPHA, bandwidth=BETA, compute_rate=1e9)
    compiled, python = (_allreduce_time("ring", 4, 40, model, compiled=c) for c in (True, False))
    assert compiled == python and python > 1e-3          # every step's 1e6 operations at 1e9/s are in the time
    monkeypatch.setattr(CollectiveProgram, "kernel", lambda self, state: SyncKernel(
        state[0], collective_kernel_step, self.tags, self.widths, state[1], work=np.full(1, 1e6)))
    with pytest.raises(ProtocolError, match=r"declared work of shape \(1,\) for its 4 nodes; allowed: one number of "
                                            r"operations per node, in member order$"):
        _allreduce_time("ring", 4, 40, model)


def test_a_scenario_with_a_network_runs_on_the_compiled_rounds(data_env, monkeypatch):
    """[network] no longer turns the compiled loop off: paper 001's and 004's steps declare their work, and the
    metrics (modelled_time included) equal the Python rounds' bit for bit."""
    from svmsim.schedule import compiled_sync, sync

    calls = []
    run_rounds = compiled_sync.run_compiled_rounds
    monkeypatch.setattr(sync, "COMPILE_AFTER_SECONDS", 0.0)
    monkeypatch.setattr(compiled_sync, "run_compiled_rounds", lambda *a, **k: calls.append(1) or run_rounds(*a, **k))
    for algorithm in ({"name": "bqo-e", "allreduce": "binomial"}, {"name": "pragam", "lam": 1e-2}):
        scenario = {"name": "net", "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
                    "algorithm": {"workers": 4, **algorithm}, "stop": {"max_iterations": 12},
                    "output": {"eval_every": 3, "progress": False, "plots": False},
                    "network": {"latency": 1e-4, "bandwidth": 1e8, "compute_rate": 1e8,
                                "links": [{"a": 0, "b": 1, "latency": 1e-3}]}}
        runs = {}
        for compiled in (False, True):
            calls.clear()
            runs[compiled] = svmsim.run({**scenario, "schedule": {"compiled": compiled}}, write=False)
            assert bool(calls) == compiled
        def rows(res):
            return [{k: v for k, v in m.items() if k not in WALL_CLOCK_METRICS} for m in res.metrics]

        assert rows(runs[True]) == rows(runs[False]) and len(rows(runs[True])) == 4
        assert runs[True].summary["modelled_time"] == runs[False].summary["modelled_time"]


def test_measured_compute_on_ray_times_each_step_on_its_host(ray_local, data_env):
    """``compute = "measured"`` on the Ray engine: one group per node, each step timed on its host actor and taken
    off its outbox's signals by the driver: the run is the in-process one (ledger, rows less times, model), its
    clock has compute time on every worker, and no timing signal reaches the programs' observations."""
    scenario = {"name": "net", "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
                "algorithm": {"name": "bqo-e", "workers": 3}, "stop": {"max_iterations": 6},
                "output": {"eval_every": 2, "progress": False, "plots": False},
                "network": {"latency": 1e-3, "compute": "measured"}}
    here = svmsim.run(scenario, write=False)
    on_ray = svmsim.run({**scenario, "engine": {"name": "ray", "actors": 2}}, write=False)
    assert on_ray.ledger.equals(here.ledger)
    assert np.array_equal(on_ray.model["w_last"], here.model["w_last"])

    def rows(res):
        return [{k: v for k, v in m.items() if k not in WALL_CLOCK_METRICS and k != "modelled_time"}
                for m in res.metrics]

    assert rows(on_ray) == rows(here)
    assert on_ray.summary["modelled_time"]["compute_seconds_max_node"] > 0
    assert on_ray.summary["modelled_time"]["seconds"] > 6 * 1e-3


def test_network_table_in_a_scenario(data_env):
    scenario = {"name": "net", "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
                "algorithm": {"name": "bqo-e", "workers": 4, "allreduce": "ring"}, "stop": {"max_iterations": 10},
                "output": {"eval_every": 2, "progress": False, "plots": False},
                "network": {"latency": 1e-3, "bandwidth": 1e9, "compute_rate": 1e9}}
    res = svmsim.run(scenario, write=False)
    times = res.column("modelled_time")
    assert np.all(np.diff(times) > 0)
    # 10 iterations of a ring all-reduce of 17 scalars over 4 workers: 6 latencies each, at least
    assert times[-1] >= 10 * 6 * 1e-3
    assert res.summary["modelled_time"]["seconds"] == times[-1]
    # compute time measured per node step (one group per node, timed in process): the same run, its own clock
    measured = svmsim.run({**scenario, "network": {**scenario["network"], "compute": "measured"}}, write=False)
    assert measured.ledger.equals(res.ledger)
    assert np.array_equal(measured.model["w_last"], res.model["w_last"])
    assert measured.summary["modelled_time"]["compute_seconds_max_node"] > 0
    with pytest.raises(ScenarioError, match=r"compute"):
        svmsim.run({**scenario, "network": {"compute": "guess"}}, write=False)
    # a step overhead: refused below 0; written out in the resolved scenario only where set
    with pytest.raises(ScenarioError, match=r"step_overhead"):
        svmsim.load_scenario({**scenario, "network": {"step_overhead": -1e-3}})
    assert "step_overhead" not in svmsim.load_scenario(scenario).to_dict()["network"]
    overhead = svmsim.load_scenario({**scenario, "network": {**scenario["network"], "step_overhead": 2e-4}})
    assert overhead.to_dict()["network"]["step_overhead"] == 2e-4
    assert svmsim.load_scenario(overhead.to_dict()).network.model().step_overhead == 2e-4
    with pytest.raises(ScenarioError, match=r"\[network\] bandwidth"):
        svmsim.run({**scenario, "network": {"bandwidth": 0}}, write=False)
    with pytest.raises(ScenarioError, match=r"link 0-9 is not an edge"):
        svmsim.run({**scenario, "network": {"links": [{"a": 0, "b": 9, "latency": 1.0}]}}, write=False)
