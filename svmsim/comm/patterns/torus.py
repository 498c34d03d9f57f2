"""The 2D torus: K = r*c participants on an r x c grid, position p at row p // c and column p % c (row-major, as
topology kind "grid" numbers its nodes). r and c are the most square factorisation of K (r <= c, r as large as
possible), the shape topology kind "grid" takes by default, so the pattern's links are those of
``[topology] kind = "grid"``, ``periodic = true`` with K nodes (a grid of 2 along a dimension has its single link
there, which the ring of 2 uses both ways). K prime gives one row of K: the ring.

All-reduce only, in two stages (the classic 2D algorithm):
  1. rows: a ring all-reduce in each row (ring order: the row's columns 0, 1, ..., c-1; c chunks);
  2. columns: a ring all-reduce in each column of the rows' results (ring order: rows 0, 1, ..., r-1; r chunks).
A dimension of length 1 has no stage. Needs d >= max(r, c) (each ring splits d into its length of chunks).

Summation order (`RingsPattern`): row i's chunk j is R_i[j] = ((v[i,j] + v[i,j+1]) + ...) + v[i,j-1] over the
row's columns from j; then column chunk m of the total is ((R_m + R_{m+1}) + ...) + R_{m-1} over the rows from m,
where R_i is row i's combined vector (the same in every column of row i, so every node ends with the same bits).
The order depends on the positions only, not on how nodes are grouped onto hosts.

Closed-form counts of an all-reduce of d scalars. A ring all-reduce over L members sends 2(L-1) messages per
member, carrying 2(L-1)d scalars per ring in total, in 2(L-1) rounds. Stage 1 has r rings of c, stage 2 c rings
of r, and stage 2 starts in the round after stage 1's last message arrives, so:
  scalars  = r * 2(c-1)d + c * 2(r-1)d = 2d(2K - r - c)
  messages = r * 2(c-1)c + c * 2(r-1)r = 2K(r + c - 2)
  rounds   = 2(c-1) + 2(r-1)          = 2(r + c - 2)
(r = 1 gives the ring's 2(K-1)d, 2K(K-1) and 2(K-1).)
"""
from __future__ import annotations

import math

import numpy as np

from . import register
from .base import RingsPattern


def torus_shape(k: int) -> tuple[int, int]:
    """(r, c): r * c == k, r <= c, r as large as possible."""
    r = math.isqrt(k)
    while k % r:
        r -= 1
    return r, k // r


@register
class Torus(RingsPattern):
    name = "torus"

    def stages(self, k):
        r, c = torus_shape(k)
        grid = np.arange(k, dtype=np.int64).reshape(r, c)
        return [grid, grid.T.copy()]

    def fits(self, kind, topology_params, G):
        return (kind == "grid" and bool(topology_params.get("periodic", False))
                and tuple(G.graph.get("grid_shape", ())) == torus_shape(G.number_of_nodes()))

    def messages(self, p):
        r, c = torus_shape(p.k)
        return 2 * p.k * (r + c - 2)

    def scalars(self, p):
        r, c = torus_shape(p.k)
        return 2 * p.d * (2 * p.k - r - c)

    def rounds(self, p):
        r, c = torus_shape(p.k)
        return 2 * (r + c - 2)
