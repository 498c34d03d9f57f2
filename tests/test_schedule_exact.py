"""Exact behaviour of the schedulers (`schedule/sync.py`, `schedule/gossip.py`, `schedule/event_host.py`): messages
routed to the right node in the right round, ledgers equal to what was sent, event order and virtual times, stop
reasons, errors naming what is wrong, and several event hosts in one process giving the run of one host."""
from __future__ import annotations

import itertools
import math
import re
import time

import networkx as nx
import numpy as np
import pytest

from svmsim.comm import MessageBatch, Meter, Outbox
from svmsim.core.timing import Clock, Distribution, LatencyModel
from svmsim.engine import InProcessEngine
from svmsim.engine.base import split_roles
from svmsim.errors import ProtocolError
from svmsim.faults import FaultModel
from svmsim.program import GossipProgram, NodeProgram, RoleSpec
from svmsim.schedule.event_host import EventHost, GossipSetting
from svmsim.schedule.event_kernels import (
    ARRIVAL,
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
        assert batch.src.shape == batch.dst.shape == times.shape == (batch.payload.shape[0],)   # a row per message
        assert batch.tag != self.tag or batch.payload.dtype == self.dtype
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
                plan=None, node_data=None, compiled=False, **kw):
    """One EventHost running a program over every node (`owner`: which host owns each node), through its Python
    methods (or its compiled kernel with `compiled`)."""
    program = program or Chatter(G)
    n = G.number_of_nodes()
    clock = clock or Clock()
    latency = latency or LatencyModel(Distribution.uniform(0.2, 0.4))
    plan = plan or (faults or FaultModel()).bind(n, seed)
    setting = GossipSetting(n, clock, latency, plan, seed, 1.0 / clock.rate)
    adj_ptr, adj = neighbour_csr(G)
    owner = np.zeros(n, dtype=np.int64) if owner is None else owner
    states = {0: program.init(np.arange(n), node_data or [None] * n, seed)}
    meter = meter or Meter(n, nx.to_numpy_array(G, nodelist=range(n), dtype=bool))
    host = EventHost({0: program}, states, np.zeros(n, dtype=np.int64), owner, me, setting, adj_ptr, adj, meter,
                     compiled=compiled, **kw)
    return host, states, meter


# ----------------------------------------------------------------------------------------------------------------
# several hosts in one process: the run of one host


def run_hosts(hosts, until, window, flushes=None, seal=False, drain=False):
    """Drive hosts that own disjoint nodes in windows shorter than the least latency: every host runs to the end of
    the window, then the messages for other hosts are handed over (they arrive after the window's end). `flushes`
    collects (host, messages handed over) when a host's outgoing buffer filled up; `seal`: what waits for other hosts
    at the end is not handed over but metered in flight by its sender; `drain`: the hosts then deliver every message
    in flight (and handle nothing else)."""
    def exchange(senders):
        handed = 0
        for h in senders:
            pending, on_heap = h.pending(), len(h.in_flight_rows())
            outgoing = h.take_outgoing()
            assert pending == on_heap + sum(p[3].shape[0] for parts in outgoing.values() for p in parts)
            for dest, parts in outgoing.items():
                assert dest != h.me
                handed += sum(p[3].shape[0] for p in parts)
                hosts[dest].put_incoming(parts)
        return handed

    limit, k = 0.0, 0
    while limit < until:
        k += 1
        limit = min(k * window, until)
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
    if drain:                                   # the end of a Ray run: deliver what is in flight, wake no node
        wakes = [h.counters()["wakes"] for h in hosts]
        for h in hosts:
            h.draining = True
        while any(h.pending() for h in hosts):
            for h in hosts:
                while (status := h.advance(math.inf)) not in (ST_QUIESCENT, ST_TIME):
                    h.grow() if status == ST_GROW else h.flush() if status in (ST_YIELD, ST_FLUSH) else exchange([h])
                h.flush()
            exchange(hosts)
        assert [h.counters()["wakes"] for h in hosts] == wakes
    sealed = 0
    if seal:
        for h in hosts:
            for parts in h.take_outgoing().values():
                h.meter_parts_in_flight(parts)
                sealed += sum(p[3].shape[0] for p in parts)
    return sealed


def split_run(G, program, owner, xbatches, until=20.0, window=0.15, faults=None, seed=0, seal=False, drain=False,
              **kw):
    """(reference host, its states, its meter), (hosts, their states, their meter, their fault plan, flushes)."""
    n = G.number_of_nodes()
    faults = faults or FaultModel()
    ref, ref_states, ref_meter = python_host(G, program, faults=faults, seed=seed, **kw)
    while (status := ref.advance(until)) != ST_TIME:          # a compiled loop hands back to grow or flush
        assert status in (ST_GROW, ST_FLUSH, ST_YIELD)
        ref.grow() if status == ST_GROW else ref.flush()
    ref.meter_in_flight()
    meter = Meter(n, nx.to_numpy_array(G, nodelist=range(n), dtype=bool))
    plan = faults.bind(n, seed)
    hosts, states = [], []
    for me, xbatch in enumerate(xbatches):
        h, st, _ = python_host(G, program, owner=owner, me=me, meter=meter, plan=plan, xbatch_bytes=xbatch, seed=seed,
                               **kw)
        hosts.append(h)
        states.append(st)
    flushes = []
    sealed = run_hosts(hosts, until, window, flushes, seal, drain)
    assert (sealed > 0) == seal                 # sealing left messages for another host to meter in flight
    for h in hosts:
        assert h.now <= until or drain
        h.meter_in_flight()
    return (ref, ref_states, ref_meter), (hosts, states, meter, plan, flushes)


def assert_split_run_is_the_run(G, owner, ref, split):
    (ref, ref_states, ref_meter), (hosts, states, meter, plan, _) = ref, split
    assert meter.ledger().equals(ref_meter.ledger()) and meter.messages > 0
    np.testing.assert_array_equal(meter.ledger().dropped_edges, ref_meter.ledger().dropped_edges)
    if isinstance(ref_states[0], dict):          # a Chatter's own records
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
    ref, split = split_run(G, Chatter(G, fanout=2, dtype=np.float32), owner, (900, 50_000), faults=faults,
                           until=13.5, seal=seal)
    assert split[4]
    assert_split_run_is_the_run(G, owner, ref, split)


@pytest.mark.parametrize("seal", [False, True])
def test_two_compiled_hosts_with_faults_give_the_run_of_one_compiled_host(iris, seal):
    dep = pushsum_engine(iris, nodes=12)[0]
    (role,) = dep.roles
    G = dep.topology
    owner = np.arange(12, dtype=np.int64) % 3
    faults = FaultModel(drop=0.2, duplicate=0.1, delay=0.2, delay_time={"kind": "exponential", "mean": 0.3},
                        churn_rate=0.05, churn_downtime=0.5)
    ref, split = split_run(G, role.program, owner, (100, 50_000, 2_000), faults=faults, until=13.5, seal=seal,
                           node_data=list(role.node_data), compiled=True)
    assert ref[0].compiled and all(h.compiled for h in split[0])
    assert split[4] and split[2].messages > 100           # the small batch filled up and was handed over early
    assert_split_run_is_the_run(G, owner, ref, split)
    ref_view = role.program.observe(ref[1][0])
    views = [role.program.observe(st[0]) for st in split[1]]
    for name in ("s", "w"):                                 # Push-Sum's sums and weights, node by node
        ours = np.stack([views[owner[i]][name][i] for i in range(12)])     # three hosts, each its own nodes
        np.testing.assert_array_equal(ours, ref_view[name])


@pytest.mark.parametrize("compiled", [False, True])
def test_draining_hosts_deliver_what_one_host_meters_in_flight(iris, compiled):
    """Without node faults, what the hosts deliver while draining is what one host meters as in flight at the end."""
    faults = FaultModel(drop=0.2, duplicate=0.1, delay=0.2, delay_time={"kind": "exponential", "mean": 0.3})
    if compiled:
        (role,) = pushsum_engine(iris, nodes=12)[0].roles
        G, program = pushsum_engine(iris, nodes=12)[0].topology, role.program
        kw = {"node_data": list(role.node_data), "compiled": True}
    else:
        G = nx.random_regular_graph(4, 12, seed=2)
        program, kw = Chatter(G, fanout=2), {}
    owner = np.arange(12, dtype=np.int64) % 2
    ref, split = split_run(G, program, owner, (100, 50_000), faults=faults, until=7.0, drain=True, **kw)
    delivered_late = sum(h.counters()["events"] for h in split[0]) - ref[0].counters()["events"]
    assert delivered_late > 0 and all(h.pending() == 0 for h in split[0])
    assert split[2].ledger().equals(ref[2].ledger())


def test_a_compiled_host_needs_a_program_with_a_kernel():
    from svmsim.errors import ScenarioError
    with pytest.raises(ScenarioError, match="^compiled = true needs a single group per host whose program provides "
                                            "a GossipKernel; allowed: compiled = false$"):
        python_host(build_topology("ring", 4), compiled=True)


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
    arrivals = np.array([(2, 1, 3, 0), (2, 1, 3, 0)], dtype=ARRIVAL)
    host.put_incoming([("chat", 3, "<f8", arrivals, np.array([now - 1.5, now + 0.25]),
                        np.array([[2, 3.0, 0], [2, 3.5, 1]]))])
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
                out.send(MessageBatch("pair", np.array([0, 0]), np.array([1, 3]), np.array([1.0, 2.0, 3.0])))
                out.send(MessageBatch("solo", np.array([0]), np.array([2]), np.array([9.0])))
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
    assert got["pair"] == {(0, 1, (1.0, 2.0, 3.0)), (0, 3, (1.0, 2.0, 3.0))}      # a shared row of three
    assert got["solo"] == {(0, 2, (9.0,))}                                        # one message, one scalar
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


def pushsum_engine(iris, nodes=12, seed=1, kind=("random_k_out", {"k": 2}), **params):
    from svmsim.algorithms.pushsum import PushSumParams, build_pushsum
    from svmsim.deployment import Problem
    dep = build_pushsum(PushSumParams(nodes=nodes, values="random", dim=3, **params),
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
    epoch = sched.host.node_state()["epoch"]
    for node in range(8):
        mine = [name for _, v, name in events if v == node]
        assert epoch[node] == len(mine)
        assert st["crashes"].count(node) == sum(n in ("crash", "leave") for n in mine)
        assert sum(v == node for v, _ in st["recovers"]) == sum(n in ("recover", "join") for n in mine)
        assert bool(ni["down"][node]) == (len(mine) % 2 == 1)
        assert bool(ni["dead"][node]) == (node in (1, 4, 6) and recover_time is None)
    assert sched.host.node_state()["dead"].max() == (1 if recover_time is None else 0)


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


def test_a_compiled_program_sending_off_the_topology_is_a_clear_error(iris):
    dep = pushsum_engine(iris, nodes=12)[0]
    ring = build_topology("ring", 12)                 # not the graph the program's mixing rows were built on
    sched = pushsum_sched(iris, True, topology=ring)[0]
    assert sched.compiled
    with pytest.raises(ProtocolError) as caught:
        sched.run(max_time=50.0)
    s, d = (int(v) for v in re.match(r"node (\d+) \(\S+\) sent a message to node (\d+) \(\S+\), which are not "
                                     r"neighbours in the topology; gossip programs may only send along edges$",
                                     str(caught.value)).groups())
    assert dep.topology.has_edge(s, d) and not ring.has_edge(s, d)
    assert f"({dep.node_names[s]})" in str(caught.value) and f"({dep.node_names[d]})" in str(caught.value)


def test_the_run_is_done_when_every_group_is():
    G = build_topology("ring", 6)
    quick, slow = Chatter(G, done_after=2), Chatter(G, done_after=40)
    groups = [("even", quick, np.array([0, 2, 4])), ("odd", slow, np.array([1, 3, 5]))]
    sched, engine, _ = gossip_run(G, groups=groups, compiled=False)
    assert sched.run(max_time=3.0) == GossipStopReason.TIME and not sched.host.done   # only one group is done
    assert sched.run(max_time=100.0) == GossipStopReason.DONE and sched.host.done is True
    assert len(engine.states[1]["wakes"]) == 40
    assert sched.host.counters()["done"] is True


def test_a_compiled_run_is_done_when_every_node_is(iris):
    dep, engine, groups = pushsum_engine(iris, nodes=6, max_wakes=3)
    meter = Meter(6, nx.to_numpy_array(dep.topology, nodelist=range(6), dtype=bool), dep.node_names)
    sched = GossipScheduler(engine, groups, meter, dep.topology, compiled=True)
    counters = sched.host.counters()
    assert set(counters) == {"wakes", "events", "sent", "sent_scalars", "delayed", "late", "lateness", "done"}
    assert counters["done"] is False
    assert sched.run(max_time=1000.0) == GossipStopReason.DONE and sched.host.counters()["done"] is True


def test_messages_from_another_host_land_alike_on_the_compiled_and_the_python_heap(iris):
    hosts = [pushsum_sched(iris, compiled)[0].host for compiled in (True, False)]
    assert [h.compiled for h in hosts] == [True, False]
    assert hosts[0].heap_top() == hosts[1].heap_top() > 0          # the same first clock tick
    from svmsim.algorithms.pushsum import TAGS
    G = pushsum_engine(iris)[0].topology
    src, dst = next(iter(G.edges()))
    d = 3
    parts = [(TAGS[0], d + 1, "<f8", np.array([(src, dst, 1, 0), (dst, src, 4, 1)], dtype=ARRIVAL),
              np.array([1.0, 4.5]), np.arange(2.0 * (d + 1)).reshape(2, d + 1)),
             (TAGS[2], d, "<f8", np.array([(dst, src, 2, 0)], dtype=ARRIVAL), np.array([2.5]), np.full((1, d), 7.0))]
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
    room = int(c._ctr[0]["free"]) - 2 * max_out
    many = lambda k: [(TAGS[2], d, "<f8", np.array([(src, dst, 0, 0)] * k, dtype=ARRIVAL), np.full(k, 9.0),
                       np.zeros((k, d)))]
    c.put_incoming(many(room))
    assert c._mi.shape[0] == pool and c.pending() == 3 + room
    c.put_incoming(many(1))
    assert c._mi.shape[0] == 2 * pool and c.pending() == 4 + room
    big = int(c._ctr[0]["free"]) + 1                        # more than the whole free list: grows before it pushes
    c.put_incoming(many(big))
    assert c.pending() == 4 + room + big and c._mi.shape[0] >= 4 * pool
    from svmsim.schedule.event_kernels import has_room
    assert has_room(c._ctr, c._ht, 0, max_out)           # the loop can go on without growing first
    room += big
    meters = []
    hosts[1].put_incoming(many(room + 1))
    for h in hosts:
        h.meter_in_flight()
        meters.append(h.meter)
    assert meters[0].ledger().equals(meters[1].ledger()) and meters[0].messages == 4 + room


def test_progress_and_outcome_report_the_run_exactly():
    from svmsim.errors import ScenarioError
    G = build_topology("ring", 6)
    sched, engine, meter = gossip_run(G, round_time=2.0, latency=LatencyModel(Distribution.uniform(0.2, 0.4)))
    reason = sched.run(max_time=5.3)
    st = engine.states[0]
    wakes, received = len(st["wakes"]), len(st["received"])
    in_flight = wakes - received                  # one message of 3 doubles per wake; the meter settles deliveries
    assert wakes > 0 and in_flight > 0 and in_flight == len(sched.in_flight())
    expected = {"time": 5.3, "round": 2, "wakes": wakes, "events": wakes + received, "sent": wakes,
                "sent_scalars": 3 * wakes, "in_flight": in_flight, "messages": received, "scalars": 3 * received,
                "bytes": 24 * received}
    assert vars(sched.progress()) == expected
    assert sched.progress(at=7.0).round == 3      # floor(7.0 / round_time 2.0)
    outcome = sched.outcome()
    assert outcome.reason == reason == GossipStopReason.TIME
    assert outcome.stats == {} and vars(outcome.progress) == expected
    assert outcome.ledger.totals["messages"] == meter.messages == wakes    # finishing metered those in flight
    sched.finish()
    assert meter.messages == wakes                # a second finish meters nothing again
    with pytest.raises(ScenarioError, match="^this gossip run has been finished; create a new scheduler to run "
                                            "again$"):
        sched.run(max_time=10.0)


def receipt_latencies(received):
    """(src, dst, latency) of every message a `Chatter` received (its payload carries its send time)."""
    return [(src, dst, t - row[1]) for src, dst, row, t, _ in received]


def test_a_lost_message_does_not_stop_the_rest_of_its_event():
    G = build_topology("ring", 6)
    sched, engine, meter = gossip_run(G, Chatter(G, fanout=3), faults=FaultModel(drop=0.4))
    sched.run(max_time=20.0)
    sched.finish()
    wakes = len(engine.states[0]["wakes"])
    summary = meter.ledger().summary()
    lost = summary["dropped_by_tag"]["chat"]["messages"]
    assert sched.host.counters()["sent"] == 3 * wakes and lost > 10
    assert summary["totals"]["messages"] + lost == 3 * wakes


def test_register_kind_gives_one_id_per_tag_width_and_dtype():
    from svmsim.schedule.event_host import register_kind
    kinds, ids = [], {}
    assert [register_kind(kinds, ids, *k) for k in [("a", 2, np.float64), ("a", 2, "<f8"), ("a", 3, np.float64),
                                                     ("a", 2, np.float32), ("b", 2, np.float64), ("a", 2, "f8")]] \
        == [0, 0, 1, 2, 3, 0]
    assert kinds == [("a", 2, np.dtype("<f8")), ("a", 3, np.dtype("<f8")), ("a", 2, np.dtype("<f4")),
                     ("b", 2, np.dtype("<f8"))]


def test_heap_top_is_the_next_event_time_or_infinity(iris):
    from svmsim.algorithms.pushsum import TAGS
    (role,) = pushsum_engine(iris, nodes=6)[0].roles
    G = pushsum_engine(iris, nodes=6)[0].topology
    nobody = np.ones(6, dtype=np.int64)               # every node belongs to host 1; these hosts are host 0
    hosts = [python_host(G, role.program, owner=nobody, xbatch_bytes=10_000, node_data=list(role.node_data),
                         compiled=c)[0] for c in (False, True)]
    src, dst = next(iter(G.edges()))
    for h in hosts:
        assert h.heap_top() == math.inf and h.pending() == 0
        h.put_incoming([(TAGS[2], 3, "<f8", np.array([(src, dst, 0, 0)], dtype=ARRIVAL), np.array([2.5]),
                          np.full((1, 3), 7.0))])
        assert h.heap_top() == 2.5 and h.pending() == 1


def test_messages_from_another_host_are_late_only_before_now_and_writable():
    G = build_topology("ring", 4)

    class Scribbler(Chatter):
        def receive(self, st, batch, times):
            batch.payload[:] += 1.0                   # a program may write to what it receives
            return super().receive(st, batch, times)

    host, states, _ = python_host(G, Scribbler(G), owner=np.ones(4, dtype=np.int64), xbatch_bytes=10_000)
    host.set_now(2.0)
    arrivals = np.array([(0, 1, 0, 0), (1, 2, 0, 0), (2, 3, 0, 0)], dtype=ARRIVAL)
    times, payload = np.array([2.0, 1.0, 1.5]), np.zeros((3, 3))
    for a in (arrivals, times, payload):
        a.setflags(write=False)                       # as unpickled from another process
    host.put_incoming([("chat", 3, "<f8", arrivals, times, payload)])
    c = host.counters()
    assert (c["late"], c["lateness"]) == (2, 1.5)     # at now is on time; 1.0 and 1.5 are late by 1.0 and 0.5
    host.draining = True
    host.advance(math.inf)
    assert sorted((s, d, row, t) for s, d, row, t, _ in states[0]["received"]) == [
        (0, 1, (1.0, 1.0, 1.0), 2.0), (1, 2, (1.0, 1.0, 1.0), 2.0), (2, 3, (1.0, 1.0, 1.0), 2.0)]


def test_messages_for_another_host_sealed_at_the_end_are_metered_in_flight_by_tag_round_and_copy():
    G = build_topology("ring", 6)
    host, _, meter = python_host(G)
    host.kind_id("other kind first", 5, "<f8")          # so that the sealed kinds have ids 1 and 2
    host.meter_parts_in_flight([
        ("chat", 3, "<f8", np.array([(0, 1, 5, 0), (1, 2, 5, 1)], dtype=ARRIVAL), np.array([1.0, 2.0]),
         np.zeros((2, 3))),
        ("ack", 2, "<f4", np.array([(2, 3, 7, 1)], dtype=ARRIVAL), np.array([3.0]), np.zeros((1, 2), np.float32))])
    ledger = meter.ledger()
    assert ledger.summary()["by_tag"] == {"chat": {"messages": 2, "scalars": 6, "bytes": 48},
                                          "ack": {"messages": 1, "scalars": 2, "bytes": 8}}
    np.testing.assert_array_equal(ledger.rounds, [[5, 2, 6, 48], [7, 1, 2, 8]])      # by the send's round
    summary = host.plan.summary(delayed=0, down_now=[])
    assert summary["in_flight_at_end"] == {"chat": {"messages": 2, "scalars": 6}, "ack": {"messages": 1, "scalars": 2}}
    assert summary["duplicated"] == {"chat": {"messages": 1, "scalars": 3}, "ack": {"messages": 1, "scalars": 2}}
    assert summary["dropped_total"] == {"messages": 0, "scalars": 0}


def test_the_gossip_scheduler_refuses_what_it_cannot_run_in_one_clear_sentence():
    from svmsim.errors import ScenarioError
    G = build_topology("ring", 6)

    def refused(message, build):
        with pytest.raises(ScenarioError, match="^" + re.escape(message) + "$"):
            build()

    hub = [("hub", Hub(2, 1.0, True), np.array([0])), ("peer", Chatter(G), np.arange(1, 6))]
    refused("role 'hub' runs Hub, which is not a gossip program; the gossip scheduler needs GossipProgram peers "
            "(use [schedule] kind = \"sync\" for server-client algorithms)", lambda: gossip_run(G, groups=hub))
    refused("2 node(s) of the topology run no program (e.g. node 4); every node of a gossip topology must be a peer",
            lambda: gossip_run(G, groups=[("peer", Chatter(G), np.arange(4))]))
    two = [("a", Chatter(G), np.arange(3)), ("b", Chatter(G), np.arange(3, 6))]
    refused("compiled = true needs a single group whose program provides a GossipKernel; there are 2 groups "
            "(allowed: compiled = false)", lambda: gossip_run(G, groups=two, compiled=True))
    for bad in (0.0, -1.0):
        refused(f"round_time = {bad!r} is out of range; allowed: a number > 0",
                lambda bad=bad: gossip_run(G, round_time=bad))
    refused("the fault plan was bound for 5 nodes but the topology has 6",
            lambda: gossip_run(G, faults=FaultModel().bind(5, 0)))
    sched, engine, meter = gossip_run(G)
    groups = sched.groups
    refused("the meter counts 5 nodes but the topology has 6", lambda: GossipScheduler(
        engine, groups, Meter(5, np.ones((5, 5), dtype=bool)), G))
    refused("the groups' ids must be 0..k-1 in order (as engines plan them); got [1, 0]", lambda: GossipScheduler(
        engine, list(reversed(gossip_run(G, groups=two)[0].groups)), meter, G))

    class Remote:
        name = "far"
    refused("the gossip scheduler steps the states of an in-process engine; engine 'far' hosts its own (its `gossip` "
            "method runs gossip)", lambda: GossipScheduler(Remote(), groups, meter, G))
    refused("eval_time = 0 is out of range; allowed: a number > 0",
            lambda: sched.run(max_time=1.0, eval_time=0, on_observe=lambda p: False))
    refused("eval_messages = 0 is out of range; allowed: an integer >= 1",
            lambda: sched.run(max_time=1.0, eval_messages=0, on_observe=lambda p: False))


def test_gossip_scheduler_defaults_and_observation_grids():
    G = build_topology("ring", 6)
    sched, engine, meter = gossip_run(G, clock=Clock(rate=2.0))
    assert sched.round_time == 0.5 and sched.n_nodes == 6 and sched.outcome().reason == ""
    plain, engine, meter = gossip_run(G)
    default = GossipScheduler(engine, plain.groups, meter, G)          # seed 0 unless told
    default.run(max_time=5.0)
    seeded = gossip_run(G, seed=0)[0]
    seeded.run(max_time=5.0)
    assert default.meter.ledger().equals(seeded.meter.ledger()) and default.meter.messages > 0
    plan = FaultModel(drop=0.3).bind(6, 5)
    assert gossip_run(G, faults=plan)[0].faults is plan                # a bound plan is used as it is
    sched, _, _ = gossip_run(G)
    assert sched.run(max_time=3.3, max_seconds=1e6) == GossipStopReason.TIME
    times, sent = [], []
    sched.run(max_time=6.0, eval_time=0.5, on_observe=lambda p: times.append(p.time) and False)
    assert times == [3.5, 4.0, 4.5, 5.0, 5.5, 6.0]                    # the grid of step 0.5 from where the run is
    before = sched.progress().sent
    sched.run(max_time=9.0, eval_messages=4, on_observe=lambda p: sent.append(p.sent) and False)
    assert sent[0] == (before // 4 + 1) * 4 and all(b - a == 4 for a, b in itertools.pairwise(sent))
    every = []
    sched.run(max_time=10.0, eval_messages=1, on_observe=lambda p: every.append(p.sent) and False)
    assert every == list(range(every[0], every[0] + len(every))) and len(every) >= 2
    # slices hand back every 4096 events; the wall-clock budget is checked there and is not met here
    budget = 60.0 + time.perf_counter()           # longer than the run, and larger than any reading of the clock so far
    assert sched.run(max_time=400.0, max_seconds=budget) == GossipStopReason.TIME
    assert sched.host.counters()["events"] > 4096


def test_extra_delays_are_drawn_from_the_delay_distribution():
    G = build_topology("ring", 6)
    faults = FaultModel(delay=1.0, delay_time=Distribution.uniform(1.0, 2.0))      # every copy delayed
    sched, engine, _ = gossip_run(G, latency=LatencyModel(Distribution.constant(0.3)), faults=faults)
    sched.run(max_time=30.0)
    extra = np.array([lat - 0.3 for _, _, lat in receipt_latencies(engine.states[0]["received"])])
    assert extra.size > 50 and sched.host.counters()["delayed"] == sched.progress().sent
    assert extra.min() >= 1.0 - 1e-9 and extra.max() <= 2.0 + 1e-9
    assert extra.std() > 0.2                      # uniform on [1, 2] (std 0.29), not a constant


@pytest.mark.parametrize("keep", [True, False])
def test_churn_rejoins_keep_or_reset_the_state_as_configured(keep):
    G = build_topology("ring", 6)
    faults = FaultModel(churn_rate=0.3, churn_downtime=0.5, churn_state=keep)
    sched, engine, _ = gossip_run(G, faults=faults)
    sched.run(max_time=40.0)
    recovers = engine.states[0]["recovers"]
    assert len(recovers) >= 5 and all(k is keep for _, k in recovers)


def test_edge_spread_gives_each_link_its_own_latency_factor():
    G = build_topology("ring", 8)
    sched, engine, _ = gossip_run(G, latency=LatencyModel(Distribution.constant(0.3), edge_spread=0.5))
    sched.run(max_time=30.0)
    by_edge = {}
    for src, dst, lat in receipt_latencies(engine.states[0]["received"]):
        by_edge.setdefault((min(src, dst), max(src, dst)), []).append(lat)
    assert len(by_edge) == 8
    for lats in by_edge.values():                 # one factor per undirected link, both ways
        np.testing.assert_allclose(lats, lats[0], rtol=1e-9)
    factors = np.log(np.array([lats[0] for lats in by_edge.values()]) / 0.3)
    assert factors.std() > 0.1                    # log-normal factors of sigma 0.5, not all links alike


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


# ----------------------------------------------------------------------------------------------------------------
# synchronous rounds: routing


class Caster(__import__("svmsim.program", fromlist=["NodeProgram"]).NodeProgram):
    """Node 0 broadcasts its round to every other node over one shared (frozen) id array, or to a group-local
    subset; the others keep (round, src, dst, value) of what reached them and say an iteration ended."""
    def __init__(self, initiator, n, subset=None):
        self.initiator, self.n, self.subset = initiator, n, subset

    def init(self, node_ids, node_data, seed):
        from svmsim.comm.message import frozen_ids
        return {"ids": np.asarray(node_ids, dtype=np.int64), "got": [],
                "to": frozen_ids(self.subset if self.subset is not None else np.arange(1, self.n))}

    def step(self, st, inbox, round_):
        out = Outbox(signals={"wake": True})
        batch = inbox.get("cast")
        if batch is not None:
            assert np.isin(batch.dst, st["ids"]).all(), "a message reached a group that does not host its receiver"
            st["got"] += [(round_, int(s), int(d), float(v[0])) for s, d, v in zip(batch.src, batch.dst, batch.rows())]
            out.signals["iteration"] = round_
        if st["ids"][0] == 0 and round_ < 4:
            out.send(MessageBatch.broadcast("cast", 0, st["to"], np.array([float(round_)])))
        return st, out


def caster_run(n, hosts, subset=None, max_rounds=6):
    from svmsim.schedule import SyncScheduler
    roles = [RoleSpec("server", Caster(True, n, subset), np.array([0]), [None]),
             RoleSpec("client", Caster(False, n, subset), np.arange(1, n), [None] * (n - 1))]
    groups = split_roles(roles, {"client": hosts})
    engine = InProcessEngine()
    engine.deploy(groups, 0)
    sched = SyncScheduler(engine, groups, Meter(n), n)
    reason = sched.run(max_rounds=max_rounds)
    got = sorted(r for g in groups[1:] for r in engine.states[g.gid]["got"])
    return sched, reason, got


@pytest.mark.parametrize("hosts", [1, 2, 3])
def test_a_broadcast_over_one_shared_id_array_reaches_each_receiver_once_on_its_own_host_every_round(hosts):
    """The router caches the group of a shared id array: the cached route must split a broadcast whose receivers
    live on several hosts in every round, not only in the first."""
    n = 7
    _, _, got = caster_run(n, hosts)
    assert got == [(r + 1, 0, d, float(r)) for r in range(4) for d in range(1, n)]
    # a subset living on one host (ids 4..6 on the last of 2 or 3 hosts): cached, and still delivered there each round
    _, _, got = caster_run(n, hosts, subset=np.array([5, 6]))
    assert got == [(r + 1, 0, d, float(r)) for r in range(4) for d in (5, 6)]


def test_the_iteration_is_zero_until_one_ends():
    sched, _, got = caster_run(5, 2, max_rounds=1)   # round 0: the server casts; nothing delivered yet
    assert (sched.round, sched.iteration, got) == (1, 0, [])
    sched.run(max_rounds=2)
    assert (sched.round, sched.iteration) == (2, 1)


@pytest.mark.parametrize("to, clients_first", [([3], False), ([1, 2, 3, 4], False), ([4, 3, 3], False),
                                               ([1, 3], True)])
def test_a_message_to_a_node_that_no_group_hosts_is_refused_not_handed_to_another_group(to, clients_first):
    """Node 3 is a node of the run (a participant-free node of a collective's topology, say) that no group hosts;
    a batch to it, alone or among hosted receivers (of group 0 too), is a protocol error naming the message."""
    from svmsim.schedule import SyncScheduler
    roles = [RoleSpec("server", Caster(True, 5, np.array(to)), np.array([0]), [None]),
             RoleSpec("client", Caster(False, 5), np.array([1, 2, 4]), [None] * 3)]
    roles = roles[::-1] if clients_first else roles
    groups = split_roles(roles, {"client": 2})
    engine = InProcessEngine()
    engine.deploy(groups, 0)
    sched = SyncScheduler(engine, groups, Meter(5), 5)
    with pytest.raises(ProtocolError, match=re.escape("node 0 sent a 'cast' message to node 3, which no group hosts, "
                                                      "so nothing would receive it; allowed: messages to the nodes "
                                                      "the run's groups host")):
        sched.run(max_rounds=3)


class Worker(NodeProgram):
    """Node 0 sends a 'lost' and a 'kept' batch to every other node in rounds 0-2; every group declares
    `kernel_evaluations` per member in each step (member id times round + 1), in the Python loop."""
    def __init__(self, initiator):
        self.initiator = initiator

    def init(self, node_ids, node_data, seed):
        return {"ids": np.asarray(node_ids, dtype=np.int64), "kept": 0}

    def step(self, st, inbox, round_):
        ids = st["ids"]
        out = Outbox(signals={"counts": {"kernel_evaluations": ids * (round_ + 1)}})
        if "lost" in inbox:
            raise AssertionError("a dropped batch was delivered")
        st["kept"] += inbox["kept"].n_messages if "kept" in inbox else 0
        if ids[0] == 0 and round_ < 3:
            out.signals["wake"] = True
            out.send(MessageBatch.broadcast("lost", 0, np.arange(1, 5), np.ones(2)))
            out.send(MessageBatch.broadcast("kept", 0, np.arange(1, 5), np.ones(3)))
        return st, out


class DropTag:
    """A fault model that loses every message of one tag."""
    def __init__(self, tag):
        self.tag = tag

    def apply(self, round_, batch):
        if batch.tag != self.tag:
            return batch, None
        none = np.zeros(batch.n_messages, bool)
        return batch.select(none), batch


def test_python_rounds_meter_node_counts_per_node_and_round_and_go_on_after_a_wholly_lost_batch():
    from svmsim.schedule import SyncScheduler
    roles = [RoleSpec("server", Worker(True), np.array([0]), [None]),
             RoleSpec("client", Worker(False), np.arange(1, 5), [None] * 4)]
    groups = split_roles(roles, {"client": 2})
    engine = InProcessEngine()
    engine.deploy(groups, 0)
    meter = Meter(5)
    sched = SyncScheduler(engine, groups, meter, 5, faults=DropTag("lost"))
    sched.run(max_rounds=10)
    assert [engine.states[g.gid]["kept"] for g in groups] == [0, 6, 6]     # 3 rounds x 4 clients, 2 per group
    ledger = meter.ledger()
    assert ledger.by_tag == {"kept": [12, 36, 288]} and ledger.dropped_by_tag == {"lost": [12, 24, 192]}
    totals, rounds = meter.node_tables()
    # the server steps in rounds 0-3, the clients in rounds 1-3: node i adds i * (round + 1) each time
    assert totals["kernel_evaluations"].tolist() == [0] + [i * (2 + 3 + 4) for i in range(1, 5)]
    assert rounds["kernel_evaluations"].tolist() == [[0, 0], [1, 10 * 2], [2, 10 * 3], [3, 10 * 4]]


def test_measured_compute_time_keeps_rounds_with_kernels_in_the_python_loop(monkeypatch):
    """Each step's measured seconds exist only in the Python loop, so a measured clock must not switch to the
    compiled one even when every group offers a kernel and compiled=True."""
    import tests.test_compiled_sync as cs
    from svmsim.comm.edges import edge_index
    from svmsim.schedule import SyncScheduler, compiled_sync
    from svmsim.schedule.cluster_time import ClusterClock, NetworkModel
    monkeypatch.setattr(compiled_sync, "run_compiled_rounds", lambda *a, **k: pytest.fail("compiled loop used"))
    k = 4
    G = build_topology("star", k + 1)
    adjacency = nx.to_numpy_array(G, nodelist=range(k + 1), dtype=bool)
    clients = np.arange(1, k + 1)
    roles = [RoleSpec("server", cs.Server(), np.array([0]), [{"clients": clients}]),
             RoleSpec("client", cs.Client(), clients, [None] * k)]
    groups = split_roles(roles, {})
    engine = InProcessEngine(timed=True)
    engine.deploy(groups, 0)
    clock = ClusterClock(NetworkModel(latency=1e-3, bandwidth=1e6, compute="measured"), k + 1,
                         *edge_index(adjacency, k + 1))
    sched = SyncScheduler(engine, groups, Meter(k + 1, adjacency), k + 1, clock=clock, compiled=True)
    assert sched.run(max_iterations=3) == "iteration budget"
    assert clock.now > 0 and (clock.compute > 0).all()


def test_python_rounds_stop_exactly_at_their_budgets_and_observe_only_when_asked():
    """A scalar budget met exactly stops the run; the last iteration is settled (its closing messages applied) and
    shown to the observer, which sees no other iteration unless observe_every asks."""
    sched, _, _ = caster_run(7, 2, max_rounds=0)
    assert sched.run(max_scalars=12) == "communication budget"
    assert (sched.meter.scalars, sched.round) == (12, 2)              # 6 clients x 1 scalar per round
    sched, _, _ = caster_run(7, 2, max_rounds=0)
    seen = []
    assert sched.run(max_iterations=2, on_iteration=lambda it, r: seen.append((it, r))) == "iteration budget"
    assert seen == [(2, 4)] and sched.round == 4                      # iteration 2 ended in round 2, settled in 3


def test_the_lane_check_and_an_insert_with_its_own_sequence_keep_the_heap_order():
    """The compiled loop's lane of one holds a delivery out of the heap: `before_heap_top` must say whether its
    (time, priority, sequence) comes before the heap's smallest, and `heap_insert` (the lane going back with the
    sequence number it drew) must pop in key order with the events `heap_push` numbered. Random keys with ties."""
    from svmsim.schedule.event_kernels import COUNTERS, HEAP_KEY, before_heap_top, heap_insert, heap_pop, heap_push

    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(0, 40))
        ht, hk = np.zeros(n + 2), np.zeros(n + 2, HEAP_KEY)
        ctr = np.zeros(1, COUNTERS)
        keys = []
        reserved = None
        for i in range(n):
            t, prio = float(rng.integers(0, 3)), int(rng.integers(0, 6))
            if reserved is None and rng.random() < 0.2:            # draw a number now, insert it later
                reserved = (t, prio, int(ctr[0]["seq"]), i)
                ctr["seq"] += 1
                continue
            keys.append((t, prio, int(ctr[0]["seq"]), i))
            heap_push(ht, hk, ctr, t, prio, i, 0)
        t, prio, seq = float(rng.integers(0, 3)), int(rng.integers(0, 6)), int(rng.integers(0, n + 2))
        assert before_heap_top(ht, hk, ctr, t, prio, seq) == all((t, prio, seq) < k[:3] for k in keys), trial
        if reserved is not None:
            heap_insert(ht, hk, ctr, reserved[0], reserved[1], reserved[2], reserved[3], 0)
            keys.append(reserved)
        popped = [int(heap_pop(ht, hk, ctr)[2]) for _ in range(len(keys))]
        assert popped == [k[3] for k in sorted(keys)], trial
