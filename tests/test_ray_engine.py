"""Tests for svmsim.engine.ray_engine: the Ray engines give the in-process engine's results, bit for bit."""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from svmsim.comm.message import Inbox, MessageBatch, Outbox  # noqa: E402
from svmsim.comm.meter import Meter  # noqa: E402
from svmsim.engine import InProcessEngine, make_engine  # noqa: E402
from svmsim.engine.base import split_roles  # noqa: E402
from svmsim.engine.ray_engine import (  # noqa: E402
    RayEngine,
    colocate_groups,
    decode_inbox,
    decode_inboxes,
    decode_outbox,
    decode_outboxes,
    encode_inbox,
    encode_inboxes,
    encode_outbox,
    encode_outboxes,
    placement,
)
from svmsim.errors import ScenarioError  # noqa: E402
from svmsim.program import NodeProgram, RoleSpec  # noqa: E402
from svmsim.schedule.sync import StopReason, SyncScheduler  # noqa: E402
from svmsim.core.metrics import WALL_CLOCK_METRICS  # noqa: E402

pytestmark = pytest.mark.ray

# The toy programs below live in this test module, which Ray's workers cannot import: ship them by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROUND_TIMEOUT = 60.0  # a hung round fails the test instead of stalling the session
K = 7  # clients
T = 5  # iterations
SEED = 11


# -- a toy algorithm ------------------------------------------------------------------------------------------
class ToyServer(NodeProgram):
    """Broadcasts a value, sums the clients' replies in sender order, then (woken) broadcasts the next value."""

    role = "server"
    initiator = True

    def __init__(self, client_ids: np.ndarray, iterations: int):
        self.client_ids = np.asarray(client_ids, dtype=np.int64)
        self.iterations = iterations

    def init(self, node_ids, node_data, seed):
        return {"id": int(node_ids[0]), "t": 0, "value": 1.0, "sums": []}

    def step(self, state, inbox: Inbox, round_):
        replies = inbox.get_batch("reply")
        if replies is None:  # round 0, or woken after an iteration ended: start the next iteration
            batch = MessageBatch.broadcast("value", state["id"], self.client_ids, [state["value"], state["t"]])
            return state, Outbox([batch])
        assert np.all(np.diff(replies.src) > 0), "replies must arrive in sender order"
        total = 0.0
        for v in replies.payload[:, 0]:  # a sequential sum: the order of the rows matters
            total += float(v)
        state["sums"].append(total)
        state["last"] = replies  # kept past the round: received arrays must not be tied to transport buffers
        state["t"] += 1
        state["value"] = 0.1 * total / replies.n_messages
        signals = {"iteration": state["t"], "wake": True}
        if state["t"] >= self.iterations:
            signals = {"iteration": state["t"], "done": True}
        return state, Outbox(signals=signals)

    def observe(self, state):
        return np.array(state["sums"])


class ToyClient(NodeProgram):
    """Each client keeps a value; on a broadcast it adds (received value x its node id) and replies."""

    role = "client"

    def __init__(self, server_id: int = 0, fail_node: int | None = None):
        self.server_id = server_id
        self.fail_node = fail_node

    def init(self, node_ids, node_data, seed):
        x = np.array([d.mean() + np.random.default_rng([seed, int(n)]).standard_normal()
                      for n, d in zip(node_ids, node_data)])
        return {"ids": np.asarray(node_ids, dtype=np.int64).copy(), "x": x}

    def step(self, state, inbox: Inbox, round_):
        ids = state["ids"]
        if self.fail_node is not None and self.fail_node in ids:
            raise ValueError(f"client {self.fail_node} refuses round {round_}")
        batch = inbox["value"]
        pos = np.searchsorted(ids, batch.dst)
        state["x"][pos] += batch.payload[:, 0] * ids[pos]
        x = state["x"][pos]
        rows = np.column_stack([x, x * x])
        return state, Outbox([MessageBatch.gather("reply", ids[pos], self.server_id, rows)])

    def observe(self, state):
        return state["x"].copy()


def toy_roles(k: int = K, iterations: int = T, fail_node: int | None = None) -> list[RoleSpec]:
    rng = np.random.default_rng(3)
    # client data large enough (160 KB per node) to travel through Ray's object store at deploy
    data = [rng.standard_normal((2000, 10)) for _ in range(k)]
    clients = np.arange(1, k + 1)
    return [RoleSpec("server", ToyServer(clients, iterations), np.array([0]), [None]),
            RoleSpec("client", ToyClient(0, fail_node), clients, data)]


def star(k: int) -> np.ndarray:
    adj = np.zeros((k + 1, k + 1), dtype=bool)
    adj[0, 1:] = adj[1:, 0] = True
    return adj


def by_role(groups, observed: dict) -> dict:
    """Observations of each role, concatenated over its groups (in node order)."""
    out = {}
    for role in ("server", "client"):
        out[role] = np.concatenate([np.atleast_1d(observed[g.gid]) for g in groups if g.role == role])
    return out


def run_toy(engine, k: int = K, iterations: int = T) -> dict:
    groups = engine.plan(toy_roles(k, iterations))
    engine.deploy(groups, SEED)
    meter = Meter(k + 1, adjacency=star(k), keep_log=True)
    sched = SyncScheduler(engine, groups, meter, k + 1)
    seen = []

    def on_iteration(t, r):
        seen.append((t, r, by_role(groups, engine.observe())))
        return False

    reason = sched.run(max_iterations=50, observe_every=2, on_iteration=on_iteration)
    return {"reason": reason, "ledger": meter.ledger(), "log": meter.log, "rows": meter.message_rows(), "seen": seen,
            "final": by_role(groups, engine.observe()), "groups": groups, "rounds": sched.round}


def message_rows(log: list) -> list[tuple]:
    """The meter's log (one entry per batch) as one row per logical message: (round, tag, src, dst, scalars).

    Engines may batch differently (one reply batch per host), so logs are compared message by message."""
    return [(r, tag, int(s), int(d), spm) for r, tag, src, dst, spm in log for s, d in zip(src, dst)]


def same_log(a: list, b: list) -> bool:
    return message_rows(a) == message_rows(b)


def named_hosts(namespace: str) -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace}


def wait_gone(namespace: str, timeout: float = 15.0) -> set[str]:
    deadline = time.monotonic() + timeout
    left = named_hosts(namespace)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = named_hosts(namespace)
    return left


@pytest.fixture(scope="module")
def reference():
    with InProcessEngine() as eng:
        return run_toy(eng)


# -- tests ----------------------------------------------------------------------------------------------------
def same_batch(a: MessageBatch, b: MessageBatch) -> bool:
    return (a.tag == b.tag and np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
            and a.payload.dtype == b.payload.dtype and a.payload.shape == b.payload.shape
            and np.array_equal(a.payload, b.payload))


def test_wire_format_round_trip():
    frozen = np.arange(6.0).reshape(3, 2)
    frozen.flags.writeable = False
    inbox = Inbox()
    inbox["w"] = MessageBatch.broadcast("w", 0, np.array([3, 5, 9]), [1.5, -2.0, 7.0])  # a broadcast view
    inbox["ints"] = MessageBatch("ints", np.array([1, 2], np.int32), np.array([0, 0]), np.array([7, 8], np.int16))
    inbox["frozen"] = MessageBatch("frozen", np.array([4, 4, 4]), np.array([1, 2, 3]), frozen)
    inbox["obj"] = MessageBatch("obj", np.array([1]), np.array([2]), np.array([["a"]], dtype=object))
    round_, back = decode_inbox(encode_inbox(17, inbox))
    assert round_ == 17 and list(back) == list(inbox)
    assert all(same_batch(back[t], inbox[t]) for t in inbox)
    assert back["w"].payload.flags.writeable and back["ints"].src.dtype == np.int32
    assert all(b.src.flags.writeable and b.dst.flags.writeable for b in back.values())
    out = Outbox([MessageBatch.gather("reply", np.array([3, 5]), 0, np.ones((2, 4)))], {"iteration": 2, "wake": True})
    back_out = decode_outbox(encode_outbox(out))
    assert back_out.signals == out.signals and same_batch(back_out.batches[0], out.batches[0])
    empty = decode_outbox(encode_outbox(Outbox()))
    assert empty.batches == [] and empty.signals is None


def test_reference_run_is_sane(reference):
    assert reference["reason"] == StopReason.DONE
    assert reference["ledger"].totals["messages"] == 2 * K * T
    assert [t for t, _, _ in reference["seen"]] == [2, 4, 5]
    assert reference["final"]["server"].shape == (T,)
    assert reference["final"]["client"].shape == (K,)


SEPARATE = ["server", "client-0..3", "client-4..6"]
COLOCATED = ["client-0..3+server", "client-0..3+server", "client-4..6"]


def assert_same_run(res: dict, ref: dict) -> None:
    """Same stop, rounds, ledger, message rows, observations along the way and final state, bit for bit."""
    assert res["reason"] == ref["reason"]
    assert res["rounds"] == ref["rounds"]
    assert res["ledger"].equals(ref["ledger"])
    assert same_log(res["log"], ref["log"])
    assert res["rows"] == ref["rows"]
    for role in ("server", "client"):
        assert np.array_equal(res["final"][role], ref["final"][role])
    assert len(res["seen"]) == len(ref["seen"])
    for (t, r, obs), (t0, r0, obs0) in zip(res["seen"], ref["seen"]):
        assert (t, r) == (t0, r0)
        assert all(np.array_equal(obs[role], obs0[role]) for role in obs0)


@pytest.mark.parametrize("compiled,wire,colocate,hosts", [
    (False, "bytes", None, COLOCATED),
    (True, "bytes", None, COLOCATED),
    (False, "objects", None, COLOCATED),
    (False, "bytes", False, SEPARATE),
    (True, "bytes", False, SEPARATE),
    (False, "objects", False, SEPARATE),
], ids=["ray", "ray-cgraph", "ray-objects", "ray-separate", "ray-cgraph-separate", "ray-objects-separate"])
def test_ray_engine_matches_inproc(ray_local, reference, compiled, wire, colocate, hosts):
    options = {} if colocate is None else {"colocate": colocate}  # None: the engine's default
    eng = RayEngine(compiled=compiled, actors=2, wire=wire, round_timeout=ROUND_TIMEOUT, **options)
    try:
        res = run_toy(eng)
        assert eng.name == ("ray-cgraph" if compiled else "ray")
        assert [g.host for g in res["groups"]] == hosts
        assert named_hosts(eng.namespace) == set(hosts)
        assert ray.get_actor("client-4..6", namespace=eng.namespace) is not None
        assert eng.ping()
    finally:
        eng.close()
    assert_same_run(res, reference)
    assert wait_gone(eng.namespace) == set()


def test_default_placement_is_colocated():
    assert RayEngine().colocate is True and RayEngine(compiled=True).colocate is True
    assert RayEngine(compiled=True, colocate=False).colocate is False
    with pytest.raises(ScenarioError, match="colocate"):
        RayEngine(colocate="yes")


def test_colocation_keeps_the_plan_and_moves_single_node_roles():
    roles = toy_roles(20)
    sep = RayEngine(actors=2, colocate=False).plan(roles)
    co = RayEngine(actors=2, colocate=True).plan(roles)
    # the same groups (gids, roles, node slices, data), only where they live differs
    assert [(g.gid, g.role, g.node_ids.tolist()) for g in co] == [(g.gid, g.role, g.node_ids.tolist()) for g in sep]
    assert all(a.node_data is b.node_data or a.node_data == b.node_data for a, b in zip(co, sep))
    assert [g.host for g in sep] == ["server", "client-0..9", "client-10..19"]
    assert [g.host for g in co] == ["client-0..9+server", "client-0..9+server", "client-10..19"]
    assert placement(co) == {"client-0..9+server": [0, 1], "client-10..19": [2]}
    assert placement(sep) == {"server": [0], "client-0..9": [1], "client-10..19": [2]}
    # applying it again changes nothing
    assert [g.host for g in colocate_groups(co)] == ["client-0..9+server", "client-0..9+server", "client-10..19"]
    # three actors for the clients: still exactly `actors` actors in all
    assert len(placement(RayEngine(actors=3, colocate=True).plan(roles))) == 3


def test_colocation_rules_for_other_shapes():
    clients = np.arange(2, 8)
    toy = ToyClient()
    # two single-node roles join the first host of the largest role, in gid order
    roles = [RoleSpec("server", toy, np.array([0])), RoleSpec("client", toy, clients),
             RoleSpec("monitor", toy, np.array([1]))]
    groups = colocate_groups(split_roles(roles, {"client": 2}))
    assert [g.host for g in groups] == ["client-0..2+server+monitor"] * 2 + ["client-3..5"] + \
        ["client-0..2+server+monitor"]
    # the largest role comes first in the name even when it is not the first role
    roles = [RoleSpec("client", toy, clients), RoleSpec("server", toy, np.array([0]))]
    assert [g.host for g in colocate_groups(split_roles(roles, {"client": 3}))] == \
        ["client-0..1+server", "client-2..3", "client-4..5", "client-0..1+server"]
    # peers only: nothing to move
    peers = [RoleSpec("peer", toy, np.arange(6))]
    assert [g.host for g in colocate_groups(split_roles(peers, {"peer": 2}))] == ["peer-0..2", "peer-3..5"]
    # one server and one client: one actor
    one = [RoleSpec("server", toy, np.array([0])), RoleSpec("client", toy, np.array([1]))]
    assert [g.host for g in colocate_groups(split_roles(one, {}))] == ["server+client"] * 2


def test_deploy_places_groups_by_their_host(ray_local):
    """deploy co-locates groups planned elsewhere (and says so in Group.host); groups that share a host name
    share an actor even on an engine that would not co-locate them itself."""
    groups = split_roles(toy_roles(5), {"client": 2})
    assert [g.host for g in groups] == ["server", "client-0..2", "client-3..4"]
    with RayEngine(actors=2, round_timeout=ROUND_TIMEOUT) as eng:
        eng.deploy(groups, SEED)
        assert [g.host for g in groups] == ["client-0..2+server", "client-0..2+server", "client-3..4"]
        assert named_hosts(eng.namespace) == {"client-0..2+server", "client-3..4"}
    assert wait_gone(eng.namespace) == set()
    with RayEngine(actors=2, colocate=False, round_timeout=ROUND_TIMEOUT) as eng:
        eng.deploy(groups, SEED)
        assert named_hosts(eng.namespace) == {"client-0..2+server", "client-3..4"}
        assert eng.ping() and sorted(eng.observe()) == [0, 1, 2]
    assert wait_gone(eng.namespace) == set()


def test_multi_group_wire_format_round_trip():
    a = Inbox()
    a["w"] = MessageBatch.broadcast("w", 0, np.array([3, 5, 9]), [1.5, -2.0])
    b = Inbox()
    b["reply"] = MessageBatch.gather("reply", np.array([1, 2]), 0, np.arange(6.0).reshape(2, 3))
    b["w"] = MessageBatch("w", np.array([4]), np.array([2]), np.array([[7]], np.int16))
    round_, back = decode_inboxes(encode_inboxes(5, {2: a, 0: b, 7: Inbox()}))
    assert round_ == 5 and list(back) == [2, 0, 7]
    assert list(back[0]) == ["reply", "w"] and len(back[7]) == 0
    assert same_batch(back[2]["w"], a["w"]) and all(same_batch(back[0][t], b[t]) for t in b)
    outs = {1: Outbox([MessageBatch.gather("reply", np.array([3, 5]), 0, np.ones((2, 4)))], {"iteration": 2}),
            0: Outbox(signals={"wake": True}), 4: Outbox()}
    back_out = decode_outboxes(encode_outboxes(outs))
    assert list(back_out) == [1, 0, 4]
    assert back_out[1].signals == {"iteration": 2} and same_batch(back_out[1].batches[0], outs[1].batches[0])
    assert back_out[0].batches == [] and back_out[0].signals == {"wake": True} and back_out[4].signals is None


@pytest.mark.parametrize("compiled", [False, True], ids=["ray", "ray-cgraph"])
def test_colocated_and_separate_runs_are_identical(ray_local, compiled):
    """Saddle-sized toy (k=20): co-located and separate hosts give the same ledger, message rows and
    observations, bit for bit; the co-located deployment runs on exactly 2 actors."""
    runs = {}
    for colocate in (False, True):
        with RayEngine(compiled=compiled, actors=2, colocate=colocate, round_timeout=ROUND_TIMEOUT) as eng:
            runs[colocate] = run_toy(eng, k=20)
            runs[colocate]["actors"] = sorted(named_hosts(eng.namespace))
        assert wait_gone(eng.namespace) == set()
    assert runs[True]["actors"] == ["client-0..9+server", "client-10..19"]
    assert runs[False]["actors"] == ["client-0..9", "client-10..19", "server"]
    assert runs[True]["rows"] and runs[True]["ledger"].totals["messages"] == 2 * 20 * T
    assert_same_run(runs[True], runs[False])


def test_one_call_per_actor_with_mail(ray_local):
    """Plain mode: the inboxes of all groups of one actor travel in one call; groups run in gid order."""
    with RayEngine(actors=2, colocate=True, round_timeout=ROUND_TIMEOUT) as eng:
        groups = eng.plan(toy_roles(K))
        eng.deploy(groups, SEED)
        assert eng.hosts == {"client-0..3+server": [0, 1], "client-4..6": [2]}
        assert eng.host_names == {0: "client-0..3+server", 1: "client-0..3+server", 2: "client-4..6"}
        calls = []

        class Counting:
            def __init__(self, j, method):
                self.j, self.method = j, method

            def remote(self, *args):
                calls.append(self.j)
                return self.method.remote(*args)

        eng._step_calls = [Counting(j, m) for j, m in enumerate(eng._step_calls)]
        srv = Inbox()
        srv["reply"] = MessageBatch.gather("reply", np.array([1, 2]), 0, np.ones((2, 2)))
        cli = Inbox()
        cli["value"] = MessageBatch.broadcast("value", 0, np.array([1, 2, 3, 4]), [1.0, 0.0])
        out = eng.step(0, {1: cli, 0: srv})                    # both groups of the first actor: one call
        assert calls == [0] and sorted(out) == [0, 1]
        assert out[0].signals == {"iteration": 1, "wake": True} and out[1].batches[0].n_messages == 4
        cli5 = Inbox()
        cli5["value"] = MessageBatch.broadcast("value", 0, np.array([5, 6, 7]), [1.0, 1.0])
        calls.clear()
        out = eng.step(1, {2: cli5, 1: cli})
        assert sorted(calls) == [0, 1] and sorted(out) == [1, 2]
        obs = eng.observe([2, 0])
        assert list(obs) == [2, 0] and obs[0].tolist() == [2.0]


def test_host_steps_its_groups_in_gid_order(ray_local):
    from svmsim.engine.ray_engine import NodeHost

    class Stamp(NodeProgram):
        def init(self, node_ids, node_data, seed):
            return []

        def step(self, state, inbox, round_):
            state.append(time.perf_counter_ns())
            return state, Outbox()

        def observe(self, state):
            return list(state)

    host = NodeHost.remote("a+b")
    try:
        prog = Stamp()
        assert ray.get(host.deploy.remote([(3, prog, np.array([3]), [None]), (1, prog, np.array([1]), [None])], 0))
        out = ray.get(host.step.remote(0, {3: Inbox(), 1: Inbox()}))
        assert set(out) == {1, 3}
        decoded = decode_outboxes(ray.get(host.step_packed.remote(encode_inboxes(1, {3: Inbox(), 1: Inbox()}))))
        assert set(decoded) == {1, 3} and ray.get(host.step_graph.remote(None)) is None
        obs = ray.get(host.observe.remote())
        assert list(obs) == [1, 3]
        assert all(a < b for a, b in zip(obs[1], obs[3]))     # group 1 ran before group 3, every round
    finally:
        ray.kill(host)


def test_bad_options_are_scenario_errors():
    with pytest.raises(ScenarioError, match="wire"):
        RayEngine(wire="json")
    with pytest.raises(ScenarioError, match="compiled"):
        RayEngine(compiled=True, wire="objects")
    with pytest.raises(ScenarioError, match="actors"):
        RayEngine(actors=0)


def test_make_engine_options(ray_local):
    eng = make_engine("ray", actors=3, namespace="svmsim-test-options")
    try:
        assert isinstance(eng, RayEngine) and not eng.compiled and eng.actors == 3
        groups = eng.plan(toy_roles(7))
        assert [g.host for g in groups] == ["client-0..2+server", "client-0..2+server", "client-3..4", "client-5..6"]
        separate = make_engine("ray", actors=3, colocate=False).plan(toy_roles(7))
        assert [g.host for g in separate] == ["server", "client-0..2", "client-3..4", "client-5..6"]
        assert make_engine("ray-cgraph").compiled
    finally:
        eng.close()


def test_close_is_idempotent_and_keeps_shared_ray(ray_local):
    eng = RayEngine(actors=2, colocate=False, round_timeout=ROUND_TIMEOUT)
    groups = eng.plan(toy_roles(3))
    eng.deploy(groups, SEED)
    assert named_hosts(eng.namespace) == {"server", "client-0..1", "client-2"}
    assert not eng.started_ray  # the session's Ray was already running
    eng.close()
    eng.close()
    assert wait_gone(eng.namespace) == set()
    assert ray.is_initialized()
    # a closed engine can be deployed again, on fresh actors
    first = eng.namespace
    eng.deploy(groups, SEED)
    try:
        assert eng.namespace != first and named_hosts(eng.namespace) == {"server", "client-0..1", "client-2"}
        assert eng.ping()
    finally:
        eng.close()
    assert wait_gone(eng.namespace) == set()


def test_two_engines_do_not_collide(ray_local):
    with RayEngine(actors=1, round_timeout=ROUND_TIMEOUT) as a, \
            RayEngine(actors=1, round_timeout=ROUND_TIMEOUT) as b:
        assert a.namespace != b.namespace
        a.deploy(a.plan(toy_roles(2)), SEED)
        b.deploy(b.plan(toy_roles(2)), SEED)
        assert named_hosts(a.namespace) == named_hosts(b.namespace) == {"client-0..1+server"}
    assert wait_gone(a.namespace) == set() and wait_gone(b.namespace) == set()


@pytest.mark.parametrize("compiled", [False, True], ids=["ray", "ray-cgraph"])
@pytest.mark.parametrize("fail_node,note", [(6, "'client-4..6'"), (2, "'client-0..3+server', group 1")],
                         ids=["own-host", "shared-host"])
def test_client_exception_surfaces_with_its_message(ray_local, compiled, fail_node, note):
    with RayEngine(compiled=compiled, actors=2, colocate=True, round_timeout=ROUND_TIMEOUT) as eng:
        groups = eng.plan(toy_roles(K, fail_node=fail_node))
        eng.deploy(groups, SEED)
        sched = SyncScheduler(eng, groups, Meter(K + 1), K + 1)
        with pytest.raises(ValueError) as info:
            sched.run(max_iterations=3)
        assert str(info.value) == f"client {fail_node} refuses round 1"
        assert type(info.value) is ValueError
        assert any(note in n for n in getattr(info.value, "__notes__", [])), info.value.__notes__
    assert wait_gone(eng.namespace) == set()


def test_one_actor_carries_everything(ray_local, reference):
    """actors=1 with co-location: one host, a compiled graph of one actor, the same run."""
    with RayEngine(compiled=True, actors=1, round_timeout=ROUND_TIMEOUT) as eng:
        res = run_toy(eng)
        assert named_hosts(eng.namespace) == {"client-0..6+server"}
        assert [g.host for g in res["groups"]] == ["client-0..6+server"] * 2
    assert_same_run(res, reference)
    assert wait_gone(eng.namespace) == set()


def test_compiled_graph_is_torn_down(ray_local, reference):
    eng = RayEngine(compiled=True, actors=2, round_timeout=ROUND_TIMEOUT)
    res = run_toy(eng)
    graph = eng._graph
    assert graph is not None and not graph.is_teardown
    assert len(eng._hosts) == 2 and named_hosts(eng.namespace) == {"client-0..3+server", "client-4..6"}
    eng.close()
    assert eng.hosts and eng._hosts == [] and eng._step_calls == []
    assert graph.is_teardown and eng._graph is None
    eng.close()
    assert wait_gone(eng.namespace) == set()
    assert res["ledger"].equals(reference["ledger"])
    # a second compiled engine builds its graph on fresh actors and gives the same run
    with RayEngine(compiled=True, actors=2, round_timeout=ROUND_TIMEOUT) as again:
        res2 = run_toy(again)
    assert res2["ledger"].equals(reference["ledger"])
    assert np.array_equal(res2["final"]["client"], reference["final"]["client"])


def test_without_an_address_the_cli_starts_a_private_ray_even_when_one_is_named(tmp_path):
    """No --address: svmsim starts a local Ray of its own (Ray's address "local"), whatever RAY_ADDRESS or the
    machine's latest cluster says; here RAY_ADDRESS names a port where nothing listens, which a plain ray.init()
    would try to join and fail on."""
    import os
    import subprocess

    scenario = tmp_path / "s.toml"
    # a gossip run: its hosts are a gossip run's, which once stopped the private Ray before the live metrics' last
    # look (and the look then started a Ray of its own)
    scenario.write_text('name = "private"\n[data]\nname = "synthetic"\nkind = "separable"\nn = 60\nd = 4\n'
                        '[topology]\nkind = "random_k_out"\n[algorithm]\nname = "pushsum"\nnodes = 12\n'
                        '[stop]\nmax_rounds = 10\n[output]\nplots = false\nprogress = false\n')
    env = dict(os.environ, RAY_ADDRESS="127.0.0.1:9", RAY_AUTH_MODE="disabled")
    r = subprocess.run([sys.executable, "-m", "svmsim.cli", "run", str(scenario), "--engine", "ray", "--out",
                        str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "run" / "ledger.json").exists()
    # before it lets its Ray go, the run waits until the node's Prometheus endpoint shows its final counters
    import json

    live = json.loads((tmp_path / "run" / "summary.json").read_text())["live_metrics"]
    assert live["final_exported"] is True and live["private_ray"] is True, live
    assert live["endpoint"].startswith("http://") and live["waited_s"] < 12.0
    assert "metrics    http://" in r.stdout and "final counters exported" in r.stdout


def test_without_an_address_the_cli_starts_a_private_ray_while_a_ray_start_cluster_is_up(tmp_path):
    """A cluster started with `ray start --head` on this machine (which a plain ray.init() would join): `svmsim run
    --engine ray` without --address still succeeds on a private Ray of its own, and leaves that cluster up."""
    import os
    import signal
    import socket
    import subprocess
    import tempfile
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    # Ray's default temporary directory, where `ray start` records the cluster that a plain ray.init() joins (put
    # back as it was afterwards: a record of a cluster that is gone would send the next plain ray.init() there)
    try:                                          # where this Ray keeps it (RAY_TMPDIR, TMPDIR, else /tmp)
        from ray._common.utils import get_ray_address_file

        record = Path(get_ray_address_file(None))
    except ImportError:                           # pragma: no cover - another Ray's layout
        record = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    recorded = record.read_bytes() if record.exists() else None
    head = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}",
                             "--num-cpus=1", "--include-dashboard=false", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None and time.time() < deadline, "ray start --head did not come up"
                time.sleep(0.5)
        scenario = tmp_path / "s.toml"
        scenario.write_text('name = "beside"\n[data]\nname = "synthetic"\nkind = "separable"\nn = 60\nd = 4\n'
                            '[algorithm]\nname = "saddle-dsvc"\nclients = 2\neps = 0.2\n'
                            '[stop]\nmax_iterations = 20\n[output]\nplots = false\nprogress = false\n')
        r = subprocess.run([sys.executable, "-m", "svmsim.cli", "run", str(scenario), "--engine", "ray", "--out",
                            str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        assert (tmp_path / "run" / "ledger.json").is_file() and head.poll() is None   # that cluster is still up
        # no driver but this probe ever joined that cluster: the run did not
        probe = subprocess.run([sys.executable, "-c", "import ray, ray._private.state as s; "
                                f"ray.init(address='127.0.0.1:{port}', log_to_driver=False); "
                                "print(len(s.jobs()))"], capture_output=True, text=True, env=env, timeout=300)
        assert probe.returncode == 0 and probe.stdout.strip().splitlines()[-1] == "1", probe.stderr[-2000:]
    finally:
        os.killpg(head.pid, signal.SIGKILL)   # that cluster's processes, all in the session `ray start` leads
        head.wait(60)
        if recorded is None:
            record.unlink(missing_ok=True)
        else:
            record.write_bytes(recorded)


def test_an_address_where_no_cluster_answers_is_one_clear_error(tmp_path):
    """--address HOST:PORT with nothing listening: exit 2 at once with what is allowed (Ray itself retries for
    minutes), and no run directory; an address that is not HOST:PORT likewise."""
    import socket
    import subprocess

    with socket.socket() as s:                     # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scenario = tmp_path / "s.toml"
    scenario.write_text('name = "join"\n[data]\nname = "synthetic"\nkind = "separable"\nn = 60\nd = 4\n'
                        '[algorithm]\nname = "saddle-dsvc"\nclients = 2\n[stop]\nmax_iterations = 5\n')
    for address, said in ((f"127.0.0.1:{port}", f"no Ray cluster answers at 127.0.0.1:{port}"),
                          ("nonsense", "engine address = 'nonsense' is not HOST:PORT")):
        r = subprocess.run([sys.executable, "-m", "svmsim.cli", "run", str(scenario), "--address", address, "--out",
                            str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and said in " ".join(r.stderr.split()) and "Traceback" not in r.stderr
        assert not (tmp_path / "run").exists()


class _LosesAHost(RayEngine):
    """A Ray engine whose second host actor is killed in each round of `at`: by `ray.kill` (as a lost machine) or
    by SIGKILL to its worker process (``how="sigkill"``, as the kernel's OOM killer or `kill -9` would). The round
    is sent only once the actor's process is gone (`ray.kill` returns before the actor dies: without the wait the
    actor could still answer that round, and the loss would be found a round later)."""

    def __init__(self, at, how: str = "ray.kill", **kw):
        super().__init__(**kw)
        self.at = (at,) if isinstance(at, int) else tuple(at)
        self.how = how

    def step(self, round_, inboxes):
        if round_ in self.at:
            import os
            import signal

            host = self._hosts[1]
            pid = ray.get(host.__ray_call__.remote(lambda actor: os.getpid()))
            if self.how == "sigkill":
                os.kill(pid, signal.SIGKILL)
            else:
                ray.kill(host, no_restart=True)
            _wait_until_gone(pid)
        return super().step(round_, inboxes)


def _wait_until_gone(pid: int, timeout: float = 60.0) -> None:
    """Wait until process `pid` has exited (no longer listed, or a zombie not yet reaped by its parent)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)
    raise AssertionError(f"the killed host actor's process {pid} still runs after {timeout:.0f} s")


def test_the_journal_checkpoints_every_n_calls_and_later_when_a_checkpoint_is_slow():
    """`HostJournal`: due every `every` calls, unless the last checkpoint took more than `max_share` of the time
    since it ended; `rebuild` restores the last checkpoint and replays the calls logged since, in order."""
    from svmsim.engine.ray_actors import HostJournal

    now = [0.0]
    journal = HostJournal(2, every=3, max_share=0.1, clock=lambda: now[0])

    def call(j_requests, cost=1.0):
        now[0] += cost
        return journal.record(j_requests)

    def take(cost):
        def blobs():
            now[0] += cost
            return [b"host0", b"host1"]
        journal.take(blobs)

    assert [call({0: i}) for i in range(3)] == [False, False, True]
    take(2.0)                                  # 2 s: the next one waits for 20 s since it ended
    assert [call({0: i, 1: i}) for i in range(3, 9)] == [False, False, False, False, False, False]
    assert journal.since == 6 and call({0: 9}, cost=14.0) is True      # 20 s after the slow checkpoint: due
    assert journal.taken == 1 and journal.seconds == 2.0 and journal.bytes == 10
    restored, replayed = [], []
    assert journal.rebuild(0, restored.append, lambda r: replayed.append(r) or r) == 9
    assert restored == [b"host0"] and replayed == [3, 4, 5, 6, 7, 8, 9]
    assert journal.rebuild(1, restored.append, lambda r: r) == 8
    journal.reset()
    assert journal.rebuild(0, restored.append, lambda r: r) is None and len(restored) == 2
    assert HostJournal(1, None).record([1]) is False                     # no checkpoints at all


def test_a_journal_of_large_requests_checkpoints_before_its_log_grows_past_its_bound(monkeypatch):
    from svmsim.engine import ray_actors

    monkeypatch.setattr(ray_actors, "MAX_LOGGED_BYTES", 100)
    journal = ray_actors.HostJournal(2, every=None)          # (no checkpoints by count or time)
    assert [journal.record({0: b"x" * 30, 1: b"y" * 10}) for _ in range(3)] == [False, False, True]
    journal.take(lambda: [b"", b""])
    assert journal.logged_bytes == 0 and journal.record([b"x" * 60, ("window", 1)]) is False


class _Locked(NodeProgram):
    """A program whose state holds a lock, which no pickler takes."""

    role = "server"
    initiator = True

    def init(self, node_ids, node_data, seed):
        import threading

        return {"lock": threading.Lock(), "t": 0}

    def step(self, state, inbox, round_):
        state["t"] += 1
        return state, Outbox(signals={"iteration": state["t"], "wake": state["t"] < 10})


def test_a_state_that_cannot_be_checkpointed_is_one_clear_error_naming_its_group(ray_local):
    from svmsim.errors import ScenarioError

    with RayEngine(actors=1, round_timeout=ROUND_TIMEOUT, checkpoint_every=3) as eng:
        groups = eng.plan([RoleSpec("server", _Locked(), np.array([0]), [None])])
        eng.deploy(groups, 0)
        sched = SyncScheduler(eng, groups, Meter(1), 1)
        with pytest.raises(ScenarioError, match=r"the state of group 0 on Ray host 'server' \(_Locked\) cannot be "
                                                r"pickled for a checkpoint .*recover = false"):
            sched.run(max_iterations=10)
    with RayEngine(actors=1, round_timeout=ROUND_TIMEOUT, recover=False) as eng:   # no checkpoints: runs
        groups = eng.plan([RoleSpec("server", _Locked(), np.array([0]), [None])])
        eng.deploy(groups, 0)
        assert SyncScheduler(eng, groups, Meter(1), 1).run(max_iterations=10) == StopReason.ITERATIONS


_LOST_SCENARIO = {"name": "lost", "seed": 0, "data": {"name": "synthetic", "kind": "separable", "n": 80, "d": 6},
                  "algorithm": {"name": "saddle-dsvc", "clients": 4, "eps": 0.2},
                  "stop": {"max_iterations": 120}, "output": {"eval_every": 5, "plots": False, "progress": False}}


def _rows(result):
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_METRICS} for row in result.metrics]


@pytest.mark.parametrize("name", ["ray", pytest.param("ray-cgraph", marks=pytest.mark.slow),
                                  pytest.param("ray-objects", marks=pytest.mark.slow)])
def test_a_lost_host_actor_is_replaced_and_the_run_is_the_undisturbed_one(ray_local, name,
                                                                        checkpoints_on_schedule):
    """A host actor killed twice (`ray.kill` before the first checkpoint, SIGKILL to its process after one): each
    time a new actor takes up the host's groups from the last checkpoint (or from the start) and every host replays
    the rounds since, so the run ends with the in-process run's ledger, model and metrics rows, and the summary
    says what was replaced."""
    import svmsim

    inproc = svmsim.run(_LOST_SCENARIO, write=False)
    options = {"compiled": name == "ray-cgraph", "wire": "objects" if name == "ray-objects" else "bytes"}
    eng = _LosesAHost(at=(30,), actors=2, round_timeout=120, checkpoint_every=50, **options)
    try:
        first = svmsim.run(_LOST_SCENARIO, engine=eng, write=False)
    finally:
        eng.close()
    eng = _LosesAHost(at=(170,), how="sigkill", actors=2, round_timeout=120, checkpoint_every=50, **options)
    try:
        second = svmsim.run(_LOST_SCENARIO, engine=eng, write=False)
    finally:
        eng.close()
    for run, at, replayed, from_checkpoint in ((first, 30, 31, False), (second, 170, 21, True)):
        assert run.ledger.equals(inproc.ledger) and _rows(run) == _rows(inproc)
        assert run.model.keys() == inproc.model.keys()
        assert all(np.array_equal(run.model[k], inproc.model[k]) for k in inproc.model)
        assert run.summary["ledger_matches_declared"] is True and "died" not in run.stop_reason
        rec = run.summary["ray_recovery"]
        assert rec["checkpoint_every"] == 50 and rec["checkpoints"] == run.summary["rounds"] // 50
        assert [(r["hosts"], r["at_round"], r["replayed_rounds"], r["from_checkpoint"]) for r in rec["recovered"]] \
            == [(["client-2..3"], at, replayed, from_checkpoint)]


def test_a_lost_host_actor_is_one_clear_error_and_the_measured_rounds_are_kept(ray_local, tmp_path):
    """With recovery off, a host actor killed mid-run: an EngineFailure naming the host and its logical nodes, and
    the run directory kept as '<dir>.failed' with the ledger and metrics of the rounds before; no directory under
    the run's own name."""
    import svmsim
    from svmsim.errors import EngineFailure

    scenario = {**_LOST_SCENARIO, "stop": {"max_iterations": 200}}
    eng = _LosesAHost(at=40, actors=2, round_timeout=120, recover=False)
    with pytest.raises(EngineFailure, match=r"Ray host actor 'client-2..3' died .*carrying logical nodes 3-4; "
                                            r".*in round 40.*the ledger and metrics measured before are in") as e:
        svmsim.run(scenario, engine=eng, out_dir=tmp_path / "run")
    assert e.value.hosts == ("client-2..3",) and e.value.node_ids == (3, 4)
    assert eng.recovery() is None
    kept = tmp_path / "run.failed"
    assert kept.is_dir() and not (tmp_path / "run").exists()
    metrics = (kept / "metrics.csv").read_text().splitlines()
    assert metrics[0].startswith("iteration") and 1 < len(metrics) < 200 // 5 + 2
    ledger = json.loads((kept / "ledger.json").read_text())
    assert ledger["totals"]["messages"] > 0
    assert "died" in json.loads((kept / "summary.json").read_text())["stop_reason"]


def test_with_recovery_off_the_cli_exits_2_with_one_message_and_keeps_the_run(ray_local, tmp_path, monkeypatch,
                                                                              capsys):
    """`svmsim run` with [engine] recover = false and a host actor lost in round 40: exit 2, one message naming the
    host and where the measured rounds are, no traceback; the partial run directory kept as '<out>.failed'."""
    from svmsim import cli

    step = RayEngine.step

    def losing_step(self, round_, inboxes):
        if round_ == 40:
            ray.kill(self._hosts[1], no_restart=True)
        return step(self, round_, inboxes)

    monkeypatch.setattr(RayEngine, "step", losing_step)
    path = tmp_path / "lost.toml"
    path.write_text('name = "lost"\nseed = 0\n[data]\nname = "synthetic"\nkind = "separable"\nn = 80\nd = 6\n'
                    '[algorithm]\nname = "saddle-dsvc"\nclients = 4\neps = 0.2\n[stop]\nmax_iterations = 200\n'
                    '[engine]\nname = "ray"\nrecover = false\nmetrics = false\n'
                    '[output]\neval_every = 5\nplots = false\nprogress = false\n')
    code = cli.main(["run", str(path), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    said = " ".join(err.split())
    assert "Ray host actor 'client-2..3' died" in said and "carrying logical nodes 3-4" in said
    assert f"measuredbeforearein{tmp_path / 'run.failed'}" in "".join(err.split())   # (wrapped at any hyphen)
    assert (tmp_path / "run.failed" / "ledger.json").is_file() and not (tmp_path / "run").exists()


_TWO_NODE_RUN = r'''
import json
import ray
from ray.cluster_utils import Cluster
import svmsim

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
try:
    spec = {"name": "two-nodes", "seed": 3, "data": {"name": "synthetic", "kind": "separable", "n": 80, "d": 6},
            "algorithm": {"name": "saddle-dsvc", "clients": 4, "beta": 0.5},
            "engine": {"name": "ray", "actors": 2, "address": cluster.address, "metrics": False},
            "stop": {"max_iterations": 200}, "output": {"eval_every": 50, "progress": False}}
    on_ray = svmsim.run(spec, write=False)
    nodes = sorted(node.node_id for node in cluster.list_all_nodes())
    inproc = svmsim.run({**spec, "engine": {"name": "inproc"}}, write=False)
    print(json.dumps({"hosts": on_ray.summary["ray_hosts"], "nodes": nodes,
                      "same_ledger": on_ray.ledger.equals(inproc.ledger),
                      "same_model": bool((on_ray.model["coef"] == inproc.model["coef"]).all())}))
finally:
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()
'''


def test_host_actors_spread_over_the_nodes_of_a_cluster(tmp_path):
    """A two-node Ray cluster on this machine (ray.cluster_utils.Cluster, in a process of its own so that the
    session's Ray is left alone): the two host actors land on different nodes (the nodes in turn, reported in the
    summary's ray_hosts), and the run's ledger and model equal the in-process run's."""
    import json
    import os
    import subprocess

    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    r = subprocess.run([sys.executable, "-c", _TWO_NODE_RUN], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(out["hosts"]) == ["client-0..1+server", "client-2..3"]
    assert sorted(set(out["hosts"].values())) == out["nodes"] and len(out["nodes"]) == 2
    assert out["same_ledger"] and out["same_model"]


_LOST_NODE_RUN = r'''
import json
import numpy as np
import ray
from ray.cluster_utils import Cluster
import svmsim
from svmsim.engine.ray_engine import RayEngine

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
worker = cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()


class LosesANode(RayEngine):
    """Removes the cluster's second node (the machine of the second host actor) in round 60."""

    def step(self, round_, inboxes):
        if round_ == 60:
            self.lost_node = worker.node_id
            cluster.remove_node(worker)
        return super().step(round_, inboxes)


try:
    spec = {"name": "lost-node", "seed": 3, "data": {"name": "synthetic", "kind": "separable", "n": 80, "d": 6},
            "algorithm": {"name": "saddle-dsvc", "clients": 4, "beta": 0.5},
            "engine": {"name": "ray", "actors": 2, "address": cluster.address, "metrics": False},
            "stop": {"max_iterations": 150}, "output": {"eval_every": 50, "progress": False}}
    eng = LosesANode(actors=2, address=cluster.address, checkpoint_every=25)
    try:
        on_ray = svmsim.run(spec, engine=eng, write=False)
    finally:
        eng.close()
    inproc = svmsim.run({**spec, "engine": {"name": "inproc"}}, write=False)
    print(json.dumps({"recovered": on_ray.summary["ray_recovery"]["recovered"], "hosts": on_ray.summary["ray_hosts"],
                      "lost_node": eng.lost_node,
                      "same_ledger": on_ray.ledger.equals(inproc.ledger),
                      "same_model": all(np.array_equal(on_ray.model[k], inproc.model[k]) for k in inproc.model)}))
finally:
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()
'''


def test_a_host_on_a_lost_node_of_a_cluster_is_replaced_on_another_node(tmp_path):
    """A two-node `ray.cluster_utils.Cluster` (in a process of its own) loses the node of the second host actor
    mid-run: the replacement goes to the node that is left, and the run ends with the in-process ledger and model."""
    import os
    import subprocess

    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    r = subprocess.run([sys.executable, "-c", _LOST_NODE_RUN], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    (lost,) = out["recovered"]
    # (the node goes down while round 60 runs or just after: the loss is seen in round 60 or in the next few)
    assert lost["hosts"] == ["client-2..3"] and 60 <= lost["at_round"] <= 65 and lost["from_checkpoint"]
    assert out["hosts"]["client-2..3"] != out["lost_node"]
    assert out["hosts"]["client-2..3"] == out["hosts"]["client-0..1+server"]     # the node that is left
    assert out["same_ledger"] and out["same_model"]
