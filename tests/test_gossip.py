"""The asynchronous gossip scheduler and Push-Sum: exact replay, compiled = Python loop, mass conservation,
ledger = declared counts, clocks, latencies, budgets, observers, and the errors for bad topologies and data."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

import svmsim
from svmsim.algorithms.pushsum import PushSum, PushSumParams, build_pushsum, mass
from svmsim.comm import MessageBatch, Meter, Outbox
from svmsim.data import make_dataset
from svmsim.deployment import Problem
from svmsim.engine import InProcessEngine
from svmsim.engine.base import split_roles
from svmsim.errors import DataError, ProtocolError, TopologyError
from svmsim.faults import FaultModel
from svmsim.program import RoleSpec
from svmsim.core.timing import Clock, Distribution, LatencyModel
from svmsim.program import GossipProgram
from svmsim.schedule.gossip import GossipScheduler, GossipStopReason
from svmsim.topology import build_topology, neighbours
from svmsim.core.metrics import WALL_CLOCK_METRICS

ALL_FAULTS = FaultModel(drop=0.1, duplicate=0.05, delay=0.2, delay_time={"kind": "exponential", "mean": 0.3},
                        crash=0.1, crash_time=3.0, recover_time=6.0, recover_state=False, stragglers=0.2,
                        straggler_factor=3.0, churn_rate=0.05, churn_downtime=1.0)


@pytest.fixture(scope="module")
def iris():
    return make_dataset({"name": "iris"})


def pushsum_run(iris, *, nodes=30, variant="pushsum", seed=1, compiled=None, faults=None, latency=None, clock=None,
                topology=("random_k_out", {"k": 2}), values="random", round_time=None, **params):
    """A deployed Push-Sum on the gossip scheduler: (scheduler, engine, meter, deployment)."""
    p = PushSumParams(nodes=nodes, values=values, variant=variant, **({"dim": 5} if values == "random" else {}),
                      **params)
    dep = build_pushsum(p, Problem(iris, seed=seed, topology_kind=topology[0], topology_params=topology[1]))
    engine = InProcessEngine()
    groups = engine.plan(dep.roles)
    engine.deploy(groups, seed)
    meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names)
    sched = GossipScheduler(engine, groups, meter, dep.topology, seed=seed, compiled=compiled, faults=faults,
                            latency=latency or LatencyModel(Distribution.lognormal(0.05, 0.5), edge_spread=0.3),
                            clock=clock, round_time=round_time)
    return sched, engine, meter, dep


def state_of(engine) -> dict:
    return engine.observe()[0]


def assert_same_run(a, b):
    (sa, ea, ma), (sb, eb, mb) = a, b
    la, lb = ma.ledger(), mb.ledger()
    assert la.equals(lb)
    np.testing.assert_array_equal(la.dropped_edges, lb.dropped_edges)
    oa, ob = state_of(ea), state_of(eb)
    for key in ("s", "w", "edge_mass", "sent"):
        np.testing.assert_array_equal(oa[key], ob[key])
    assert sa.progress() == sb.progress()
    for key, value in sa.node_counters().items():
        np.testing.assert_array_equal(value, sb.node_counters()[key])
    assert sa.fault_summary() == sb.fault_summary()


# ----------------------------------------------------------------------------------------------------------------
# replay and the two event loops


@pytest.mark.parametrize("compiled", [True, False])
def test_same_seed_replays_the_same_run_bit_for_bit(iris, compiled):
    runs = []
    for _ in range(2):
        sched, engine, meter, _ = pushsum_run(iris, compiled=compiled, faults=ALL_FAULTS)
        assert sched.compiled == compiled
        sched.run(max_time=12.0)
        sched.finish()
        runs.append((sched, engine, meter))
    assert_same_run(*runs)
    sched, engine, meter, _ = pushsum_run(iris, compiled=compiled, faults=ALL_FAULTS, seed=2)
    sched.run(max_time=12.0)
    assert not np.array_equal(state_of(engine)["s"], state_of(runs[0][1])["s"])


@pytest.mark.parametrize("variant", ["pushsum", "running-sum", "pairwise"])
def test_compiled_loop_gives_the_python_loop_run(iris, variant):
    clock = Clock("periodic", rate=1.5, jitter=0.3)
    latency = LatencyModel(Distribution.uniform(0.01, 0.2), bandwidth=400.0, edge_spread=0.5)
    runs = []
    for compiled in (False, True):
        sched, engine, meter, _ = pushsum_run(iris, variant=variant, compiled=compiled, faults=ALL_FAULTS,
                                              clock=clock, latency=latency, round_time=0.7)
        reason = sched.run(max_time=15.0)
        assert reason == GossipStopReason.TIME and sched.now == 15.0
        sched.finish()
        runs.append((sched, engine, meter))
    assert_same_run(*runs)
    summary = runs[0][0].fault_summary()
    assert summary["dropped_total"]["messages"] > 0 and summary["node_events"]["crash"] == 3
    assert summary["node_events"]["recover"] == 3 and summary["node_events"]["leave"] > 0


@pytest.mark.parametrize("variant", ["pushsum", "running-sum", "pairwise"])
def test_zero_latency_deliveries_through_the_compiled_lane_give_the_python_loop_run(iris, variant):
    """With latency 0 the compiled loop keeps a delivery due now out of its heap (a lane of one) and takes it when
    its (time, priority, sequence) comes first. With every fault (a duplicate's second copy, also due now, goes
    on the heap behind it; delayed copies come later; crashes and churn at their own times), replies sent from a
    delivery (pairwise), and the run cut into slices by message budgets and evaluation points (the loop returns
    while a delivery waits in the lane, which goes back on the heap with its sequence number), the run is the
    Python loop's, bit for bit."""
    clock = Clock("periodic", rate=1.5, jitter=0.3)
    latency = LatencyModel(Distribution.constant(0.0))
    runs = []
    for compiled in (False, True):
        sched, engine, meter, _ = pushsum_run(iris, variant=variant, compiled=compiled, faults=ALL_FAULTS,
                                              clock=clock, latency=latency, round_time=0.7)
        budget = 0
        for _ in range(40):
            budget += 7
            sched.run(max_time=12.0, max_messages=budget, eval_messages=3, on_observe=lambda progress: False)
        assert sched.run(max_time=12.0) == GossipStopReason.TIME
        sched.finish()
        runs.append((sched, engine, meter))
    assert_same_run(*runs)
    summary = runs[0][0].fault_summary()
    assert summary["dropped_total"]["messages"] > 0 and summary["node_events"]["crash"] == 3


def test_resuming_a_run_gives_the_same_run(iris):
    whole = pushsum_run(iris, faults=ALL_FAULTS)
    whole[0].run(max_time=10.0)
    pieces = pushsum_run(iris, faults=ALL_FAULTS)
    for t in (1.0, 2.5, 7.0, 10.0):
        pieces[0].run(max_time=t)
    for s in (whole[0], pieces[0]):
        s.finish()
    assert_same_run(whole[:3], pieces[:3])


# ----------------------------------------------------------------------------------------------------------------
# Push-Sum


def conserved_total(sched, engine):
    """Sum of s and w over the nodes plus in flight (pushes, and the replies of pairwise averaging)."""
    s, w = mass([state_of(engine)])
    for _, _, tag, payload in sched.in_flight():
        if tag == "push":
            s = s + payload[:-1]
            w += payload[-1]
        elif tag == "average_reply":
            s = s + payload
    return s, w


@pytest.mark.parametrize("variant", ["pushsum", "running-sum", "pairwise"])
def test_mass_is_conserved_at_every_instant(iris, variant):
    sched, engine, _, _ = pushsum_run(iris, variant=variant, nodes=40,
                                      latency=LatencyModel(Distribution.lognormal(0.5, 0.5)))
    o = state_of(engine)
    s0, w0 = o["s0"].sum(axis=0), o["w0"].sum()
    for t in (0.5, 1.7, 4.0, 9.3, 20.0):
        sched.run(max_time=t)
        assert sched.n_in_flight > 5
        s, w = conserved_total(sched, engine)
        np.testing.assert_allclose(s, s0, rtol=0, atol=1e-12 * np.abs(o["s0"]).sum())
        assert abs(w - w0) <= 1e-12 * w0


def test_running_sum_keeps_the_mass_that_loss_destroys(iris):
    faults = FaultModel(drop=0.3, duplicate=0.1)
    runs = {}
    for variant in ("pushsum", "running-sum"):
        sched, engine, _, dep = pushsum_run(iris, variant=variant, nodes=40, faults=faults)
        sched.run(max_time=120.0)
        runs[variant] = (sched, dep.evaluate({"peer": [state_of(engine)]}), state_of(engine))
    sched, metrics, o = runs["running-sum"]
    s, w = mass([o])                       # nodes plus what the edge totals still owe: exact whatever was lost
    np.testing.assert_allclose(s, o["s0"].sum(axis=0), rtol=0, atol=1e-12 * np.abs(o["s0"]).sum())
    assert abs(w - o["w0"].sum()) <= 1e-12 * o["w0"].sum()
    lost = sched.fault_summary()["dropped"]["lost"]["push_cumulative"]["messages"]
    assert lost > 0.25 * sched.progress().sent
    assert metrics["consensus_error"] < 2e-3                  # it converges to the true average, only slower
    _, plain, _ = runs["pushsum"]
    assert plain["weight_at_nodes"] < 1e-3                    # plain push-sum lost its mass with the messages
    assert plain["consensus_error"] > 0.03                    # and settles on a biased average


def test_pushsum_converges_and_ledger_equals_the_declared_count(iris):
    sched, engine, meter, dep = pushsum_run(iris, nodes=30, max_wakes=150, values="data_mean")
    reason = sched.run()
    assert reason == GossipStopReason.DONE
    obs = {"peer": [state_of(engine)]}
    assert dep.evaluate(obs)["consensus_error"] < 1e-6
    sched.finish()
    led = meter.ledger()
    d = iris.d
    declared = dep.declared_scalars(obs)
    assert led.totals["scalars"] == declared
    assert led.totals["messages"] == sched.progress().sent == int(state_of(engine)["sent"].sum())
    assert led.by_tag == {"push": [led.totals["messages"], led.totals["messages"] * (d + 1),
                                   led.totals["messages"] * (d + 1) * 8]}
    sent = {f"peer-{i}": int(v) for i, v in enumerate(sched.node_counters()["sent"])}
    assert {k: v["sent"]["messages"] for k, v in led.by_node().items()} == {k: v for k, v in sent.items() if v}
    assert led.dropped_by_tag == {}
    assert led.rounds[:, 1].sum() == led.totals["messages"]
    assert led.rounds[:, 0].max() == int(sched.now)                       # round = floor(send time / round_time)


def test_pairwise_messages_and_replies_are_counted(iris):
    sched, engine, meter, dep = pushsum_run(iris, variant="pairwise", nodes=20, max_wakes=30)
    assert sched.run() == GossipStopReason.DONE
    sched.finish()
    led = meter.ledger()
    requests, replies = led.by_tag["average"][0], led.by_tag["average_reply"][0]
    # the last requests may still be in flight when the run is done: they are metered at the end, their replies
    # were never sent
    assert 0 <= requests - replies <= sched.fault_summary()["in_flight_at_end"].get("average", {"messages": 0})[
        "messages"]
    assert led.totals["scalars"] == dep.declared_scalars({"peer": [state_of(engine)]}) == (requests + replies) * 5


def test_mixing_matrix_decides_the_targets(iris):
    G = build_topology("star", 12, seed=0)
    counts = {}
    for mixing in ("neighbour", "metropolis"):
        p = PushSumParams(nodes=12, values="random", dim=2, mixing=mixing)
        dep = build_pushsum(p, Problem(iris, seed=0, topology=G))
        engine = InProcessEngine()
        groups = engine.plan(dep.roles)
        engine.deploy(groups, 0)
        meter = Meter(12, dep.adjacency(), dep.node_names)
        sched = GossipScheduler(engine, groups, meter, G, seed=0)
        sched.run(max_time=200.0)
        counts[mixing] = sched.node_counters()["sent"] / (sched.node_counters()["ticks"] - 1)   # one is pending
    # the random walk always sends; with Metropolis-Hastings a leaf sends with probability 1/12 (to the hub) and
    # the hub with 11/12 (1/12 to each leaf)
    assert np.all(counts["neighbour"] == 1.0)
    assert abs(counts["metropolis"][1:].mean() - 1 / 12) < 0.02 and abs(counts["metropolis"][0] - 11 / 12) < 0.05


def test_disconnected_topology_is_a_clear_error(iris):
    G = nx.Graph([(0, 1), (1, 2), (3, 4)])
    with pytest.raises(TopologyError, match="disconnected: 2 connected components"):
        PushSum(G)
    with pytest.raises(TopologyError, match="disconnected"):
        build_pushsum(PushSumParams(values="random"), Problem(iris, seed=0, topology=G))
    scenario = {"name": "ps", "data": {"name": "iris"}, "algorithm": {"name": "pushsum", "values": "random"},
                "stop": {"max_rounds": 5}, "output": {"progress": False}}
    with pytest.raises(TopologyError, match="disconnected"):
        svmsim.run(scenario, topology=G, write=False)
    with pytest.raises(TopologyError, match="gossip topology is disconnected"):
        GossipScheduler(InProcessEngine(), [], Meter(5), G)


def test_node_without_data_is_a_clear_error(iris):
    G = build_topology("ring", 4)
    data = [{"X": iris.X[:3]}, {"X": iris.X[3:5]}, {"X": iris.X[5:5]}, {"X": iris.X[5:9]}]
    with pytest.raises(DataError, match="node 2 has no data points"):
        PushSum(G).init(np.arange(4), data, 0)
    params = PushSumParams(nodes=200)                                     # iris has 150 points
    with pytest.raises(svmsim.errors.InfeasibleParameterError, match="at most 150 nodes"):
        build_pushsum(params, Problem(iris, seed=0, topology_kind="ring"))


# ----------------------------------------------------------------------------------------------------------------
# the scheduler with a plain Python program


class Ping(GossipProgram):
    """Each tick sends (sender, send time) to a random neighbour from the node's own stream; records everything."""

    def __init__(self, G, tags=("ping",), payload_size=2):
        self.nbrs = neighbours(G)
        self.tags = tags
        self.payload_size = payload_size

    def init(self, node_ids, node_data, seed):
        return {"rng": {int(i): np.random.default_rng([seed, int(i)]) for i in node_ids}, "wakes": [],
                "received": [], "crashes": [], "recovers": []}

    def wake(self, st, nodes, times):
        out = Outbox()
        for node, t in zip(nodes.tolist(), times.tolist()):
            st["wakes"].append((node, t))
            j = int(st["rng"][node].choice(self.nbrs[node]))
            payload = np.zeros(self.payload_size)
            payload[:2] = (node, t)
            out.send(MessageBatch.single(self.tags[len(st["wakes"]) % len(self.tags)], node, j, payload))
        return st, out

    def receive(self, st, batch, times):
        for src, dst, row, t in zip(batch.src.tolist(), batch.dst.tolist(), batch.rows(), times.tolist()):
            st["received"].append((src, dst, float(row[1]), t, batch.tag))
        return st, Outbox()

    def crash(self, st, nodes):
        st["crashes"].append(int(nodes[0]))
        return st

    def recover(self, st, nodes, keep_state):
        st["recovers"].append((int(nodes[0]), bool(keep_state)))
        return st


def ping_run(G, seed=0, program=None, **kw):
    program = program or Ping(G)
    n = G.number_of_nodes()
    engine = InProcessEngine()
    groups = split_roles([RoleSpec("peer", program, np.arange(n, dtype=np.int64), [None] * n)], {})
    engine.deploy(groups, seed)
    adjacency = nx.to_numpy_array(G, nodelist=range(n), dtype=bool)
    meter = Meter(n, adjacency)
    return GossipScheduler(engine, groups, meter, G, seed=seed, **kw), engine, meter


def test_constant_latency_bandwidth_and_send_time_rounds():
    G = build_topology("ring", 8)
    sched, engine, meter = ping_run(G, latency=LatencyModel(Distribution.constant(0.25), bandwidth=64.0),
                                    round_time=0.5)
    assert not sched.compiled
    sched.run(max_time=20.0)
    st = engine.states[0]
    delays = np.array([t - sent for _, _, sent, t, _ in st["received"]])
    np.testing.assert_allclose(delays, 0.25 + 16 / 64.0, rtol=0, atol=1e-12)   # 2 scalars = 16 bytes
    sched.finish()
    expected = np.bincount([int(t / 0.5) for _, t in st["wakes"]])
    rounds = meter.ledger().rounds
    np.testing.assert_array_equal(rounds[:, 1], expected[expected > 0])
    np.testing.assert_array_equal(rounds[:, 0], np.flatnonzero(expected))


def test_clocks_tick_at_their_rates():
    G = build_topology("complete", 10)
    sched, engine, _ = ping_run(G, clock=Clock("poisson", rate=2.0))
    sched.run(max_time=500.0)
    ticks = np.bincount([n for n, _ in engine.states[0]["wakes"]], minlength=10)
    assert np.all(np.abs(ticks - 1000) < 5 * math.sqrt(1000))               # Poisson(rate * T)
    sched, engine, _ = ping_run(G, clock=Clock("periodic", rate=0.5))
    sched.run(max_time=101.0)
    for node in range(10):
        times = np.array([t for n, t in engine.states[0]["wakes"] if n == node])
        assert 0 < times[0] < 2.0 and times.size in (50, 51)                # a random phase, then every period
        np.testing.assert_allclose(np.diff(times), 2.0, atol=1e-9)
    sched, engine, _ = ping_run(G, faults=FaultModel(straggler_nodes=[3], straggler_factor=4.0))
    sched.run(max_time=800.0)
    ticks = np.bincount([n for n, _ in engine.states[0]["wakes"]], minlength=10)
    assert abs(ticks[3] - 200) < 5 * math.sqrt(200) and np.all(np.abs(np.delete(ticks, 3) - 800) < 5 * math.sqrt(800))


def test_events_are_handled_in_time_order_and_equal_times_by_priority():
    G = build_topology("ring", 6)
    # periodic clocks without jitter and a latency of exactly one period: deliveries and ticks fall on equal times
    sched, engine, _ = ping_run(G, clock=Clock("periodic", rate=1.0), latency=LatencyModel(Distribution.constant(1.0)))
    order = []
    program = engine.groups[0].program
    wake, receive = program.wake, program.receive
    program.wake = lambda st, nodes, times: (order.append((times[0], 1)), wake(st, nodes, times))[1]
    program.receive = lambda st, batch, times: (order.append((times[0], 0)), receive(st, batch, times))[1]
    sched.run(max_time=30.0)
    assert order == sorted(order)                     # time first, then deliveries (0) before ticks (1)


def test_observer_is_called_at_each_eval_time_and_can_stop_the_run():
    G = build_topology("ring", 6)
    sched, engine, meter = ping_run(G)
    seen = []

    def observe(p):
        seen.append(p)
        wakes = engine.states[0]["wakes"]
        assert all(t < p.time for _, t in wakes) and p.wakes == len(wakes)      # the state as of that instant
        return p.time >= 7.5

    assert sched.run(max_time=100.0, eval_time=2.5, on_observe=observe) == GossipStopReason.OBSERVER
    assert [p.time for p in seen] == [2.5, 5.0, 7.5] and [p.round for p in seen] == [2, 5, 7]
    assert meter.messages + sched.n_in_flight == seen[-1].sent             # metered: everything settled so far
    counted = []
    sched.run(max_time=100.0, eval_messages=40, on_observe=lambda p: counted.append(p.sent) or len(counted) == 3)
    assert counted[0] % 40 == 0 and np.all(np.diff(counted) == 40)


@pytest.mark.parametrize("compiled", [False, None], ids=["python", "compiled"])
def test_observers_that_peek_see_the_state_itself_and_snapshots_stay_as_taken(iris, compiled):
    """`peek`: the observer reads the nodes' s and w in place (read-only views, no copy of every node's values);
    without it every observation is a snapshot that later events leave as it was; `hand_over`, when the run is
    over, gives the state's own arrays, writable, and the scheduler lets go of its queue."""
    sched, engine, _, _ = pushsum_run(iris, nodes=20, compiled=compiled)
    state_s = engine.states[0].arrays.s
    peeked, kept = [], []

    def observe(p, observations):
        obs = observations[0]
        peeked.append((np.shares_memory(obs["s"], state_s), obs["s"].flags.writeable, obs["s"].copy()))
        return p.time >= 3.0

    sched.run(max_time=50.0, eval_time=1.0, on_observe=observe, with_observations=True, peek=True)
    assert [(shared, writeable) for shared, writeable, _ in peeked] == [(True, False)] * 3
    sched.run(max_time=50.0, eval_time=1.0, on_observe=lambda p, o: kept.append(o[0]) or p.time >= 5.0,
              with_observations=True)
    assert len(kept) == 2 and not np.shares_memory(kept[0]["s"], state_s)
    assert not np.array_equal(kept[0]["s"], kept[1]["s"])                    # each as it was when taken
    np.testing.assert_array_equal(kept[1]["s"], state_s)
    out = sched.outcome(peek=True)
    assert np.shares_memory(out.observations[0]["s"], state_s)
    np.testing.assert_array_equal(out.observations[0]["w"], engine.observe()[0]["w"])
    sched, engine, _, _ = pushsum_run(iris, nodes=20, compiled=compiled)
    sched.run(max_time=2.0)
    final = sched.outcome().observations[0]                                   # a snapshot unless asked to peek
    assert not np.shares_memory(final["s"], engine.states[0].arrays.s) and final["s"].flags.writeable
    assert "handed_over" not in final
    sched, engine, _, _ = pushsum_run(iris, nodes=20, compiled=compiled)
    sched.run(max_time=2.0)
    in_flight = sched.n_in_flight
    out = sched.outcome(hand_over=True)                                       # the run is over: its own arrays
    last = out.observations[0]
    assert last["s"] is engine.states[0].arrays.s and last["w"] is engine.states[0].arrays.w
    assert last["handed_over"] and last["s"].flags.writeable and out.progress.in_flight == in_flight > 0
    assert sched.n_in_flight == 0 and sched.in_flight() == []                 # metered, and the queue let go
    assert sched.host.heap_top() == math.inf
    assert out.ledger.totals["messages"] == out.progress.sent


def test_a_run_through_peeking_observers_gives_the_snapshots_results(iris, monkeypatch):
    """The runner evaluates from peeks and builds the model from the state handed over; the same run with
    snapshots gives the same bits."""
    from svmsim.engine.inproc import InProcessEngine as Engine

    scenario = {"name": "peek", "seed": 3, "data": {"name": "iris", "test": "none"},
                "topology": {"kind": "random_k_out"}, "algorithm": {"name": "pushsum", "nodes": 24},
                "schedule": {"kind": "gossip"}, "stop": {"max_rounds": 12}, "output": {"progress": False}}
    peeked = svmsim.run(scenario, write=False)
    monkeypatch.setattr(Engine, "peek", Engine.observe)
    monkeypatch.setattr(Engine, "hand_over", Engine.observe)          # the model divides a copy, not the state
    copied = svmsim.run(scenario, write=False)
    assert [{k: v for k, v in r.items() if k not in WALL_CLOCK_METRICS} for r in peeked.metrics] == \
        [{k: v for k, v in r.items() if k not in WALL_CLOCK_METRICS} for r in copied.metrics]
    for key in ("estimates", "average", "target"):
        np.testing.assert_array_equal(peeked.model[key], copied.model[key])
    assert peeked.ledger.equals(copied.ledger)


def test_budgets_stop_the_run_exactly():
    G = build_topology("ring", 6)
    sched, _, _ = ping_run(G)
    assert sched.run(max_messages=57) == GossipStopReason.MESSAGES and sched.progress().sent == 57
    assert sched.run(max_scalars=200) == GossipStopReason.COMMUNICATION and sched.progress().sent_scalars == 200
    assert sched.run(max_time=50.0) == GossipStopReason.TIME and sched.now == 50.0
    assert sched.run(max_time=1e9, max_seconds=0.05) == GossipStopReason.WALL


def test_a_sync_program_is_refused_and_the_gossip_program_refuses_rounds():
    G = build_topology("ring", 4)
    from svmsim.program import NodeProgram
    engine = InProcessEngine()
    groups = split_roles([RoleSpec("peer", NodeProgram(), np.arange(4, dtype=np.int64), [None] * 4)], {})
    with pytest.raises(svmsim.errors.ScenarioError, match="not a gossip program"):
        GossipScheduler(engine, groups, Meter(4), G)
    with pytest.raises(ProtocolError, match="gossip scheduler"):
        Ping(G).step(None, None, 0)


# ----------------------------------------------------------------------------------------------------------------
# scenarios


def test_pushsum_scenario_runs_reproducibly_with_faults(tmp_path):
    scenario = {"name": "ps", "seed": 3, "data": {"name": "iris"}, "topology": {"kind": "random_k_out", "k": 2},
                "algorithm": {"name": "pushsum", "nodes": 25, "variant": "running-sum"},
                "schedule": {"latency": {"kind": "lognormal", "median": 0.05, "sigma": 0.5}, "eval_time": 2.0},
                "faults": {"drop": 0.2, "duplicate": 0.05},
                "stop": {"max_rounds": 60}, "output": {"progress": False, "run_dir": str(tmp_path / "run")}}
    a = svmsim.run(scenario)
    b = svmsim.run(scenario, write=False)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in WALL_CLOCK_METRICS} for r in rows]
    assert strip(a.metrics) == strip(b.metrics) and a.ledger.equals(b.ledger)
    assert [r["iteration"] for r in a.metrics] == list(range(2, 61, 2))
    assert a.final["consensus_error"] < 0.02 * a.metrics[0]["consensus_error"]
    assert a.summary["ledger_matches_declared"] is True
    assert a.summary["faults"]["dropped_total"]["messages"] == a.ledger.summary()["dropped_by_tag"][
        "push_cumulative"]["messages"]
    assert (tmp_path / "run" / "summary.json").is_file() and a.summary["compiled_loop"] is True
    c = svmsim.run(scenario, overrides={"schedule.compiled": False}, write=False)
    assert strip(a.metrics) == strip(c.metrics) and a.ledger.equals(c.ledger)
    resolved = svmsim.load_scenario(tmp_path / "run" / "scenario.resolved.toml")
    assert resolved.schedule.latency == {"kind": "lognormal", "median": 0.05, "sigma": 0.5}
    assert resolved.faults.drop == 0.2


def test_long_latencies_grow_the_compiled_pool_and_match_the_python_loop(monkeypatch):
    """Many messages in flight outgrow the compiled loop's first pool; growing it changes nothing in the run."""
    from svmsim.schedule import event_host

    calls = []
    grow = event_host.grow_pool
    monkeypatch.setattr(event_host, "grow_pool", lambda *a: calls.append(1) or grow(*a))
    spec = {"name": "grow", "data": {"name": "iris"}, "topology": {"kind": "complete"},
            "algorithm": {"name": "pushsum", "nodes": 30, "values": "random", "dim": 5},
            "schedule": {"latency": {"kind": "uniform", "low": 5.0, "high": 50.0}},
            "stop": {"max_rounds": 200}, "output": {"progress": False}}
    compiled = svmsim.run(spec, write=False)
    assert calls, "the pool never grew: the test no longer exercises growth"
    python = svmsim.run({**spec, "schedule": {**spec["schedule"], "compiled": False}}, write=False)
    assert compiled.summary["ledger_matches_declared"] is True
    assert compiled.ledger.equals(python.ledger)
    assert compiled.final["consensus_error"] == python.final["consensus_error"]
