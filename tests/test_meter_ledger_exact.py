"""The meter and its ledger, exactly: every table, every file Ledger.save writes (headers, rows, the JSON summary
byte for byte), the merge of hosts' ledgers (shared edges and rounds summed, iterations in order, node quantities
with their dtypes, one ledger merging to itself), and the errors that name what is wrong."""
from __future__ import annotations

import copy
import dataclasses
import io
import json

import networkx as nx
import numpy as np
import pytest

from svmsim.comm import Ledger, MessageBatch, Meter, merge_ledgers
from svmsim.comm.message import frozen_ids
from svmsim.errors import ProtocolError

NAMES = ["a", "b", "c"]
BIG = 2 ** 53          # beyond it a float64 no longer holds every integer


def path3():
    """The path a - b - c."""
    adj = np.zeros((3, 3), dtype=bool)
    adj[0, 1] = adj[1, 0] = adj[1, 2] = adj[2, 1] = True
    return adj


def script(m: Meter) -> Meter:
    """A small run: two tags (float64 and float32 payloads), a dropped message, an integer and a float node
    quantity, two iterations."""
    m.record(0, MessageBatch.single("ping", 0, 1, [1.0, 2.0]))                                # 1 msg, 2 sc, 16 B
    m.record(1, MessageBatch("pong", np.array([1, 2]), np.array([0, 1]), np.ones((2, 1), dtype=np.float32)))
    m.record_dropped(1, MessageBatch.single("ping", 1, 2, [1.0, 2.0, 3.0]))
    m.record_node(0, "kernel_evaluations", [0, 2], [3, 4])
    m.record_node(1, "kernel_evaluations", 1, 5)
    m.record_node(1, "time", [0, 1, 2], 0.5)
    m.record_node(3, "kernel_evaluations", 0, 1)
    m.mark_iteration(0, 0)
    m.mark_iteration(1, 1)
    return m


EDGES = [[0, 1, 1, 2, 16], [1, 0, 1, 1, 4], [2, 1, 1, 1, 4]]
ROUNDS = [[0, 1, 2, 16], [1, 2, 2, 8]]

SUMMARY = {
    "totals": {"messages": 3, "scalars": 4, "bytes": 24},
    "by_tag": {"ping": {"messages": 1, "scalars": 2, "bytes": 16}, "pong": {"messages": 2, "scalars": 2, "bytes": 8}},
    "dropped_by_tag": {"ping": {"messages": 1, "scalars": 3, "bytes": 24}},
    "by_node": {
        "a": {"sent": {"messages": 1, "scalars": 2, "bytes": 16}, "received": {"messages": 1, "scalars": 1, "bytes": 4}},
        "b": {"sent": {"messages": 1, "scalars": 1, "bytes": 4}, "received": {"messages": 2, "scalars": 3, "bytes": 20}},
        "c": {"sent": {"messages": 1, "scalars": 1, "bytes": 4}, "received": {"messages": 0, "scalars": 0, "bytes": 0}},
    },
    "n_rounds_with_messages": 2,
    "iterations": 2,
    "nodes": {
        "kernel_evaluations": {"total": 13, "n_rounds": 3, "by_node": {"a": 4, "b": 5, "c": 4}},
        "time": {"total": 1.5, "n_rounds": 1, "by_node": {"a": 0.5, "b": 0.5, "c": 0.5}},
    },
}

FILES = {
    "ledger_edges.csv": "src,dst,src_name,dst_name,messages,scalars,bytes\n0,1,a,b,1,2,16\n1,0,b,a,1,1,4\n2,1,c,b,1,1,4\n",
    "ledger_rounds.csv": "round,messages,scalars,bytes\n0,1,2,16\n1,2,2,8\n",
    "ledger_nodes.csv": "node,name,kernel_evaluations,time\n0,a,4,0.5\n1,b,5,0.5\n2,c,4,0.5\n",
    "ledger_node_rounds.csv": "round,kernel_evaluations,time\n0,7,0.0\n1,5,1.5\n3,1,0.0\n",
    "ledger.json": json.dumps(SUMMARY, indent=2),
}


def saved(ledger: Ledger, directory) -> dict:
    directory.mkdir()
    ledger.save(directory)
    return {p.name: p.read_text() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("adjacency", [path3(), None], ids=["topology", "keyed"])
def test_the_ledger_of_a_small_run_exactly(adjacency):
    led = script(Meter(3, adjacency, node_names=NAMES)).ledger()
    assert led.totals == {"messages": 3, "scalars": 4, "bytes": 24}
    assert led.by_tag == {"ping": [1, 2, 16], "pong": [2, 2, 8]}
    assert led.dropped_by_tag == {"ping": [1, 3, 24]}
    assert led.edges.tolist() == EDGES and led.edges.dtype == np.int64
    assert led.dropped_edges.tolist() == [[1, 2, 1, 3, 24]] and led.dropped_edges.dtype == np.int64
    assert led.rounds.tolist() == ROUNDS and led.rounds.dtype == np.int64
    assert led.iteration_rounds.tolist() == [[0, 0], [1, 1]] and led.iteration_rounds.dtype == np.int64
    assert led.node_names == NAMES
    assert led.node_totals["kernel_evaluations"].tolist() == [4, 5, 4]
    assert led.node_totals["kernel_evaluations"].dtype == np.int64
    assert led.node_totals["time"].tolist() == [0.5, 0.5, 0.5]
    assert led.node_rounds["kernel_evaluations"].tolist() == [[0, 7], [1, 5], [3, 1]]
    assert led.node_rounds["time"].tolist() == [[1.0, 1.5]]
    assert led.summary() == SUMMARY


def test_the_files_a_ledger_saves_exactly(tmp_path):
    led = script(Meter(3, path3(), node_names=NAMES)).ledger()
    assert saved(led, tmp_path / "run") == FILES


def test_a_long_rounds_table_is_written_whole(tmp_path):
    n = 70_000                                              # more rows than one formatting chunk
    rounds = np.column_stack([np.arange(n), np.ones(n), np.full(n, 2), np.full(n, 16)]).astype(np.int64)
    empty = np.zeros((0, 5), dtype=np.int64)
    led = Ledger({"messages": n, "scalars": 2 * n, "bytes": 16 * n}, {"x": [n, 2 * n, 16 * n]}, {}, empty, empty,
                 rounds, np.zeros((0, 2), dtype=np.int64), ["a"])
    led.save(tmp_path)
    lines = (tmp_path / "ledger_rounds.csv").read_text().splitlines()
    assert len(lines) == n + 1
    assert lines[0] == "round,messages,scalars,bytes"
    assert lines[1] == "0,1,2,16" and lines[65_537] == "65536,1,2,16" and lines[-1] == f"{n - 1},1,2,16"


def test_round_ids_stay_exact_integers_beyond_float_precision(tmp_path):
    host_a, host_b = Meter(2), Meter(2)
    host_a.record(BIG + 1, MessageBatch.single("x", 0, 1, [1.0]))
    host_b.record(BIG, MessageBatch.single("x", 1, 0, [1.0]))
    host_b.record(BIG + 1, MessageBatch.single("x", 1, 0, [1.0, 2.0]))
    host_a.record_node(BIG, "kernel_evaluations", 0, 2)
    host_a.record_node(BIG + 1, "kernel_evaluations", 1, 3)
    merged = merge_ledgers([host_a.ledger(), host_b.ledger()])
    assert merged.rounds.tolist() == [[BIG, 1, 1, 8], [BIG + 1, 2, 3, 24]]
    assert merged.node_rounds["kernel_evaluations"].tolist() == [[BIG, 2], [BIG + 1, 3]]
    host_a.ledger().save(tmp_path)
    assert (tmp_path / "ledger_node_rounds.csv").read_text() == \
        f"round,kernel_evaluations\n{BIG},2\n{BIG + 1},3\n"


def test_integer_node_quantities_are_summed_exactly():
    m = Meter(2)
    m.record_node(0, "kernel_evaluations", [0], BIG + 1)
    m.record_node(0, "kernel_evaluations", [0, 1], [2, 3])
    totals, rounds = m.node_tables()
    assert totals["kernel_evaluations"].tolist() == [BIG + 3, 3]
    assert rounds["kernel_evaluations"].tolist() == [[0, BIG + 6]]
    assert m.node_quantity_totals() == {"kernel_evaluations": BIG + 6}


def test_float_node_quantities_accumulate():
    m = Meter(3)
    m.record_node(0, "time", [0], 0.5)
    m.record_node(2, "time", [0, 1], [0.25, 1.0])
    m.record_node(2, "time", 2, 0.125)
    totals, rounds = m.node_tables()
    assert totals["time"].tolist() == [0.75, 1.0, 0.125]
    assert rounds["time"].tolist() == [[0.0, 0.5], [2.0, 1.375]]


@pytest.mark.parametrize("adjacency", [path3(), None], ids=["topology", "keyed"])
def test_a_flat_payload_is_one_scalar_per_message(adjacency):
    m = Meter(3, adjacency)
    m.record(0, MessageBatch("x", np.array([0, 2]), np.array([1, 1]), np.ones(2, dtype=np.float32)))
    m.record_dropped(0, MessageBatch("x", np.array([1]), np.array([0]), np.ones(1)))
    led = m.ledger()
    assert led.by_tag == {"x": [2, 2, 8]} and led.dropped_by_tag == {"x": [1, 1, 8]}
    assert led.edges.tolist() == [[0, 1, 1, 1, 4], [2, 1, 1, 1, 4]]
    assert led.dropped_edges.tolist() == [[1, 0, 1, 1, 8]]


@pytest.mark.parametrize("adjacency", [path3(), None], ids=["topology", "keyed"])
def test_shared_id_arrays_are_counted_once_per_send_whatever_the_payload(adjacency):
    m = Meter(3, adjacency, keep_log=True)
    spokes = frozen_ids([0, 2])
    m.record(0, MessageBatch.gather("x", spokes, 1, np.ones((2, 2))))                       # float64: 16 B each
    m.ledger()                                                                           # a read in between
    m.record(1, MessageBatch.gather("x", spokes, 1, np.ones((2, 2), dtype=np.float32)))     # same ids, 8 B each
    m.record(1, MessageBatch.gather("x", spokes, 1, np.ones((2, 3))))                       # same ids, 3 scalars
    m.record(2, MessageBatch.broadcast("y", 1, spokes, np.ones(1)))
    led = m.ledger()
    assert led.edges.tolist() == [[0, 1, 3, 7, 48], [1, 0, 1, 1, 8], [1, 2, 1, 1, 8], [2, 1, 3, 7, 48]]
    assert led.rounds.tolist() == [[0, 2, 4, 32], [1, 4, 10, 64], [2, 2, 2, 16]]
    assert led.totals == {"messages": 8, "scalars": 16, "bytes": 112}
    assert len(m.message_rows()) == 8


def test_the_log_keeps_the_ids_as_sent():
    m = Meter(3, keep_log=True)
    src, dst = np.array([0, 1]), np.array([1, 2])
    m.record(0, MessageBatch("x", src, dst, np.ones((2, 1))))
    src[:] = 2                                                       # the sender reuses its arrays
    dst[:] = 0
    assert m.message_rows() == [(0, "x", 0, 1, 1), (0, "x", 1, 2, 1)]


def test_nodes_are_named_by_their_ids_unless_named():
    m = Meter(3)
    assert m.last_round == -1
    m.record(0, MessageBatch.single("x", 2, 0, [1.0]))
    led = m.ledger()
    assert m.last_round == 0
    assert led.node_names == ["0", "1", "2"]
    assert led.by_node() == {"2": {"sent": {"messages": 1, "scalars": 1, "bytes": 8},
                                   "received": {"messages": 0, "scalars": 0, "bytes": 0}},
                             "0": {"sent": {"messages": 0, "scalars": 0, "bytes": 0},
                                   "received": {"messages": 1, "scalars": 1, "bytes": 8}}}


def test_rounds_recorded_in_pieces_are_one_row_each():
    m = Meter(3, path3())
    m.record(0, MessageBatch.single("x", 0, 1, [1.0]))
    m.record(1, MessageBatch.single("x", 1, 2, [1.0, 2.0]))
    m.record(0, MessageBatch.single("y", 1, 0, [1.0]))          # round 0 again, after round 1
    m.record_node(2, "k", 0, 1)
    m.record_node(1, "k", 1, 2)
    m.record_node(2, "k", 2, 4)
    led = m.ledger()
    assert led.rounds.tolist() == [[0, 2, 2, 16], [1, 1, 2, 16]]
    assert led.node_rounds["k"].tolist() == [[1, 2], [2, 5]]
    assert m.last_round == 1


# -- merging ---------------------------------------------------------------------------------------------------
def test_merging_nothing_is_refused():
    with pytest.raises(ValueError, match=r"^no ledgers to merge$"):
        merge_ledgers([])


def test_one_ledger_merges_to_itself(tmp_path):
    led = script(Meter(3, path3(), node_names=NAMES)).ledger()
    merged = Ledger.merge([led])
    assert merged.equals(led) and merged.node_names == NAMES
    assert merged.node_rounds["kernel_evaluations"].dtype == np.int64       # counts stay integers
    assert merged.node_rounds["time"].dtype == np.float64                   # time stays fractional
    assert saved(merged, tmp_path / "merged") == FILES


def test_hosts_sharing_edges_rounds_and_quantities_merge_to_the_one_meter(tmp_path):
    one = Meter(3, path3(), node_names=NAMES)
    hosts = [Meter(3, node_names=NAMES), Meter(3, node_names=NAMES)]
    # (host, round, batch): the same edges and rounds seen by both hosts, with different counts
    traffic = [(0, 0, MessageBatch.single("x", 0, 1, [1.0])),
               (1, 0, MessageBatch("x", np.array([0, 0]), np.array([1, 1]), np.ones((2, 3)))),
               (1, 2, MessageBatch.single("y", 2, 1, [1.0, 2.0])),
               (0, 2, MessageBatch.single("x", 1, 2, [1.0]))]
    for h, r, batch in traffic:
        one.record(r, batch)
        hosts[h].record(r, batch)
    for h, r, batch in [(0, 1, MessageBatch.single("x", 1, 2, [1.0])),
                        (1, 1, MessageBatch("x", np.array([1, 1]), np.array([2, 2]), np.ones((2, 2))))]:
        one.record_dropped(r, batch)
        hosts[h].record_dropped(r, batch)
    for h, r, q, ids, amt in [(0, 0, "k", [0, 1], [1, 2]), (1, 0, "k", [1], 5), (1, 2, "k", [2], 7),
                              (1, 2, "t", [2], 0.25), (1, 3, "t", [0, 1], 0.5)]:
        one.record_node(r, q, ids, amt)
        hosts[h].record_node(r, q, ids, amt)
    for h, it, r in [(1, 0, 0), (0, 0, 0), (1, 1, 2), (0, 1, 2)]:   # both hosts end each iteration
        one.mark_iteration(it, r)
        hosts[h].mark_iteration(it, r)
    merged = merge_ledgers([h.ledger() for h in hosts])
    assert merged.totals == {"messages": 5, "scalars": 10, "bytes": 80}
    assert merged.by_tag == {"x": [4, 8, 64], "y": [1, 2, 16]}
    assert merged.dropped_by_tag == {"x": [3, 5, 40]}
    assert merged.edges.tolist() == [[0, 1, 3, 7, 56], [1, 2, 1, 1, 8], [2, 1, 1, 2, 16]]
    assert merged.dropped_edges.tolist() == [[1, 2, 3, 5, 40]]
    assert merged.rounds.tolist() == [[0, 3, 7, 56], [2, 2, 3, 24]]
    assert merged.iteration_rounds.tolist() == [[0, 0], [0, 0], [1, 2], [1, 2]]
    assert merged.node_totals["k"].tolist() == [1, 7, 7]
    assert merged.node_rounds["k"].tolist() == [[0, 8], [2, 7]]
    assert merged.node_totals["t"].tolist() == [0.5, 0.5, 0.25]
    assert merged.node_rounds["t"].tolist() == [[2.0, 0.25], [3.0, 1.0]]
    full = one.ledger()
    assert merged.equals(full) and full.equals(merged)
    assert saved(merged, tmp_path / "merged") == saved(full, tmp_path / "one")


def test_iterations_from_several_hosts_merge_in_iteration_order():
    a, b = Meter(2), Meter(2)
    a.mark_iteration(1, 4)
    a.mark_iteration(2, 3)
    b.mark_iteration(0, 4)
    merged = merge_ledgers([a.ledger(), b.ledger()])
    assert merged.iteration_rounds.tolist() == [[0, 4], [1, 4], [2, 3]]


def test_empty_tables_given_as_lists_merge_to_integer_tables():
    # hand-made ledgers (as tests of the Ray hosts build them) may give an empty table as []
    names = ["a", "b"]
    parts = [Ledger({"messages": 1, "scalars": 1, "bytes": 8}, {"x": [1, 1, 8]}, {}, np.array([[0, 1, 1, 1, 8]]), [],
                    np.array([[0, 1, 1, 8]]), [], names) for _ in range(2)]
    merged = merge_ledgers(parts)
    assert merged.edges.tolist() == [[0, 1, 2, 2, 16]]
    assert merged.dropped_edges.shape == (0, 5) and merged.dropped_edges.dtype == np.int64
    assert merged.iteration_rounds.shape == (0, 2) and merged.iteration_rounds.dtype == np.int64
    assert merged.summary()["iterations"] == 0


def test_ledgers_that_differ_anywhere_are_not_equal():
    led = script(Meter(3, path3(), node_names=NAMES)).ledger()
    assert led.equals(copy.deepcopy(led))

    def changed(**fields):
        return dataclasses.replace(copy.deepcopy(led), **fields)

    def plus_one(a):
        a = a.copy()
        a[-1, -1] += 1
        return a

    others = [changed(totals={**led.totals, "bytes": 25}),
              changed(by_tag={**led.by_tag, "pong": [2, 2, 9]}),
              changed(dropped_by_tag={}),
              changed(edges=plus_one(led.edges)),
              changed(dropped_edges=plus_one(led.dropped_edges)),
              changed(rounds=plus_one(led.rounds)),
              changed(iteration_rounds=plus_one(led.iteration_rounds)),
              changed(node_totals={**led.node_totals, "kernel_evaluations": np.array([4, 5, 5])}),
              changed(node_totals={**led.node_totals, "extra": np.zeros(3, dtype=np.int64)},
                      node_rounds={**led.node_rounds, "extra": np.zeros((0, 2), dtype=np.int64)}),
              changed(node_rounds={**led.node_rounds, "time": np.array([[1.0, 1.25]])})]
    for i, other in enumerate(others):
        assert not led.equals(other), i
        assert not other.equals(led), i


# -- the meter's other readings ----------------------------------------------------------------------------------
def test_the_message_log_one_row_per_message_sorted():
    m = Meter(3, path3(), keep_log=True)
    m.record(1, MessageBatch("pong", np.array([2, 1]), np.array([1, 0]), np.ones((2, 1))))
    m.record(0, MessageBatch.broadcast("ping", 1, frozen_ids([2, 0]), np.array([1.0, 2.0])))
    assert m.message_rows() == [(0, "ping", 1, 0, 2), (0, "ping", 1, 2, 2), (1, "pong", 1, 0, 1),
                                (1, "pong", 2, 1, 1)]
    assert all(type(v) is int for row in m.message_rows() for v in row[2:4])
    with pytest.raises(ValueError, match=r"^the meter was created without keep_log=True$"):
        Meter(3).message_rows()


def test_scalars_up_to_a_round_include_that_round():
    m = Meter(3)
    m.record(0, MessageBatch.single("x", 0, 1, [1.0, 2.0, 3.0]))                   # 1 msg, 3 sc
    m.record(1, MessageBatch("x", np.array([1, 2]), np.array([0, 0]), np.ones((2, 2))))   # 2 msgs, 4 sc
    m.record(3, MessageBatch.single("x", 2, 1, [1.0]))                             # 1 msg, 1 sc
    assert [m.scalars_up_to_round(r) for r in (-1, 0, 1, 2, 3, 9)] == [0, 3, 7, 7, 8, 8]


def test_the_edge_matrix_up_to_the_dense_limit():
    m = Meter(1024)
    m.record(0, MessageBatch.single("x", 1023, 0, [1.0, 2.0]))
    m.record_dropped(0, MessageBatch.single("x", 5, 7, [1.0]))
    e = m.edge_matrix()
    assert e.shape == (3, 1024, 1024) and e.dtype == np.int64
    assert e[:, 1023, 0].tolist() == [1, 2, 16] and int(e.sum()) == 19
    d = m.edge_matrix(dropped=True)
    assert d[:, 5, 7].tolist() == [1, 1, 8] and int(d.sum()) == 10
    with pytest.raises(ValueError, match=r"^edge_matrix is only available for up to 1024 nodes; use ledger\(\)\.edges$"):
        Meter(1025).edge_matrix()


def test_compiled_buffers_come_back_into_the_ledger():
    m = Meter(3, path3(), node_names=NAMES)
    m.record(0, MessageBatch.single("x", 0, 1, [1.0]))
    bufs = m.compiled_buffers(3, rounds=8, iterations=4)
    assert bufs.lookup.tolist() == [-1, 0, -1, 1, -1, 2, -1, 3, -1]
    assert bufs.edges.dtype == np.int64                               # integer counters, as the loops write
    bufs.edges[:, bufs.lookup[2 * 3 + 1]] += [2, 4, 32]              # the loop: two messages 2 -> 1
    bufs.by_tag[1] = [2, 4, 32]                                        # tag "y"; tag "z" (row 2) sent nothing
    bufs.rounds[:2] = [[1, 1, 2, 16], [2, 1, 2, 16]]
    bufs.rounds[2] = [9, 9, 9, 9]                                      # beyond n_rounds: not taken
    bufs.iterations[:1] = [[0, 2]]
    bufs.iterations[1] = [7, 7]                                        # beyond n_iterations
    m.absorb(bufs, ("x", "y", "z"), n_rounds=2, n_iterations=1)
    led = m.ledger()
    assert led.totals == {"messages": 3, "scalars": 5, "bytes": 40}
    assert led.by_tag == {"x": [1, 1, 8], "y": [2, 4, 32]}
    assert led.edges.tolist() == [[0, 1, 1, 1, 8], [2, 1, 2, 4, 32]]
    assert led.rounds.tolist() == [[0, 1, 1, 8], [1, 1, 2, 16], [2, 1, 2, 16]]
    assert led.iteration_rounds.tolist() == [[0, 2]]
    assert m.last_round == 2
    assert Meter(3, path3(), keep_log=True).compiled_buffers(1) is None and Meter(3).compiled_buffers(1) is None


def test_a_tag_whose_messages_carry_no_scalars_is_absorbed_by_its_message_count():
    """A compiled loop's tag with messages of width 0 (a bare signal) has its row in the ledger: a tag counts once
    it sent messages, whatever their scalars."""
    m = Meter(3, path3(), node_names=NAMES)
    bufs = m.compiled_buffers(2, rounds=4, iterations=2)
    bufs.edges[:, bufs.lookup[0 * 3 + 1]] += [2, 0, 0]
    bufs.by_tag[0] = [2, 0, 0]
    bufs.rounds[0] = [0, 2, 0, 0]
    m.absorb(bufs, ("ping", "data"), n_rounds=1, n_iterations=0)
    led = m.ledger()
    assert led.by_tag == {"ping": [2, 0, 0]} and led.totals == {"messages": 2, "scalars": 0, "bytes": 0}


def test_compiled_buffers_have_the_compiled_loops_types_and_a_lookup_up_to_1024_nodes():
    """The compiled loops index the edge counters by the lookup's int32 entries and count into int64 arrays (a float
    array would compile a second loop, or count inexactly past 2^53); the dense lookup (N^2 entries) is built up to
    1024 nodes inclusive, and beyond it the loop finds edges in the CSR rows."""
    import networkx as nx

    bufs = Meter(3, path3()).compiled_buffers(2, rounds=4, iterations=2)
    assert bufs.lookup.dtype == np.int32
    assert [a.dtype for a in (bufs.edges, bufs.by_tag, bufs.rounds, bufs.iterations)] == [np.dtype(np.int64)] * 4
    for n, dense in ((1024, True), (1025, False)):
        ring = nx.cycle_graph(n)
        lookup = Meter(n, nx.to_scipy_sparse_array(ring)).compiled_buffers(1).lookup
        assert lookup.shape == ((n * n,) if dense else (0,))
        if dense:
            assert lookup[0 * n + 1] >= 0 and lookup[(n - 1) * n + 0] >= 0 and lookup[0 * n + 2] == -1


# -- errors that name what is wrong ------------------------------------------------------------------------------
@pytest.mark.parametrize("adjacency", [path3(), None], ids=["topology", "keyed"])
@pytest.mark.parametrize("s, d", [(3, 1), (1, 3), (-1, 0), (0, -1)])
def test_a_message_off_the_node_range_names_its_ends(adjacency, s, d):
    m = Meter(3, adjacency, node_names=NAMES)
    with pytest.raises(ProtocolError, match=rf"^message with tag 'ping' goes from node {s} to node {d}, but node ids "
                                            r"must lie in 0\.\.2$"):
        m.record(0, MessageBatch.single("ping", s, d, [1.0]))
    assert m.ledger().edges.shape == (0, 5)


@pytest.mark.parametrize("s, d", [(0, 2), (2, 0), (1, 1)])
def test_a_message_off_the_topology_names_its_ends(s, d):
    m = Meter(3, path3(), node_names=NAMES)
    with pytest.raises(ProtocolError, match=rf"^message with tag 'ping' goes from node {s} \({NAMES[s]}\) to node {d} "
                                            rf"\({NAMES[d]}\), which are not neighbours in the topology; node programs "
                                            r"may only send along edges$"):
        m.record(0, MessageBatch.single("ping", s, d, [1.0]))


def test_a_batch_refused_midway_leaves_the_ledger_as_it_was():
    m = Meter(3, path3(), node_names=NAMES)
    m.record(0, MessageBatch.single("x", 1, 2, [1.0]))
    before = m.ledger()
    for record in (m.record, m.record_dropped):
        with pytest.raises(ProtocolError, match=r"from node 0 \(a\) to node 2 \(c\)"):
            record(1, MessageBatch("x", np.array([0, 1, 0]), np.array([1, 0, 2]), np.ones((3, 1))))
    after = m.ledger()
    assert after.edges.tolist() == before.edges.tolist() == [[1, 2, 1, 1, 8]]
    assert after.dropped_edges.shape == (0, 5)


@pytest.mark.parametrize("ids, bad", [([0, 7], 7), ([7], 7), ([-1, 1], -1), ([1, 4, -2], 4)])
def test_a_node_quantity_off_the_node_range_names_the_node(ids, bad):
    m = Meter(4)
    with pytest.raises(ProtocolError, match=rf"^node quantity 'kernel_evaluations' recorded for node {bad}, but node "
                                            r"ids must lie in 0\.\.3$"):
        m.record_node(0, "kernel_evaluations", ids, 1)
    assert m.node_tables() == ({}, {})


def test_node_quantity_amounts_of_the_wrong_kind_are_refused_by_name():
    m = Meter(2)
    with pytest.raises(TypeError, match=r"^node quantity 'k': amounts must be integers or floats, not complex128$"):
        m.record_node(0, "k", [0], np.array([1 + 2j]))
    m.record_node(0, "k", [0], 2)
    with pytest.raises(TypeError, match=r"^node quantity 'k' was recorded in integers; got float64 amounts$"):
        m.record_node(1, "k", [1], 0.5)
    assert m.node_quantity_totals() == {"k": 2}


def _old_by_node(ledger: Ledger) -> dict:
    """`by_node` as it was computed row by row (the reference for the array version)."""
    out: dict = {}
    for s, d, msgs, sc, by in ledger.edges:
        for node, key in ((s, "sent"), (d, "received")):
            rec = out.setdefault(ledger.node_names[node], {"sent": [0, 0, 0], "received": [0, 0, 0]})
            for q, v in enumerate((msgs, sc, by)):
                rec[key][q] += int(v)
    return {k: {kk: dict(zip(("messages", "scalars", "bytes"), vv)) for kk, vv in v.items()} for k, v in out.items()}


@pytest.mark.parametrize("seed", range(6))
def test_ledger_json_is_json_dumps_of_the_summary_byte_for_byte(seed, tmp_path):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    names = [["peer-%d" % i, 'q"uote\\%d' % i, "n\u00e9\u4e2d%d" % i, "tab\t%d" % i][seed % 4] for i in range(n)]
    pairs = np.unique(rng.integers(0, n, size=(int(rng.integers(1, 4 * n)), 2)), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    counts = rng.integers(0, 2 ** 40, size=(pairs.shape[0], 3))
    quantities = {"kernel_evaluations": rng.integers(0, 9, size=n)} if seed % 2 else {}
    ledger = Ledger(totals={"messages": 1, "scalars": 2, "bytes": 3}, by_tag={"t": [1, 2, 3]}, dropped_by_tag={},
                    edges=np.column_stack([pairs, counts]), dropped_edges=np.zeros((0, 5), dtype=np.int64),
                    rounds=np.array([[0, 1, 2, 3]]), iteration_rounds=np.array([[1, 0]]), node_names=names,
                    node_totals=quantities, node_rounds={q: np.array([[0, int(v.sum())]]) for q, v in
                                                          quantities.items()})
    assert ledger.by_node() == _old_by_node(ledger)
    assert list(ledger.by_node()) == list(_old_by_node(ledger))
    assert ledger.json_text() == json.dumps(ledger.summary(), indent=2)
    for block in (1, 3, n):                          # by_node written a block of nodes at a time: the same bytes
        text = io.StringIO()
        ledger.write_json(text, block=block)
        assert text.getvalue() == ledger.json_text()
    assert ledger.summary(by_node=False) == {**ledger.summary(), "by_node": {}}
    ledger.save(tmp_path)
    assert (tmp_path / "ledger.json").read_text() == ledger.json_text()
    rows = (tmp_path / "ledger_edges.csv").read_text().splitlines()
    assert rows[1:] == [f"{s},{d},{names[s]},{names[d]},{m},{sc},{b}" for s, d, m, sc, b in ledger.edges]


@pytest.mark.parametrize("names, pairs", [([0, 1, 2], [[0, 1], [2, 0]]),            # names json keys turn to text
                                          (["a", "b", "c"], []),                    # no traffic: by_node is {}
                                          ([np.str_("a"), "b", "c"], [[1, 2]])])    # a str subclass
def test_ledger_json_of_any_names_and_of_no_traffic_is_json_dumps_of_the_summary(names, pairs):
    edges = np.array([[s, d, 1, 2, 16] for s, d in pairs], dtype=np.int64).reshape(-1, 5)
    ledger = Ledger(totals={"messages": len(pairs), "scalars": 2, "bytes": 16}, by_tag={}, dropped_by_tag={},
                    edges=edges, dropped_edges=np.zeros((0, 5), dtype=np.int64), rounds=np.zeros((0, 4), np.int64),
                    iteration_rounds=np.zeros((0, 2), np.int64), node_names=names, node_totals={}, node_rounds={})
    assert ledger.json_text() == json.dumps(ledger.summary(), indent=2)
    assert json.loads(ledger.json_text())["by_node"] == ({} if not pairs else json.loads(json.dumps(_old_by_node(ledger))))


@pytest.mark.parametrize("rows", [0, 1, 6, 7, 9])
def test_the_edge_table_is_written_whole_whatever_its_chunks(rows, tmp_path):
    from svmsim.comm.ledger import _write_edges_csv
    edges = np.arange(rows * 5, dtype=np.int64).reshape(rows, 5) % 4
    names = ["n0", "n1", "n\u00e92", "n3"]
    for chunk in (1, 2, 3, 65536):
        _write_edges_csv(tmp_path / "e.csv", edges, names, chunk=chunk)
        lines = (tmp_path / "e.csv").read_text().splitlines()
        assert lines == ["src,dst,src_name,dst_name,messages,scalars,bytes"] + [
            f"{s},{d},{names[s]},{names[d]},{m},{sc},{b}" for s, d, m, sc, b in edges.tolist()]


# -- rounds recorded in pieces, messages without scalars, shared ids ----------------------------------------------
def complete4() -> np.ndarray:
    return ~np.eye(4, dtype=bool)


@pytest.mark.parametrize("adjacency", [path3(), None], ids=["topology", "keyed"])
def test_a_round_read_between_its_pieces_is_one_row(adjacency):
    """A ledger read in the middle of a round (a live dashboard, an evaluation) splits the round's log in two
    consecutive pieces; the table still has one row per round."""
    m = Meter(3, adjacency)
    m.record(4, MessageBatch.single("x", 0, 1, [1.0]))
    assert m.rounds_table().tolist() == [[4, 1, 1, 8]]
    m.record(4, MessageBatch.single("x", 1, 2, [1.0, 2.0]))
    assert m.rounds_table().tolist() == [[4, 2, 3, 24]]
    assert m.rounds_table().tolist() == [[4, 2, 3, 24]]               # a read that adds nothing
    m.record(5, MessageBatch.single("x", 1, 0, [1.0]))
    led = m.ledger()
    assert led.rounds.tolist() == [[4, 2, 3, 24], [5, 1, 1, 8]] and led.rounds.dtype == np.int64
    assert m.scalars_up_to_round(4) == 3 and m.last_round == 5


def test_rounds_merged_from_pieces_stay_exact_integers_beyond_float_precision():
    m = Meter(3, path3())
    for piece in ([[7, BIG + 1, BIG + 1, 1]], [[2, 1, 1, 8], [7, 1, 2, BIG + 1]]):
        bufs = m.compiled_buffers(1, rounds=4, iterations=1)
        bufs.rounds[:len(piece)] = piece
        m.absorb(bufs, ("x",), n_rounds=len(piece), n_iterations=0)
    t = m.rounds_table()
    assert t.dtype == np.int64
    assert t.tolist() == [[2, 1, 1, 8], [7, BIG + 2, BIG + 3, BIG + 2]]


def test_node_quantities_in_pieces_out_of_order_keep_their_kind_and_exact_sums():
    m = Meter(2)
    m.record_node(3, "k", [0, 1], [BIG, 1])
    m.record_node(1, "k", 0, 5)
    m.record_node(3, "k", 1, 2)
    m.record_node(2, "t", 0, 0.25)
    m.record_node(1, "t", [0, 1], 0.5)
    m.record_node(2, "t", 1, 0.125)
    totals, rounds = m.node_tables()
    assert rounds["k"].dtype == np.int64 and rounds["k"].tolist() == [[1, 5], [3, BIG + 3]]
    assert rounds["t"].dtype == np.float64 and rounds["t"].tolist() == [[1.0, 1.0], [2.0, 0.375]]
    assert totals["k"].tolist() == [BIG + 5, 3] and totals["t"].tolist() == [0.75, 0.625]


@pytest.mark.parametrize("adjacency", [path3(), None], ids=["topology", "keyed"])
def test_messages_without_scalars_are_counted_in_their_round_and_edge(adjacency):
    """A bare signal (payload of width 0) is a message: it has its round row and its edge row."""
    m = Meter(3, adjacency)
    m.record(0, MessageBatch("ready", np.array([0, 2]), np.array([1, 1]), np.empty((2, 0))))
    m.record(1, MessageBatch.single("x", 1, 0, [1.0]))
    led = m.ledger()
    assert led.rounds.tolist() == [[0, 2, 0, 0], [1, 1, 1, 8]]
    assert led.edges.tolist() == [[0, 1, 1, 0, 0], [1, 0, 1, 1, 8], [2, 1, 1, 0, 0]]
    assert m.edges_table().tolist() == led.edges.tolist()             # delivered unless asked for the dropped
    assert m.edges_table(dropped=True).shape == (0, 5)


@pytest.mark.parametrize("adjacency", [complete4(), None], ids=["topology", "keyed"])
@pytest.mark.parametrize("shared", ["senders", "receivers"])
def test_one_shared_id_array_with_a_fresh_one_counts_the_fresh_one_as_sent(adjacency, shared):
    """Only batches whose two id arrays are both shared (read-only, reused) are counted later in bulk: an id array
    its sender fills again after sending is counted as it was when sent."""
    m = Meter(4, adjacency)
    fixed = frozen_ids([0, 1] if shared == "senders" else [2, 3])
    fresh = np.array([2, 3] if shared == "senders" else [0, 1])
    for r in range(2):
        src, dst = (fixed, fresh) if shared == "senders" else (fresh, fixed)
        m.record(r, MessageBatch("x", src, dst, np.ones((2, 1))))
        fresh[:] = fresh[::-1].copy()
    edges = [[0, 2, 1, 1, 8], [0, 3, 1, 1, 8], [1, 2, 1, 1, 8], [1, 3, 1, 1, 8]]
    assert m.ledger().edges.tolist() == edges


@pytest.mark.parametrize("adjacency", [complete4(), None], ids=["topology", "keyed"])
def test_shared_id_arrays_in_several_pairs_keep_each_pairs_count(adjacency):
    """Shared arrays are counted per (senders, receivers) pair: the same senders to two receiver arrays, and two
    sender arrays to the same receivers, with messages of the same width."""
    m = Meter(4, adjacency)
    a, b = frozen_ids([0, 1]), frozen_ids([1, 3])
    to2, to3 = frozen_ids([2, 2]), frozen_ids([3, 3])
    for r in range(3):
        for src, dst in ((a, to2), (a, to3), (b, to2)):
            m.record(r, MessageBatch("x", src, dst, np.ones((2, 1))))
    assert m.ledger().edges.tolist() == [[0, 2, 3, 3, 24], [0, 3, 3, 3, 24], [1, 2, 6, 6, 48], [1, 3, 3, 3, 24],
                                         [3, 2, 3, 3, 24]]


@pytest.mark.parametrize("adjacency", [complete4(), None], ids=["topology", "keyed"])
def test_shared_id_arrays_are_checked_once_and_added_once_per_read(adjacency, monkeypatch):
    """The meter's fast path for shared id arrays (module docs): the edges are checked on the first send and added
    in one pass (sends x per message) when the ledger is read, however many sends came between."""
    import svmsim.comm.meter as meter_module
    from svmsim.comm.edges import KeyedCounts

    calls = []
    real_accumulate, real_add = meter_module.accumulate_edges, KeyedCounts.add
    monkeypatch.setattr(meter_module, "accumulate_edges", lambda *a: calls.append(a[-1]) or real_accumulate(*a))
    monkeypatch.setattr(KeyedCounts, "add", lambda self, k, w: calls.append(w.tolist()) or real_add(self, k, w))
    m = Meter(4, adjacency)
    spokes, hub = frozen_ids([0, 1, 3]), frozen_ids([2, 2, 2])
    for r in range(50):
        m.record(r, MessageBatch("x", spokes, hub, np.ones((3, 2))))
    led = m.ledger()
    assert led.edges.tolist() == [[s, 2, 50, 100, 800] for s in (0, 1, 3)]
    assert calls == ([0, 50] if adjacency is not None else [[50, 100, 800]])


@pytest.mark.parametrize("seed", range(4))
def test_the_topology_meters_edge_table_is_the_keyed_meters_with_nodes_without_neighbours(seed):
    """The edge table of a meter with a topology (edge ids in CSR rows, each mapped back to its row) equals that of a
    meter without one (keys src * n + dst), on graphs whose nodes without neighbours leave empty rows anywhere,
    the first and last included, with some edges never used and dropped messages on others."""
    rng = np.random.default_rng(seed)
    n = 12
    adjacency = rng.random((n, n)) < 0.3
    np.fill_diagonal(adjacency, False)
    for lonely in (0, n - 1, int(rng.integers(1, n - 1))):
        adjacency[lonely, :] = adjacency[:, lonely] = False
    src, dst = np.nonzero(adjacency)
    with_topology, keyed = Meter(n, adjacency), Meter(n)
    for r in range(5):
        pick = rng.random(src.shape[0]) < 0.4
        batch = MessageBatch("x", src[pick], dst[pick], np.ones((int(pick.sum()), r + 1)))
        lost = rng.random(src.shape[0]) < 0.1
        dropped = MessageBatch("x", src[lost], dst[lost], np.ones((int(lost.sum()), 2)))
        for m in (with_topology, keyed):
            m.record(r, batch)
            m.record_dropped(r, dropped)
    for dropped in (False, True):
        table = with_topology.edges_table(dropped)
        assert table.dtype == np.int64 and table.shape[1] == 5 and table.shape[0] > 0
        assert table.tolist() == keyed.edges_table(dropped).tolist()


def test_keyed_ids_of_any_integer_type_name_edges_beyond_int32():
    """Without a topology an edge is the key src * n + dst: int32 ids of a 10^5-node run must not overflow it."""
    n = 100_000
    m = Meter(n)
    m.record(0, MessageBatch("x", np.array([n - 1, 3], dtype=np.int32), np.array([n - 2, n - 1], dtype=np.int32),
                             np.ones((2, 1))))
    m.record_dropped(0, MessageBatch("x", np.array([n - 1], dtype=np.int32), np.array([0], dtype=np.int32),
                                     np.ones((1, 1))))
    assert m.edges_table().tolist() == [[3, n - 1, 1, 1, 8], [n - 1, n - 2, 1, 1, 8]]
    assert m.edges_table(dropped=True).tolist() == [[n - 1, 0, 1, 1, 8]]


@pytest.mark.parametrize("src, dst, s, d", [([0, 5], [1, 1], 5, 1), ([1, 1], [0, 7], 1, 7), ([0, 0], [1, -1], 0, -1)])
def test_the_first_message_off_the_node_range_is_named_after_valid_ones(src, dst, s, d):
    m = Meter(3, node_names=NAMES)
    with pytest.raises(ProtocolError, match=rf"^message with tag 'x' goes from node {s} to node {d}, but node ids "
                                            r"must lie in 0\.\.2$"):
        m.record(0, MessageBatch("x", np.array(src), np.array(dst), np.ones((2, 1))))


@pytest.mark.parametrize("seed", range(6))
def test_edge_counts_looking_ahead_are_the_in_order_counts(seed):
    """`accumulate_edges` finds edge ids EDGE_LOOKAHEAD messages ahead of the adds: for batches shorter and longer
    than that, runs of one sender's neighbours, and a message off the topology anywhere, it adds exactly what an
    in-order loop adds up to that message, and returns its index."""
    from svmsim.comm.edges import EDGE_LOOKAHEAD, accumulate_edges, edge_id, edge_index

    rng = np.random.default_rng(seed)
    n = 30
    adjacency = rng.random((n, n)) < 0.2
    adjacency = adjacency | adjacency.T
    np.fill_diagonal(adjacency, False)
    ptr, nbr = edge_index(adjacency, n)
    edges = np.flatnonzero(adjacency.ravel())
    for m in (0, 1, EDGE_LOOKAHEAD - 1, EDGE_LOOKAHEAD, EDGE_LOOKAHEAD + 1, 2 * EDGE_LOOKAHEAD + 3, 200):
        pick = edges[rng.integers(0, edges.shape[0], m)]
        src, dst = pick // n, pick % n
        if m and rng.random() < 0.6:                        # one message off the topology (or off the node range)
            k = int(rng.integers(0, m))
            src[k], dst[k] = (0, 0) if rng.random() < 0.5 else (n + 3, 1)
        per_message = np.array([1, 7, 56], dtype=np.int64)
        got = np.zeros((3, nbr.shape[0]), dtype=np.int64)
        bad = accumulate_edges(got, src, dst, n, ptr, nbr, per_message, 2)
        want = np.zeros_like(got)
        expected_bad = -1
        for i in range(m):
            e = edge_id(ptr, nbr, n, src[i], dst[i])
            if e < 0:
                expected_bad = i
                break
            want[:, e] += per_message * 2
        assert bad == expected_bad and np.array_equal(got, want), (m, bad, expected_bad)


# -- node names made when read ---------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix, n", [("peer-", 12), ("", 3), ("%d q\"\\ \u00e9-", 5), ("peer-", 0)])
def test_node_names_read_like_the_list_of_them(prefix, n):
    import pickle

    from svmsim.core.names import NodeNames
    names, plain = NodeNames(prefix, n), [f"{prefix}{i}" for i in range(n)]
    assert list(names) == plain and len(names) == n and names == plain and plain == names
    assert names == tuple(plain) and names == NodeNames(prefix, n) and pickle.loads(pickle.dumps(names)) == names
    assert names != plain + ["x"] and names != plain[::-1] + ([] if n > 1 else ["x"]) and names != NodeNames("?", n + 1)
    for i in range(-n, n):
        assert names[i] == plain[i] and names[np.int64(i)] == plain[i]
    for bad in (n, -n - 1):
        with pytest.raises(IndexError):
            names[bad]
    for s in (slice(None), slice(1, None, 2), slice(None, None, -1), slice(-2, None)):
        assert names[s] == plain[s]
    for name in plain:
        assert name in names and names.index(name) == plain.index(name) and names.count(name) == 1
    others = (f"{prefix}{n}", f"{prefix}01", f"{prefix}-1", f"{prefix}1 ", f"{prefix}\u0661", "x" + prefix, 3, None)
    for other in others:
        assert other not in names and names.count(other) == 0
        with pytest.raises(ValueError):
            names.index(other)
    if n > 2:
        with pytest.raises(ValueError):
            names.index(plain[0], 1)
    assert not NodeNames(prefix, 0) and NodeNames("a", 0) == NodeNames("b", 0)
    for bad_index in (1.5, "0", None):                   # as a list: TypeError
        with pytest.raises(TypeError):
            names[bad_index]
    with pytest.raises(AttributeError):                  # a ledger keeps it as it is: it cannot change
        names.n = n + 1
    with pytest.raises(AttributeError):
        names.prefix = "other-"
    with pytest.raises(AttributeError):
        del names.n
    assert list(names) == plain and len(names) == n
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises((ValueError, TypeError)):
            NodeNames(prefix, bad)
    with pytest.raises(TypeError):
        NodeNames(7, n)


@pytest.mark.parametrize("prefix", ["peer-", "", "%s%% q\"\\ \u00e9-"])
def test_a_ledger_of_names_made_when_read_writes_what_the_list_of_them_writes(prefix, tmp_path):
    from svmsim.core.names import NodeNames
    n = 40
    G = nx.random_regular_graph(4, n, seed=1)
    metered = {}
    for kind, names in (("lazy", NodeNames(prefix, n)), ("list", [f"{prefix}{i}" for i in range(n)])):
        m = Meter(n, nx.to_scipy_sparse_array(G), node_names=names)
        src = np.array([u for u, v in G.edges()] + [v for u, v in G.edges()])
        dst = np.array([v for u, v in G.edges()] + [u for u, v in G.edges()])
        m.record(0, MessageBatch("x", src, dst, np.zeros((src.size, 3))))
        m.record_dropped(1, MessageBatch("x", src[:5], dst[:5], np.zeros((5, 3))))
        m.record_node(2, "kernel_evaluations", np.arange(n), np.arange(n) % 3)
        ledger = m.ledger()
        merged = merge_ledgers([ledger, ledger])
        assert merged.node_names == names and ledger.node_names == names
        # a NodeNames cannot change and is kept as it is; a list is the ledger's own copy
        assert (ledger.node_names is names and merged.node_names is names) if kind == "lazy" else (
            type(ledger.node_names) is list and ledger.node_names is not names and merged.node_names is not names
            and merged.node_names is not ledger.node_names)
        (tmp_path / kind).mkdir()
        ledger.save(tmp_path / kind)
        metered[kind] = ledger
    assert metered["lazy"].json_text() == json.dumps(metered["lazy"].summary(), indent=2) == metered["list"].json_text()
    for f in sorted(p.name for p in (tmp_path / "list").iterdir()):
        assert (tmp_path / "lazy" / f).read_bytes() == (tmp_path / "list" / f).read_bytes(), f
    assert isinstance(merge_ledgers([metered["lazy"]]).node_names, NodeNames)


def test_a_meter_that_loses_nothing_keeps_no_counters_of_lost_messages():
    n = 6
    ring = nx.cycle_graph(n)
    m = Meter(n, nx.to_scipy_sparse_array(ring))
    m.record(0, MessageBatch("x", np.arange(n), (np.arange(n) + 1) % n, np.zeros((n, 2))))
    assert m._dropped_edges is None                       # 3 x 8 bytes an edge that a run without faults never uses
    assert m.edges_table(dropped=True).shape == (0, 5) and m.edges_table(dropped=True).dtype == np.int64
    assert m.ledger().dropped_edges.shape == (0, 5) and m.ledger().edges.shape == (n, 5)
    m.record_dropped(1, MessageBatch("x", np.array([2]), np.array([3]), np.zeros((1, 2))))
    assert m.edges_table(dropped=True).tolist() == [[2, 3, 1, 2, 16]]
    with pytest.raises(ProtocolError):                    # a lost message off the topology: nothing kept of it
        m.record_dropped(1, MessageBatch("x", np.array([0, 4, 0]), np.array([1, 5, 3]), np.zeros((3, 2))))
    assert m.edges_table(dropped=True).tolist() == [[2, 3, 1, 2, 16]]
