"""Small dense-vector kernels shared by the compiled steps (numba)."""
from __future__ import annotations

import numba

__all__ = ["dot", "segment_cumsum"]


@numba.njit(cache=True, nogil=True)
def dot(a, b):
    """sum_c a[c] b[c], in index order (so every caller rounds the same way)."""
    acc = 0.0
    for c in range(a.shape[0]):
        acc += a[c] * b[c]
    return acc


@numba.njit(cache=True, nogil=True)
def segment_cumsum(ptr, values):
    """The running sum of each segment values[ptr[i]:ptr[i + 1]], in index order (as np.cumsum of the segment)."""
    out = values.copy()
    for i in range(ptr.shape[0] - 1):
        for k in range(ptr[i] + 1, ptr[i + 1]):
            out[k] += out[k - 1]
    return out
