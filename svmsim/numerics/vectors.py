"""Small dense-vector kernels shared by the compiled steps (numba), and the index type of their CSR rows."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["CSR_INDEX", "dot"]

#: the column indices of CSR rows that compiled loops walk: unsigned, so that numba indexes with them without its
#: check for negative (wrap-around) indices, which cost a9a's CSR matvec 1.4x and its scatter (X^T v) 1.7x; the
#: LIBSVM reader's indices are below 2^31
CSR_INDEX = np.uint32


@numba.njit(cache=True, nogil=True)
def dot(a, b):
    """sum_c a[c] b[c], in index order (so every caller rounds the same way)."""
    acc = 0.0
    for c in range(a.shape[0]):
        acc += a[c] * b[c]
    return acc
