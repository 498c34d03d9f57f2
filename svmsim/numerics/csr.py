"""CSR forms in numba: sorted neighbour lists (row u's neighbours are ``values[ptr[u]:ptr[u+1]]``, ascending) with
the search that checks an edge and finds an edge's position, and the index type of data rows in CSR form."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["CSR_INDEX", "sorted_position", "is_edge"]

#: the column indices of CSR data rows that compiled loops walk: unsigned, so that numba indexes with them without
#: its check for negative (wrap-around) indices, which cost a9a's CSR matvec 1.4x and its scatter (X^T v) 1.7x;
#: the LIBSVM reader's indices are below 2^31
CSR_INDEX = np.uint32


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
