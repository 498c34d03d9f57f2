"""Tests for svmsim.engine.ray_engine: the Ray engines give the in-process engine's results, bit for bit."""
from __future__ import annotations

import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from svmsim.comm.message import Inbox, MessageBatch, Outbox  # noqa: E402
from svmsim.comm.meter import Meter  # noqa: E402
from svmsim.engine import InProcessEngine, make_engine  # noqa: E402
from svmsim.engine.ray_engine import (  # noqa: E402
    RayEngine,
    decode_inbox,
    decode_outbox,
    encode_inbox,
    encode_outbox,
)
from svmsim.errors import ScenarioError  # noqa: E402
from svmsim.program import NodeProgram, RoleSpec  # noqa: E402
from svmsim.schedule.sync import StopReason, SyncScheduler  # noqa: E402

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
    return {"reason": reason, "ledger": meter.ledger(), "log": meter.log, "seen": seen,
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


@pytest.mark.parametrize("compiled,wire", [(False, "bytes"), (True, "bytes"), (False, "objects")],
                         ids=["ray", "ray-cgraph", "ray-objects"])
def test_ray_engine_matches_inproc(ray_local, reference, compiled, wire):
    eng = RayEngine(compiled=compiled, actors=2, wire=wire, round_timeout=ROUND_TIMEOUT)
    try:
        res = run_toy(eng)
        assert eng.name == ("ray-cgraph" if compiled else "ray")
        assert [g.host for g in res["groups"]] == ["server", "client-0..3", "client-4..6"]
        assert named_hosts(eng.namespace) == {"server", "client-0..3", "client-4..6"}
        assert ray.get_actor("client-4..6", namespace=eng.namespace) is not None
        assert eng.ping()
    finally:
        eng.close()
    assert res["reason"] == reference["reason"]
    assert res["rounds"] == reference["rounds"]
    assert res["ledger"].equals(reference["ledger"])
    assert same_log(res["log"], reference["log"])
    for role in ("server", "client"):
        assert np.array_equal(res["final"][role], reference["final"][role])
    assert len(res["seen"]) == len(reference["seen"])
    for (t, r, obs), (t0, r0, obs0) in zip(res["seen"], reference["seen"]):
        assert (t, r) == (t0, r0)
        assert all(np.array_equal(obs[role], obs0[role]) for role in obs0)
    assert wait_gone(eng.namespace) == set()


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
        assert [g.host for g in groups] == ["server", "client-0..2", "client-3..4", "client-5..6"]
        assert make_engine("ray-cgraph").compiled
    finally:
        eng.close()


def test_close_is_idempotent_and_keeps_shared_ray(ray_local):
    eng = RayEngine(actors=2, round_timeout=ROUND_TIMEOUT)
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
        assert named_hosts(a.namespace) == named_hosts(b.namespace) == {"server", "client-0..1"}
    assert wait_gone(a.namespace) == set() and wait_gone(b.namespace) == set()


@pytest.mark.parametrize("compiled", [False, True], ids=["ray", "ray-cgraph"])
def test_client_exception_surfaces_with_its_message(ray_local, compiled):
    with RayEngine(compiled=compiled, actors=2, round_timeout=ROUND_TIMEOUT) as eng:
        groups = eng.plan(toy_roles(K, fail_node=6))
        eng.deploy(groups, SEED)
        sched = SyncScheduler(eng, groups, Meter(K + 1), K + 1)
        with pytest.raises(ValueError) as info:
            sched.run(max_iterations=3)
        assert str(info.value) == "client 6 refuses round 1"
        assert type(info.value) is ValueError
        assert any("client-4..6" in note for note in getattr(info.value, "__notes__", []))
    assert wait_gone(eng.namespace) == set()


def test_compiled_graph_is_torn_down(ray_local, reference):
    eng = RayEngine(compiled=True, actors=2, round_timeout=ROUND_TIMEOUT)
    res = run_toy(eng)
    graph = eng._graph
    assert graph is not None and not graph.is_teardown
    eng.close()
    assert graph.is_teardown and eng._graph is None
    eng.close()
    assert wait_gone(eng.namespace) == set()
    assert res["ledger"].equals(reference["ledger"])
    # a second compiled engine builds its graph on fresh actors and gives the same run
    with RayEngine(compiled=True, actors=2, round_timeout=ROUND_TIMEOUT) as again:
        res2 = run_toy(again)
    assert res2["ledger"].equals(reference["ledger"])
    assert np.array_equal(res2["final"]["client"], reference["final"]["client"])
