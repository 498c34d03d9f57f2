"""What a collective pattern is: how it lays out K participants, which operations it runs, its closed-form counts
and the result in its documented order.

A pattern is one of two shapes, and the one executor (`comm.collectives`: `Plan.arrays` and the numba steps) reads
only the tables a shape supplies, never a pattern's name:

* `TreePattern` ("tree" shape): a parent per position (-1 at the root) and each position's children in the order it
  sends down to them; reduce goes up the tree, broadcast down it; all-gather sends a subtree's blocks up in preorder
  and all K blocks down.
* `RingsPattern` ("rings" shape): one or more stages, each a set of disjoint rings of the same length L that cover
  the K positions; an all-reduce runs a ring all-reduce (reduce-scatter then all-gather over L chunks) in each ring
  of a stage, every stage on the previous one's result. Reduce, broadcast and all-gather take the single ring of a
  one-stage pattern whose ring is the positions in order.

Positions index the plan's node ids (0..K-1); the root is a position. The counts and the result take the
`comm.collectives.Plan` the pattern laid out (its op, K, d, root, combine codes and layout tables). A pattern
subclass sets `name` and is registered by `comm.patterns.register` (the package imports every module in its
folder, so a pattern is one file).
"""
from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import numpy as np

from ...errors import ProtocolError

__all__ = ["Layout", "Pattern", "RingsPattern", "TreePattern", "chunk_bounds", "combine_np", "fail"]

#: the per-column combining codes of `comm.collectives` (SUM, MIN, MAX)
_SUM, _MIN, _MAX = range(3)


def fail(what: str, allowed: str) -> ProtocolError:
    """The error of a collective that cannot be laid out: what is wrong, and what is allowed."""
    return ProtocolError(f"collective: {what}; allowed: {allowed}")


def combine_np(ops: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a (+ | min | max) b per column, as the numba steps combine them (a: the receiver's side)."""
    return np.where(ops == _MIN, np.minimum(a, b), np.where(ops == _MAX, np.maximum(a, b), a + b))


def chunk_bounds(d: int, n: int) -> np.ndarray:
    """The n + 1 bounds of d scalars split into n chunks, the first d mod n chunks one scalar longer."""
    base, rem = divmod(d, n)
    return np.concatenate([[0], np.cumsum([base + (1 if c < rem else 0) for c in range(n)])]).astype(np.int64)


class Layout(NamedTuple):
    """Where K participants stand in a pattern (positions 0..K-1)."""

    parent: np.ndarray     # (K,) tree shape: parent position, -1 at the root (rings: all -1)
    children: tuple        # per position, the children in the order it sends down to them (rings: empty)
    stages: tuple          # rings shape: per stage an (rings, L) array of positions in ring order, L >= 2 (trees: ())


class Pattern:
    """One collective pattern. Subclasses set `name` (the scenario's spelling), `shape` (by their base class),
    `ops` (the operations it lays out) and `auto_kinds` (topology kinds whose links it uses, for ``allreduce =
    "auto"``), and implement `layout` and the closed-form counts."""

    name: ClassVar[str] = ""
    shape: ClassVar[str] = ""
    ops: ClassVar[tuple[str, ...]] = ("reduce", "broadcast", "allreduce", "allgather")
    auto_kinds: ClassVar[tuple[str, ...]] = ()

    def check(self, op: str, k: int, d: int, branching: Any) -> None:
        """Raise `fail(...)` for an operation, size or branching the pattern cannot lay out."""

    def min_width(self, k: int) -> int:
        """The fewest scalars an all-reduce over k participants needs (a ring splits them into chunks)."""
        return 1

    def fits(self, kind: str, topology_params: dict, G) -> bool:
        """Whether ``allreduce = "auto"`` picks this pattern on a topology of this kind (its links exist)."""
        return kind in self.auto_kinds

    def layout(self, k: int, root: int, ids: np.ndarray, branching: int) -> Layout:
        raise NotImplementedError

    # closed-form counts of a plan laid out by this pattern --------------------------------------------------------
    def messages(self, p: Any) -> int:
        raise NotImplementedError

    def scalars(self, p: Any) -> int:
        raise NotImplementedError

    def rounds(self, p: Any) -> int:
        """Rounds that carry messages (from the round the collective starts)."""
        raise NotImplementedError

    def phase_widths(self, p: Any) -> dict[str, list[int]]:
        """The message widths of each phase ("up": toward the root / along the ring; "down": back out)."""
        raise NotImplementedError

    def total(self, p: Any, v: np.ndarray) -> np.ndarray:
        """The combined vector of a reduce or all-reduce of the rows `v` (by position), in the documented order."""
        raise NotImplementedError


class TreePattern(Pattern):
    """A tree over [root] + the other positions in the given order ("heap index" h: index 0 the root). Subclasses
    give `parent_index(h, k, branching)`; children are sent to by ascending node id unless `order_children` says
    otherwise. Summation order: a node's partial sum is its own value, then its children's partial sums added one
    at a time in the order they arrive (by the child's subtree height, then by node id)."""

    shape = "tree"

    def parent_index(self, h: int, k: int, branching: int) -> int:
        raise NotImplementedError

    def order_children(self, children: list[list[int]], parent: np.ndarray, order: list[int],
                       ids: np.ndarray) -> list[list[int]]:
        return [sorted(c, key=lambda p: ids[p]) for c in children]

    def layout(self, k, root, ids, branching):
        parent = np.full(k, -1, np.int64)
        children: list[list[int]] = [[] for _ in range(k)]
        order = [root] + [p for p in range(k) if p != root]        # heap index h -> position
        for h in range(1, k):
            parent[order[h]] = order[self.parent_index(h, k, branching)]
        for p in range(k):
            if parent[p] >= 0:
                children[parent[p]].append(p)
        children = self.order_children(children, parent, order, ids)
        return Layout(parent, tuple(tuple(c) for c in children), ())

    def messages(self, p):
        return (2 if p.op in ("allreduce", "allgather") else 1) * (p.k - 1)

    def scalars(self, p):
        k, d = p.k, p.d
        if p.op == "allgather":        # up: a subtree's blocks; down: all K blocks
            return d * (int(p.subtree_sizes().sum()) - k) + (k - 1) * k * d
        return (2 if p.op == "allreduce" else 1) * (k - 1) * d

    def rounds(self, p):
        return (2 if p.op in ("allreduce", "allgather") else 1) * p.height()

    def phase_widths(self, p):
        k, d = p.k, p.d
        if k == 1:
            return {}
        up = sorted({int(s) * d for s in p.subtree_sizes()[np.arange(k) != p.root]}, reverse=True)
        return {"reduce": {"up": [d]}, "broadcast": {"down": [d]}, "allreduce": {"up": [d], "down": [d]},
                "allgather": {"up": up, "down": [k * d]}}[p.op]

    def total(self, p, v):
        h = p.heights()

        def part(q):
            acc = v[q].copy()
            for c in sorted(p.children[q], key=lambda c: (h[c], p.nodes[c])):
                acc = combine_np(p.combine, acc, part(c))
            return acc

        return part(p.root)


class RingsPattern(Pattern):
    """Stages of disjoint rings (subclasses give `stages(k)`: per stage an (rings, L) array of positions in ring
    order). All-reduce only, unless the pattern is one ring over the positions in order (then also reduce, broadcast
    and all-gather: a chain from root + 1 to the root, a chain from the root, each block K - 1 hops).

    Summation order of an all-reduce: in each stage, in each ring of length L, chunk j (of L; the first d mod L one
    scalar longer) is summed left to right along the ring from ring index j: ((u[j] + u[j+1]) + u[j+2]) + ... +
    u[j-1], where u is what the ring's members hold when the stage starts (their inputs in the first stage, the
    previous stage's results after it); every member of the ring then holds the ring's combined vector."""

    shape = "rings"
    ops = ("allreduce",)

    def stages(self, k: int) -> list[np.ndarray]:
        raise NotImplementedError

    def layout(self, k, root, ids, branching):
        stages = tuple(np.asarray(s, np.int64) for s in self.stages(k) if np.asarray(s).shape[1] >= 2)
        return Layout(np.full(k, -1, np.int64), tuple(() for _ in range(k)), stages)

    def min_width(self, k):
        return max([int(np.asarray(s).shape[1]) for s in self.stages(k)] + [1]) if k > 1 else 1

    def check(self, op, k, d, branching):
        need = self.min_width(k)
        if op == "allreduce" and d < need:
            raise fail(f"a {self.name} all-reduce splits d = {d} scalars into chunks of rings of up to {need} "
                       f"participants", f"d >= {need}, or a star or tree")

    def messages(self, p):
        k = p.k
        if p.op == "allreduce":
            return sum(2 * (s.shape[1] - 1) * s.shape[1] * s.shape[0] for s in p.stages)
        return (k - 1) * k if p.op == "allgather" else k - 1

    def scalars(self, p):
        k, d = p.k, p.d
        if p.op == "allreduce":
            return sum(2 * (s.shape[1] - 1) * d * s.shape[0] for s in p.stages)
        return (k - 1) * k * d if p.op == "allgather" else (k - 1) * d

    def rounds(self, p):
        if p.op == "allreduce":
            return sum(2 * (s.shape[1] - 1) for s in p.stages)
        return p.k - 1

    def phase_widths(self, p):
        if p.op == "allreduce":
            w = sorted({int(x) for lo in p.stage_lo for x in np.diff(lo)}, reverse=True)
            return {"up": w, "down": w} if w else {}
        return {"up": [p.d]} if p.op == "reduce" else {"down": [p.d]}

    def total(self, p, v):
        if p.op == "reduce":               # one ring: a chain from root + 1 to the root
            k = p.k
            acc = v[(p.root + 1) % k].copy()
            for s in range(2, k + 1):
                acc = combine_np(p.combine, acc, v[(p.root + s) % k])
            return acc
        u = v.copy()
        for rings, lo in zip(p.stages, p.stage_lo):
            n = rings.shape[1]
            for ring in rings:
                total = np.empty(p.d)
                for j in range(n):
                    a, b = lo[j], lo[j + 1]
                    acc = u[ring[j], a:b].copy()
                    for s in range(1, n):
                        acc = combine_np(p.combine[a:b], acc, u[ring[(j + s) % n], a:b])
                    total[a:b] = acc
                u[ring] = total
        return u[p.root]
