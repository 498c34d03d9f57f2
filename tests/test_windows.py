"""Conservative time windows (`svmsim.schedule.windows`): several gossip hosts, driven window by window, give the
one-host run bit for bit (ledger, every node's state, the observer's rows, the stop), including a run that ends by
the programs' `done` signal (found exactly, then replayed) and runs with faults; the window is the smallest latency
a message can have, and a scenario that has none is refused. The Ray form is held by tests/test_ray_gossip.py."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from svmsim.algorithms.gadget import GadgetParams, build_gadget, gather_nodes
from svmsim.algorithms.pushsum import PushSumParams, build_pushsum
from svmsim.comm import merge_ledgers
from svmsim.comm.meter import Meter
from svmsim.config import load_scenario
from svmsim.core.streams import STREAM_EDGE, counter_uniform, standard_normal, stream_keys
from svmsim.core.timing import Clock, Distribution, LatencyModel
from svmsim.data import make_dataset
from svmsim.deployment import Problem
from svmsim.engine import InProcessEngine
from svmsim.errors import ScenarioError
from svmsim.faults import FaultModel
from svmsim.schedule.event_host import EventHost, GossipSetting
from svmsim.schedule.gossip import GossipScheduler, GossipStopReason
from svmsim.schedule.windows import WindowHost, _first_all_done, run_windows, smallest_latency
from svmsim.topology import neighbour_csr

LATENCY = LatencyModel(Distribution.uniform(0.3, 0.6))


@pytest.fixture(scope="module")
def iris():
    return make_dataset({"name": "iris"})


def one_host(dep, seed, latency, faults=None, compiled=None, eval_time=None, stop_after=None, **budgets):
    """The in-process run: (observations, meter, observer rows, stop reason, fault tally)."""
    engine = InProcessEngine()
    groups = engine.plan(dep.roles)
    engine.deploy(groups, seed)
    meter = Meter(dep.topology.number_of_nodes(), dep.adjacency(), dep.node_names)
    sched = GossipScheduler(engine, groups, meter, dep.topology, seed=seed, latency=latency, faults=faults,
                            compiled=compiled)
    rows = []

    def observe(p, obs):
        rows.append((p, obs))
        return stop_after is not None and len(rows) == stop_after

    reason = sched.run(eval_time=eval_time, on_observe=observe if eval_time else None, with_observations=True,
                       **budgets)
    observations = sched.observe()
    sched.finish()
    return observations, meter, rows, reason, sched.faults.tally


class Hosts:
    """`k` hosts in this process owning contiguous blocks of nodes, each an `EventHost` behind a `WindowHost`."""

    def __init__(self, dep, seed, latency, k, faults=None, compiled=None):
        self.dep, self.seed, self.latency, self.k = dep, seed, latency, k
        self.faults, self.compiled = faults or FaultModel(), compiled
        n = dep.topology.number_of_nodes()
        self.n = n
        self.owner = np.repeat(np.arange(k), -(-n // k))[:n].astype(np.int64)
        self.adj_ptr, self.adj = neighbour_csr(dep.topology)
        self.build()

    def build(self):
        (role,) = self.dep.roles
        self.meters = [Meter(self.n, self.dep.adjacency(), self.dep.node_names) for _ in range(self.k)]
        self.plan = self.faults.bind(self.n, self.seed)
        setting = GossipSetting(self.n, Clock(), self.latency, self.plan, self.seed, 1.0)
        self.hosts, self.states = [], []
        for j in range(self.k):
            mine = np.flatnonzero(self.owner == j)
            states = {j: role.program.init(mine, [role.node_data[i] for i in mine], self.seed)}
            node_group = np.where(self.owner == j, j, -1).astype(np.int64)
            host = EventHost({j: role.program}, states, node_group, self.owner, j, setting, self.adj_ptr, self.adj,
                             self.meters[j], compiled=self.compiled, xbatch_bytes=4000)
            self.states.append(states)
            self.hosts.append(WindowHost(host, lambda j=j: {j: role.program.observe(self.states[j][j])}))

    def step(self, requests):
        return [h.step(*req) for h, req in zip(self.hosts, requests)]

    def run(self, **kw):
        width = smallest_latency(self.latency, self.adj_ptr, self.adj, stream_keys(self.seed, STREAM_EDGE, 1)[0])
        out = run_windows(self.step, self.build, self.k, width, **kw)
        for j, wh in enumerate(self.hosts):
            for parts in out.transit[j]:
                wh.host.put_incoming(parts)
            wh.host.meter_in_flight()
        return out

    def ledger(self):
        return merge_ledgers([m.ledger() for m in self.meters])

    def observations(self):
        return [wh.observe()[j] for j, wh in enumerate(self.hosts)]


def same_ledger(a, b):
    assert a.equals(b) and a.summary() == b.summary() and a.totals["messages"] > 0


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("compiled", [None, False])
def test_gadget_in_windows_is_the_one_host_run_up_to_done(load, k, compiled):
    """GADGET ends by its programs' done signal: the hosts find the instant every node has finished, replay to it,
    and give the one-host ledger and node states bit for bit."""
    ds = load("heart_scale")
    dep = build_gadget(GadgetParams(nodes=7, lam=1e-2, eps=1e-3, patience=5, iterations=400),
                       Problem(ds, seed=0, topology_kind="random_k_out", topology_params={"k": 2}))
    ref_obs, ref_meter, _, reason, _ = one_host(dep, 0, LATENCY, compiled=compiled)
    assert reason == GossipStopReason.DONE
    hosts = Hosts(dep, 0, LATENCY, k, compiled=compiled)
    out = hosts.run()
    assert out.reason == "done" and out.replayed and out.windows > 10
    same_ledger(ref_meter.ledger(), hosts.ledger())
    ref = gather_nodes([ref_obs[0]])
    got = gather_nodes(hosts.observations())
    assert ref["done"].all() and got["done"].all()
    for key in ref:
        assert np.array_equal(ref[key], got[key]), key


def test_pushsum_in_windows_with_faults_and_an_observer_gives_the_one_host_rows(iris):
    """Push-Sum (compiled) under loss, duplicates, delays and crashes, with an observer every 2 time units and a
    time budget: the same rows (every progress field and every node's observation), ledger and fault tally."""
    dep = build_pushsum(PushSumParams(nodes=30, values="random", dim=4),
                        Problem(iris, seed=3, topology_kind="random_k_out", topology_params={"k": 2}))
    faults = FaultModel(drop=0.1, duplicate=0.05, delay=0.2, delay_time={"kind": "exponential", "mean": 0.3},
                        crash=0.1, crash_time=5.0, recover_time=9.0)
    latency = LatencyModel(Distribution.constant(0.25), edge_spread=0.3)
    _, ref_meter, ref_rows, reason, ref_tally = one_host(dep, 3, latency, faults=faults, eval_time=2.0,
                                                         max_time=21.0)
    assert reason == GossipStopReason.TIME and len(ref_rows) == 10
    hosts = Hosts(dep, 3, latency, 3, faults=faults)
    rows = []

    def observe(snaps, at):
        rows.append((at, snaps))
        return False

    out = hosts.run(max_time=21.0, eval_time=2.0, observe=observe)
    assert out.reason == "time" and not out.replayed
    assert [at for at, _ in rows] == [p.time for p, _ in ref_rows]
    for (at, snaps), (p, obs) in zip(rows, ref_rows):
        for key in ("wakes", "events", "sent", "sent_scalars", "in_flight", "messages", "scalars", "bytes"):
            assert sum(s[key] for s in snaps) == getattr(p, key), key
        got = {}
        for s in snaps:
            got.update(s["observations"])
        for key in ("s", "w"):
            merged = np.concatenate([got[j][key] for j in sorted(got)])
            assert np.array_equal(merged, obs[0][key]), key
    same_ledger(ref_meter.ledger(), hosts.ledger())
    tally = hosts.plan.tally
    assert tally.by_fate == ref_tally.by_fate and tally.node_event_counts == ref_tally.node_event_counts
    assert sorted(tally.node_events) == ref_tally.node_events
    assert {cause for (_, cause, _) in tally.by_fate} >= {"lost", "delivered", "in_flight_at_end"}
    assert tally.node_event_counts.get("crash", 0) > 0


def test_an_observer_stop_is_where_one_host_stops(iris):
    dep = build_pushsum(PushSumParams(nodes=12, values="random", dim=3),
                        Problem(iris, seed=1, topology_kind="ring", topology_params={}))
    ref_obs, ref_meter, ref_rows, reason, _ = one_host(dep, 1, LATENCY, eval_time=1.5, stop_after=4, max_time=30.0)
    assert reason == GossipStopReason.OBSERVER and ref_rows[-1][0].time == 6.0
    hosts = Hosts(dep, 1, LATENCY, 2)
    calls = []
    out = hosts.run(max_time=30.0, eval_time=1.5, observe=lambda snaps, at: calls.append(at) or len(calls) == 4)
    assert out.reason == "observer" and calls == [1.5, 3.0, 4.5, 6.0]
    same_ledger(ref_meter.ledger(), hosts.ledger())
    assert np.array_equal(np.concatenate([o["s"] for o in hosts.observations()]), ref_obs[0]["s"])


def test_the_first_instant_every_host_is_done():
    assert _first_all_done([False, False], [[(1.0, True)], [(2.0, True)]]) == 2.0
    assert _first_all_done([True, False], [[(1.5, False), (3.0, True)], [(2.0, True)]]) == 3.0
    assert _first_all_done([True, False], [[(2.5, False)], [(2.0, True)]]) == 2.0
    assert _first_all_done([False, False], [[(1.0, True)], []]) is None


def test_the_window_is_the_smallest_latency_and_zero_is_refused():
    G = nx.random_regular_graph(3, 20, seed=2)
    adj_ptr, adj = neighbour_csr(G)
    key = stream_keys(0, STREAM_EDGE, 1)[0]
    assert smallest_latency(LatencyModel(Distribution.constant(0.2)), adj_ptr, adj, key) == 0.2
    assert smallest_latency(LatencyModel(Distribution.uniform(0.1, 0.3), bandwidth=10.0), adj_ptr, adj, key) == 0.1
    spread = smallest_latency(LatencyModel(Distribution.constant(0.2), edge_spread=0.5), adj_ptr, adj, key)
    # the least edge factor exp(0.5 Z_edge) over the graph's edges, with the loop's draw for each edge
    z = min(standard_normal(counter_uniform(key, 2 * (min(u, v) * 20 + max(u, v))),
                            counter_uniform(key, 2 * (min(u, v) * 20 + max(u, v)) + 1)) for u, v in G.edges())
    assert spread == pytest.approx(0.2 * math.exp(0.5 * z) * (1 - 1e-9), rel=1e-15) and 0.02 < spread < 0.2
    for dist in (Distribution.constant(0.0), Distribution.exponential(0.1), Distribution.lognormal(0.1, 0.5)):
        with pytest.raises(ScenarioError, match="smallest message latency > 0.*allowed"):
            smallest_latency(LatencyModel(dist), adj_ptr, adj, key)


def test_a_deterministic_ray_scenario_needs_a_positive_latency_and_no_message_budget():
    base = {"name": "g", "data": {"name": "iris"}, "algorithm": {"name": "pushsum", "nodes": 10},
            "topology": {"kind": "random_k_out", "k": 2}, "stop": {"max_rounds": 5},
            "engine": {"name": "ray", "gossip": "deterministic"}}
    with pytest.raises(ScenarioError,
                       match=r"\[engine\] gossip = 'deterministic'.*latency = .*value = 0\.0\} can be 0; allowed"):
        load_scenario({**base, "schedule": {"latency": 0.0}})
    with pytest.raises(ScenarioError, match=r"\[engine\] gossip = 'deterministic'.*exponential.*can be 0; allowed"):
        load_scenario({**base, "schedule": {"latency": {"kind": "exponential", "mean": 0.1}}})
    with pytest.raises(ScenarioError, match=r"max_messages = 100 .*allowed with gossip = 'deterministic'"):
        load_scenario({**base, "schedule": {"latency": 0.1, "max_messages": 100}})
    with pytest.raises(ScenarioError, match=r"gossip = 'lockstep' is not a mode of gossip on Ray; allowed: "
                                            r"free, deterministic"):
        load_scenario({**base, "engine": {"name": "ray", "gossip": "lockstep"}})
    gadget = {**base, "algorithm": {"name": "gadget", "nodes": 10}, "schedule": {"latency": 0.1}}
    for faults in ({"crash": 0.1}, {"crash_nodes": [3]}, {"churn_rate": 0.01}):
        with pytest.raises(ScenarioError, match=r"\[engine\] gossip = 'deterministic' with faults that take nodes "
                                                r"down: algorithm 'gadget' ends when.*allowed: no crash"):
            load_scenario({**gadget, "faults": faults})
    assert load_scenario({**gadget, "faults": {"drop": 0.2, "duplicate": 0.1}}).faults.drop == 0.2
    assert load_scenario({**base, "schedule": {"latency": 0.1}}).engine.gossip == "deterministic"
    assert load_scenario({**base, "engine": {"name": "inproc"}, "schedule": {"latency": 0.0}}).engine.gossip == "free"


def test_the_deterministic_mode_refusals_are_whole_and_exact():
    """Every word of the three refusals (the allowed alternatives included), each condition at its edge: a uniform
    latency whose low end is 0 is refused like a zero constant, Push-Sum (which never ends by itself) may crash in
    windows, and the scalar budget is refused like the message budget."""
    import re

    base = {"name": "g", "data": {"name": "iris"}, "algorithm": {"name": "pushsum", "nodes": 10},
            "topology": {"kind": "random_k_out", "k": 2}, "stop": {"max_rounds": 5},
            "engine": {"name": "ray", "gossip": "deterministic"}}
    latency = ("scenario: [engine] gossip = 'deterministic' runs the hosts in time windows no longer than the smallest "
               "message latency, but [schedule] latency = {kind = \"uniform\", low = 0.0, high = 1.0} can be 0; "
               "allowed: a latency with a positive minimum (a constant > 0, a uniform distribution with low > 0), or "
               "gossip = \"free\"")
    with pytest.raises(ScenarioError, match="^" + re.escape(latency) + "$"):
        load_scenario({**base, "schedule": {"latency": {"kind": "uniform", "low": 0.0, "high": 1.0}}})
    budget = ("scenario: [stop] max_scalars = 1000 is a budget that one host meets at an exact message, which hosts in "
              "time windows cannot see; allowed with gossip = 'deterministic': [schedule] max_time, [stop] max_rounds "
              "or max_iterations (virtual time), or gossip = \"free\"")
    with pytest.raises(ScenarioError, match="^" + re.escape(budget) + "$"):
        load_scenario({**base, "schedule": {"latency": 0.1}, "stop": {"max_scalars": 1000, "max_rounds": 5}})
    messages = budget.replace("[stop] max_scalars = 1000", "[schedule] max_messages = 100")
    with pytest.raises(ScenarioError, match="^" + re.escape(messages) + "$"):
        load_scenario({**base, "schedule": {"latency": 0.1, "max_messages": 100}})
    faults = ("scenario: [engine] gossip = 'deterministic' with faults that take nodes down: algorithm 'gadget' ends "
              "when every node has finished or is down, a node going down or coming back can decide that instant, "
              "and time windows do not yet find it exactly (a host sees the change only at its next program event); "
              "allowed: no crash, crash_nodes or churn_rate with this algorithm, or gossip = \"free\"")
    with pytest.raises(ScenarioError, match="^" + re.escape(faults) + "$"):
        load_scenario({**base, "algorithm": {"name": "gadget", "nodes": 10}, "schedule": {"latency": 0.1},
                       "faults": {"crash": 0.1}})
    assert load_scenario({**base, "schedule": {"latency": 0.1}, "faults": {"crash": 0.1}}).faults.crash == 0.1
    low = load_scenario({**base, "schedule": {"latency": {"kind": "uniform", "low": 0.05, "high": 1.0}}})
    assert low.engine.gossip == "deterministic" and low.schedule.latency_distribution().minimum == 0.05


@pytest.mark.parametrize("compiled", [None, False])
def test_a_host_hands_back_at_a_done_change_only_when_asked_and_only_at_a_change(load, compiled):
    """Hosts in windows hand back at every change of their programs' done signal (and only then: the changes
    alternate), hosts not asked (the default) never do, whether the loop is compiled or Python."""
    ds = load("heart_scale")
    dep = build_gadget(GadgetParams(nodes=7, lam=1e-2, eps=1e-3, patience=5, iterations=400),
                       Problem(ds, seed=0, topology_kind="random_k_out", topology_params={"k": 2}))
    hosts = Hosts(dep, 0, LATENCY, 2, compiled=compiled)
    seen = []
    step = hosts.step

    def recording(requests):
        res = step(requests)
        seen.append([r["changes"] for r in res])
        return res

    def rebuilding():                                   # the replay to the done instant starts a second pass
        seen.append(None)
        build()

    build = hosts.build
    hosts.step, hosts.build = recording, rebuilding
    assert hosts.run().reason == "done"
    cut = seen.index(None)
    for windows in (seen[:cut], seen[cut + 1:]):
        for j in range(2):
            flags = [done for window in windows for _, done in window[j]]
            assert flags and flags[0] is True and all(a != b for a, b in zip(flags, flags[1:])), flags

    fresh = Hosts(dep, 0, LATENCY, 2, compiled=compiled)
    for wh in fresh.hosts:
        wh.host.pause_on_done = False                   # as an EventHost starts (WindowHost asks for it)
    pending, limit, res = [[], []], 0.0, []
    while limit < 2000.0 and not (res and all(r["done"] for r in res)):
        limit += 0.3                                    # the window: LATENCY's smallest latency
        res = fresh.step([(pending[j], limit, False) for j in range(2)])
        assert all(r["changes"] == [] for r in res)
        pending = [[r["out"][j] for r in res if j in r["out"]] for j in range(2)]
    assert all(r["done"] for r in res)                  # done changed, and nobody handed back for it



def test_an_event_exactly_on_a_windows_end_belongs_to_the_next_window(iris):
    """A window is half open, [T, T + W): crashes at exactly t = 5.0 and recoveries at exactly t = 9.0 fall on
    evaluation points (every 2.5), where a window ends; the snapshot there is the one-host state just before that
    instant, and the one-host rows, ledger and tally come out (a closed window would take the crashes into the
    row at 5.0)."""
    dep = build_pushsum(PushSumParams(nodes=20, values="random", dim=3),
                        Problem(iris, seed=5, topology_kind="random_k_out", topology_params={"k": 2}))
    faults = FaultModel(crash=0.3, crash_time=5.0, recover_time=9.0)
    latency = LatencyModel(Distribution.constant(0.3))
    _, ref_meter, ref_rows, reason, ref_tally = one_host(dep, 5, latency, faults=faults, eval_time=2.5,
                                                         max_time=12.5)
    assert reason == GossipStopReason.TIME and [p.time for p, _ in ref_rows] == [2.5, 5.0, 7.5, 10.0, 12.5]
    assert ref_tally.node_event_counts.get("crash", 0) > 0
    hosts = Hosts(dep, 5, latency, 2, faults=faults)
    rows = []
    out = hosts.run(max_time=12.5, eval_time=2.5, observe=lambda snaps, at: rows.append((at, snaps)) and False)
    assert out.reason == "time"
    assert [at for at, _ in rows] == [p.time for p, _ in ref_rows]
    for (at, snaps), (p, obs) in zip(rows, ref_rows):
        for key in ("wakes", "events", "sent", "in_flight", "messages", "scalars"):
            assert sum(s[key] for s in snaps) == getattr(p, key), (at, key)
        got = {}
        for s in snaps:
            got.update(s["observations"])
        assert np.array_equal(np.concatenate([got[j]["s"] for j in sorted(got)]), obs[0]["s"]), at
    same_ledger(ref_meter.ledger(), hosts.ledger())
    assert hosts.plan.tally.node_event_counts == ref_tally.node_event_counts
