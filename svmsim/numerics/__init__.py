"""Shared numeric kernels (numba): a vectorisable exp, the fast Walsh-Hadamard transform."""
