"""Sorted neighbour lists in CSR form (row u's neighbours are ``values[ptr[u]:ptr[u+1]]``, ascending): the search
that checks an edge and finds an edge's position, in numba."""
from __future__ import annotations

import numba

__all__ = ["sorted_position", "is_edge"]


@numba.njit(cache=True, nogil=True, inline="always")
def sorted_position(ptr, values, u, v):
    """Position of v in row u of a CSR-style sorted adjacency (values[ptr[u]:ptr[u+1]]), by binary search; the
    insertion point when v is not there."""
    lo = ptr[u]
    hi = ptr[u + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def is_edge(ptr, values, u, v):
    """Whether v is in row u."""
    lo = sorted_position(ptr, values, u, v)
    return lo < ptr[u + 1] and values[lo] == v
