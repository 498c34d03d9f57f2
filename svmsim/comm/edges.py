"""Directed edges of a topology as a CSR adjacency, and per-edge counters indexed by edge id.

Edge id e of the directed edge (s, d) is the position of d in the sorted neighbour list of s:
``nbr[ptr[s]:ptr[s + 1]]`` holds the neighbours of s in increasing order, so ids run in (src, dst) order and a
lookup is a binary search in one row. Counters are then ``(quantities, n_edges)`` arrays: memory O(edges), for
any number of nodes, and a compiled loop can count in place.
"""
from __future__ import annotations

import numba
import numpy as np

from ..numerics.csr import sorted_position
from ..numerics.prefetch import prefetch

__all__ = ["edge_index", "sorted_position", "edge_id", "next_edge_id", "accumulate_edges", "KeyedCounts"]


def _rows_rise(ptr: np.ndarray, nbr: np.ndarray) -> bool:
    """Whether every CSR row of (ptr, nbr) rises strictly (sorted, without repeats)."""
    rises = np.diff(nbr) > 0
    starts = ptr[1:-1]
    rises[starts[(starts > 0) & (starts < nbr.shape[0])] - 1] = True      # a row's first entry follows another's
    return bool(rises.all())


def edge_index(adjacency, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, nbr) of a topology given as a boolean (n, n) matrix, a sparse matrix (anything with ``tocsr``) or a
    ``(ptr, nbr)`` pair; rows come out sorted and without repeats."""
    n = int(n_nodes)
    if isinstance(adjacency, tuple) and len(adjacency) == 2:
        ptr = np.asarray(adjacency[0], dtype=np.int64)
        nbr = np.asarray(adjacency[1], dtype=np.int64)
        if ptr.shape != (n + 1,) or ptr[0] != 0 or ptr[-1] != nbr.shape[0] or (np.diff(ptr) < 0).any():
            raise ValueError(f"a (ptr, nbr) adjacency needs ptr of length {n + 1} rising from 0 to len(nbr)")
        if not (ptr.flags.writeable or nbr.flags.writeable) and _rows_rise(ptr, nbr) and (
                not nbr.size or (nbr.min() >= 0 and nbr.max() < n)):
            return ptr, nbr                     # read-only, sorted and without repeats already: shared, not copied
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    elif hasattr(adjacency, "tocsr"):
        a = adjacency.tocsr()
        if a.shape != (n, n):
            raise ValueError(f"the adjacency is {a.shape[0]} x {a.shape[1]}, but the meter counts {n} nodes")
        a = a.tocoo()
        keep = a.data != 0
        src, nbr = a.row[keep].astype(np.int64), a.col[keep].astype(np.int64)
    else:
        a = np.asarray(adjacency)
        if a.shape != (n, n):
            raise ValueError(f"the adjacency is {'x'.join(map(str, a.shape))}, but the meter counts {n} nodes")
        src, nbr = (x.astype(np.int64) for x in np.nonzero(a))
    if nbr.size and (nbr.min() < 0 or nbr.max() >= n):
        raise ValueError(f"an adjacency entry names a node outside 0..{n - 1}")
    keys = np.unique(src * n + nbr)
    src, nbr = keys // n, keys % n
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    return ptr, np.ascontiguousarray(nbr)


@numba.njit(cache=True, nogil=True, inline="always")
def edge_id(ptr, nbr, n_nodes, s, d):
    """The id of the directed edge s -> d, or -1 when it is not an edge (or an id is out of range)."""
    if s < 0 or s >= n_nodes or d < 0 or d >= n_nodes:
        return -1
    e = sorted_position(ptr, nbr, s, d)
    if e < ptr[s + 1] and nbr[e] == d:
        return e
    return -1


@numba.njit(cache=True, nogil=True, inline="always")
def next_edge_id(ptr, nbr, n_nodes, s, d, prev_s, prev_e):
    """`edge_id`, first trying the edge after `prev_e` (the previous message's, from `prev_s`): messages of one
    sender usually come in the order of its neighbour list (a broadcast), and then no search is needed."""
    if s == prev_s and prev_e >= 0:
        e = prev_e + 1
        if e < ptr[s + 1] and nbr[e] == d:
            return e
    return edge_id(ptr, nbr, n_nodes, s, d)


#: messages `accumulate_edges` looks ahead: their edge ids are found (their sender's row prefetched twice as far
#: ahead) and their counters prefetched while earlier messages are added; a 10^5-node overlay's counters do not fit
#: the caches, and in-order lookups waited on every one
EDGE_LOOKAHEAD = 8


@numba.njit(cache=True, nogil=True)
def accumulate_edges(counts, src, dst, n_nodes, ptr, nbr, per_message, times):
    """Add `times` copies of messages src[i] -> dst[i], each carrying the quantities `per_message`, to the
    per-edge `counts` (quantities, n_edges); return the index of a message off the topology, or -1 (then nothing
    at or after it was added). Messages are added in order; edge ids are found EDGE_LOOKAHEAD messages ahead."""
    nq = per_message.shape[0]
    m = src.shape[0]
    ahead = np.empty(EDGE_LOOKAHEAD, dtype=np.int64)       # edge ids of messages i .. i + EDGE_LOOKAHEAD - 1
    e = -1
    s = -1
    for i in range(min(EDGE_LOOKAHEAD, m)):
        e = next_edge_id(ptr, nbr, n_nodes, src[i], dst[i], s, e)
        s = src[i]
        ahead[i] = e
    for i in range(m):
        j = i + 2 * EDGE_LOOKAHEAD
        if j < m and 0 <= src[j] < n_nodes:
            prefetch(ptr, src[j])
        here = ahead[i % EDGE_LOOKAHEAD]
        j = i + EDGE_LOOKAHEAD
        if j < m:
            e = next_edge_id(ptr, nbr, n_nodes, src[j], dst[j], s, e)
            s = src[j]
            ahead[i % EDGE_LOOKAHEAD] = e
            if e >= 0:
                for q in range(nq):
                    prefetch(counts[q], e)
        if here < 0:
            return i
        for q in range(nq):
            counts[q, here] += per_message[q] * times
    return -1


class KeyedCounts:
    """Per-key counters without a topology (key = src * n + dst): batches of keys wait in a list and are folded
    into sorted unique keys with summed counts once they add up to `fold_at` rows, so memory follows the distinct
    edges, not the messages."""

    def __init__(self, n_quantities: int, fold_at: int = 1 << 18):
        self.nq = int(n_quantities)
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros((self.nq, 0), dtype=np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_rows = 0
        self._fold_at = int(fold_at)

    def add(self, keys: np.ndarray, per_message: np.ndarray) -> None:
        """Count each of `keys` once with the quantities `per_message` (one column per quantity)."""
        self._pending.append((keys, per_message))
        self._pending_rows += keys.shape[0]
        if self._pending_rows >= self._fold_at:
            self.fold()

    def fold(self) -> None:
        if not self._pending:
            return
        allkeys = np.concatenate([self.keys] + [k for k, _ in self._pending])
        weights = np.concatenate([self.counts] + [np.repeat(w.reshape(-1, 1), k.shape[0], axis=1)
                                                  for k, w in self._pending], axis=1)
        self._pending = []
        self._pending_rows = 0
        keys, inv = np.unique(allkeys, return_inverse=True)
        self.keys = keys
        self.counts = np.vstack([np.bincount(inv, weights[q], minlength=keys.size) for q in range(self.nq)]
                                ).astype(np.int64).reshape(self.nq, keys.size)

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted keys, counts (quantities, keys))."""
        self.fold()
        return self.keys, self.counts
