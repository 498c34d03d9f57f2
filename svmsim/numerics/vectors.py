"""Small dense-vector kernels shared by the compiled steps (numba)."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["dot", "pairwise_sum", "segment_cumsum"]


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


#: NumPy's pairwise summation: blocks of at most this many values are summed in eight running sums
PAIRWISE_BLOCK = 128


@numba.njit(cache=True, nogil=True)
def _pairwise_block(a, lo, n):
    """NumPy's pairwise sum of a[lo:lo + n] for n <= PAIRWISE_BLOCK: fewer than 8 values one after another from
    -0.0; else eight interleaved running sums, combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then
    the rest one by one."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = lo + 8
    end = lo + n - n % 8
    while i < end:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < lo + n:
        res += a[i]
        i += 1
    return res


@numba.njit(cache=True, nogil=True)
def pairwise_sum(a, lo, n):
    """a[lo:lo + n].sum() in NumPy's pairwise order (np.add.reduce over a contiguous axis), so the same bits:
    blocks of at most PAIRWISE_BLOCK values (`_pairwise_block`); a longer run is the sum of its two halves (the
    first a multiple of 8), evaluated here with an explicit stack (numba cannot cache a recursive function)."""
    if n <= PAIRWISE_BLOCK:
        return _pairwise_block(a, lo, n)
    depth = 64                                         # halves: log2(n) levels at most
    f_lo = np.empty(depth, dtype=np.int64)
    f_n = np.empty(depth, dtype=np.int64)
    f_stage = np.empty(depth, dtype=np.int64)          # 0: not begun, 1: left half pending, 2: right half pending
    f_left = np.empty(depth)
    top = 0
    f_lo[0], f_n[0], f_stage[0] = lo, n, 0
    while True:
        m = f_n[top]
        if m > PAIRWISE_BLOCK:                         # split: first the left half
            half = m // 2
            half -= half % 8
            f_stage[top] = 1
            f_lo[top + 1], f_n[top + 1], f_stage[top + 1] = f_lo[top], half, 0
            top += 1
            continue
        v = _pairwise_block(a, f_lo[top], m)
        top -= 1
        while top >= 0:                                # hand v to the parents
            if f_stage[top] == 1:                      # the left half is done: now the right one
                f_left[top] = v
                f_stage[top] = 2
                half = f_n[top] // 2
                half -= half % 8
                f_lo[top + 1], f_n[top + 1], f_stage[top + 1] = f_lo[top] + half, f_n[top] - half, 0
                top += 1
                break
            v = f_left[top] + v
            top -= 1
        if top < 0:
            return v
