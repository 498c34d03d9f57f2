"""The general meter: quantities per node as well as per message, per-edge counters for any number of nodes,
ledgers that merge exactly, bytes from the payload's dtype; and the compiled synchronous loop for any number of
groups and nodes, giving the Python loop's ledger and states."""
from __future__ import annotations

import json

import networkx as nx
import numba
import numpy as np
import pytest

from svmsim.comm import Ledger, MessageBatch, Meter, merge_ledgers
from svmsim.comm.edges import KeyedCounts, edge_index
from svmsim.comm.message import frozen_ids
from svmsim.engine import InProcessEngine
from svmsim.engine.base import split_roles
from svmsim.program import KERNEL_DONE, KERNEL_WAKE, NodeProgram, RoleSpec, SyncKernel, kernel_step
from svmsim.schedule import SyncScheduler

TAGS = ("ping", "pong")
WIDTHS = np.array([1, 2], dtype=np.int64)


@numba.njit(cache=True)
def _hub_step(arrays, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    spokes, ints, total = arrays
    completed = -1
    flags = 0
    n_out = 0
    if n_in > 0:                                        # pongs: fold them in (in (src, dst) order), end the iteration
        for r in range(n_in):
            total[0] = total[0] * 0.5 + in_payload[r, 0] * in_payload[r, 1]
        ints[0] += 1
        completed = ints[0]
        flags = KERNEL_DONE if ints[0] == ints[1] else KERNEL_WAKE
    else:                                               # woken: ping every spoke
        for j in range(spokes.shape[0]):
            out_tag[n_out] = 0
            out_src[n_out] = 0
            out_dst[n_out] = spokes[j]
            out_payload[n_out, 0] = (ints[0] + 1.0) / 3.0
            n_out += 1
    return n_out, completed, flags


@numba.njit(cache=True)
def _spoke_step(arrays, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    ids, seen = arrays
    n_out = 0
    for r in range(n_in):
        c = in_dst[r] - ids[0]
        seen[c] = seen[c] / 7.0 + in_payload[r, 0]
        out_tag[n_out] = 1
        out_src[n_out] = in_dst[r]
        out_dst[n_out] = 0
        out_payload[n_out, 0] = seen[c]
        out_payload[n_out, 1] = in_dst[r] * 1.1
        n_out += 1
    return n_out, -1, 0


class Hub(NodeProgram):
    role = "hub"
    initiator = True

    def __init__(self, iterations, dtypes=None):
        self.iterations, self.dtypes = iterations, dtypes

    def init(self, node_ids, node_data, seed):
        return {"spokes": frozen_ids(node_data[0]["spokes"]), "ints": np.array([0, self.iterations]),
                "total": np.zeros(1)}

    def kernel(self, st):
        return SyncKernel((st["spokes"], st["ints"], st["total"]), _hub_step, TAGS, WIDTHS, st["spokes"].size,
                          dtypes=self.dtypes)

    def step(self, st, inbox, round_):
        return st, kernel_step(self.kernel(st), inbox, round_)

    def observe(self, st):
        return {"total": float(st["total"][0]), "iteration": int(st["ints"][0])}


class Spoke(NodeProgram):
    role = "spoke"

    def __init__(self, dtypes=None):
        self.dtypes = dtypes

    def init(self, node_ids, node_data, seed):
        return {"ids": frozen_ids(node_ids), "seen": np.zeros(len(node_ids))}

    def kernel(self, st):
        return SyncKernel((st["ids"], st["seen"]), _spoke_step, TAGS, WIDTHS, st["ids"].size, dtypes=self.dtypes)

    def step(self, st, inbox, round_):
        return st, kernel_step(self.kernel(st), inbox, round_)

    def observe(self, st):
        return {"seen": st["seen"].copy()}


def _star(n_nodes, sparse):
    G = nx.star_graph(n_nodes - 1)
    if sparse:
        return nx.to_scipy_sparse_array(G, nodelist=range(n_nodes), format="csr")
    return nx.to_numpy_array(G, nodelist=range(n_nodes), dtype=bool)


def _run(compiled, n_nodes=9, spoke_groups=1, iterations=6, dtypes=None, sparse=False, **run):
    spokes = np.arange(1, n_nodes, dtype=np.int64)
    roles = [RoleSpec("hub", Hub(iterations, dtypes), np.array([0]), [{"spokes": spokes}]),
             RoleSpec("spoke", Spoke(dtypes), spokes, [None] * spokes.size)]
    eng = InProcessEngine()
    groups = split_roles(roles, {"spoke": spoke_groups})
    eng.deploy(groups, 0)
    meter = Meter(n_nodes, _star(n_nodes, sparse))
    sched = SyncScheduler(eng, groups, meter, n_nodes, compiled=compiled)
    observed = []
    reason = sched.run(observe_every=2, on_iteration=lambda it, rnd: observed.append((it, rnd)) and False, **run)
    return reason, sched, meter.ledger(), eng.observe(), observed


def _assert_same_run(a, b):
    (r0, s0, l0, o0, c0), (r1, s1, l1, o1, c1) = a, b
    assert r0 == r1 and (s0.round, s0.iteration) == (s1.round, s1.iteration) and c0 == c1
    assert l0.totals == l1.totals and l0.by_tag == l1.by_tag and l0.dropped_by_tag == l1.dropped_by_tag
    for name in ("edges", "dropped_edges", "rounds", "iteration_rounds"):
        np.testing.assert_array_equal(getattr(l0, name), getattr(l1, name), err_msg=name)
    assert l0.equals(l1) and l0.summary() == l1.summary()
    assert o0[0] == o1[0]
    for g in range(1, len(o0)):
        np.testing.assert_array_equal(o0[g]["seen"], o1[g]["seen"])


@pytest.fixture
def compiled_calls(monkeypatch):
    from svmsim.schedule import compiled_sync

    calls = []
    real = compiled_sync.run_compiled_rounds

    def spy(kernels, *a, **kw):
        calls.append(len(kernels))
        return real(kernels, *a, **kw)

    monkeypatch.setattr(compiled_sync, "run_compiled_rounds", spy)
    return calls


def test_sixteen_groups_run_compiled_with_the_python_loop_ledger_and_states(compiled_calls):
    runs = [_run(c, n_nodes=41, spoke_groups=16, iterations=9) for c in (False, True)]
    assert compiled_calls and set(compiled_calls) == {17}
    _assert_same_run(*runs)
    assert runs[1][2].totals["messages"] == 9 * 2 * 40


def test_five_thousand_nodes_run_compiled_with_the_python_loop_ledger_and_states(compiled_calls):
    runs = [_run(c, n_nodes=5000, spoke_groups=3, iterations=4, sparse=True) for c in (False, True)]
    assert compiled_calls and set(compiled_calls) == {4}
    _assert_same_run(*runs)
    led = runs[1][2]
    assert led.edges.shape == (2 * 4999, 5) and (led.edges[:, 2] == 4).all()


def test_groups_of_one_program_with_arrays_of_another_type_are_kinds_of_their_own():
    from svmsim.schedule.compiled_sync import _kinds, work_readable

    a = SyncKernel((np.zeros(3), np.zeros(2, np.int64)), _spoke_step, TAGS, WIDTHS, 1)
    b = SyncKernel((np.zeros(4), np.zeros(1, np.int64)), _spoke_step, TAGS, WIDTHS, 1)
    c = SyncKernel((np.zeros((2, 2))[:, 0], np.zeros(1, np.int64)), _spoke_step, TAGS, WIDTHS, 1)   # strided
    h = SyncKernel((np.zeros(1, np.int64), np.zeros(2, np.int64), np.zeros(1)), _hub_step, TAGS, WIDTHS, 1)
    kinds, kind_of, slot_of, slots = _kinds([h, a, b, c])
    assert len(kinds) == 3 and kind_of.tolist() == [0, 1, 1, 2] and slot_of.tolist() == [0, 0, 1, 0]
    assert slots == ((-1, -1),) * 3                  # (work, counts) items of each kind's state: none
    worker = SyncKernel((np.zeros(3), np.zeros(2)), _spoke_step, TAGS, WIDTHS, 1)
    worker.work = worker.arrays[1]                    # the modelled time reads item 1 of this kind's state
    assert _kinds([worker, a])[3] == ((1, -1), (-1, -1))
    apart = SyncKernel((np.zeros(3),), _spoke_step, TAGS, WIDTHS, 1, work=np.zeros(1))   # not in its state
    assert _kinds([apart])[3] == ((-1, -1),) and not work_readable(apart) and work_readable(a) and work_readable(worker)
    counts = np.zeros((1, 3), np.int64)
    counting = SyncKernel((np.zeros(3), np.zeros(3), counts), _spoke_step, TAGS, WIDTHS, 1, quantities=("q",),
                          counts=counts)
    assert _kinds([counting, a])[3] == ((-1, 2), (-1, -1))


QUANTITIES = ("kernel_evaluations", "flops")


@numba.njit(cache=True)
def _counting_spoke_step(arrays, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst,
                         out_payload):
    """`_spoke_step`, counting per member: 1 + round % 3 kernel evaluations and 10 * node id flops per message."""
    ids, seen, counts = arrays
    n_out = _spoke_step((ids, seen), round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst,
                        out_payload)[0]
    for r in range(n_in):
        c = in_dst[r] - ids[0]
        counts[0, c] += 1 + round_ % 3
        counts[1, c] += 10 * in_dst[r]
    return n_out, -1, 0


class CountingSpoke(Spoke):
    def init(self, node_ids, node_data, seed):
        return {**super().init(node_ids, node_data, seed), "counts": np.zeros((2, len(node_ids)), np.int64)}

    def kernel(self, st):
        return SyncKernel((st["ids"], st["seen"], st["counts"]), _counting_spoke_step, TAGS, WIDTHS, st["ids"].size,
                          quantities=QUANTITIES, counts=st["counts"])

    def observe(self, st):
        return {"seen": st["seen"].copy(), "counts": st["counts"].copy(), "ids": st["ids"].copy()}


def test_node_quantities_from_compiled_steps_reach_the_meter_as_from_python_steps(compiled_calls):
    """A kernel's `counts` are metered per member and round by the compiled loop exactly as the Python rounds meter
    them (`kernel_step`'s signals): the same node totals and per-round rows, for 3 groups of spokes, through the
    loop's buffer flushes (40 counters a round, 1,024 records); the totals are the programs' own counters."""
    def run(compiled):
        n_nodes = 41
        spokes = np.arange(1, n_nodes, dtype=np.int64)
        roles = [RoleSpec("hub", Hub(30), np.array([0]), [{"spokes": spokes}]),
                 RoleSpec("spoke", CountingSpoke(), spokes, [None] * spokes.size)]
        eng = InProcessEngine()
        groups = split_roles(roles, {"spoke": 3})
        eng.deploy(groups, 0)
        meter = Meter(n_nodes, _star(n_nodes, False))
        SyncScheduler(eng, groups, meter, n_nodes, compiled=compiled).run(max_iterations=30)
        return meter.ledger(), eng.observe()

    (python, obs_p), (compiled, obs_c) = run(False), run(True)
    assert compiled_calls
    assert python.equals(compiled)
    for q, name in enumerate(QUANTITIES):
        own = np.zeros(41, np.int64)
        for o in obs_c.values():
            if "counts" in o:
                own[o["ids"]] = o["counts"][q]
        np.testing.assert_array_equal(compiled.node_totals[name], own, err_msg=name)
        np.testing.assert_array_equal(python.node_rounds[name], compiled.node_rounds[name], err_msg=name)
    assert compiled.node_totals["flops"][7] == 30 * 70 and compiled.node_totals["kernel_evaluations"][0] == 0
    assert compiled.node_rounds["kernel_evaluations"].shape[0] == 30           # one row per round with pings


def test_a_kernel_refuses_counts_it_cannot_meter():
    from svmsim.errors import ProtocolError

    with pytest.raises(ProtocolError, match="int64 array of shape"):
        SyncKernel((np.zeros((1, 3)),), _spoke_step, TAGS, WIDTHS, 1, quantities=("q",), counts=np.zeros((1, 3)))
    with pytest.raises(ProtocolError, match="item of its arrays"):
        SyncKernel((), _spoke_step, TAGS, WIDTHS, 1, quantities=("q",), counts=np.zeros((1, 3), np.int64))
    with pytest.raises(ProtocolError, match="no counts array"):
        SyncKernel((), _spoke_step, TAGS, WIDTHS, 1, quantities=("q",))


def test_bytes_follow_the_payload_dtype_on_both_paths(compiled_calls):
    dtypes = (np.float64, np.float32)                   # pongs travel as float32: 4 bytes per scalar
    runs = [_run(c, n_nodes=12, spoke_groups=2, iterations=7, dtypes=dtypes) for c in (False, True)]
    assert compiled_calls
    _assert_same_run(*runs)
    for _, _, led, _, _ in runs:
        m, s, b = led.by_tag["pong"]
        assert b == 4 * s and s == 2 * m
        assert led.by_tag["ping"][2] == 8 * led.by_tag["ping"][1]
    # the payloads were rounded to float32 on both paths: the states differ from an all-float64 run
    plain = _run(True, n_nodes=12, spoke_groups=2, iterations=7)
    assert plain[3][0]["total"] != runs[1][3][0]["total"]
    meter = Meter(3)
    meter.record(0, MessageBatch.single("x", 0, 1, np.ones(5, dtype=np.float32)))
    meter.record(0, MessageBatch.single("y", 0, 2, np.ones(5, dtype=np.int16)))
    assert meter.by_tag == {"x": [1, 5, 20], "y": [1, 5, 10]}


def test_a_kernel_refuses_payload_dtypes_off_the_wire():
    from svmsim.errors import ProtocolError
    from svmsim.program import kernel_dtypes

    k = SyncKernel((), _spoke_step, TAGS, WIDTHS, 1, dtypes=(np.float64, np.complex128))
    with pytest.raises(ProtocolError, match="'pong' has payload dtype complex128"):
        kernel_dtypes(k)


def _traffic(seed=0, n=30, batches=60):
    """Random batches on a ring with chords: (round, sender host, batch, dropped?)."""
    rng = np.random.default_rng(seed)
    G = nx.circulant_graph(n, [1, 5])
    edges = np.array(sorted(set(G.edges()) | {(b, a) for a, b in G.edges()}))
    out = []
    for i in range(batches):
        rows = edges[rng.integers(0, edges.shape[0], rng.integers(1, 20))]
        width = int(rng.integers(1, 4))
        dtype = (np.float64, np.float32)[i % 2]
        b = MessageBatch(f"t{i % 3}", rows[:, 0].copy(), rows[:, 1].copy(), np.ones((rows.shape[0], width), dtype))
        out.append((int(i // 4), b, i % 7 == 0))
    return G, out


def _meter_all(meters, host_of, traffic, n):
    for round_, batch, dropped in traffic:
        hosts = host_of[batch.src]
        for h in np.unique(hosts):
            part = batch.select(hosts == h)
            (meters[h].record_dropped if dropped else meters[h].record)(round_, part)
            meters[h].record_node(round_, "kernel_evals", part.src, 3)
    for it in range(5):
        meters[it % len(meters)].mark_iteration(it, 3 * it)


def test_merged_host_ledgers_equal_the_ledger_of_one_meter_that_saw_everything():
    n = 30
    G, traffic = _traffic()
    adj = nx.to_numpy_array(G, nodelist=range(n), dtype=bool)
    host_of = np.arange(n) % 3
    one = Meter(n, adj)
    _meter_all([one], np.zeros(n, dtype=np.int64), traffic, n)
    hosts = [Meter(n, None) for _ in range(3)]                # hosts meter without a topology (the fallback)
    _meter_all(hosts, host_of, traffic, n)
    full = one.ledger()
    merged = Ledger.merge([h.ledger() for h in hosts])
    assert merged.totals == full.totals and merged.by_tag == full.by_tag
    assert merged.dropped_by_tag == full.dropped_by_tag and full.dropped_by_tag
    for name in ("edges", "dropped_edges", "rounds", "iteration_rounds"):
        np.testing.assert_array_equal(getattr(merged, name), getattr(full, name), err_msg=name)
    np.testing.assert_array_equal(merged.node_totals["kernel_evals"], full.node_totals["kernel_evals"])
    np.testing.assert_array_equal(merged.node_rounds["kernel_evals"], full.node_rounds["kernel_evals"])
    assert merged.equals(full) and merged.summary() == full.summary()
    assert merge_ledgers([h.ledger() for h in hosts]).equals(full)


def test_node_quantities_per_node_and_round_in_the_ledger_and_its_files(tmp_path):
    m = Meter(4, node_names=["s", "a", "b", "c"])
    m.record(0, MessageBatch.single("x", 0, 1, [1.0]))
    plain = tmp_path / "plain"
    plain.mkdir()
    m.ledger().save(plain)
    assert "nodes" not in json.loads((plain / "ledger.json").read_text())
    assert sorted(p.name for p in plain.iterdir()) == ["ledger.json", "ledger_edges.csv", "ledger_rounds.csv"]
    m.record_node(0, "kernel_evals", [1, 2], [10, 20])
    m.record_node(0, "kernel_evals", 1, 5)
    m.record_node(3, "kernel_evals", np.array([3]), [7])
    m.record_node(3, "modelled_time", [0, 3], [0.25, 0.5])
    led = m.ledger()
    assert led.node_totals["kernel_evals"].tolist() == [0, 15, 20, 7]
    assert led.node_rounds["kernel_evals"].tolist() == [[0, 35], [3, 7]]
    assert led.node_totals["modelled_time"].tolist() == [0.25, 0, 0, 0.5]
    assert led.totals == {"messages": 1, "scalars": 1, "bytes": 8}      # not messages
    nodes = led.summary()["nodes"]
    assert nodes["kernel_evals"] == {"total": 42, "n_rounds": 2, "by_node": {"a": 15, "b": 20, "c": 7}}
    assert nodes["modelled_time"]["total"] == 0.75
    led.save(tmp_path)
    assert (tmp_path / "ledger_nodes.csv").read_text().splitlines()[:2] == [
        "node,name,kernel_evals,modelled_time", "0,s,0,0.25"]
    assert (tmp_path / "ledger_node_rounds.csv").read_text().splitlines() == [
        "round,kernel_evals,modelled_time", "0,35,0.0", "3,7,0.75"]
    with pytest.raises(TypeError, match="recorded in integers"):
        m.record_node(4, "kernel_evals", [1], [0.5])
    from svmsim.errors import ProtocolError
    with pytest.raises(ProtocolError, match="0..3"):
        m.record_node(4, "kernel_evals", [4], [1])


def test_edge_counters_follow_the_topology_in_any_form():
    G = nx.circulant_graph(40, [1, 3])
    dense = nx.to_numpy_array(G, nodelist=range(40), dtype=bool)
    forms = [dense, nx.to_scipy_sparse_array(G, nodelist=range(40), format="csr"), edge_index(dense, 40)]
    ptr, nbr = edge_index(dense, 40)
    assert ptr[-1] == nbr.shape[0] == 2 * G.number_of_edges()
    rng = np.random.default_rng(1)
    rows = np.array(sorted(G.edges()))[rng.integers(0, G.number_of_edges(), 500)]
    ledgers = []
    for adj in forms + [None]:
        m = Meter(40, adj)
        m.record(2, MessageBatch("e", rows[:, 0].copy(), rows[:, 1].copy(), np.ones((500, 3))))
        m.record(5, MessageBatch("e", rows[:, 1].copy(), rows[:, 0].copy(), np.ones((500, 1), np.float32)))
        ledgers.append(m.ledger())
    assert all(lg.equals(ledgers[0]) for lg in ledgers[1:])
    assert ledgers[0].edges[:, 2].sum() == 1000


def test_read_only_sorted_rows_are_shared_and_any_other_pair_is_made_sorted():
    """`edge_index` keeps a read-only (ptr, nbr) pair whose rows rise strictly (what `neighbour_csr` gives) as it
    is; writable rows are copied, and read-only rows that are unsorted, repeat a neighbour or name a node outside
    the range are sorted, merged or refused as any other pair."""
    from svmsim.topology import neighbour_csr

    G = nx.circulant_graph(12, [1, 4])
    G.remove_edges_from([(0, 1), (0, 11), (0, 4), (0, 8)])          # node 0 has no neighbours: an empty first row
    ptr, nbr = neighbour_csr(G)
    assert edge_index((ptr, nbr), 12)[1] is nbr and edge_index((ptr, nbr), 12)[0] is ptr
    copied = edge_index((ptr.copy(), nbr.copy()), 12)
    assert copied[1] is not nbr and np.array_equal(copied[1], nbr) and np.array_equal(copied[0], ptr)
    writable = nbr.copy()                                            # one writable array is enough to copy both
    assert edge_index((ptr, writable), 12)[1] is not writable

    def frozen(a):
        a = np.array(a, dtype=np.int64)
        a.flags.writeable = False
        return a

    p, v = edge_index((frozen([0, 3, 4, 4]), frozen([2, 1, 2, 0])), 3)     # row 0 unsorted with a repeat
    assert p.tolist() == [0, 2, 3, 3] and v.tolist() == [1, 2, 0]
    with pytest.raises(ValueError, match="outside 0..2"):
        edge_index((frozen([0, 1, 2, 2]), frozen([1, 3])), 3)


def test_keyed_counts_fold_as_they_go():
    k = KeyedCounts(3, fold_at=10)
    k.add(np.array([5, 1, 5]), np.array([1, 2, 8]))
    k.add(np.array([3] * 12), np.array([1, 1, 4]))         # folds
    k.add(np.array([1]), np.array([1, 3, 24]))
    keys, counts = k.table()
    assert keys.tolist() == [1, 3, 5]
    assert counts.tolist() == [[2, 12, 2], [5, 12, 4], [32, 48, 16]]


def test_a_meter_without_a_topology_keeps_rounds_in_the_python_loop(compiled_calls):
    spokes = np.arange(1, 6, dtype=np.int64)
    roles = [RoleSpec("hub", Hub(4), np.array([0]), [{"spokes": spokes}]),
             RoleSpec("spoke", Spoke(), spokes, [None] * 5)]
    eng = InProcessEngine()
    groups = split_roles(roles, {})
    eng.deploy(groups, 0)
    meter = Meter(6)
    assert meter.compiled_view() is None and meter.compiled_buffers(2) is None
    SyncScheduler(eng, groups, meter, 6, compiled=True).run()
    assert not compiled_calls
    assert meter.ledger().equals(_run(True, n_nodes=6, iterations=4)[2])


@numba.njit(cache=True)
def _peer_step(arrays, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    ids, value, n = arrays
    for r in range(n_in):                               # values from the left neighbour, in (src, dst) order
        c = in_dst[r] - ids[0]
        value[c] = 0.5 * value[c] + in_payload[r, 0]
    for c in range(ids.shape[0]):                       # every peer passes its value on to the right
        out_tag[c] = 0
        out_src[c] = ids[c]
        out_dst[c] = (ids[c] + 1) % n[0]
        out_payload[c, 0] = value[c] / 3.0
    return ids.shape[0], round_ if ids[0] == 0 else -1, KERNEL_WAKE


class Peer(NodeProgram):
    role = "peer"
    initiator = True

    def init(self, node_ids, node_data, seed):
        return {"ids": frozen_ids(node_ids), "value": node_ids.astype(float) + 1.0,
                "n": np.array([node_data[0]["n"]])}

    def kernel(self, st):
        return SyncKernel((st["ids"], st["value"], st["n"]), _peer_step, ("pass",), np.array([1]), st["ids"].size)

    def step(self, st, inbox, round_):
        return st, kernel_step(self.kernel(st), inbox, round_)

    def observe(self, st):
        return {"seen": st["value"].copy()}


def _ring(compiled, n=50, groups=5):
    roles = [RoleSpec("peer", Peer(), np.arange(n), [{"n": n}] * n)]
    eng = InProcessEngine()
    gs = split_roles(roles, {"peer": groups})
    eng.deploy(gs, 0)
    meter = Meter(n, nx.to_numpy_array(nx.cycle_graph(n), nodelist=range(n), dtype=bool))
    sched = SyncScheduler(eng, gs, meter, n, compiled=compiled)
    observed = []
    reason = sched.run(max_rounds=40, observe_every=7,
                       on_iteration=lambda it, rnd: observed.append((it, rnd)) and False)
    return reason, sched, meter.ledger(), {g + 1: o for g, o in eng.observe().items()} | {0: None}, observed


def test_groups_of_one_program_only_run_compiled_with_the_python_loop_run(compiled_calls):
    runs = [_ring(c) for c in (False, True)]
    assert compiled_calls and set(compiled_calls) == {5}
    _assert_same_run(*runs)
    assert runs[1][2].totals["messages"] == 50 * runs[1][1].round
