"""CSR forms in numba: sorted neighbour lists (row u's neighbours are ``values[ptr[u]:ptr[u+1]]``, ascending) with
the search that checks an edge and finds an edge's position, and the index type of data rows in CSR form."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["CSR_INDEX", "sorted_position", "is_edge", "part_row_sums"]

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


def part_row_sums(X, parts: list[np.ndarray]) -> np.ndarray:
    """Row p is the sum of the rows ``X[parts[p]]`` (CSR or dense X), added in the order the part lists them (as
    ``X[idx].sum(axis=0)`` adds them, so the same bits), in one compiled pass instead of a slice per part."""
    import scipy.sparse as sp

    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    ptr = np.zeros(len(parts) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(sizes)
    members = np.concatenate(parts).astype(np.int64) if len(parts) else np.zeros(0, np.int64)
    out = np.zeros((len(parts), X.shape[1]))
    if sp.issparse(X):
        X = X.tocsr()
        _csr_part_sums(X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data.astype(np.float64), ptr,
                       members, out)
    else:
        _dense_part_sums(np.ascontiguousarray(X, dtype=np.float64), ptr, members, out)
    return out


@numba.njit(cache=True, nogil=True)
def _csr_part_sums(indptr, indices, data, ptr, members, out):
    for p in range(ptr.shape[0] - 1):
        for t in range(ptr[p], ptr[p + 1]):
            i = members[t]
            for k in range(indptr[i], indptr[i + 1]):
                out[p, indices[k]] += data[k]


@numba.njit(cache=True, nogil=True)
def _dense_part_sums(X, ptr, members, out):
    for p in range(ptr.shape[0] - 1):
        for t in range(ptr[p], ptr[p + 1]):
            i = members[t]
            for c in range(X.shape[1]):
                out[p, c] += X[i, c]


@numba.njit(cache=True, nogil=True)
def is_edge(ptr, values, u, v):
    """Whether v is in row u."""
    lo = sorted_position(ptr, values, u, v)
    return lo < ptr[u + 1] and values[lo] == v
