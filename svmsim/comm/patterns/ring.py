"""The ring: position p sends to position p + 1 (mod K) (topology kinds "ring" and "complete" have these links).

Reduce: a chain from root + 1 to the root ((K-1)d scalars, K-1 messages and rounds); broadcast: a chain from the
root (the same counts); all-reduce: reduce-scatter then all-gather over K chunks, the first d mod K one scalar
longer (2(K-1)d scalars in 2K(K-1) messages, 2(K-1) rounds); all-gather: each block travels K - 1 hops
((K-1)Kd scalars in (K-1)K messages, K-1 rounds). Summation: chunk j (all-reduce) or the whole vector (reduce,
j = root + 1) left to right along the ring from position j: ((v[j] + v[j+1]) + v[j+2]) + ... + v[j-1].
"""
from __future__ import annotations

import numpy as np

from . import register
from .base import RingsPattern, fail


@register
class Ring(RingsPattern):
    name = "ring"
    ops = ("reduce", "broadcast", "allreduce", "allgather")
    auto_kinds = ("ring", "complete")

    def stages(self, k):
        return [np.arange(k, dtype=np.int64).reshape(1, k)]

    def check(self, op, k, d, branching):
        if op == "allreduce" and d < k:
            raise fail(f"a ring all-reduce splits d = {d} scalars into K = {k} chunks", "d >= K, or a star or tree")
