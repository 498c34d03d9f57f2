"""The star: the root is the hub, the others its leaves (a tree of height 1; topology kind "star" has its links).

Counts (K participants, d scalars): reduce and broadcast (K-1)d scalars in K-1 messages, 1 round; all-reduce
2(K-1)d scalars in 2(K-1) messages, 2 rounds; all-gather (K-1)d up and (K-1)Kd down, 2 rounds. Summation: the
root's own value, then the leaves by node id.
"""
from __future__ import annotations

from . import register
from .base import TreePattern


@register
class Star(TreePattern):
    name = "star"
    auto_kinds = ("star",)

    def parent_index(self, h, k, branching):
        return 0
