"""Fault plans, exactly: every validation error (what is wrong, what is allowed), the configuration round trip,
which nodes a plan crashes or slows, which messages it loses, duplicates or drops at dead nodes in which round
(against a reference built from the counter-based streams), the churn timeline, the tally and the summary."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import svmsim.fault_plan as fault_plan_module
from svmsim.comm import MessageBatch
from svmsim.core.streams import STREAM_CHURN, STREAM_FAULT, counter_uniform, stream_keys
from svmsim.core.timing import Distribution, churn_gap
from svmsim.errors import ScenarioError
from svmsim.fault_plan import FaultTally
from svmsim.faults import FAULT_KEYS, FaultModel, Outage


def error(**kw) -> str:
    with pytest.raises(ScenarioError) as info:
        FaultModel(**kw)
    return str(info.value)


def range_msg(key, value, allowed) -> str:
    return f"faults.{key} = {value!r} is out of range; allowed: {allowed}"


# ----------------------------------------------------------------------------------------------------------------
# validation of the model

BOUNDS = {  # key: (allowed, accepted values, refused values)
    "drop": ("a number in [0, 1)", [0, 0.0, 0.5, 0.999999], [1, 1.0, -1e-12, math.inf]),
    "duplicate": ("a number in [0, 1)", [0, 0.999999], [1.0, -1e-12]),
    "crash": ("a number in [0, 1]", [0.0, 1.0], [1.000001, -1e-12]),
    "stragglers": ("a number in [0, 1]", [0.0, 1.0], [1.000001, -1e-12]),
    "crash_time": ("a number >= 0", [0.0, 1e9], [-1e-12, math.inf]),
    "straggler_factor": ("a number >= 1", [1.0, 1e9], [0.999999, math.inf]),
    "churn_rate": ("a number >= 0", [0.0, 1e9], [-1e-12, math.inf]),
    "churn_downtime": ("a number > 0", [1e-12, 1e9], [0.0, -1.0, math.inf]),
}


@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_each_number_is_checked_against_its_exact_range(key):
    allowed, good, bad = BOUNDS[key]
    for v in good:
        assert getattr(FaultModel(**{key: v}), key) == v
    for v in [*bad, math.nan, "0.5", True, None, [0.5]]:
        assert error(**{key: v}) == range_msg(key, v, allowed)


def test_delay_range_and_its_distribution():
    assert FaultModel(delay=1.0, delay_time=2).delay == 1.0
    for v in (1.000001, -0.1, math.nan, "0.5"):
        assert error(delay=v, delay_time=1.0) == range_msg("delay", v, "a number in [0, 1]")
    m = FaultModel(delay=0.25, delay_time=2)
    assert m.delay_time == Distribution.constant(2.0) and isinstance(m.delay_time, Distribution)
    m = FaultModel(delay=0.25, delay_time={"kind": "exponential", "mean": 0.1})
    assert m.delay_time == Distribution("exponential", (0.1,))
    assert error(delay=0.25, delay_time=-1).startswith("faults.delay_time = -1 is out of range; allowed: a number >= 0")
    assert error(delay=0.25, delay_time={"kind": "gamma"}).startswith("faults.delay_time.kind = 'gamma' is not a")
    assert error(delay=0.5) == ("faults.delay = 0.5 needs faults.delay_time, the extra delay's distribution; allowed: "
                                "a number or a table such as {kind = \"exponential\", mean = 0.1}")
    assert error(delay=1e-9).startswith("faults.delay = 1e-09 needs faults.delay_time")
    assert error(delay_time=1.0) == ("faults.delay_time is given but faults.delay = 0, so no message is delayed; "
                                     "allowed: set delay (the probability of an extra delay) in (0, 1], or remove "
                                     "delay_time")


@pytest.mark.parametrize("key", ["crash_nodes", "straggler_nodes"])
def test_node_lists_are_lists_of_non_negative_integers(key):
    m = FaultModel(**{key: [3, np.int64(0), 3]})
    assert getattr(m, key) == (3, 0, 3) and all(type(v) is int for v in getattr(m, key))
    assert getattr(FaultModel(**{key: np.array([2, 1])}), key) == (2, 1)
    for bad in ("12", b"\x01", [True], [1, -1], [1.0], [None], ["1"]):
        assert error(**{key: bad}) == (f"faults.{key} = {bad!r} is invalid; allowed: a list of node ids "
                                       "(integers >= 0)")


def test_a_fraction_and_a_list_of_the_same_nodes_exclude_each_other():
    assert error(crash=0.1, crash_nodes=[1]) == (
        "faults.crash and faults.crash_nodes are both given; allowed: a fraction of nodes (crash) or a list of nodes "
        "(crash_nodes), not both")
    assert error(stragglers=0.1, straggler_nodes=[1]) == (
        "faults.stragglers and faults.straggler_nodes are both given; allowed: a fraction (stragglers) or a list of "
        "nodes (straggler_nodes), not both")
    FaultModel(crash=0.1, straggler_nodes=[1])
    FaultModel(stragglers=0.1, crash_nodes=[1])


def test_recover_time_must_follow_the_crash_of_some_node():
    assert FaultModel(crash_nodes=[0], crash_time=2.0, recover_time=2.000001).recover_time == 2.000001
    assert FaultModel(crash=0.5, recover_time=1).recover_time == 1
    for v in (2.0, 1.0, math.inf, "5", True, math.nan):
        assert error(crash_nodes=[0], crash_time=2.0, recover_time=v) == range_msg(
            "recover_time", v, "a number > crash_time (2.0)")
    assert error(crash=0.5, recover_time=0) == range_msg("recover_time", 0, "a number > crash_time (0.0)")
    assert error(recover_time=5.0) == ("faults.recover_time = 5.0 is given but no node crashes; allowed: set crash "
                                       "or crash_nodes too")
    assert error(recover_time=5.0, stragglers=0.5).startswith("faults.recover_time = 5.0 is given but no node")


def test_state_flags_need_what_they_apply_to():
    assert error(recover_state=False) == (
        "faults.recover_state = false applies to crashed nodes that recover; allowed: set recover_time (and crash or "
        "crash_nodes), or remove recover_state")
    assert error(recover_state=False, crash_nodes=[1]).startswith("faults.recover_state = false applies")
    assert not FaultModel(recover_state=False, crash_nodes=[1], recover_time=3.0).recover_state
    assert error(churn_state=False) == ("faults.churn_state = false applies to churn; allowed: set churn_rate > 0, or "
                                        "remove churn_state")
    assert not FaultModel(churn_state=False, churn_rate=0.1).churn_state


def test_seed_and_outages():
    for seed in (0, 7, np.int64(3)):
        assert FaultModel(seed=seed).seed == seed
    for bad in (-1, True, 1.5, "3", np.int64(-2)):
        assert error(seed=bad) == range_msg("seed", bad, "an integer >= 0")
    FaultModel(outages=[Outage((1,), 0.0, 1e-9), Outage((2,), 5.0)])
    for bad in ("x", (1, 2.0), Outage((1,), -1.0), Outage((1,), 5.0, 5.0), Outage((1,), 5.0, 4.0)):
        assert error(outages=[Outage((0,), 1.0), bad]) == (
            f"faults.outages entry {bad!r} is invalid; allowed: Outage(nodes, start, end) with 0 <= start < end")


# ----------------------------------------------------------------------------------------------------------------
# the [faults] table, emptiness, synchronous rounds


def test_from_config_drops_unset_keys_and_names_the_first_unknown_one():
    assert FaultModel.from_config(None) == FaultModel() == FaultModel.from_config({"drop": None, "seed": None})
    assert FaultModel.from_config({"drop": 0.1, "crash_nodes": [2, 1]}) == FaultModel(drop=0.1, crash_nodes=(2, 1))
    with pytest.raises(ScenarioError) as info:
        FaultModel.from_config({"zeta": 1, "chaos": 2, "drop": 0.1})
    assert str(info.value) == ("unknown key 'faults.chaos'; allowed keys: drop, duplicate, delay, delay_time, crash, "
                               "crash_nodes, crash_time, recover_time, recover_state, stragglers, straggler_nodes, "
                               "straggler_factor, churn_rate, churn_downtime, churn_state, seed, or a fault kind's "
                               "table: outage, rack_failure, availability_trace")
    with pytest.raises(ScenarioError, match="unknown key 'faults.outages'"):
        FaultModel.from_config({"outages": []})


def test_to_config_lists_the_non_defaults_and_round_trips():
    assert FaultModel().to_config() == {}
    m = FaultModel(drop=0.1, delay=0.5, delay_time={"kind": "uniform", "low": 0.1, "high": 0.2}, crash_nodes=[3, 1],
                   crash_time=2.0, recover_time=4.0, recover_state=False, straggler_factor=4.0, stragglers=0.5,
                   churn_rate=0.1, churn_state=False, seed=3)
    cfg = m.to_config()
    assert cfg == {"drop": 0.1, "delay": 0.5, "delay_time": {"kind": "uniform", "low": 0.1, "high": 0.2},
                   "crash_nodes": [3, 1], "crash_time": 2.0, "recover_time": 4.0, "recover_state": False,
                   "stragglers": 0.5, "churn_rate": 0.1, "churn_state": False, "seed": 3}
    assert list(cfg) == [k for k in FAULT_KEYS if k in cfg]
    assert type(cfg["crash_nodes"]) is list and json.loads(json.dumps(cfg)) == cfg
    assert FaultModel.from_config(cfg) == m
    assert FaultModel(seed=0).to_config() == {"seed": 0}


@pytest.mark.parametrize("kw", [{"drop": 0.1}, {"duplicate": 0.1}, {"delay": 0.1, "delay_time": 1.0},
                                {"crash": 0.1}, {"crash_nodes": [0]}, {"stragglers": 0.1}, {"straggler_nodes": [0]},
                                {"churn_rate": 0.1}, {"outages": [Outage((0,), 1.0)]}])
def test_any_one_fault_makes_a_model_non_empty(kw):
    assert FaultModel().is_empty and FaultModel().bind(3, 0).is_empty
    assert not FaultModel(**kw).is_empty and not FaultModel(**kw).bind(3, 0).is_empty
    assert FaultModel(crash_time=5.0, straggler_factor=2.0, churn_downtime=3.0, seed=1).is_empty


SYNC_NEEDS = {
    "delay": ({"delay": 0.1, "delay_time": 1.0}, "delay (synchronous rounds deliver every message in the next round)"),
    "stragglers": ({"stragglers": 0.2}, "stragglers (synchronous rounds have no clocks)"),
    "straggler_nodes": ({"straggler_nodes": [1]}, "stragglers (synchronous rounds have no clocks)"),
    "recover": ({"crash_nodes": [1], "recover_time": 3.0, "recover_state": False},
                "recover_state = false (restarting a node calls a gossip program's recover hook)"),
    "churn": ({"churn_rate": 0.1, "churn_state": False},
              "churn_state = false (restarting a node calls a gossip program's recover hook)"),
    "outages": ({"outages": [Outage((1,), 1.0, 2.0, keep_state=False)]}, "outages without state"),
}
SYNC_ALLOWED = ("need the gossip scheduler; allowed with synchronous rounds: drop, duplicate, crash/crash_nodes with "
                "recover_state = true, churn with churn_state = true")


@pytest.mark.parametrize("case", sorted(SYNC_NEEDS))
def test_check_sync_names_each_gossip_only_fault(case):
    kw, need = SYNC_NEEDS[case]
    for check in (FaultModel(**kw).check_sync, FaultModel(**kw).bind(4, 0).check_sync):
        with pytest.raises(ScenarioError) as info:
            check()
        assert str(info.value) == f"{need} {SYNC_ALLOWED}"


def test_check_sync_joins_every_need_and_passes_what_rounds_can_do():
    kw = {}
    for case in ("delay", "stragglers", "recover", "churn", "outages"):
        kw.update(SYNC_NEEDS[case][0])
    with pytest.raises(ScenarioError) as info:
        FaultModel(**kw).check_sync()
    assert str(info.value) == "; ".join(SYNC_NEEDS[c][1] for c in ("delay", "stragglers", "recover", "churn",
                                                                   "outages")) + " " + SYNC_ALLOWED
    FaultModel(drop=0.1, duplicate=0.2, crash_nodes=[1], crash_time=1.0, recover_time=3.0, churn_rate=0.1,
               outages=[Outage((2,), 1.0, 2.0), Outage((3,), 1.0, keep_state=False)]).check_sync()
    FaultModel(crash=0.5, recover_time=3.0).bind(4, 0).check_sync()


# ----------------------------------------------------------------------------------------------------------------
# binding: node sets, outages, keys


def test_bind_takes_the_model_seed_before_the_run_seed():
    assert FaultModel(seed=7).bind(5, 99).seed == 7
    assert FaultModel(seed=0).bind(5, 99).seed == 0
    plan = FaultModel().bind(np.int64(5), np.int64(99))
    assert plan.seed == 99 and plan.n_nodes == 5 and type(plan.seed) is int and type(plan.n_nodes) is int
    np.testing.assert_array_equal(plan.fault_keys, stream_keys(99, STREAM_FAULT, 5))
    np.testing.assert_array_equal(plan.churn_keys, stream_keys(99, STREAM_CHURN, 5))
    np.testing.assert_array_equal(FaultModel(seed=7).bind(5, 99).fault_keys, stream_keys(7, STREAM_FAULT, 5))
    fault, churn = FaultModel(seed=7).bind(5, 99).node_keys()        # a gossip host's own copies: the same keys
    np.testing.assert_array_equal(fault, stream_keys(7, STREAM_FAULT, 5))
    np.testing.assert_array_equal(churn, stream_keys(7, STREAM_CHURN, 5))


def test_a_plan_keeps_no_per_node_arrays_until_a_round_or_a_reader_needs_them():
    plan = FaultModel(drop=0.5, churn_rate=0.1, straggler_nodes=[1], straggler_factor=2.0).bind(4, 3)
    assert plan.node_keys()[0] is not plan.node_keys()[0] and plan.straggler_factors is not plan.straggler_factors
    assert [k for k, v in vars(plan).items() if isinstance(v, np.ndarray) and v.size == 4] == []
    assert plan._sent is None and "fault_keys" not in vars(plan)
    assert plan.fault_keys is plan.fault_keys and plan.churn_keys is plan.churn_keys    # kept once read
    plan.apply(0, MessageBatch("t", np.array([0, 1]), np.array([1, 2]), np.zeros((2, 1))))
    assert plan._sent.tolist() == [1, 1, 0, 0] and plan._churn_count.dtype == np.int64
    assert plan._outage_down.dtype == bool == plan._churn_down.dtype


@pytest.mark.parametrize("key", ["crash_nodes", "straggler_nodes"])
def test_listed_nodes_must_exist(key):
    FaultModel(**{key: [9]}).bind(10, 0)
    for nodes, first in (([1, 12, 10], 12), ([10], 10)):
        with pytest.raises(ScenarioError) as info:
            FaultModel(**{key: nodes}).bind(10, 0)
        assert str(info.value) == (f"faults.{key} contains node {first}, but the topology has 10 nodes; allowed: node "
                                   "ids 0..9")
    for v in (10, -1):
        with pytest.raises(ScenarioError) as info:
            FaultModel(outages=[Outage((0, v), 1.0)]).bind(10, 0)
        assert str(info.value) == f"faults.outages names node {v}, but the topology has 10 nodes"


def test_node_sets_from_lists_and_fractions():
    plan = FaultModel(crash_nodes=[5, 1, 5], straggler_nodes=[4, 2], straggler_factor=3.0).bind(8, 0)
    assert plan.crashed_nodes.tolist() == [1, 5] and plan.crashed_nodes.dtype == np.int64
    assert plan.straggler_nodes.tolist() == [2, 4] and plan.straggler_nodes.dtype == np.int64
    assert plan.straggler_factors.tolist() == [1, 1, 3, 1, 3, 1, 1, 1]
    none = FaultModel().bind(8, 0)
    assert none.crashed_nodes.size == 0 == none.straggler_nodes.size and none.crashed_nodes.dtype == np.int64
    assert none.straggler_factors.tolist() == [1.0] * 8 and none.outages == []
    # k = max(1, round(f n)): at least one node, half-way rounds to even
    for f, n, k in ((0.01, 10, 1), (0.25, 10, 2), (0.35, 10, 4), (0.3, 10, 3), (1.0, 7, 7), (0.5, 3, 2)):
        for seed in range(3):
            plan = FaultModel(crash=f, stragglers=f).bind(n, seed)
            for chosen in (plan.crashed_nodes, plan.straggler_nodes):
                assert chosen.size == k and np.all(np.diff(chosen) > 0) and 0 <= chosen[0] and chosen[-1] < n
                assert chosen.dtype == np.int64


def test_chosen_nodes_depend_on_the_seed_and_on_the_fault():
    def chosen(seed, stream):
        rng = np.random.default_rng([seed, 0xFA17, stream])              # the plan's documented choice
        return np.sort(rng.choice(40, size=10, replace=False)).tolist()

    sets = set()
    for seed in range(4):
        plan = FaultModel(crash=0.25, stragglers=0.25).bind(40, seed)
        assert plan.crashed_nodes.tolist() == chosen(seed, 1) == FaultModel(crash=0.25).bind(40, seed).crashed_nodes.tolist()
        assert plan.straggler_nodes.tolist() == chosen(seed, 2) != chosen(seed, 1)
        assert plan.straggler_factors[plan.straggler_nodes].tolist() == [4.0] * 10
        assert FaultModel(crash=0.25, seed=seed).bind(40, 123).crashed_nodes.tolist() == chosen(seed, 1)
        sets.add(tuple(plan.crashed_nodes))
    assert len(sets) == 4


def test_outages_are_sorted_by_start_then_node():
    plan = FaultModel(crash_nodes=[3, 1], crash_time=2.0, recover_time=5, recover_state=False,
                      outages=[Outage((4, 0), 1.0, 3.0, keep_state=False), Outage((2,), 2.0)]).bind(5, 0)
    assert plan.outages == [(0, 1.0, 3.0, False), (4, 1.0, 3.0, False), (1, 2.0, 5.0, False), (2, 2.0, math.inf, True),
                            (3, 2.0, 5.0, False)]
    assert all(type(o[0]) is int and type(o[1]) is float and type(o[2]) is float and type(o[3]) is bool
               for o in plan.outages)
    plan = FaultModel(crash_nodes=[0], crash_time=3, outages=[Outage((np.int64(4),), 1)]).bind(5, 0)
    assert plan.outages == [(4, 1.0, math.inf, True), (0, 3.0, math.inf, True)]
    assert type(plan.outages[0][0]) is int and type(plan.outages[1][1]) is float


def test_plan_numbers_are_floats():
    plan = FaultModel(drop=0, duplicate=0, churn_rate=1, churn_downtime=2, churn_state=False).bind(3, 0)
    assert (plan.drop, plan.duplicate, plan.delay, plan.churn_rate, plan.churn_downtime) == (0.0, 0.0, 0.0, 1.0, 2.0)
    assert all(type(v) is float for v in (plan.drop, plan.duplicate, plan.delay, plan.churn_rate,
                                           plan.churn_downtime))
    assert plan.churn_state is False and plan.delay_distribution is None
    assert FaultModel(churn_rate=1).bind(3, 0).churn_state is True
    plan = FaultModel(delay=0.5, delay_time=0.25).bind(3, 0)
    assert plan.delay == 0.5 and plan.delay_distribution == Distribution.constant(0.25)
    assert plan.model == FaultModel(delay=0.5, delay_time=0.25) and plan.tally.by_fate == {}


# ----------------------------------------------------------------------------------------------------------------
# synchronous rounds: which messages are lost or duplicated


class Reference:
    """The documented fates, one message at a time: message i of a sender (counting all it ever sent) is lost when
    u(8 i) < drop, unless its sender is down; a delivered one is copied when u(8 i + 1) < duplicate; a live sender's
    message to a down node that is not lost dies at the receiver."""

    def __init__(self, keys, drop, duplicate):
        self.keys, self.drop, self.duplicate, self.sent = keys, drop, duplicate, {}

    def fates(self, src, dst, down=()):
        out = []
        for s, d in zip(src.tolist(), dst.tolist()):
            i = self.sent.get(s, 0)
            self.sent[s] = i + 1
            if s in down:
                out.append("dead_sender")
            elif counter_uniform(self.keys[s], 8 * i) < self.drop:
                out.append("lost")
            elif d in down:
                out.append("dead_receiver")
            elif counter_uniform(self.keys[s], 8 * i + 1) < self.duplicate:
                out.append("twice")
            else:
                out.append("once")
        return out


def check_apply(plan, ref, round_, batch, down=()):
    """Apply the plan to the batch and compare every message's fate with the reference; returns the fates."""
    fates = ref.fates(batch.src, batch.dst, down)
    delivered, dropped = plan.apply(round_, batch)
    rows = batch.rows()
    keep = [i for i, f in enumerate(fates) for _ in range({"once": 1, "twice": 2}.get(f, 0))]
    gone = [i for i, f in enumerate(fates) if f in ("lost", "dead_sender", "dead_receiver")]
    assert delivered.tag == batch.tag
    assert delivered.src.tolist() == batch.src[keep].tolist() and delivered.dst.tolist() == batch.dst[keep].tolist()
    np.testing.assert_array_equal(delivered.rows(), rows[keep])
    if gone:
        assert dropped.tag == batch.tag
        assert dropped.src.tolist() == batch.src[gone].tolist() and dropped.dst.tolist() == batch.dst[gone].tolist()
        np.testing.assert_array_equal(dropped.rows(), rows[gone])
    else:
        assert dropped is None
    if len(keep) == batch.n_messages and not gone:
        assert delivered is batch
    return fates


def test_drop_and_duplicate_follow_each_senders_message_counter():
    n, seed = 6, 3
    plan = FaultModel(drop=0.3, duplicate=0.25, seed=seed).bind(n, 0)
    ref = Reference(stream_keys(seed, STREAM_FAULT, n), 0.3, 0.25)
    rng = np.random.default_rng(1)
    fates = []
    for round_, m in enumerate((2000, 1, 7, 0, 300, 2)):
        src = rng.integers(0, n, m)
        dst = rng.integers(0, n, m)
        batch = MessageBatch("t", src.astype(np.int64), dst.astype(np.int64), rng.random((m, 2)))
        fates += check_apply(plan, ref, round_, batch)
    counts = {f: fates.count(f) for f in ("lost", "twice", "once")}
    total = len(fates)
    assert total == 2310 and abs(counts["lost"] - 0.3 * total) < 4 * math.sqrt(0.21 * total)
    assert abs(counts["twice"] - 0.25 * 0.7 * total) < 4 * math.sqrt(0.25 * 0.75 * 0.7 * total)
    spm = 2
    assert plan.tally.by_fate == {("t", "lost", False): [counts["lost"], spm * counts["lost"]],
                                  ("t", "delivered", True): [counts["twice"], spm * counts["twice"]]}
    assert plan._sent.sum() == total


def test_broadcasts_keep_their_one_payload_row():
    n, seed = 12, 5
    plan = FaultModel(drop=0.4, duplicate=0.4, seed=seed).bind(n, 0)
    ref = Reference(stream_keys(seed, STREAM_FAULT, n), 0.4, 0.4)
    for round_ in range(6):
        batch = MessageBatch.broadcast("ask", round_ % 3, np.arange(n), np.array([1.0, 2.0, 3.0]))
        fates = check_apply(plan, ref, round_, batch)
        assert "lost" in fates or "twice" in fates
    batch = MessageBatch.broadcast("ask", 0, np.arange(1, n), np.array([1.0, 2.0, 3.0]))
    delivered, dropped = FaultModel(drop=0.4, duplicate=0.4, seed=seed).bind(n, 0).apply(0, batch)
    assert delivered.payload.shape == (1, 3) and dropped.payload.shape == (1, 3)
    assert delivered.n_messages > 1 and dropped.n_messages > 1
    assert plan.tally.by_fate[("ask", "lost", False)][1] == 3 * plan.tally.by_fate[("ask", "lost", False)][0]


def test_ids_of_the_batches_apply_builds_are_int64():
    plan = FaultModel(drop=0.5, duplicate=0.5, seed=1).bind(4, 0)
    src = np.array([0, 1, 2, 3] * 8, dtype=np.int32)
    delivered, dropped = plan.apply(0, MessageBatch("t", src, src[::-1].copy(), np.ones((32, 1))))
    assert delivered.src.dtype == np.int64 and delivered.dst.dtype == np.int64
    assert dropped.n_messages > 0 and delivered.n_messages > 0


def test_a_message_is_lost_exactly_when_its_uniform_is_below_p():
    seed = 11
    keys = stream_keys(seed, STREAM_FAULT, 3)
    u_drop = counter_uniform(keys[0], 0)
    u_dup = counter_uniform(keys[0], 1)
    batch = MessageBatch.single("t", 0, 1, [1.0])
    for drop, lost in ((u_drop, False), (np.nextafter(u_drop, 1.0), True)):
        delivered, dropped = FaultModel(drop=float(drop), seed=seed).bind(3, 0).apply(0, batch)
        assert (dropped is not None) == lost and delivered.n_messages == (0 if lost else 1)
    for dup, twice in ((u_dup, False), (np.nextafter(u_dup, 1.0), True)):
        delivered, dropped = FaultModel(duplicate=float(dup), seed=seed).bind(3, 0).apply(0, batch)
        assert dropped is None and delivered.n_messages == (2 if twice else 1)


def test_only_duplicates_leave_nothing_dropped_and_empty_batches_pass():
    plan = FaultModel(duplicate=0.999, seed=0).bind(3, 0)
    batch = MessageBatch("t", np.array([0, 1, 2]), np.array([1, 2, 0]), np.arange(6.0).reshape(3, 2))
    delivered, dropped = plan.apply(0, batch)
    assert dropped is None and delivered.src.tolist() == [0, 0, 1, 1, 2, 2]
    assert plan.tally.by_fate == {("t", "delivered", True): [3, 6]}
    empty = MessageBatch("t", np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros((0, 2)))
    crash = FaultModel(drop=0.5, crash_nodes=[0]).bind(3, 0)
    assert crash.apply(0, empty) == (empty, None) and crash.tally.by_fate == {} and crash._sent is None
    one = MessageBatch.single("t", 0, 1, [1.0, 2.0])
    delivered, dropped = FaultModel(crash_nodes=[0]).bind(3, 0).apply(0, one)
    assert delivered.n_messages == 0 and dropped.src.tolist() == [0]
    nothing = FaultModel(crash_nodes=[2], crash_time=5).bind(3, 0)
    assert nothing.apply(0, batch) == (batch, None) and nothing.tally.by_fate == {}


def test_dead_senders_receivers_and_losses_in_their_rounds():
    n, seed = 5, 2
    plan = FaultModel(drop=0.3, duplicate=0.3, crash_nodes=[2], crash_time=3.0, recover_time=6.0, seed=seed,
                      outages=[Outage((4,), 5.0)]).bind(n, 0)
    ref = Reference(stream_keys(seed, STREAM_FAULT, n), 0.3, 0.3)
    src = np.array([2, 0, 2, 4, 1, 2, 3, 4, 2, 0] * 4, dtype=np.int64)
    dst = np.array([0, 2, 4, 2, 3, 2, 4, 1, 3, 2] * 4, dtype=np.int64)
    expected_down = {0: set(), 1: set(), 2: set(), 3: {2}, 4: {2}, 5: {2, 4}, 6: {4}, 7: {4}}
    total: dict = {}
    for round_, down in expected_down.items():
        for tag in ("a", "b"):                              # two batches in one round: the same nodes are down
            payload = np.arange(3.0 * src.size).reshape(-1, 3) + round_
            fates = check_apply(plan, ref, round_, MessageBatch(tag, src, dst, payload), down)
            for f in fates:
                total[tag, f] = total.get((tag, f), 0) + 1
    assert plan.tally.node_events == [(3.0, 2, "crash"), (5.0, 4, "crash"), (6.0, 2, "recover")]
    assert plan.tally.node_event_counts == {"crash": 2, "recover": 1}
    expected = {}
    for (tag, f), k in total.items():
        if f in ("lost", "dead_sender", "dead_receiver"):
            expected[tag, f, False] = [k, 3 * k]
        elif f == "twice":
            expected[tag, "delivered", True] = [k, 3 * k]
    assert all(total.get((t, f), 0) > 0 for t in "ab" for f in ("lost", "dead_sender", "dead_receiver", "twice"))
    assert plan.tally.by_fate == expected


def test_recover_and_crash_at_integer_rounds():
    plan = FaultModel(crash_nodes=[1], crash_time=2, recover_time=4).bind(3, 0)
    batch = MessageBatch("t", np.array([1, 0]), np.array([0, 1]), np.ones((2, 1)))
    dropped_in = []
    for r in range(6):
        _, dropped = plan.apply(r, batch)
        dropped_in.append(0 if dropped is None else dropped.n_messages)
    assert dropped_in == [0, 0, 2, 2, 0, 0]
    assert plan.tally.node_events == [(2.0, 1, "crash"), (4.0, 1, "recover")]
    assert plan.tally.by_fate == {("t", "dead_sender", False): [2, 2], ("t", "dead_receiver", False): [2, 2]}


# ----------------------------------------------------------------------------------------------------------------
# churn in synchronous rounds


def churn_reference(rate, downtime, keys, rounds):
    """Per round the set of nodes away, and the leave/join events: node v's k-th transition comes after the gap
    with counter k (even: up-time, odd: down-time)."""
    transitions = []
    for v, key in enumerate(keys):
        t, k = 0.0, 0
        while True:
            t += churn_gap(rate, downtime, key, k)
            if t > rounds:
                break
            transitions.append((t, v, "leave" if k % 2 == 0 else "join"))
            k += 1
    down = [{v for v in range(len(keys)) if sum(1 for t, w, _ in transitions if w == v and t <= r) % 2}
            for r in range(rounds)]
    return down, transitions


def down_sets(plan, rounds, n):
    """Which nodes each round's self-messages find down (dead senders)."""
    out = []
    for r in range(rounds):
        batch = MessageBatch("self", np.arange(n), np.arange(n), np.ones((n, 1)))
        _, dropped = plan.apply(r, batch)
        again = plan.apply(r, batch)[1]                     # a second batch in the round: the same nodes
        out.append(set() if dropped is None else set(dropped.src.tolist()))
        assert out[-1] == (set() if again is None else set(again.src.tolist()))
    return out


def test_churn_timeline_follows_the_counter_scheme():
    n, rate, downtime, rounds, seed = 6, 0.2, 3.0, 120, 4
    plan = FaultModel(churn_rate=rate, churn_downtime=downtime, seed=seed).bind(n, 0)
    expected, transitions = churn_reference(rate, downtime, stream_keys(seed, STREAM_CHURN, n), rounds)
    assert down_sets(plan, rounds, n) == expected
    transitions = [e for e in transitions if e[0] <= rounds - 1]
    assert sorted(plan.tally.node_events) == sorted(transitions)
    assert min(sum(1 for e in transitions if e[1] == v) for v in range(n)) >= 4       # several cycles per node
    assert plan.tally.node_event_counts == {"leave": sum(e[2] == "leave" for e in transitions),
                                            "join": sum(e[2] == "join" for e in transitions)}
    # transitions between two rounds are logged at their own times, in round order
    rounds_of = [math.ceil(t) for t, _, _ in plan.tally.node_events]
    assert rounds_of == sorted(rounds_of)


def test_churn_and_outages_together():
    n, seed = 4, 9
    plan = FaultModel(churn_rate=0.3, churn_downtime=2.0, crash_nodes=[1], crash_time=10, recover_time=20,
                      seed=seed).bind(n, 0)
    churn, _ = churn_reference(0.3, 2.0, stream_keys(seed, STREAM_CHURN, n), 30)
    got = down_sets(plan, 30, n)
    assert got == [c | ({1} if 10 <= r < 20 else set()) for r, c in enumerate(churn)]
    assert (10.0, 1, "crash") in plan.tally.node_events and (20.0, 1, "recover") in plan.tally.node_events


def test_churn_transitions_at_a_round_boundary(monkeypatch):
    """Up 3, down 2, up 3+..: a node leaving at time t is away in round t, and back in the round it rejoins."""
    calls = []

    def gap(up_rate, mean_down, key, counter):
        calls.append(int(counter))
        return float(mean_down) if counter % 2 == 1 else 1.0 / up_rate

    monkeypatch.setattr(fault_plan_module, "churn_gap", gap)
    plan = FaultModel(churn_rate=1 / 3, churn_downtime=2.0).bind(2, 0)
    got = down_sets(plan, 16, 2)
    assert got == [{0, 1} if r in (3, 4, 8, 9, 13, 14) else set() for r in range(16)]
    assert [e[:1] + e[2:] for e in plan.tally.node_events[::2]] == [
        (3.0, "leave"), (5.0, "join"), (8.0, "leave"), (10.0, "join"), (13.0, "leave"), (15.0, "join")]
    assert sorted(calls) == sorted([0, 0] + [k for k in range(1, 7) for _ in range(2)])


# ----------------------------------------------------------------------------------------------------------------
# the tally and the summary


def test_tally_accumulates_and_lists_at_most_max_events():
    t = FaultTally()
    t.messages("a", "lost", 0, np.int64(2), 6)
    t.messages("a", "lost", False, 1, 3)
    t.messages("a", "lost", True, 4, 8)
    assert t.by_fate == {("a", "lost", False): [3, 9], ("a", "lost", True): [4, 8]}
    assert all(type(v) is int for rec in t.by_fate.values() for v in rec)
    assert t.fate_table(("lost",)) == {"lost": {"a": {"messages": 7, "scalars": 17}}}
    assert t.fate_table(("lost",), duplicate=False) == {"lost": {"a": {"messages": 3, "scalars": 9}}}
    assert t.fate_table(("lost",), duplicate=True) == {"lost": {"a": {"messages": 4, "scalars": 8}}}
    assert t.fate_table(("dead_receiver",)) == {}
    for i in range(FaultTally.MAX_EVENTS_LISTED + 5):
        t.node_event(np.float64(i) / 2, np.int64(i % 3), "leave" if i % 2 else "join")
    assert FaultTally.MAX_EVENTS_LISTED == 1000 and len(t.node_events) == 1000
    assert t.node_event_counts == {"join": 503, "leave": 502}
    assert t.node_events[:3] == [(0.0, 0, "join"), (0.5, 1, "leave"), (1.0, 2, "join")]
    assert t.node_events[-1] == (499.5, 999 % 3, "leave")
    assert all(type(e[0]) is float and type(e[1]) is int for e in t.node_events)


def test_summary_reports_every_fate_and_node_event():
    model = FaultModel(drop=0.1, crash_nodes=[4, 1], crash_time=2.0, straggler_nodes=[2], seed=5,
                       outages=[Outage((3,), 1.0, 4.0), Outage((0,), 3.0)])
    plan = model.bind(5, 0)
    t = plan.tally
    t.messages("b", "lost", False, 2, 6)
    t.messages("a", "lost", False, 1, 3)
    t.messages("a", "lost", True, 4, 12)
    t.messages("a", "dead_receiver", True, 2, 6)
    t.messages("a", "dead_sender", False, 1, 3)
    t.messages("a", "delivered", True, 3, 9)
    t.messages("a", "delivered", False, 100, 300)
    t.messages("b", "in_flight_at_end", False, 2, 6)
    t.messages("b", "in_flight_at_end", True, 1, 3)
    t.messages("a", "late", False, 7, 7)
    for event in ((1.0, 3, "crash"), (1.5, 2, "leave"), (2.0, 1, "crash"), (2.0, 4, "crash"), (2.5, 2, "join"),
                  (3.0, 0, "crash"), (4.0, 3, "recover")):
        t.node_event(*event)
    s = plan.summary(delayed=np.int64(4), down_now=np.array([0, 1, 4]))
    assert s == {
        "model": {"drop": 0.1, "crash_nodes": [4, 1], "crash_time": 2.0, "straggler_nodes": [2], "seed": 5},
        "seed": 5,
        "dropped": {"lost": {"a": {"messages": 5, "scalars": 15}, "b": {"messages": 2, "scalars": 6}},
                    "dead_receiver": {"a": {"messages": 2, "scalars": 6}},
                    "dead_sender": {"a": {"messages": 1, "scalars": 3}}},
        "dropped_total": {"messages": 10, "scalars": 30},
        "duplicated": {"a": {"messages": 5, "scalars": 15}, "b": {"messages": 1, "scalars": 3}},
        "in_flight_at_end": {"b": {"messages": 3, "scalars": 9}},
        "crashed_nodes": [1, 4],
        "permanent_crashes": [0, 1, 4],
        "stragglers": [2],
        "node_events": {"crash": 4, "join": 1, "leave": 1, "recover": 1},
        "node_event_log": [[1.0, 3, "crash"], [1.5, 2, "leave"], [2.0, 1, "crash"], [2.0, 4, "crash"],
                           [2.5, 2, "join"], [3.0, 0, "crash"], [4.0, 3, "recover"]],
        "delayed_messages": 4,
        "down_at_end": [0, 1, 4]}
    assert list(s["node_events"]) == ["crash", "join", "leave", "recover"]
    assert list(s["dropped"]) == ["dead_receiver", "dead_sender", "lost"] and list(s["dropped"]["lost"]) == ["a", "b"]
    assert json.loads(json.dumps(s)) == s                                # the run summary is written as JSON
    bare = FaultModel(churn_rate=0.1).bind(3, 8).summary()
    assert bare == {"model": {"churn_rate": 0.1}, "seed": 8, "dropped": {},
                    "dropped_total": {"messages": 0, "scalars": 0}, "duplicated": {}, "in_flight_at_end": {},
                    "crashed_nodes": [], "permanent_crashes": [], "stragglers": [], "node_events": {},
                    "node_event_log": []}
