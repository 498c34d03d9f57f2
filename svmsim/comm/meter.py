"""The meter: the one choke point every logical message crosses, exactly once, and the one writer of the ledger.

What is counted is keyed by quantity, as the registry names them (`quantities`). Every message carries the
message quantities (`MESSAGE_QUANTITIES`: messages, scalars, bytes; bytes are the batch's bytes per message: the
payload's dtype, or a codec's encoded size, `MessageBatch.wire_bytes`), kept per
tag, per directed edge (sender -> receiver) and per round; dropped messages (fault models) are kept apart and
never delivered. Node quantities (`record_node`, e.g. ``"kernel_evaluations"``) are work a node did, not messages,
kept per node and per round. The meter also keeps the round at which each algorithm iteration ended (so that cost
up to an iterate can be read off).

Recording:
  ``record(round_, batch)``            a batch of delivered messages;
  ``record_dropped(round_, batch)``    a batch of messages sent but lost;
  ``record_node(round_, q, ids, amounts)``  quantity q done by nodes `ids` in that round;
  ``mark_iteration(iteration, round_)``  an iteration ended in that round.
A compiled loop meters in place instead: ``compiled_buffers(n_tags)`` hands it the meter's own per-edge counters
(with the topology's CSR adjacency to find an edge's id) and fresh per-tag, per-round and per-iteration buffers;
``absorb(buffers, tags, n_rounds, n_iterations)`` takes back what it filled. ``edge_counts()`` lends the per-edge
counters to readers of derived quantities that are linear in them (`quantities.edge_weighted_total`).

Per-edge counters are indexed by the topology's directed edges (`edges.edge_index`): memory O(edges) for any
number of nodes. A meter without a topology (``adjacency=None``) accumulates per (src, dst) key instead
(`edges.KeyedCounts`); it cannot lend buffers to a compiled loop.

Batches whose src and dst arrays are the shared id arrays node programs send with (`message.constant_ids`,
`frozen_ids`) are validated once and then only counted as a pattern; their edges are added in bulk when the
ledger is read. Either way every message is counted exactly once.
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..core.names import default_names
from ..errors import ProtocolError
from .edges import KeyedCounts, accumulate_edges, edge_index
from .ledger import Ledger, frozen_names
from .message import MessageBatch, frozen_view, is_shared_ids
from .quantities import MESSAGE_QUANTITIES, by_kind

__all__ = ["Meter", "Ledger", "CompiledBuffers", "MESSAGE_QUANTITIES"]

_DENSE_LIMIT = 1024  # `edge_matrix` (a dense N x N copy) is offered up to this many nodes, and a compiled loop
# gets a dense (src, dst) -> edge id table (int32, 4 MiB at the limit) to skip the binary search
_Q = len(MESSAGE_QUANTITIES)
_PER_MESSAGE = tuple(q.per_message for q in by_kind("message"))   # (scalars, bytes) of a message -> its amounts
ROUND_BUFFER = 1 << 14
ITERATION_BUFFER = 1 << 12


class CompiledBuffers(NamedTuple):
    """What a compiled loop meters into. `edges` is the meter's own (quantities, n_edges) counter array (added to
    in place); the edge id of s -> d is the position of d in ``nbr[ptr[s]:ptr[s + 1]]`` (`edges.edge_id`), or,
    when `lookup` is not empty (up to `_DENSE_LIMIT` nodes), ``lookup[s * n_nodes + d]`` (-1: not an edge). The
    loop fills rows of `by_tag` (tag, quantity), `rounds` (round, quantities...) and `iterations` (iteration,
    round) and hands them back with `Meter.absorb`."""

    edges: np.ndarray
    ptr: np.ndarray
    nbr: np.ndarray
    lookup: np.ndarray
    by_tag: np.ndarray
    rounds: np.ndarray
    iterations: np.ndarray


class Meter:
    """Counts every logical message once.

    Parameters
    ----------
    n_nodes: number of logical nodes (ids 0..n_nodes-1).
    adjacency: optional topology: a boolean (n_nodes, n_nodes) matrix, a sparse matrix or a CSR ``(ptr, nbr)``
        pair; when given, a message between nodes that are not neighbours raises `ProtocolError` (node programs
        may only talk along the topology's edges).
    keep_log: also keep the full message log (round, tag, src, dst, scalars) - for tests and small runs.
    """

    def __init__(self, n_nodes: int, adjacency=None, node_names: Sequence[str] | None = None, keep_log: bool = False):
        self.n_nodes = int(n_nodes)
        self.node_names = node_names or default_names(self.n_nodes)
        self._check = adjacency is not None
        if self._check:
            self._ptr, self._nbr = edge_index(adjacency, self.n_nodes)
            self._edges = np.zeros((_Q, self._nbr.shape[0]), dtype=np.int64)
            # the lost messages' counters: made at the first loss (a run without faults loses none: 96 bytes an edge)
            self._dropped_edges: np.ndarray | None = None
            self._lookup: np.ndarray | None = None      # made for the first compiled loop
        else:
            self._keyed = KeyedCounts(_Q)
            self._dropped_keyed = KeyedCounts(_Q)
        self._totals = [0] * _Q
        self.by_tag: dict[str, list[int]] = {}
        self.dropped_by_tag: dict[str, list[int]] = {}
        # pragma: no mutate start (equivalent: only values >= 0 are stored; 'Q' holds the same bytes)
        self._round_log = array("q")   # flat (round, quantities...) per round that carried messages
        # pragma: no mutate end
        self._patterns: dict[tuple, list] = {}
        self._per_message: dict[tuple, np.ndarray] = {}   # (scalars, bytes) -> the quantities of one message
        # pragma: no mutate start (equivalent: a sentinel, flushing a round that carried nothing does nothing)
        self._cur_round = -1
        # pragma: no mutate end
        self._cur = [0] * _Q
        self.last_round = -1
        # pragma: no mutate start (equivalent: iterations and rounds are >= 0, 'Q' holds them in the same bytes)
        self._iteration_log = array("q")   # flat (iteration, round at which it ended): no Python object per
        # pragma: no mutate end
        # iteration (million-iteration runs would otherwise spend their time in the garbage collector)
        self._node_totals: dict[str, np.ndarray] = {}
        self._node_rounds: dict[str, tuple[array, array]] = {}   # quantity -> (rounds, amounts), one per round
        self.log: list[tuple] | None = [] if keep_log else None

    # -- totals ----------------------------------------------------------------------------------------------
    @property
    def messages(self) -> int:
        return self._totals[0]

    @property
    def scalars(self) -> int:
        return self._totals[1]

    @property
    def bytes(self) -> int:
        return self._totals[2]

    def totals(self) -> dict:
        return dict(zip(MESSAGE_QUANTITIES, self._totals))

    # -- recording ------------------------------------------------------------------------------------------
    def record(self, round_: int, batch: MessageBatch) -> None:
        """Count one batch sent in round `round_` (or at virtual-time bin `round_`)."""
        src = batch.src
        dst = batch.dst
        m = src.shape[0]
        if m == 0:
            return
        payload = batch.payload
        spm = payload.shape[1] if payload.ndim == 2 else 1
        bpm = spm * payload.dtype.itemsize if batch.wire_bytes is None else batch.wire_bytes
        if is_shared_ids(src) and is_shared_ids(dst):
            key = (id(src), id(dst), spm, bpm)
            pattern = self._patterns.get(key)
            if pattern is None:      # (the pattern holds its arrays, so no other array can have their ids)
                self._add_edges(batch, spm, bpm, times=0)     # validate once, count nothing
                pattern = self._patterns[key] = [src, dst, 0, spm, bpm]
            pattern[2] += 1
        else:
            self._add_edges(batch, spm, bpm)
        sc = m * spm
        by = m * bpm
        tot = self.by_tag.get(batch.tag)
        if tot is None:
            tot = self.by_tag[batch.tag] = [0] * _Q
        if round_ != self._cur_round:
            self._flush_round()
            self._cur_round = round_
        # the message quantities, in MESSAGE_QUANTITIES order (written out: this is the Python loop's hot path)
        cur = self._cur
        totals = self._totals
        tot[0] += m
        tot[1] += sc
        tot[2] += by
        cur[0] += m
        cur[1] += sc
        cur[2] += by
        totals[0] += m
        totals[1] += sc
        totals[2] += by
        if self.log is not None:
            self.log.append((round_, batch.tag, batch.src.copy(), batch.dst.copy(), spm))

    def record_dropped(self, round_: int, batch: MessageBatch) -> None:
        """Count messages that were sent but lost (fault model); they are not part of the delivered totals."""
        m = batch.src.shape[0]
        if m == 0:
            return
        spm, bpm = batch.scalars_per_message, batch.bytes_per_message
        self._add_edges(batch, spm, bpm, dropped=True)
        tot = self.dropped_by_tag.setdefault(batch.tag, [0] * _Q)
        for q, per_message in enumerate(_PER_MESSAGE):
            tot[q] += m * per_message(spm, bpm)

    def record_node(self, round_: int, quantity: str, node_ids, amounts) -> None:
        """Count `amounts` (one per node id, or one for all) of a node quantity, e.g. ``"kernel_evaluations"``, done by
        `node_ids` in round `round_`. Integer amounts keep integer totals; float amounts (e.g. modelled time)
        float ones."""
        # pragma: no mutate start (equivalent: node ids are integers, and any integer dtype indexes alike)
        ids = np.atleast_1d(np.asarray(node_ids, dtype=np.int64))
        # pragma: no mutate end
        amt = np.broadcast_to(np.asarray(amounts), ids.shape)
        if ids.shape[0] == 0:
            return
        if ids.min() < 0 or ids.max() >= self.n_nodes:
            bad = int(ids[(ids < 0) | (ids >= self.n_nodes)][0])
            raise ProtocolError(f"node quantity {quantity!r} recorded for node {bad}, but node ids must lie in "
                                f"0..{self.n_nodes - 1}")
        is_float = amt.dtype.kind == "f"
        if amt.dtype.kind not in "iubf":  # pragma: no mutate (equivalent: one-letter kinds)
            raise TypeError(f"node quantity {quantity!r}: amounts must be integers or floats, not {amt.dtype}")
        acc = self._node_totals.get(quantity)
        if acc is None:
            acc = self._node_totals[quantity] = np.zeros(self.n_nodes, np.float64 if is_float else np.int64)
            # pragma: no mutate start (equivalent: never negative; 'Q' holds the same bytes as 'q')
            self._node_rounds[quantity] = (array("q"), array("d" if is_float else "q"))
            # pragma: no mutate end
        elif is_float and acc.dtype.kind != "f":
            raise TypeError(f"node quantity {quantity!r} was recorded in integers; got {amt.dtype} amounts")
        # pragma: no mutate start (equivalent: copy= changes no value add.at reads)
        np.add.at(acc, ids, amt.astype(acc.dtype, copy=False))
        # pragma: no mutate end
        total = amt.sum()
        rounds, amounts_log = self._node_rounds[quantity]
        if len(rounds) and rounds[-1] == round_:
            amounts_log[-1] += total.item()
        else:
            rounds.append(int(round_))
            amounts_log.append(total.item())

    def node_quantity_totals(self) -> dict:
        """quantity -> the total over all nodes so far (node quantities: e.g. kernel evaluations)."""
        return {q: v.sum().item() for q, v in sorted(self._node_totals.items())}

    def mark_iteration(self, iteration: int, round_: int) -> None:
        self._iteration_log.append(int(iteration))
        self._iteration_log.append(int(round_))

    def _flush_round(self) -> None:
        cur = self._cur
        if cur[0] == 0:          # nothing recorded since the last flush
            return
        r = self._cur_round
        self._round_log.append(r)
        self._round_log.extend(cur)
        self.last_round = max(self.last_round, r)
        self._cur = [0] * _Q

    def _flush_patterns(self) -> None:
        for pattern in self._patterns.values():
            src, dst, times, spm, bpm = pattern
            if times:
                # pragma: no mutate start (equivalent: the ids were checked when the pattern was made, so no error
                # names this batch, and its payload is not read)
                ids = MessageBatch("", src, dst, np.empty((0, 0)))
                # pragma: no mutate end
                self._add_edges(ids, spm, bpm, times=times)
                pattern[2] = 0

    def _add_edges(self, batch: MessageBatch, spm: int, bpm: int, times: int = 1, dropped: bool = False) -> None:
        """Add `times` x the batch's messages (of `spm` scalars, `bpm` bytes each) to the per-edge counters (the
        dropped ones with `dropped`); times = 0 only checks the edges. A message off the topology (or off the
        node range) raises `ProtocolError` and leaves the counters as they were."""
        src = np.asarray(batch.src, dtype=np.int64)        # (keyed: src * n + dst must not overflow int32)
        # pragma: no mutate start (equivalent: with src int64, src * n + dst is int64, and the compiled search
        # reads any integer type)
        dst = np.asarray(batch.dst, dtype=np.int64)
        # pragma: no mutate end
        # pragma: no mutate start (equivalent: a cache, and NumPy's default integer is int64)
        per_message = self._per_message.get((spm, bpm))
        if per_message is None:
            per_message = self._per_message[(spm, bpm)] = np.array([f(spm, bpm) for f in _PER_MESSAGE],
                                                                   dtype=np.int64)
        # pragma: no mutate end
        n = self.n_nodes
        if self._check:
            if dropped and self._dropped_edges is None:
                # pragma: no mutate start (equivalent: read via edges_table's int64 cast; exact below 2**53)
                self._dropped_edges = np.zeros((_Q, self._nbr.shape[0]), dtype=np.int64)
                # pragma: no mutate end
            target = self._dropped_edges if dropped else self._edges
            # read-only views whichever way the ids came (a program's frozen ids, or arrays made above): one
            # compilation of the counting loop, not one per writeability
            src, dst = frozen_view(src), frozen_view(dst)
            bad = accumulate_edges(target, src, dst, n, self._ptr, self._nbr, per_message, times)
            if bad >= 0:     # take back what was added before the bad message: the ledger stays exact
                accumulate_edges(target, src[:bad], dst[:bad], n, self._ptr, self._nbr, -per_message, times)
                self._raise_bad_edge(batch, bad)
            return
        if src.min() < 0 or src.max() >= n or dst.min() < 0 or dst.max() >= n:
            ok = (src >= 0) & (src < n) & (dst >= 0) & (dst < n)
            self._raise_bad_edge(batch, int(np.flatnonzero(~ok)[0]))
        if times:
            (self._dropped_keyed if dropped else self._keyed).add(src * n + dst, per_message * times)

    def _raise_bad_edge(self, batch: MessageBatch, i: int) -> None:
        self.raise_bad_edge(batch.tag, int(batch.src[i]), int(batch.dst[i]))

    def raise_bad_edge(self, tag: str, s: int, d: int) -> None:
        if not (0 <= s < self.n_nodes and 0 <= d < self.n_nodes):
            raise ProtocolError(f"message with tag {tag!r} goes from node {s} to node {d}, but node ids "
                                f"must lie in 0..{self.n_nodes - 1}")
        raise ProtocolError(f"message with tag {tag!r} goes from node {s} ({self.node_names[s]}) to node "
                            f"{d} ({self.node_names[d]}), which are not neighbours in the topology; node programs "
                            f"may only send along edges")

    # -- a compiled loop's buffers ------------------------------------------------------------------------------
    def compiled_view(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(per-edge counters (quantities, n_edges), ptr, nbr) for a compiled loop that meters in place, or None
        when it cannot (no topology, or a message log is kept: then the loop must not run)."""
        if not self._check or self.log is not None:
            return None
        return self._edges, self._ptr, self._nbr

    def edge_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(per-edge counters (message quantities, n_edges), ptr, nbr), brought up to date, for reading (a derived
        quantity linear in them: `quantities.edge_weighted_total`); None without a topology."""
        if not self._check:
            return None
        self.sync()
        return self._edges, self._ptr, self._nbr

    def compiled_buffers(self, n_tags: int, rounds: int = ROUND_BUFFER,
                         iterations: int = ITERATION_BUFFER) -> CompiledBuffers | None:
        """The buffers a compiled loop meters into (see `CompiledBuffers`), or None as for `compiled_view`.
        Hand them back with `absorb`."""
        view = self.compiled_view()
        if view is None:
            return None
        self.sync()
        if self._lookup is None:
            n = self.n_nodes
            self._lookup = np.full(n * n if n <= _DENSE_LIMIT else 0, -1, np.int32)
            if n <= _DENSE_LIMIT:
                # pragma: no mutate start (equivalent: arange's default is int64, and the ids are stored into int32)
                src = np.repeat(np.arange(n, dtype=np.int64), np.diff(self._ptr))
                self._lookup[src * n + self._nbr] = np.arange(self._nbr.shape[0], dtype=np.int32)
                # pragma: no mutate end
        return CompiledBuffers(view[0], view[1], view[2], self._lookup, np.zeros((n_tags, _Q), np.int64),
                               np.zeros((rounds, 1 + _Q), np.int64), np.zeros((iterations, 2), np.int64))

    def absorb(self, buffers: CompiledBuffers, tags: tuple, n_rounds: int, n_iterations: int) -> None:
        """Add what a compiled loop metered into `buffers` (its edges went straight into the meter's counters):
        `buffers.by_tag` (a row per tag of `tags`), the first `n_rounds` rows of `buffers.rounds` and the first
        `n_iterations` of `buffers.iterations`."""
        self._flush_round()
        by_tag = buffers.by_tag
        for t, row in zip(tags, by_tag):
            if row[0]:
                tot = self.by_tag.get(t)
                if tot is None:
                    tot = self.by_tag[t] = [0] * _Q
                for q in range(_Q):
                    tot[q] += int(row[q])
        sums = by_tag.sum(axis=0)
        for q in range(_Q):
            self._totals[q] += int(sums[q])
        rounds = buffers.rounds[:n_rounds]
        # pragma: no mutate start (equivalent: compiled_buffers makes both logs int64; the cast only guards that)
        if rounds.shape[0]:
            self._round_log.frombytes(np.ascontiguousarray(rounds, dtype=np.int64).tobytes())
            self.last_round = max(self.last_round, int(rounds[-1, 0]))
        if n_iterations:
            self._iteration_log.frombytes(
                np.ascontiguousarray(buffers.iterations[:n_iterations], dtype=np.int64).tobytes())
        # pragma: no mutate end

    # -- reading ----------------------------------------------------------------------------------------------
    @property
    def iteration_rounds(self) -> np.ndarray:
        """Rows (iteration, round at which it ended), in the order the iterations ended."""
        return np.frombuffer(self._iteration_log, dtype=np.int64).reshape(-1, 2).copy()

    def rounds_table(self) -> np.ndarray:
        """Rows (round, messages, scalars, bytes), one per round that carried messages, in round order."""
        self._flush_round()
        width = 1 + _Q
        return _sum_by_round(np.frombuffer(self._round_log, dtype=np.int64).reshape(len(self._round_log) // width,
                                                                                   width))

    def node_tables(self) -> tuple[dict, dict]:
        """(quantity -> per-node amounts, quantity -> rows (round, amount) in round order)."""
        totals = {q: v.copy() for q, v in sorted(self._node_totals.items())}
        rounds = {}
        for q in totals:
            r, a = self._node_rounds[q]
            dt = np.float64 if a.typecode == "d" else np.int64
            rounds[q] = _sum_by_round(np.column_stack([np.frombuffer(r, np.int64).astype(dt), np.frombuffer(a, dt)]))
        return totals, rounds

    def message_rows(self) -> list[tuple]:
        """The kept log as one row per logical message, (round, tag, src, dst, scalars), sorted: comparable
        across engines whatever the grouping of nodes into batches. Needs ``keep_log=True``."""
        if self.log is None:
            raise ValueError("the meter was created without keep_log=True")
        rows = [(r, tag, int(s), int(d), spm) for r, tag, src, dst, spm in self.log for s, d in zip(src, dst)]
        return sorted(rows)

    def scalars_up_to_round(self, round_: int) -> int:
        t = self.rounds_table()
        return int(t[t[:, 0] <= round_, 2].sum())

    def sync(self) -> None:
        """Bring the per-round and per-edge counters up to date (done by every reader)."""
        self._flush_round()
        self._flush_patterns()

    def edges_table(self, dropped: bool = False) -> np.ndarray:
        """Rows (src, dst, messages, scalars, bytes) for every edge that carried something, in (src, dst) order."""
        self.sync()
        n = self.n_nodes
        if not self._check:
            keys, counts = (self._dropped_keyed if dropped else self._keyed).table()
            src, dst = np.divmod(keys, n)
            return np.column_stack([src, dst, counts.T]).astype(np.int64)
        # the edges that carried something, by id in the CSR rows, filled in column by column: the table and one
        # column beside it (160 + 32 bytes an edge at most, not five whole-table temporaries)
        e = self._dropped_edges if dropped else self._edges
        if e is None:                                    # nothing was lost
            return np.empty((0, 2 + _Q), dtype=np.int64)
        ids = np.flatnonzero(e[0])
        table = np.empty((ids.shape[0], 2 + _Q), dtype=np.int64)
        table[:, 0] = np.searchsorted(self._ptr, ids, side="right") - 1      # the row holding each edge id
        table[:, 1] = self._nbr[ids]
        for q in range(_Q):
            table[:, 2 + q] = e[q, ids]
        return table

    def edge_matrix(self, dropped: bool = False) -> np.ndarray:
        """(3, N, N) array of messages, scalars, bytes per directed edge (up to `_DENSE_LIMIT` nodes)."""
        n = self.n_nodes
        if n > _DENSE_LIMIT:
            raise ValueError("edge_matrix is only available for up to %d nodes; use ledger().edges" % _DENSE_LIMIT)
        t = self.edges_table(dropped)
        out = np.zeros((_Q, n, n), dtype=np.int64)
        out[:, t[:, 0], t[:, 1]] = t[:, 2:].T
        return out

    def ledger(self) -> Ledger:
        self.sync()
        node_totals, node_rounds = self.node_tables()
        return Ledger(totals=self.totals(), by_tag={k: list(v) for k, v in sorted(self.by_tag.items())},
                      dropped_by_tag={k: list(v) for k, v in sorted(self.dropped_by_tag.items())},
                      edges=self.edges_table(), dropped_edges=self.edges_table(dropped=True),
                      rounds=self.rounds_table(),
                      iteration_rounds=self.iteration_rounds, node_names=frozen_names(self.node_names),
                      node_totals=node_totals, node_rounds=node_rounds)


def _sum_by_round(rows: np.ndarray) -> np.ndarray:
    """`rows` (round, amounts...) as one row per round, in round order, amounts summed in the order recorded (a
    round recorded in pieces: a read between them, or rounds out of order). Integer sums stay exact; float sums
    are those of adding the pieces one by one."""
    rounds, piece_of = np.unique(rows[:, 0], return_inverse=True)
    sums = np.zeros((rounds.shape[0], rows.shape[1] - 1), dtype=rows.dtype)
    np.add.at(sums, piece_of, rows[:, 1:])
    return np.column_stack([rounds, sums])
