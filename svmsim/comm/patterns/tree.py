"""The b-ary tree in heap layout over [root] + the others in the given order: the parent of heap index h is
(h - 1) // b (b = branching), as topology kind "tree" numbers its nodes; reduce up, broadcast down.

Counts: those of any tree (`TreePattern`): (K-1)d scalars per direction in K-1 messages, one round per level.
"""
from __future__ import annotations

from numbers import Integral

from . import register
from .base import TreePattern, fail


@register
class Tree(TreePattern):
    name = "tree"
    auto_kinds = ("tree",)

    def check(self, op, k, d, branching):
        if isinstance(branching, bool) or not isinstance(branching, Integral) or branching < 1:
            raise fail(f"branching = {branching!r}", "an integer branching >= 1")

    def parent_index(self, h, k, branching):
        return (h - 1) // int(branching)
