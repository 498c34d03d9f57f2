"""Logical messages.

A node program writes its outgoing messages as `MessageBatch`es: many logical messages with one tag and one
payload shape, sent from `src[i]` to `dst[i]` with payload row `payload[i]`. A single message is a batch of
one. Batching is a representation, not a transport decision: the meter counts every row as one message.

Sizes follow the papers' convention: every int, float or array entry in a payload is one *scalar*; bytes are
the payload's bytes (8 per float64 or int64 scalar).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["MessageBatch", "Outbox", "Inbox", "merge_batches"]

_EMPTY_I64 = np.empty(0, dtype=np.int64)


class MessageBatch:
    """`m` logical messages sharing a tag; message i goes `src[i] -> dst[i]` carrying `payload[i]`."""

    __slots__ = ("tag", "src", "dst", "payload")

    def __init__(self, tag: str, src: np.ndarray, dst: np.ndarray, payload: np.ndarray):
        self.tag = tag
        self.src = src
        self.dst = dst
        self.payload = payload

    # -- constructors -------------------------------------------------------------------------------------
    @classmethod
    def broadcast(cls, tag: str, src: int, dsts: np.ndarray, values) -> "MessageBatch":
        """One message per destination, all carrying the same values (each copy is counted)."""
        row = np.atleast_1d(np.asarray(values))
        dsts = np.asarray(dsts, dtype=np.int64)
        payload = np.broadcast_to(row, (dsts.shape[0], row.shape[0]))
        return cls(tag, np.full(dsts.shape[0], src, dtype=np.int64), dsts, payload)

    @classmethod
    def gather(cls, tag: str, srcs: np.ndarray, dst: int, rows: np.ndarray) -> "MessageBatch":
        """One message per source to a common destination; `rows[i]` is what `srcs[i]` sends."""
        srcs = np.asarray(srcs, dtype=np.int64)
        rows = np.asarray(rows)
        if rows.ndim == 1:
            rows = rows.reshape(srcs.shape[0], -1)
        return cls(tag, srcs, np.full(srcs.shape[0], dst, dtype=np.int64), rows)

    @classmethod
    def single(cls, tag: str, src: int, dst: int, values) -> "MessageBatch":
        row = np.atleast_1d(np.asarray(values))
        return cls(tag, np.array([src], dtype=np.int64), np.array([dst], dtype=np.int64), row.reshape(1, -1))

    # -- sizes ----------------------------------------------------------------------------------------------
    @property
    def n_messages(self) -> int:
        return self.src.shape[0]

    @property
    def scalars_per_message(self) -> int:
        return self.payload.shape[1] if self.payload.ndim == 2 else 1

    @property
    def n_scalars(self) -> int:
        return self.n_messages * self.scalars_per_message

    @property
    def bytes_per_message(self) -> int:
        return self.scalars_per_message * self.payload.dtype.itemsize

    def select(self, mask: np.ndarray) -> "MessageBatch":
        return MessageBatch(self.tag, self.src[mask], self.dst[mask], self.payload[mask])

    def __reduce__(self):  # broadcast payloads are views: send a compact copy across processes
        return (MessageBatch, (self.tag, self.src, self.dst, np.ascontiguousarray(self.payload)))

    def __repr__(self) -> str:
        return f"MessageBatch(tag={self.tag!r}, messages={self.n_messages}, scalars={self.n_scalars})"


def merge_batches(batches: list[MessageBatch]) -> MessageBatch:
    """Concatenate batches of one tag and order the rows by (src, dst): every engine delivers the same order."""
    if len(batches) == 1:
        return batches[0]
    src = np.concatenate([b.src for b in batches])
    dst = np.concatenate([b.dst for b in batches])
    payload = np.concatenate([np.asarray(b.payload) for b in batches])
    order = np.lexsort((dst, src))
    return MessageBatch(batches[0].tag, src[order], dst[order], payload[order])


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
