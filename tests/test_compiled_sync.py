"""The compiled synchronous loop gives the Python loop's run: same ledger, same rounds, same observer calls, same
state, under every way a run can stop; and its errors read like the Python loop's."""
from __future__ import annotations

import sys
from pathlib import Path

import numba
import numpy as np
import pytest

from svmsim.comm import Meter
from svmsim.comm.message import MessageBatch, Outbox, frozen_ids
from svmsim.engine import InProcessEngine
from svmsim.engine.base import split_roles
from svmsim.errors import ProtocolError
from svmsim.program import (KERNEL_DONE, KERNEL_ERROR, KERNEL_PAUSE, KERNEL_WAKE, NodeProgram, RoleSpec,
                            SyncKernel, kernel_step)
from svmsim.schedule import SyncScheduler
from svmsim.schedule.sync import StopReason
from svmsim.topology import build_topology

TAGS = ("hello", "ping", "pong")
WIDTHS = np.array([1, 1, 2], dtype=np.int64)
ITER, PAUSE_EVERY, LAST, TOTAL_SLOT = 0, 1, 2, 3


@numba.njit(cache=True)
def _server_step(arrays, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    clients, ints, total = arrays
    n_out = 0
    flags = 0
    completed = -1
    if n_in > 0 and in_tag[0] == 2:                     # pongs: sum them, end the iteration
        for r in range(n_in):
            total[0] += in_payload[r, 0] * in_payload[r, 1]
        ints[ITER] += 1
        completed = ints[ITER]
        flags |= KERNEL_WAKE
        if ints[ITER] % ints[PAUSE_EVERY] == 0:
            flags |= KERNEL_PAUSE
        if ints[ITER] == ints[LAST]:
            flags = KERNEL_DONE
    elif n_in == 0 or in_tag[0] == 0:                   # woken (or greeted): ping every client
        for j in range(clients.shape[0]):
            out_tag[n_out] = 1
            out_src[n_out] = 0
            out_dst[n_out] = clients[j]
            out_payload[n_out, 0] = ints[ITER] + 0.5
            n_out += 1
    return n_out, completed, flags


@numba.njit(cache=True)
def _client_step(arrays, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    ids, seen, mode = arrays
    if mode[0] == 2:
        return 0, -1, KERNEL_ERROR
    n_out = 0
    for r in range(n_in):
        if in_tag[r] == 1 and mode[0] == 3:               # mode 3: one message too many (past max_out)
            out_tag[n_out] = 2
            out_src[n_out] = in_dst[r]
            out_dst[n_out] = 0
            n_out += 1
        if in_tag[r] == 1:
            c = in_dst[r] - ids[0]
            seen[c] += in_payload[r, 0]
            out_tag[n_out] = 2
            out_src[n_out] = in_dst[r]
            out_dst[n_out] = 0 if mode[0] == 0 else ids[(c + 1) % ids.shape[0]]   # mode 1: to a neighbour client
            if mode[0] == 4:                              # mode 4: to the node after the last client
                out_dst[n_out] = ids[ids.shape[0] - 1] + 1
            out_payload[n_out, 0] = seen[c]
            out_payload[n_out, 1] = in_dst[r]
            n_out += 1
    return n_out, -1, 0


class Server(NodeProgram):
    role = "server"

    def __init__(self, pause_every=7, last=-1):
        self.pause_every, self.last = pause_every, last

    def init(self, node_ids, node_data, seed):
        return {"clients": frozen_ids(node_data[0]["clients"]), "total": np.zeros(1),
                "ints": np.array([0, self.pause_every, self.last, 0], dtype=np.int64), "greeted": False}

    def kernel(self, st):
        if not st["greeted"]:
            return None           # the greeting round runs in Python (a set-up phase)
        return SyncKernel((st["clients"], st["ints"], st["total"]), _server_step, TAGS, WIDTHS, st["clients"].size)

    def step(self, st, inbox, round_):
        if "hello" in inbox:
            st["greeted"] = True
        return st, kernel_step(self.kernel(st), inbox, round_)

    def observe(self, st):
        return {"iteration": int(st["ints"][ITER]), "total": float(st["total"][0])}


class Client(NodeProgram):
    role = "client"
    initiator = True

    def __init__(self, mode=0):
        self.mode = mode

    def init(self, node_ids, node_data, seed):
        return {"ids": frozen_ids(node_ids), "seen": np.zeros(len(node_ids)), "mode": np.array([self.mode]),
                "started": False}

    def kernel(self, st):
        if not st["started"]:
            return None
        return SyncKernel((st["ids"], st["seen"], st["mode"]), _client_step, TAGS, WIDTHS, st["ids"].size,
                          error=lambda: "client reported a broken protocol")

    def step(self, st, inbox, round_):
        if not st["started"]:
            st["started"] = True
            out = Outbox()
            out.send(MessageBatch.single("hello", int(st["ids"][0]), 0, [1.0]))
            return st, out
        return st, kernel_step(self.kernel(st), inbox, round_)

    def observe(self, st):
        return {"seen": st["seen"].copy()}


def _run(compiled, k=5, mode=0, pause_every=7, last=-1, observe_every=4, client_groups=1, **budget):
    G = build_topology("star", k + 1)
    clients = np.arange(1, k + 1, dtype=np.int64)
    roles = [RoleSpec("server", Server(pause_every, last), np.array([0]), [{"clients": clients}]),
             RoleSpec("client", Client(mode), clients, [None] * k)]
    eng = InProcessEngine()
    groups = split_roles(roles, {"client": client_groups})
    eng.deploy(groups, 0)
    import networkx as nx

    meter = Meter(k + 1, nx.to_numpy_array(G, nodelist=range(k + 1)) > 0)
    sched = SyncScheduler(eng, groups, meter, k + 1, compiled=compiled)
    seen_calls = []

    def on_iteration(it, rnd):
        seen_calls.append((it, rnd, eng.observe()[0]["total"]))
        return False

    reason = sched.run(observe_every=observe_every, on_iteration=on_iteration, **budget)
    return reason, sched, meter.ledger(), eng.observe(), seen_calls


@pytest.mark.parametrize("budget", [{"max_iterations": 40}, {"max_rounds": 37}, {"max_scalars": 333},
                                    {"max_iterations": 1000, "last": 23}])
def test_compiled_loop_gives_the_python_loop_run(budget):
    last = budget.pop("last", -1)
    runs = [_run(c, last=last, **budget) for c in (False, True)]
    (r0, s0, l0, o0, c0), (r1, s1, l1, o1, c1) = runs
    assert r0 == r1 and r0 != StopReason.QUIESCENT
    assert (s0.round, s0.iteration) == (s1.round, s1.iteration)
    assert l0.equals(l1)
    assert c0 == c1 and len(c0) >= 3                    # the observer ran at the same iterations and rounds
    assert o0[0] == o1[0] and np.array_equal(o0[1]["seen"], o1[1]["seen"])
    if last > 0:
        assert r1 == StopReason.DONE and s1.iteration == last


def test_compiled_loop_is_used_and_resumable():
    from svmsim.schedule import compiled_sync

    calls = []
    real = compiled_sync.run_compiled_rounds

    def spy(*a, **kw):
        out = real(*a, **kw)
        calls.append(out[0])
        return out

    compiled_sync.run_compiled_rounds = spy
    try:
        reason, sched, ledger, obs, _ = _run(True, pause_every=3, max_iterations=20)
    finally:
        compiled_sync.run_compiled_rounds = real
    assert reason == StopReason.ITERATIONS and obs[0]["iteration"] == 20
    assert compiled_sync.PAUSE in calls and compiled_sync.BOUNDARY in calls
    # declared count: one hello, then 5 pings (1 scalar) + 5 pongs (2 scalars) per iteration
    assert ledger.totals["scalars"] == 1 + 20 * 15
    assert ledger.by_tag["pong"][1] == 20 * 10


def test_several_groups_of_one_program_run_compiled_with_the_same_results(monkeypatch):
    from svmsim.schedule import compiled_sync

    calls = []
    real = compiled_sync.run_compiled_rounds

    def spy(*a, **kw):
        calls.append(len(a[0]))
        return real(*a, **kw)

    monkeypatch.setattr(compiled_sync, "run_compiled_rounds", spy)
    runs = [_run(c, client_groups=2, max_iterations=12) for c in (False, True)]
    assert calls and set(calls) == {3}                  # the server and two client groups, in the compiled loop
    assert runs[0][2].equals(runs[1][2]) and runs[0][3][0] == runs[1][3][0]
    assert all(np.array_equal(runs[0][3][g]["seen"], runs[1][3][g]["seen"]) for g in (1, 2))


def test_compiled_loop_rejects_a_message_off_the_topology():
    with pytest.raises(ProtocolError, match="not neighbours in the topology"):
        _run(True, mode=1, max_iterations=3)
    with pytest.raises(ProtocolError, match="not neighbours in the topology"):
        _run(False, mode=1, max_iterations=3)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_message_to_a_node_that_no_group_hosts_is_refused_by_both_loops(compiled):
    """Node 5 is a node of the run and of its topology, but no group hosts it: the clients' pongs to it (sent in the
    compiled loop when it runs) must not land in another group's inbox (a group index of -1 would pick the last)."""
    import networkx as nx
    clients = np.arange(1, 5)
    roles = [RoleSpec("server", Server(), np.array([0]), [{"clients": clients}]),
             RoleSpec("client", Client(mode=4), clients, [None] * 4)]
    eng = InProcessEngine()
    groups = split_roles(roles, {})
    eng.deploy(groups, 0)
    meter = Meter(6, nx.to_numpy_array(nx.complete_graph(6), nodelist=range(6)) > 0)
    sched = SyncScheduler(eng, groups, meter, 6, compiled=compiled)
    with pytest.raises(ProtocolError, match="node 1 sent a 'pong' message to node 5, which no group hosts"):
        sched.run(max_iterations=3)


def test_by_default_a_short_run_stays_in_python_and_a_long_one_switches(monkeypatch):
    from svmsim.schedule import compiled_sync, sync

    calls = []
    real = compiled_sync.run_compiled_rounds

    def spy(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(compiled_sync, "run_compiled_rounds", spy)
    monkeypatch.setattr(compiled_sync, "loop_ready", lambda kernels, encoding=False: False)     # a loop not compiled yet
    short = _run(None, max_iterations=30)
    assert not calls
    monkeypatch.setattr(sync, "COMPILE_AFTER_SECONDS", 0.0)     # as if the Python rounds had run long enough
    switched = _run(None, max_iterations=30)
    assert calls
    assert short[2].equals(switched[2]) and short[3][0] == switched[3][0]


def test_a_loop_compiled_already_is_taken_at_once_and_compilation_is_not_python_time(monkeypatch, tmp_path):
    """`loop_ready` says whether the rounds' loop is compiled (in this process, or in numba's cache on disk); a run
    then moves to it from its first round. Otherwise the Python rounds' clock leaves numba's compilation out: a
    run whose first rounds compile for 30 s of wall time has not run 20 s of Python rounds."""
    from svmsim.core import compile_clock
    from svmsim.schedule import compiled_sync, sync

    monkeypatch.setenv("SVMSIM_CACHE_DIR", str(tmp_path))      # an empty loop cache
    calls = []
    real = compiled_sync.run_compiled_rounds
    monkeypatch.setattr(compiled_sync, "run_compiled_rounds", lambda *a, **kw: calls.append(1) or real(*a, **kw))

    def forget_loops():                                    # as a new process: nothing compiled in memory
        monkeypatch.setattr(compiled_sync, "_LOOPS", {})
        for name in [m for m in sys.modules if m.startswith("svmsim_rounds_")]:
            monkeypatch.delitem(sys.modules, name)

    forget_loops()
    _run(None, max_iterations=30)
    assert not calls                                       # not compiled: a short run stays in Python
    _run(True, max_iterations=3)                           # compiles it (kept in this process and on disk)
    # numba's index sits beside the module, or under $NUMBA_CACHE_DIR when that is set
    index_dirs = [tmp_path / "loops" / "__pycache__"] + ([Path(numba.config.CACHE_DIR)] if numba.config.CACHE_DIR
                                                         else [])
    assert any(p for d in index_dirs for p in d.rglob("svmsim_rounds_*.nbi"))
    calls.clear()
    _run(None, max_iterations=30)
    assert calls                                           # compiled already: taken at once
    forget_loops()
    calls.clear()
    _run(None, max_iterations=30)
    assert calls                                           # on disk only: taken at once too
    monkeypatch.setattr(compiled_sync, "loop_ready", lambda kernels, encoding=False: False)
    watch = compile_clock.Stopwatch()
    monkeypatch.setattr(compile_clock, "seconds", lambda kind="compile": watch.compiled_before + 30.0)
    monkeypatch.setattr(sync, "COMPILE_AFTER_SECONDS", 20.0)
    calls.clear()
    _run(None, max_iterations=30)
    assert not calls                                       # 30 s "compiling" in the rounds did not count



def test_compiled_step_errors_reach_the_caller():
    with pytest.raises(ProtocolError, match="broken protocol"):
        _run(True, mode=2, max_iterations=3)
    for compiled in (True, False):
        with pytest.raises(ProtocolError, match="more than its kernel's max_out = 5"):
            _run(compiled, mode=3, max_iterations=3)


def test_a_kernel_state_with_a_nested_tuple_is_refused_clearly():
    """The compiled loop borrows the arrays of a kernel's state at its top level only: a nested tuple would be
    reference-counted wrongly, so it is refused with a message saying what is allowed."""
    from types import SimpleNamespace

    from svmsim.errors import ProtocolError
    from svmsim.schedule import compiled_sync

    k = SimpleNamespace(arrays=(np.zeros(2), (np.zeros(1),)), tags=("t",), widths=np.array([1]), max_out=1)
    with pytest.raises(ProtocolError, match="item 1 is itself a tuple; allowed: a flat tuple"):
        compiled_sync.run_compiled_rounds([k], None, None, None, None, round_=0, iteration=0, max_rounds=None,
                                          max_scalars=None, max_iterations=None, observe_every=0)


def _star_run(compiled, k=5):
    """A server and k clients (one group) on a star, deployed in process: (scheduler, meter)."""
    import networkx as nx

    G = build_topology("star", k + 1)
    clients = np.arange(1, k + 1, dtype=np.int64)
    roles = [RoleSpec("server", Server(7, -1), np.array([0]), [{"clients": clients}]),
             RoleSpec("client", Client(0), clients, [None] * k)]
    eng = InProcessEngine()
    groups = split_roles(roles, {"client": 1})
    eng.deploy(groups, 0)
    meter = Meter(k + 1, nx.to_numpy_array(G, nodelist=range(k + 1)) > 0)
    return SyncScheduler(eng, groups, meter, k + 1, compiled=compiled), meter


@pytest.mark.parametrize("compiled", [False, True])
def test_the_observer_gets_the_iteration_and_the_round_it_was_called_in(compiled):
    """on_iteration(iteration, round): the iteration that just ended (a multiple of observe_every) and the
    scheduler's current round, after the iteration's round and its settle round (both loops)."""
    calls = []
    sched, meter = _star_run(compiled)
    sched.run(max_iterations=20, observe_every=4,
              on_iteration=lambda it, rnd: calls.append((it, rnd, sched.round, sched.iteration)) or False)
    ended = dict(map(tuple, meter.iteration_rounds))
    assert [c[0] for c in calls] == [4, 8, 12, 16, 20]
    for it, rnd, now, current in calls:
        assert type(it) is int and type(rnd) is int
        assert rnd == now and it == current and ended[it] < rnd


@pytest.mark.parametrize("compiled", [False, True])
def test_the_round_callback_gets_the_schedulers_round(compiled):
    """on_round(round) (the progress bars' tick): the scheduler's round at each call, an int, never falling, the
    last one the round the run ended at (both loops)."""
    calls = []
    sched, meter = _star_run(compiled)
    sched.run(max_iterations=20, on_round=lambda r: calls.append((r, sched.round)))
    assert calls and all(type(r) is int and r == now for r, now in calls)
    assert [r for r, _ in calls] == sorted(r for r, _ in calls) and calls[-1][0] == sched.round
