"""Fault models on the gossip scheduler and in synchronous rounds: validation, seeded rates, crashes, restarts,
stragglers, churn, and how losses show in the ledger and the fault summary."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from svmsim.algorithms.pushsum import PushSumParams, build_pushsum
from svmsim.comm import MessageBatch, Meter, Outbox
from svmsim.comm.message import frozen_ids
from svmsim.data import make_dataset
from svmsim.deployment import Problem
from svmsim.engine import InProcessEngine
from svmsim.engine.base import split_roles
from svmsim.errors import ScenarioError
from svmsim.faults import FaultModel, Outage
from svmsim.program import NodeProgram, RoleSpec
from svmsim.config import load_scenario
from svmsim.schedule import SyncScheduler
from svmsim.core.timing import Distribution, LatencyModel
from svmsim.program import GossipProgram
from svmsim.schedule.gossip import GossipScheduler
from svmsim.topology import build_topology, neighbours


class Recorder(GossipProgram):
    """Each tick sends (send time) to a random neighbour; records ticks, sends, receptions and fault hooks."""

    def __init__(self, G):
        self.nbrs = neighbours(G)

    def init(self, node_ids, node_data, seed):
        return {"rng": {int(i): np.random.default_rng([seed, int(i)]) for i in node_ids}, "wakes": [], "sent": [],
                "received": [], "crashes": [], "recovers": []}

    def wake(self, st, nodes, times):
        out = Outbox()
        for node, t in zip(nodes.tolist(), times.tolist()):
            j = int(st["rng"][node].choice(self.nbrs[node]))
            st["wakes"].append((node, t))
            st["sent"].append((node, j, t))
            out.send(MessageBatch.single("ping", node, j, [t]))
        return st, out

    def receive(self, st, batch, times):
        for src, dst, row, t in zip(batch.src.tolist(), batch.dst.tolist(), batch.rows(), times.tolist()):
            st["received"].append((src, dst, float(row[0]), t))
        return st, Outbox()

    def crash(self, st, nodes):
        st["crashes"].extend(int(v) for v in nodes)
        return st

    def recover(self, st, nodes, keep_state):
        st["recovers"].extend((int(v), bool(keep_state)) for v in nodes)
        return st


def recorded_run(faults, G=None, seed=0, max_time=200.0, latency=0.5, **kw):
    """Run the recorder; returns (state, scheduler, meter) after `finish`."""
    G = G if G is not None else build_topology("complete", 10)
    n = G.number_of_nodes()
    engine = InProcessEngine()
    groups = split_roles([RoleSpec("peer", Recorder(G), np.arange(n, dtype=np.int64), [None] * n)], {})
    engine.deploy(groups, seed)
    meter = Meter(n, nx.to_numpy_array(G, nodelist=range(n), dtype=bool))
    sched = GossipScheduler(engine, groups, meter, G, seed=seed, faults=faults,
                            latency=LatencyModel(Distribution.constant(latency)), **kw)
    sched.run(max_time=max_time)
    sched.finish()
    return engine.states[0], sched, meter


def within_binomial(k: int, n: int, p: float, sigmas: float = 4.0) -> bool:
    return abs(k - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


# ----------------------------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize("key, value, allowed", [
    ("drop", 1.0, "a number in [0, 1)"), ("drop", -0.01, "a number in [0, 1)"), ("drop", math.nan, "a number in [0, 1)"),
    ("duplicate", 1.5, "a number in [0, 1)"), ("crash", 1.2, "a number in [0, 1]"),
    ("straggler_factor", 0.5, "a number >= 1"), ("churn_downtime", 0.0, "a number > 0")])
def test_values_out_of_range_are_errors_that_name_the_key(key, value, allowed):
    with pytest.raises(ScenarioError, match=rf"faults\.{key} = .* is out of range; allowed: {__import__('re').escape(allowed)}"):
        FaultModel(**{key: value})


def test_scenario_fault_errors_name_key_value_and_range():
    raw = {"name": "f", "data": {"name": "iris"}, "algorithm": {"name": "pushsum", "nodes": 10},
           "stop": {"max_rounds": 5}}
    msg = str(pytest.raises(ScenarioError, load_scenario, raw, {"faults.drop": 1.0}).value)
    assert "[faults] drop = 1.0 is out of range; allowed: a number in [0, 1)" in msg
    msg = str(pytest.raises(ScenarioError, load_scenario, raw, {"faults.delay": 0.3}).value)
    assert "[faults] delay = 0.3 needs faults.delay_time" in msg
    msg = str(pytest.raises(ScenarioError, load_scenario, raw, {"faults.chaos": 1}).value)
    assert "[faults] unknown key 'chaos'; allowed keys: drop, duplicate, delay" in msg
    sync = {"name": "f", "data": {"name": "iris"}, "algorithm": {"name": "saddle-dsvc", "clients": 4},
            "stop": {"max_iterations": 5}}
    msg = str(pytest.raises(ScenarioError, load_scenario, sync, {"faults.stragglers": 0.5}).value)
    assert "[faults] stragglers (synchronous rounds have no clocks) need the gossip scheduler" in msg
    assert load_scenario(sync, {"faults.drop": 0.1}).faults.drop == 0.1
    with pytest.raises(ScenarioError, match="contains node 12, but the topology has 10 nodes"):
        FaultModel(crash_nodes=[1, 12]).bind(10, 0)
    with pytest.raises(ScenarioError, match="crash and faults.crash_nodes are both given"):
        FaultModel(crash=0.1, crash_nodes=[1])


# ----------------------------------------------------------------------------------------------------------------
# message faults


def test_drop_rate_is_p_and_lost_messages_are_metered_as_dropped():
    p = 0.2
    st, sched, meter = recorded_run(FaultModel(drop=p))
    sent, lost = len(st["sent"]), sched.fault_summary()["dropped"]["lost"]["ping"]["messages"]
    assert sent > 1500 and within_binomial(lost, sent, p)
    led = meter.ledger()
    assert led.dropped_by_tag == {"ping": [lost, lost, 8 * lost]}
    at_end = sched.fault_summary()["in_flight_at_end"]["ping"]["messages"]
    assert at_end > 0 and sched.n_in_flight == 0 and sched.in_flight() == []      # metered by finish, none left
    assert led.totals["messages"] == sent - lost == len(st["received"]) + at_end
    assert led.dropped_edges[:, 2].sum() == lost


def test_duplicates_arrive_twice_and_are_counted():
    p = 0.1
    st, sched, meter = recorded_run(FaultModel(duplicate=p))
    sent = len(st["sent"])
    summary = sched.fault_summary()
    dups = summary["duplicated"]["ping"]["messages"]
    assert within_binomial(dups, sent, p)
    received = len(st["received"]) + sum(v["messages"] for v in summary["in_flight_at_end"].values())
    assert received == meter.ledger().totals["messages"] == sent + dups
    times = [r[2] for r in st["received"]]
    assert len(times) - len(set(times)) > 0.8 * dups                     # the same message, received twice


def test_extra_delay_is_added_with_its_probability():
    st, sched, _ = recorded_run(FaultModel(delay=0.5, delay_time=1.0), latency=0.1)
    delays = np.array([t - sent for _, _, sent, t in st["received"]])
    slow = np.isclose(delays, 1.1, atol=1e-9)
    assert np.all(slow | np.isclose(delays, 0.1, atol=1e-9))
    assert within_binomial(int(slow.sum()), delays.size, 0.5)
    assert sched.fault_summary()["delayed_messages"] >= slow.sum()


def test_fault_decisions_are_seeded_and_leave_the_clocks_alone():
    a, sa, _ = recorded_run(FaultModel(drop=0.3, seed=1))
    b, sb, _ = recorded_run(FaultModel(drop=0.3, seed=1))
    c, sc, _ = recorded_run(FaultModel(drop=0.3, seed=2))
    assert a["received"] == b["received"] and sa.fault_summary() == sb.fault_summary()
    assert a["received"] != c["received"]
    assert a["wakes"] == c["wakes"] and a["sent"] == c["sent"]           # clocks and targets do not move


# ----------------------------------------------------------------------------------------------------------------
# node faults


def test_crashed_nodes_send_and_receive_nothing_after_the_crash():
    crashed, t_crash = [2, 5], 40.0
    st, sched, meter = recorded_run(FaultModel(crash_nodes=crashed, crash_time=t_crash), latency=0.5)
    assert sorted(st["crashes"]) == crashed and st["recovers"] == []
    assert all(t < t_crash for node, t in st["wakes"] if node in crashed)
    assert any(t > t_crash for node, t in st["wakes"] if node not in crashed)
    assert all(t < t_crash for _, dst, _, t in st["received"] if dst in crashed)
    # sent to a crashed node and arriving after the crash, within the run (later ones are in flight at the end)
    doomed = sum(1 for _, dst, t in st["sent"] if dst in crashed and t_crash <= t + 0.5 <= 200.0)
    summary = sched.fault_summary()
    assert doomed > 0 and summary["dropped"]["dead_receiver"]["ping"]["messages"] == doomed
    assert meter.ledger().dropped_by_tag["ping"][0] == doomed
    assert summary["permanent_crashes"] == crashed and summary["down_at_end"] == crashed
    assert summary["node_events"] == {"crash": 2}
    assert sched.node_counters()["dead"].nonzero()[0].tolist() == crashed


@pytest.mark.parametrize("keep", [True, False])
def test_crashed_nodes_recover_with_or_without_their_state(keep):
    st, sched, _ = recorded_run(FaultModel(crash=0.3, crash_time=20.0, recover_time=50.0, recover_state=keep))
    nodes = sched.fault_summary()["crashed_nodes"]
    assert len(nodes) == 3 and sorted(st["crashes"]) == nodes
    assert sorted(st["recovers"]) == [(v, keep) for v in nodes]
    for v in nodes:
        ticks = [t for node, t in st["wakes"] if node == v]
        assert not any(20.0 <= t < 50.0 for t in ticks) and any(t >= 50.0 for t in ticks)
    assert sched.fault_summary()["down_at_end"] == []


@pytest.mark.parametrize("keep", [True, False])
def test_pushsum_node_is_frozen_while_down_and_kept_or_restarted_at_recovery(keep):
    iris = make_dataset({"name": "iris"})
    dep = build_pushsum(PushSumParams(nodes=20, values="random", dim=3),
                        Problem(iris, seed=0, topology_kind="random_k_out", topology_params={"k": 2}))
    engine = InProcessEngine()
    groups = engine.plan(dep.roles)
    engine.deploy(groups, 0)
    sched = GossipScheduler(engine, groups, Meter(20, dep.adjacency()), dep.topology, seed=0,
                            faults=FaultModel(crash_nodes=[7], crash_time=5.0, recover_time=9.0, recover_state=keep))
    sched.run(max_time=5.0)
    at_crash = engine.observe()[0]
    sched.run(max_time=8.99)
    assert sched.fault_summary()["dropped"]["dead_receiver"]["push"]["messages"] > 0
    frozen = engine.observe()[0]
    np.testing.assert_array_equal(frozen["s"][7], at_crash["s"][7])
    sched.run(max_time=9.0)                                           # the recovery at 9.0
    back = engine.observe()[0]
    expected = (at_crash["s"][7], at_crash["w"][7]) if keep else (back["s0"][7], back["w0"][7])
    np.testing.assert_array_equal(back["s"][7], expected[0])
    assert back["w"][7] == expected[1] and (keep or back["w"][7] == 1.0)


def test_stragglers_are_chosen_by_the_seed_and_tick_slower():
    G = build_topology("complete", 20)
    st, sched, _ = recorded_run(FaultModel(stragglers=0.25, straggler_factor=5.0), G=G, max_time=400.0)
    slow = sched.fault_summary()["stragglers"]
    assert len(slow) == 5 and slow == recorded_run(FaultModel(stragglers=0.25), G=G, max_time=1.0)[1].fault_summary()[
        "stragglers"]
    ticks = np.bincount([n for n, _ in st["wakes"]], minlength=20)
    fast = np.setdiff1d(np.arange(20), slow)
    assert np.all(np.abs(ticks[slow] - 80) < 5 * math.sqrt(80))
    assert np.all(np.abs(ticks[fast] - 400) < 5 * math.sqrt(400))


def test_churn_takes_nodes_away_and_back():
    rate, downtime, T = 0.1, 2.0, 300.0
    st, sched, meter = recorded_run(FaultModel(churn_rate=rate, churn_downtime=downtime), max_time=T)
    summary = sched.fault_summary()
    events = summary["node_events"]
    assert events["leave"] > 0.5 * 10 * T / (1 / rate + downtime) and events["leave"] - events["join"] in range(11)
    intervals: dict[int, list] = {}
    for t, node, kind in summary["node_event_log"]:
        if kind == "leave":
            intervals.setdefault(node, []).append([t, math.inf])
        else:
            intervals[node][-1][1] = t
    down_share = sum(min(e, T) - s for iv in intervals.values() for s, e in iv) / (10 * T)
    assert abs(down_share - downtime / (1 / rate + downtime)) < 0.05
    for node, iv in intervals.items():                      # no ticks, no deliveries while away
        assert not any(s <= t < e for n, t in st["wakes"] if n == node for s, e in iv)
        assert not any(s <= t < e for _, d, _, t in st["received"] if d == node for s, e in iv)
    assert summary["dropped"]["dead_receiver"]["ping"]["messages"] > 0


def test_explicit_outages_and_the_summary():
    model = FaultModel(drop=0.05, outages=[Outage((1, 3), start=10.0, end=30.0), Outage((4,), start=50.0)])
    st, sched, meter = recorded_run(model, max_time=100.0)
    summary = sched.fault_summary()
    assert summary["node_events"] == {"crash": 3, "recover": 2}
    assert summary["permanent_crashes"] == [4] and summary["down_at_end"] == [4]
    dropped = summary["dropped"]
    assert summary["dropped_total"]["messages"] == sum(v["ping"]["messages"] for v in dropped.values())
    assert summary["dropped_total"]["messages"] == meter.ledger().dropped_by_tag["ping"][0]
    assert summary["model"]["drop"] == 0.05


# ----------------------------------------------------------------------------------------------------------------
# synchronous rounds


class Echo(NodeProgram):
    """Node 0 sends a 3-scalar 'ask' to every other node each round; they answer 'echo' (2 scalars)."""

    initiator = True

    def __init__(self, n, role):
        self.n, self.role = n, role

    def init(self, node_ids, node_data, seed):
        return {"ids": frozen_ids(node_ids), "asked": 0, "echoes": 0}

    def step(self, st, inbox, round_):
        out = Outbox()
        if self.role == "server":
            st["echoes"] += inbox["echo"].n_messages if "echo" in inbox else 0
            if round_ % 2 == 0:
                st["asked"] += 1
                out.send(MessageBatch.broadcast("ask", 0, frozen_ids(range(1, self.n)), np.ones(3)))
            out.signals = {"wake": True}
        elif "ask" in inbox:
            b = inbox["ask"]
            out.send(MessageBatch.gather("echo", b.dst, 0, np.ones((b.n_messages, 2))))
        return st, out


def sync_run(faults: FaultModel, rounds=400, n=11):
    roles = [RoleSpec("server", Echo(n, "server"), np.array([0]), [None]),
             RoleSpec("client", Echo(n, "client"), np.arange(1, n), [None] * (n - 1))]
    engine = InProcessEngine()
    groups = engine.plan(roles)
    engine.deploy(groups, 0)
    G = build_topology("star", n)
    meter = Meter(n, nx.to_numpy_array(G, nodelist=range(n), dtype=bool))
    plan = faults.bind(n, 0)
    plan.check_sync()
    SyncScheduler(engine, groups, meter, n, faults=plan).run(max_rounds=rounds)
    return engine.states, meter, plan.summary()


def test_synchronous_rounds_drop_and_duplicate_with_their_rates():
    states, meter, summary = sync_run(FaultModel(drop=0.2, duplicate=0.1))
    led = meter.ledger()
    asks_sent = states[0]["asked"] * 10
    lost = summary["dropped"]["lost"]
    assert within_binomial(lost["ask"]["messages"], asks_sent, 0.2)
    dup = summary["duplicated"]["ask"]["messages"]
    assert within_binomial(dup, asks_sent - lost["ask"]["messages"], 0.1)
    assert led.by_tag["ask"][0] == asks_sent - lost["ask"]["messages"] + dup
    assert led.dropped_by_tag["ask"][0] == lost["ask"]["messages"] and led.dropped_by_tag["ask"][1] == 3 * lost[
        "ask"]["messages"]
    assert states[0]["echoes"] + summary["dropped"]["lost"]["echo"]["messages"] >= led.by_tag["echo"][0] - 10


def test_synchronous_rounds_drop_messages_of_crashed_and_churned_nodes():
    states, meter, summary = sync_run(FaultModel(crash_nodes=[3], crash_time=100.0), rounds=300)
    dead = summary["dropped"]["dead_receiver"]["ask"]["messages"]
    assert dead == sum(1 for r in range(100, 300, 2))                   # every ask from round 100 on
    assert summary["permanent_crashes"] == [3] and summary["node_events"] == {"crash": 1}
    edges = meter.ledger().edges
    assert edges[(edges[:, 0] == 3) & (edges[:, 1] == 0), 2].item() == 50   # echoes only before the crash
    _, _, churned = sync_run(FaultModel(churn_rate=0.02, churn_downtime=10.0), rounds=400)
    assert churned["node_events"]["leave"] > 0 and churned["dropped"]["dead_receiver"]["ask"]["messages"] > 0
    with pytest.raises(ScenarioError, match="delay .* need the gossip scheduler"):
        FaultModel(delay=0.1, delay_time=1.0).bind(11, 0).check_sync()
