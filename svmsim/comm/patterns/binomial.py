"""The binomial tree over [root] + the others in the given order: the parent of index h is h with its lowest set
bit cleared (index 0 the root), so index h sits at depth popcount(h), the tree's height is the most set bits of an
index below K (log2 K for K a power of two), and every parent-child pair differs in one bit (topology kind
"hypercube" has these links). A parent sends down to its tallest subtree first, so with one send port a broadcast
takes height message times (MPI's binomial reduce and broadcast); `branching` plays no part.

Counts: those of any tree (`TreePattern`), with 2 * height rounds for an all-reduce.
"""
from __future__ import annotations

import numpy as np

from . import register
from .base import TreePattern


@register
class Binomial(TreePattern):
    name = "binomial"
    auto_kinds = ("hypercube",)

    def parent_index(self, h, k, branching):
        return h & (h - 1)

    def order_children(self, children, parent, order, ids):
        k = len(order)
        tall = np.zeros(k, np.int64)       # the tallest subtree first (index h + 2^j: height j unless K cuts it)
        for h in range(k - 1, 0, -1):
            tall[parent[order[h]]] = max(tall[parent[order[h]]], tall[order[h]] + 1)
        index = {p: h for h, p in enumerate(order)}
        return [sorted(c, key=lambda p: (-tall[p], -index[p])) for c in children]
