"""Small dense-vector kernels shared by the compiled steps (numba)."""
from __future__ import annotations

import numba

__all__ = ["dot"]


@numba.njit(cache=True, nogil=True)
def dot(a, b):
    """sum_c a[c] b[c], in index order (so every caller rounds the same way)."""
    acc = 0.0
    for c in range(a.shape[0]):
        acc += a[c] * b[c]
    return acc
