"""Exact behaviour of the schedulers (`schedule/sync.py`, `schedule/gossip.py`, `schedule/event_host.py`): messages
routed to the right node in the right round, ledgers equal to what was sent, event order and virtual times, stop
reasons, errors naming what is wrong, and several event hosts in one process giving the run of one host."""
from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from svmsim.comm import MessageBatch, Meter, Outbox
from svmsim.core.timing import Clock, Distribution, LatencyModel
from svmsim.engine import InProcessEngine
from svmsim.engine.base import split_roles
from svmsim.errors import ProtocolError
from svmsim.faults import FaultModel
from svmsim.program import GossipProgram, RoleSpec
from svmsim.schedule.event_host import EventHost, GossipSetting
from svmsim.schedule.event_kernels import (
    ST_EVAL_TIME,
    ST_FLUSH,
    ST_GROW,
    ST_QUIESCENT,
    ST_TIME,
    ST_XFLUSH,
    ST_YIELD,
)
from svmsim.schedule.gossip import GossipScheduler, GossipStopReason
from svmsim.topology import build_topology, neighbour_csr, neighbours

# ----------------------------------------------------------------------------------------------------------------
# gossip programs written in Python


class Chatter(GossipProgram):
    """Each wake sends `fanout` messages ``(sender, send time, k)`` to neighbours, the larger neighbour ids first;
    records every wake, receipt, crash and recovery; may say it is done after `done_after` wakes of its nodes."""

    def __init__(self, G, fanout=1, tag="chat", dtype=np.float64, done_after=None):
        self.nbrs = neighbours(G)
        self.fanout, self.tag, self.dtype, self.done_after = fanout, tag, dtype, done_after

    def init(self, node_ids, node_data, seed):
        return {"rng": {int(i): np.random.default_rng([seed, int(i)]) for i in node_ids}, "wakes": [],
                "received": [], "crashes": [], "recovers": []}

    def _targets(self, st, node):
        picks = st["rng"][node].choice(self.nbrs[node], size=self.fanout, replace=True)
        return sorted((int(j) for j in picks), reverse=True)

    def wake(self, st, nodes, times):
        out = Outbox()
        node, t = int(nodes[0]), float(times[0])
        st["wakes"].append((node, t))
        for k, j in enumerate(self._targets(st, node)):
            out.send(MessageBatch.single(self.tag, node, j, np.array([node, t, k], dtype=self.dtype)))
        if self.done_after is not None and len(st["wakes"]) >= self.done_after:
            out.signals = {"done": True}
        return st, out

    def receive(self, st, batch, times):
        for src, dst, row, t in zip(batch.src.tolist(), batch.dst.tolist(), batch.rows(), times.tolist()):
            st["received"].append((src, dst, tuple(float(v) for v in row), t, batch.tag))
        return st, Outbox()

    def crash(self, st, nodes):
        st["crashes"].append(int(nodes[0]))
        return st

    def recover(self, st, nodes, keep_state):
        st["recovers"].append((int(nodes[0]), bool(keep_state)))
        return st


def gossip_run(G, program=None, seed=0, groups=None, **kw):
    """(scheduler, engine, meter) of a Python program on the in-process gossip scheduler."""
    program = program or Chatter(G)
    n = G.number_of_nodes()
    engine = InProcessEngine()
    roles = groups or [("peer", program, np.arange(n, dtype=np.int64))]
    groups = split_roles([RoleSpec(r, p, ids, [None] * len(ids)) for r, p, ids in roles], {})
    engine.deploy(groups, seed)
    meter = Meter(n, nx.to_numpy_array(G, nodelist=range(n), dtype=bool))
    return GossipScheduler(engine, groups, meter, G, seed=seed, **kw), engine, meter


def python_host(G, program=None, *, seed=0, owner=None, me=0, latency=None, clock=None, faults=None, meter=None,
                plan=None, **kw):
    """One EventHost running a Python program over every node (`owner`: which host owns each node)."""
    program = program or Chatter(G)
    n = G.number_of_nodes()
    clock = clock or Clock()
    latency = latency or LatencyModel(Distribution.uniform(0.2, 0.4))
    plan = plan or (faults or FaultModel()).bind(n, seed)
    setting = GossipSetting(n, clock, latency, plan, seed, 1.0 / clock.rate)
    adj_ptr, adj = neighbour_csr(G)
    owner = np.zeros(n, dtype=np.int64) if owner is None else owner
    states = {0: program.init(np.arange(n), [None] * n, seed)}
    meter = meter or Meter(n, nx.to_numpy_array(G, nodelist=range(n), dtype=bool))
    host = EventHost({0: program}, states, np.zeros(n, dtype=np.int64), owner, me, setting, adj_ptr, adj, meter,
                     compiled=False, **kw)
    return host, states, meter


# ----------------------------------------------------------------------------------------------------------------
# several hosts in one process: the run of one host


def run_hosts(hosts, until, window, flushes=None, seal=False):
    """Drive hosts that own disjoint nodes in windows shorter than the least latency: every host runs to the end of
    the window, then the messages for other hosts are handed over (they arrive after the window's end). `flushes`
    collects (host, messages handed over) when a host's outgoing buffer filled up; `seal`: what waits for other hosts
    at the end is not handed over but metered in flight by its sender."""
    def exchange(senders):
        handed = 0
        for h in senders:
            for dest, parts in h.take_outgoing().items():
                assert dest != h.me
                handed += sum(p[3].shape[0] for p in parts)
                hosts[dest].put_incoming(parts)
        return handed

    limit = 0.0
    while limit < until:
        limit = min(limit + window, until)
        for h in hosts:
            while True:
                status = h.advance(limit)
                if status == ST_XFLUSH:
                    handed = exchange([h])
                    if flushes is not None:
                        flushes.append((h.me, handed))
                elif status in (ST_YIELD, ST_FLUSH):
                    h.flush()
                elif status == ST_GROW:
                    h.grow()
                else:
                    assert status in (ST_TIME, ST_QUIESCENT)
                    h.flush()
                    break
        if not (seal and limit >= until):
            exchange(hosts)
    if seal:
        for h in hosts:
            for parts in h.take_outgoing().values():
                h.meter_parts_in_flight(parts)


def split_run(G, program, owner, xbatches, until=20.0, window=0.15, faults=None, seed=0, seal=False):
    """(reference host, its states, its meter), (hosts, their states, their meter, their fault plan, flushes)."""
    n = G.number_of_nodes()
    faults = faults or FaultModel()
    ref, ref_states, ref_meter = python_host(G, program, faults=faults, seed=seed)
    assert ref.advance(until) == ST_TIME
    ref.meter_in_flight()
    meter = Meter(n, nx.to_numpy_array(G, nodelist=range(n), dtype=bool))
    plan = faults.bind(n, seed)
    hosts, states = [], []
    for me, xbatch in enumerate(xbatches):
        h, st, _ = python_host(G, program, owner=owner, me=me, meter=meter, plan=plan, xbatch_bytes=xbatch, seed=seed)
        hosts.append(h)
        states.append(st)
    flushes = []
    run_hosts(hosts, until, window, flushes, seal)
    for h in hosts:
        assert h.now <= until
        h.meter_in_flight()
    return (ref, ref_states, ref_meter), (hosts, states, meter, plan, flushes)


def assert_split_run_is_the_run(G, owner, ref, split):
    (ref, ref_states, ref_meter), (hosts, states, meter, plan, _) = ref, split
    assert meter.ledger().equals(ref_meter.ledger()) and meter.messages > 0
    np.testing.assert_array_equal(meter.ledger().dropped_edges, ref_meter.ledger().dropped_edges)
    wakes = sorted(w for me, st in enumerate(states) for w in st[0]["wakes"] if owner[w[0]] == me)
    assert wakes == sorted(ref_states[0]["wakes"])
    received = sorted(r for me, st in enumerate(states) for r in st[0]["received"] if owner[r[1]] == me)
    assert received == sorted(ref_states[0]["received"]) and received
    totals = {k: sum(h.counters()[k] for h in hosts) for k in ("wakes", "events", "sent", "sent_scalars", "delayed")}
    assert totals == {k: ref.counters()[k] for k in totals}
    assert all(h.counters()["late"] == 0 and h.counters()["lateness"] == 0.0 for h in hosts)
    ni = np.stack([hosts[owner[i]].node_state()[i] for i in range(len(owner))])
    np.testing.assert_array_equal(ni, ref.node_state())
    assert plan.summary(delayed=0, down_now=[]) == ref.plan.summary(delayed=0, down_now=[])


@pytest.mark.parametrize("seal", [False, True])
def test_two_python_hosts_with_faults_give_the_run_of_one_host(seal):
    G = nx.random_regular_graph(4, 12, seed=2)
    owner = np.arange(12, dtype=np.int64) % 2
    faults = FaultModel(drop=0.2, duplicate=0.1, delay=0.2, delay_time={"kind": "exponential", "mean": 0.3})
    ref, split = split_run(G, Chatter(G, fanout=2), owner, (900, 50_000), faults=faults, until=12.0, seal=seal)
    assert split[4]
    assert_split_run_is_the_run(G, owner, ref, split)


def test_a_host_hands_its_outgoing_buffer_back_once_it_holds_a_batch():
    G = nx.random_regular_graph(4, 12, seed=3)
    owner = np.arange(12, dtype=np.int64) % 3
    ref, split = split_run(G, Chatter(G), owner, (900, 1800, 2000))
    flushes = split[4]
    # one message per event: the buffer is handed back holding exactly max(1, xbatch_bytes // 900) messages
    assert {me for me, _ in flushes} == {0, 1, 2}
    assert all(held == (1, 2, 2)[me] for me, held in flushes)
    assert_split_run_is_the_run(G, owner, ref, split)


# ----------------------------------------------------------------------------------------------------------------
# the Python event loop: slices, limits, order


def test_a_slice_hands_back_after_exactly_yield_every_events():
    G = build_topology("ring", 6)
    host, _, _ = python_host(G, yield_every=5)
    assert host.now == 0.0 and host.counters()["done"] is False
    assert host.advance(math.inf) == ST_YIELD and host.counters()["events"] == 5
    assert host.advance(math.inf) == ST_YIELD and host.counters()["events"] == 10
    remote, _, _ = python_host(G, owner=np.zeros(6, dtype=np.int64), xbatch_bytes=10**9, yield_every=5)
    assert remote.advance(math.inf) == ST_YIELD and remote.counters()["events"] == 1024   # a host among several


def test_an_event_at_the_evaluation_time_or_the_limit():
    G = build_topology("ring", 6)
    host, states, _ = python_host(G)
    first = host.heap_top()
    assert 0 < first < math.inf
    host.next_eval = first                  # the observation at t comes before the events at t
    assert host.advance(math.inf) == ST_EVAL_TIME and host.counters()["events"] == 0
    host.next_eval = math.inf
    assert host.advance(first) == ST_TIME   # an event at the limit is handled, the next one is not
    assert host.counters()["events"] == 1 and host.now == first and states[0]["wakes"][0][1] == first
    assert host.heap_top() > first
    # an evaluation point at the limit is observed before the slice ends at the limit
    host.next_eval = host.heap_top() + 0.5
    assert host.advance(host.next_eval) == ST_EVAL_TIME


def test_observations_at_the_time_budget_and_a_fresh_run_at_time_zero():
    G = build_topology("ring", 6)
    sched, _, _ = gossip_run(G)
    assert sched.now == 0.0 and sched.progress().time == 0.0
    seen = []
    assert sched.run(max_time=5.0, eval_time=2.5, on_observe=lambda p: seen.append(p.time) and False) == \
        GossipStopReason.TIME
    assert seen == [2.5, 5.0] and sched.now == 5.0


def test_python_loop_stops_when_no_event_is_left():
    G = build_topology("ring", 6)
    sched, engine, _ = gossip_run(G, faults=FaultModel(crash_nodes=list(range(6)), crash_time=2.0))
    assert sched.run(max_time=100.0) == GossipStopReason.QUIESCENT
    st = engine.states[0]
    assert sorted(st["crashes"]) == list(range(6)) and max(t for _, t in st["wakes"]) < 2.0
    assert sched.node_counters()["dead"].all() and sched.n_in_flight == 0
    assert sched.host.counters()["done"] is False


def test_draining_delivers_every_message_and_ticks_no_clock():
    G = build_topology("ring", 6)
    host, states, _ = python_host(G, Chatter(G, fanout=2), latency=LatencyModel(Distribution.constant(3.0)))
    assert host.advance(4.0) == ST_TIME
    wakes, sent, held = host.counters()["wakes"], host.counters()["sent"], host.pending()
    assert held > 0 and len(states[0]["received"]) + held == sent
    host.draining = True
    assert host.advance(4.0) == ST_QUIESCENT                  # the time limit does not hold a drain
    assert host.pending() == 0 and host.counters()["wakes"] == wakes and len(states[0]["received"]) == sent
    assert host.now == max(t for *_, t, _ in states[0]["received"])


def test_messages_of_one_event_arriving_together_are_delivered_in_send_order():
    G = build_topology("complete", 5)
    program = Chatter(G, fanout=3)
    host, states, _ = python_host(G, program, latency=LatencyModel(Distribution.constant(0.5)))
    host.advance(10.0)
    received = states[0]["received"]
    assert len(received) > 20
    for (src, _, row, t, _), (src2, _, row2, t2, _) in itertools.pairwise(received):
        if t == t2 and src == src2 and row[1] == row2[1]:        # the same send event
            assert row2[2] == row[2] + 1


def test_a_late_message_from_another_host_is_delivered_at_once_and_counted_late():
    G = build_topology("ring", 4)
    host, states, _ = python_host(G, latency=LatencyModel(Distribution.constant(0.5)),
                                  owner=np.array([0, 0, 1, 1]), xbatch_bytes=10**6)
    assert host.advance(5.0) == ST_TIME
    now = host.now
    before = len(states[0]["received"])
    ints = np.array([[2, 1, 3, 0], [2, 1, 3, 0]], dtype=np.int64)
    host.put_incoming([("chat", 3, "<f8", ints, np.array([now - 1.5, now + 0.25]), np.array([[2, 3.0, 0], [2, 3.5, 1]]))])
    assert host.counters()["late"] == 1 and host.counters()["lateness"] == pytest.approx(1.5)
    host.advance(now + 0.25)
    got = [r for r in states[0]["received"][before:] if r[0] == 2]
    assert [(r[1], r[2], r[3]) for r in got] == [(1, (2.0, 3.0, 0.0), now), (1, (2.0, 3.5, 1.0), now + 0.25)]


# ----------------------------------------------------------------------------------------------------------------
# what programs send: payload shapes and dtypes, errors


def test_messages_in_flight_are_listed_with_their_sender_tag_and_payload():
    G = build_topology("ring", 6)

    class Logged(Chatter):
        def wake(self, st, nodes, times):
            st, out = super().wake(st, nodes, times)
            st.setdefault("sent", []).extend((b.tag, int(b.src[0]), int(b.dst[0]), tuple(b.payload[0])) for b in
                                             out.batches)
            return st, out

    sched, engine, _ = gossip_run(G, Logged(G), latency=LatencyModel(Distribution.uniform(1.0, 4.0)))
    sched.run(max_time=6.0)
    st = engine.states[0]
    delivered = {(r[4], r[0], r[1], r[2]) for r in st["received"]}
    expected = sorted(m for m in st["sent"] if m not in delivered)
    rows = sched.in_flight()
    assert expected and sched.n_in_flight == len(rows)
    assert sorted((tag, src, dst, tuple(row)) for src, dst, tag, row in rows) == expected


def test_payload_shapes_and_dtypes_reach_the_receiver_and_the_ledger():
    G = build_topology("star", 4)         # node 0 is the hub

    class Shapes(Chatter):
        def wake(self, st, nodes, times):
            node = int(nodes[0])
            st["wakes"].append((node, float(times[0])))
            out = Outbox()
            if node == 0:
                out.send(MessageBatch.broadcast("all", 0, np.array([1, 2, 3]), np.array([7.0, 8.0], np.float32)))
                out.send(MessageBatch("one", np.array([0, 0]), np.array([2, 3]), np.array([5.0, 6.0])))
            else:
                out.send(MessageBatch("flat", np.array([node]), np.array([0]), np.array([node, 1.0, 2.0])))
            return st, out

    sched, engine, meter = gossip_run(G, Shapes(G), latency=LatencyModel(Distribution.constant(0.1)))
    sched.run(max_time=3.0)
    sched.finish()
    got = {}
    for src, dst, row, _, tag in engine.states[0]["received"]:
        got.setdefault(tag, set()).add((src, dst, row))
    assert got["all"] == {(0, d, (7.0, 8.0)) for d in (1, 2, 3)}                 # every copy carries the row
    assert got["one"] == {(0, 2, (5.0,)), (0, 3, (6.0,))}                         # one scalar per message
    assert {row for _, _, row in got["flat"]} == {(float(s), 1.0, 2.0) for s in (1, 2, 3)}   # one row of three
    tags = meter.ledger().summary()["by_tag"]
    hub = sum(1 for w in engine.states[0]["wakes"] if w[0] == 0)
    assert tags["all"]["messages"] == 3 * hub and tags["all"]["bytes"] == 3 * hub * 2 * 4    # float32: 4 bytes
    assert tags["one"]["scalars"] == 2 * hub and tags["one"]["bytes"] == 2 * hub * 8
    assert tags["flat"]["scalars"] == 3 * tags["flat"]["messages"]


def test_sending_off_the_topology_or_for_another_node_is_a_clear_error():
    G = build_topology("ring", 6)

    class Rogue(Chatter):
        def __init__(self, G, src_shift, dst):
            super().__init__(G)
            self.src_shift, self.dst = src_shift, dst

        def wake(self, st, nodes, times):
            node = int(nodes[0])
            return st, Outbox([MessageBatch.single("x", node + self.src_shift, self.dst(node), [1.0])])

    with pytest.raises(ProtocolError, match=r"node (\d) sent a message to node 6, but node ids must lie in 0\.\.5$"):
        gossip_run(G, Rogue(G, 0, lambda i: 6))[0].run(max_time=5.0)
    with pytest.raises(ProtocolError, match=r"node ([2-4]) \(\1\) sent a message to node 0 \(0\), which "
                                            "are not neighbours in the topology"):
        gossip_run(G, Rogue(G, 0, lambda i: 0 if i in (2, 3, 4) else (i + 1) % 6))[0].run(max_time=20.0)
    with pytest.raises(ProtocolError, match=r"claims to come from node \d, but the event being handled is node \d's; "
                                            "a gossip program sends only from the node that woke or received$"):
        gossip_run(G, Rogue(G, 1, lambda i: i))[0].run(max_time=5.0)


# ----------------------------------------------------------------------------------------------------------------
# node events, done signals and the compiled loop


@pytest.fixture(scope="module")
def iris():
    from svmsim.data import make_dataset
    return make_dataset({"name": "iris"})


def pushsum_engine(iris, nodes=12, seed=1, kind=("random_k_out", {"k": 2})):
    from svmsim.algorithms.pushsum import PushSumParams, build_pushsum
    from svmsim.deployment import Problem
    dep = build_pushsum(PushSumParams(nodes=nodes, values="random", dim=3),
                        Problem(iris, seed=seed, topology_kind=kind[0], topology_params=kind[1]))
    engine = InProcessEngine()
    groups = engine.plan(dep.roles)
    engine.deploy(groups, seed)
    return dep, engine, groups


def pushsum_sched(iris, compiled, faults=None, topology=None, **kw):
    dep, engine, groups = pushsum_engine(iris, **kw)
    G = topology if topology is not None else dep.topology
    meter = Meter(dep.n_nodes, nx.to_numpy_array(G, nodelist=range(dep.n_nodes), dtype=bool), dep.node_names)
    sched = GossipScheduler(engine, groups, meter, G, seed=1, compiled=compiled, faults=faults,
                            latency=LatencyModel(Distribution.lognormal(0.05, 0.5)))
    return sched, engine, meter


def down_intervals(events, until):
    """node -> [(start, end)] of the times it was down, from the fault tally's node events."""
    out, start = {}, {}
    for t, node, name in events:
        if name in ("crash", "leave"):
            start[node] = t
        else:
            out.setdefault(node, []).append((start.pop(node), t))
    for node, t in start.items():
        out.setdefault(node, []).append((t, until))
    return out


@pytest.mark.parametrize("recover_time", [6.0, None])
def test_a_node_that_is_down_neither_wakes_nor_receives(recover_time):
    G = build_topology("ring", 8)
    faults = FaultModel(crash_nodes=[1, 4, 6], crash_time=2.0, recover_time=recover_time, recover_state=True,
                        churn_rate=0.3, churn_downtime=1.5)          # recover_time None: crashed for good
    sched, engine, _ = gossip_run(G, Chatter(G, fanout=2), faults=faults)
    sched.run(max_time=30.0)
    st, plan = engine.states[0], sched.faults
    events = list(plan.tally.node_events)
    down = down_intervals(events, 30.0)
    assert any(len(v) > 1 for v in down.values())             # churn, crash and recovery all happened
    inside = lambda node, t: any(a <= t < b for a, b in down.get(node, ()))
    assert not any(inside(node, t) for node, t in st["wakes"])
    assert not any(inside(dst, t) for _, dst, _, t, _ in st["received"])
    # the hooks: one crash per down period and one recovery per up again; the epoch counts the changes
    ni = sched.node_counters()
    epoch = sched.host.node_state()[:, 0]
    for node in range(8):
        mine = [name for _, v, name in events if v == node]
        assert epoch[node] == len(mine)
        assert st["crashes"].count(node) == sum(n in ("crash", "leave") for n in mine)
        assert sum(v == node for v, _ in st["recovers"]) == sum(n in ("recover", "join") for n in mine)
        assert bool(ni["down"][node]) == (len(mine) % 2 == 1)
        assert bool(ni["dead"][node]) == (node in (1, 4, 6) and recover_time is None)
    assert sched.host.node_state()[:, 4].max() == (1 if recover_time is None else 0)   # the dead flag


def test_churn_ends_for_nodes_that_crashed_for_good():
    G = build_topology("ring", 5)
    faults = FaultModel(crash_nodes=list(range(5)), crash_time=3.0, churn_rate=0.5, churn_downtime=0.5)
    sched, _, _ = gossip_run(G, faults=faults)
    assert sched.run(max_time=1e4) == GossipStopReason.QUIESCENT and sched.now < 100.0


def test_crash_and_recover_hooks_may_return_a_new_state():
    G = build_topology("ring", 6)

    class Fresh(Chatter):
        def crash(self, st, nodes):
            return {**st, "crashes": st["crashes"] + [int(nodes[0])]}

        def recover(self, st, nodes, keep_state):
            return {**st, "recovers": st["recovers"] + [(int(nodes[0]), bool(keep_state))]}

    sched, engine, _ = gossip_run(G, Fresh(G), faults=FaultModel(crash_nodes=[2, 5], crash_time=1.0,
                                                                   recover_time=3.0, recover_state=True))
    sched.run(max_time=6.0)
    st = engine.states[0]
    assert sorted(st["crashes"]) == [2, 5] and sorted(st["recovers"]) == [(2, True), (5, True)]


def test_the_run_is_done_when_every_group_is():
    G = build_topology("ring", 6)
    quick, slow = Chatter(G, done_after=2), Chatter(G, done_after=40)
    groups = [("even", quick, np.array([0, 2, 4])), ("odd", slow, np.array([1, 3, 5]))]
    sched, engine, _ = gossip_run(G, groups=groups, compiled=False)
    assert sched.run(max_time=3.0) == GossipStopReason.TIME and not sched.host.done   # only one group is done
    assert sched.run(max_time=100.0) == GossipStopReason.DONE and sched.host.done is True
    assert len(engine.states[1]["wakes"]) == 40


def test_messages_from_another_host_land_alike_on_the_compiled_and_the_python_heap(iris):
    hosts = [pushsum_sched(iris, compiled)[0].host for compiled in (True, False)]
    assert [h.compiled for h in hosts] == [True, False]
    assert hosts[0].heap_top() == hosts[1].heap_top() > 0          # the same first clock tick
    from svmsim.algorithms.pushsum import TAGS
    G = pushsum_engine(iris)[0].topology
    src, dst = next(iter(G.edges()))
    d = 3
    parts = [(TAGS[0], d + 1, "<f8", np.array([[src, dst, 1, 0], [dst, src, 4, 1]]), np.array([1.0, 4.5]),
              np.arange(2.0 * (d + 1)).reshape(2, d + 1)),
             (TAGS[2], d, "<f8", np.array([[dst, src, 2, 0]]), np.array([2.5]), np.full((1, d), 7.0))]
    for h in hosts:
        h.set_now(2.0)
        h.set_now(1.0)                        # the clock never goes back
        assert h.now == 2.0
        h.put_incoming(parts)
    rows = [sorted((r[0], r[1], r[2], tuple(r[3])) for r in h.in_flight_rows()) for h in hosts]
    assert rows[0] == rows[1] == sorted([(src, dst, TAGS[0], (0.0, 1.0, 2.0, 3.0)),
                                         (dst, src, TAGS[0], (4.0, 5.0, 6.0, 7.0)),
                                         (dst, src, TAGS[2], (7.0, 7.0, 7.0))])
    for h in hosts:
        c = h.counters()
        assert (h.pending(), c["late"], c["lateness"]) == (3, 1, 1.0)       # the one due at 1.0 < now is late by 1
    assert hosts[0].heap_top() == hosts[1].heap_top() <= 2.0             # ... and put on the heap at now
    # the compiled pool grows only when a batch does not fit, and then doubles
    c = hosts[0]
    pool, max_out = c._mi.shape[0], c.kernel.max_out
    from svmsim.schedule.event_kernels import N_FREE
    room = int(c._ctr[N_FREE]) - 2 * max_out
    many = lambda k: [(TAGS[2], d, "<f8", np.tile([[src, dst, 0, 0]], (k, 1)), np.full(k, 9.0), np.zeros((k, d)))]
    c.put_incoming(many(room))
    assert c._mi.shape[0] == pool and c.pending() == 3 + room
    c.put_incoming(many(1))
    assert c._mi.shape[0] == 2 * pool and c.pending() == 4 + room
    meters = []
    hosts[1].put_incoming(many(room + 1))
    for h in hosts:
        h.meter_in_flight()
        meters.append(h.meter)
    assert meters[0].ledger().equals(meters[1].ledger()) and meters[0].messages == 4 + room


# ----------------------------------------------------------------------------------------------------------------
# synchronous rounds under the modelled cluster time


class Hub(__import__("svmsim.program", fromlist=["NodeProgram"]).NodeProgram):
    """Node 0 sends d doubles to each spoke, the spokes answer with d float32s; each step declares `work`."""
    def __init__(self, d, work, initiator):
        self.d, self.work, self.initiator = d, work, initiator

    def init(self, node_ids, node_data, seed):
        return {"ids": np.asarray(node_ids, dtype=np.int64)}

    def step(self, st, inbox, round_):
        out = Outbox(signals={"work": np.full(len(st["ids"]), self.work)})
        if st["ids"][0] == 0:
            out.send(MessageBatch.broadcast("down", 0, np.array([1, 2]), np.ones(self.d)))
        else:
            for i in st["ids"].tolist():
                out.send(MessageBatch.single("up", i, 0, np.ones(self.d, dtype=np.float32)))
        return st, out


@pytest.mark.parametrize("compute", ["count", "measured"])
def test_modelled_cluster_time_of_synchronous_rounds(compute):
    from svmsim.comm.edges import edge_index
    from svmsim.schedule import SyncScheduler
    from svmsim.schedule.cluster_time import ClusterClock, NetworkModel
    G = build_topology("star", 3)
    adjacency = nx.to_numpy_array(G, nodelist=range(3), dtype=bool)
    d, alpha, beta, rate = 10, 1e-3, 1e4, 1e3
    roles = [RoleSpec("hub", Hub(d, 50.0, True), np.array([0]), [None]),
             RoleSpec("spoke", Hub(d, 20.0, False), np.array([1, 2]), [None, None])]
    groups = split_roles(roles, {})
    engine = InProcessEngine(timed=compute == "measured")
    engine.deploy(groups, 0)
    model = NetworkModel(latency=alpha, bandwidth=beta, compute_rate=rate, compute=compute)
    clock = ClusterClock(model, 3, *edge_index(adjacency, 3))
    sched = SyncScheduler(engine, groups, Meter(3, adjacency), 3, clock=clock)
    timed = []
    sched.run(max_rounds=4, on_round=lambda r: timed.append(dict(engine.step_seconds)))
    if compute == "count":
        # hub: computes 50/rate = 0.05, sends 80 bytes (0.008 on its port) to 1, then to 2, each arriving 0.001 later;
        # a spoke computes 0.02 and answers 40 bytes (0.004): spoke 2 is the later one in every round trip
        trip = 0.05 + 2 * 0.008 + 0.001 + 0.02 + 0.004 + 0.001
        assert trip == pytest.approx(0.092)
        assert clock.now == pytest.approx(2 * trip, rel=1e-12)
        np.testing.assert_allclose(clock.compute, [100 / rate, 40 / rate, 40 / rate])
    else:                        # each group's measured step, shared evenly by its nodes
        hub = sum(t.get(0, 0.0) for t in timed)
        spokes = sum(t.get(1, 0.0) for t in timed)
        assert hub > 0 and spokes > 0
        np.testing.assert_allclose(clock.compute, [hub, spokes / 2, spokes / 2], rtol=1e-12)
