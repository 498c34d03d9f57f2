"""Logical messages.

A node program writes its outgoing messages as `MessageBatch`es: many logical messages with one tag and one
payload shape, sent from `src[i]` to `dst[i]` with payload row `payload[i]`. A single message is a batch of
one. Batching is a representation, not a transport decision: the meter counts every row as one message.

Sizes follow the papers' convention: every int, float or array entry in a payload is one *scalar*; bytes are
the payload's bytes (8 per float64 or int64 scalar), or, for a batch a codec encoded (`comm.compression`), the
encoding's size (`MessageBatch.wire_bytes`): the payload is then what the receiver decodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["MessageBatch", "Outbox", "Inbox", "merge_batches", "constant_ids", "frozen_ids", "frozen_view", "is_shared_ids"]

_EMPTY_I64 = np.empty(0, dtype=np.int64)
_CONST_CACHE: dict[tuple[int, int], np.ndarray] = {}
_SHARED: dict[int, np.ndarray] = {}   # id -> array, holding the arrays so that their ids stay theirs
_SHARED_LIMIT = 1 << 16


def is_shared_ids(arr: np.ndarray) -> bool:
    """True for id arrays made by `constant_ids` or `frozen_ids`: read-only and reused from round to round, so
    the meter and the router may cache what they computed for them."""
    return _SHARED.get(id(arr), False) is arr


def _share(arr: np.ndarray) -> None:
    if len(_SHARED) >= _SHARED_LIMIT:       # programs that freeze ids every round: start over (caches still work)
        _SHARED.clear()
        _CONST_CACHE.clear()
    _SHARED[id(arr)] = arr


def constant_ids(value: int, n: int) -> np.ndarray:
    """A read-only int64 array of n copies of `value`, shared between calls (cheap and recognisable by the meter
    and the router, which cache per read-only index array)."""
    key = (int(value), int(n))
    arr = _CONST_CACHE.get(key)
    if arr is None:
        if len(_CONST_CACHE) > 4096:
            _CONST_CACHE.clear()
        arr = np.full(n, value, dtype=np.int64)
        arr.flags.writeable = False
        _CONST_CACHE[key] = arr
        _share(arr)
    return arr


def frozen_ids(ids) -> np.ndarray:
    """`ids` as a read-only int64 array (node programs freeze the id arrays they send with, once)."""
    arr = np.array(ids, dtype=np.int64)
    arr.flags.writeable = False
    _share(arr)
    return arr


def frozen_view(a: np.ndarray) -> np.ndarray:
    """A read-only view of `a` (what a program's `peek` shows of its state, the ids the meter counts: no copy)."""
    v = a.view()
    v.flags.writeable = False
    return v


class MessageBatch:
    """`m` logical messages sharing a tag; message i goes `src[i] -> dst[i]` carrying `payload[i]`.

    A broadcast stores its one payload row once (`payload.shape[0] == 1` while `m > 1`): every message carries a
    copy of that row and each copy is counted. Use `row(i)` or `rows()` to read payloads either way.

    `wire_bytes`: the bytes of one message on the wire when a codec encoded the batch (the payload then holds the
    decoded rows, as the receiver reads them); None: the payload's own bytes.
    """

    __slots__ = ("tag", "src", "dst", "payload", "wire_bytes")

    def __init__(self, tag: str, src: np.ndarray, dst: np.ndarray, payload: np.ndarray, wire_bytes: int | None = None):
        self.tag = tag
        self.src = src
        self.dst = dst
        self.payload = payload
        self.wire_bytes = wire_bytes

    # -- constructors -------------------------------------------------------------------------------------
    @classmethod
    def broadcast(cls, tag: str, src: int, dsts: np.ndarray, values) -> "MessageBatch":
        """One message per destination, all carrying the same values (each copy is counted)."""
        row = values.reshape(1, -1) if isinstance(values, np.ndarray) else np.atleast_1d(np.asarray(values)).reshape(1, -1)
        if not (isinstance(dsts, np.ndarray) and dsts.dtype == np.int64):
            dsts = np.asarray(dsts, dtype=np.int64)
        return cls(tag, constant_ids(src, dsts.shape[0]), dsts, row)

    @classmethod
    def gather(cls, tag: str, srcs: np.ndarray, dst: int, rows: np.ndarray) -> "MessageBatch":
        """One message per source to a common destination; `rows[i]` is what `srcs[i]` sends."""
        if not (isinstance(srcs, np.ndarray) and srcs.dtype == np.int64):
            srcs = np.asarray(srcs, dtype=np.int64)
        rows = np.asarray(rows)
        if rows.ndim == 1:
            rows = rows.reshape(srcs.shape[0], -1)
        return cls(tag, srcs, constant_ids(dst, srcs.shape[0]), rows)

    @classmethod
    def single(cls, tag: str, src: int, dst: int, values) -> "MessageBatch":
        row = np.atleast_1d(np.asarray(values))
        return cls(tag, np.array([src], dtype=np.int64), np.array([dst], dtype=np.int64), row.reshape(1, -1))

    # -- sizes ----------------------------------------------------------------------------------------------
    @property
    def n_messages(self) -> int:
        return self.src.shape[0]

    @property
    def is_broadcast(self) -> bool:
        return self.payload.shape[0] == 1 and self.src.shape[0] > 1

    def row(self, i: int) -> np.ndarray:
        return self.payload[0 if self.payload.shape[0] == 1 else i]

    def rows(self) -> np.ndarray:
        """The payload with one row per message (a broadcast's row repeated)."""
        if self.payload.shape[0] == self.src.shape[0]:
            return self.payload
        return np.repeat(self.payload, self.src.shape[0], axis=0)

    @property
    def scalars_per_message(self) -> int:
        return self.payload.shape[1] if self.payload.ndim == 2 else 1

    @property
    def n_scalars(self) -> int:
        return self.n_messages * self.scalars_per_message

    @property
    def bytes_per_message(self) -> int:
        """The bytes of one message: its encoding's (`wire_bytes`), else the payload row's."""
        if self.wire_bytes is not None:
            return self.wire_bytes
        return self.scalars_per_message * self.payload.dtype.itemsize

    def select(self, mask: np.ndarray) -> "MessageBatch":
        payload = self.payload if self.payload.shape[0] == 1 and self.src.shape[0] != 1 else self.payload[mask]
        return MessageBatch(self.tag, self.src[mask], self.dst[mask], payload, self.wire_bytes)

    def __reduce__(self):
        if self.wire_bytes is None:
            return (MessageBatch, (self.tag, self.src, self.dst, self.payload))
        return (MessageBatch, (self.tag, self.src, self.dst, self.payload, self.wire_bytes))

    def __repr__(self) -> str:
        return f"MessageBatch(tag={self.tag!r}, messages={self.n_messages}, scalars={self.n_scalars})"


def merge_batches(batches: list[MessageBatch]) -> MessageBatch:
    """Concatenate batches of one tag and order the rows by (src, dst): every engine delivers the same order."""
    if len(batches) == 1:
        return batches[0]
    src = np.concatenate([b.src for b in batches])
    dst = np.concatenate([b.dst for b in batches])
    payload = np.concatenate([b.rows() for b in batches])
    order = np.lexsort((dst, src))
    wire = batches[0].wire_bytes
    if any(b.wire_bytes != wire for b in batches):
        wire = None                  # (read by no one: batches are merged for delivery, after the meter)
    return MessageBatch(batches[0].tag, src[order], dst[order], payload[order], wire)


@dataclass
class Outbox:
    """What one group of nodes emits in one step: messages, plus signals to the scheduler (not messages).

    Signals tell the scheduler about algorithm progress, e.g. ``{"iteration": 12}`` when an iteration ends or
    ``{"done": True}``. They model the simulation's observer, not the network, and are never metered.
    """

    batches: list[MessageBatch] = field(default_factory=list)
    signals: dict | None = None

    def send(self, batch: MessageBatch) -> None:
        self.batches.append(batch)


class Inbox(dict):
    """Messages delivered to one group in one step: ``tag -> MessageBatch`` with rows ordered by (src, dst)."""

    def get_batch(self, tag: str) -> MessageBatch | None:
        return self.get(tag)
