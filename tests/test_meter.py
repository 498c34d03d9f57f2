"""The meter counts every logical message exactly once, whatever the batching."""
from __future__ import annotations

import numpy as np
import pytest

from svmsim.comm import MessageBatch, Meter
from svmsim.comm.message import constant_ids, frozen_ids, merge_batches
from svmsim.errors import ProtocolError


def star_adjacency(n):
    a = np.zeros((n, n), dtype=bool)
    a[0, 1:] = a[1:, 0] = True
    return a


def test_broadcast_and_gather_counts():
    m = Meter(5, star_adjacency(5))
    clients = frozen_ids([1, 2, 3, 4])
    m.record(0, MessageBatch.broadcast("coord", 0, clients, np.array([7], dtype=np.int64)))
    m.record(1, MessageBatch.gather("delta", clients, 0, np.ones((4, 2))))
    led = m.ledger()
    assert led.totals == {"messages": 8, "scalars": 12, "bytes": 96}
    assert led.by_tag == {"coord": [4, 4, 32], "delta": [4, 8, 64]}
    assert led.rounds.tolist() == [[0, 4, 4, 32], [1, 4, 8, 64]]
    nodes = led.by_node()
    assert nodes["0"]["sent"] == {"messages": 4, "scalars": 4, "bytes": 32}
    assert nodes["3"]["received"]["scalars"] == 1 and nodes["3"]["sent"]["scalars"] == 2


def test_cached_patterns_count_the_same_as_fresh_arrays():
    rng = np.random.default_rng(0)
    frozen, fresh = Meter(6, star_adjacency(6)), Meter(6, star_adjacency(6))
    clients = frozen_ids([1, 2, 3, 4, 5])
    for r in range(50):
        p = rng.normal(size=(5, 3))
        frozen.record(r, MessageBatch.gather("x", clients, 0, p))
        fresh.record(r, MessageBatch("x", np.array([1, 2, 3, 4, 5]), np.zeros(5, dtype=np.int64), p))
        if r % 7 == 0:
            frozen.ledger()          # reading in the middle flushes the patterns; counting continues
    assert frozen.ledger().equals(fresh.ledger())
    assert frozen.edge_matrix()[1, 3, 0] == 150


def test_message_off_the_topology_is_a_protocol_error():
    m = Meter(4, star_adjacency(4), node_names=["server", "client-0", "client-1", "client-2"])
    with pytest.raises(ProtocolError, match="client-0.*client-1.*not neighbours"):
        m.record(0, MessageBatch.single("gossip", 1, 2, [1.0]))
    with pytest.raises(ProtocolError, match="0..3"):
        m.record(0, MessageBatch.single("x", 0, 9, [1.0]))
    ro = constant_ids(2, 1)
    with pytest.raises(ProtocolError):                       # also for cached (read-only) arrays
        m.record(0, MessageBatch("x", constant_ids(1, 1), ro, np.ones((1, 1))))


def test_dense_and_sparse_edge_ledgers_agree():
    n = 1500                                                    # above the dense limit
    big = Meter(n)
    rng = np.random.default_rng(3)
    src = rng.integers(0, n, 4000)
    dst = rng.integers(0, n, 4000)
    big.record(0, MessageBatch("g", src, dst, np.ones((4000, 2))))
    big.record(1, MessageBatch("g", src[:10], dst[:10], np.ones((10, 2))))
    edges = big.ledger().edges
    assert edges[:, 2].sum() == 4010 and edges[:, 3].sum() == 8020
    pairs = {}
    for s, d in zip(np.r_[src, src[:10]], np.r_[dst, dst[:10]]):
        pairs[(s, d)] = pairs.get((s, d), 0) + 1
    assert {(int(a), int(b)): int(c) for a, b, c in edges[:, :3]} == pairs


def test_dropped_messages_are_counted_apart():
    m = Meter(3)
    m.record(0, MessageBatch.single("a", 0, 1, [1.0, 2.0]))
    m.record_dropped(0, MessageBatch.single("a", 0, 2, [1.0, 2.0]))
    led = m.ledger()
    assert led.totals["messages"] == 1
    assert led.dropped_by_tag == {"a": [1, 2, 16]}


def test_merge_orders_rows_by_source():
    a = MessageBatch.gather("z", frozen_ids([5, 3]), 0, np.array([[5.0], [3.0]]))
    b = MessageBatch.gather("z", frozen_ids([4]), 0, np.array([[4.0]]))
    merged = merge_batches([a, b])
    assert merged.src.tolist() == [3, 4, 5] and merged.payload.ravel().tolist() == [3.0, 4.0, 5.0]
    bc = MessageBatch.broadcast("s", 0, frozen_ids([1, 2, 3]), [9.0, 8.0])
    assert bc.rows().shape == (3, 2) and bc.n_scalars == 6
