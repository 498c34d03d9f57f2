"""Fast Walsh-Hadamard transform over the rows of a matrix (vectorised NumPy, O(n d log d))."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["fwht_rows", "next_power_of_two", "rotate_into_columns"]


def next_power_of_two(d: int) -> int:
    return 1 << max(0, int(d - 1).bit_length())


def fwht_rows(Y: np.ndarray, normalize: bool = True) -> np.ndarray:
    """Apply the Sylvester Walsh-Hadamard matrix to every row of `Y` (shape (n, d), d a power of two), in place.

    With `normalize` the transform is H = W / sqrt(d), which is orthogonal and symmetric.
    """
    n, d = Y.shape
    if d & (d - 1):
        raise ValueError(f"row length {d} is not a power of two")
    h = 1
    while h < d:
        view = Y.reshape(n, d // (2 * h), 2, h)
        a = view[:, :, 0, :].copy()
        b = view[:, :, 1, :]
        view[:, :, 0, :] += b
        np.subtract(a, b, out=view[:, :, 1, :])
        h *= 2
    if normalize:
        Y *= 1.0 / np.sqrt(d)
    return Y


@numba.njit(cache=True, nogil=True)
def rotate_into_columns(Y, signs, factors, out):
    """out[:, j] = factors[j] * H D Y[j] for every row j of Y (n x d, d a power of two): the randomized
    Hadamard rotation of each point, written as a column of the d x n matrix `out` (normalised H = W/sqrt(d))."""
    n, d = Y.shape
    buf = np.empty(d)
    norm = 1.0 / np.sqrt(d)
    for j in range(n):
        for i in range(d):
            buf[i] = Y[j, i] * signs[i]
        h = 1
        while h < d:
            for start in range(0, d, 2 * h):
                for i in range(start, start + h):
                    a = buf[i]
                    b = buf[i + h]
                    buf[i] = a + b
                    buf[i + h] = a - b
            h *= 2
        f = factors[j] * norm
        for i in range(d):
            out[i, j] = buf[i] * f
    return out
