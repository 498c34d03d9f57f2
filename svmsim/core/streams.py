"""Counter-based random streams: the n-th draw of a stream is a hash of (seed, stream, node, n) (SplitMix64).

A node's k-th clock gap or its c-th message's latency therefore does not depend on how other events were
interleaved or batched: the same scenario and seed replay bit for bit on any engine and any grouping of nodes.
Foundations: imports nothing of svmsim.
"""
from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["mix64", "counter_uniform", "stream_keys", "standard_normal", "STREAM_CLOCK", "STREAM_LATENCY",
           "STREAM_EDGE", "STREAM_FAULT", "STREAM_CHURN", "STREAM_PROGRAM", "STREAM_CODEC", "STREAM_CLUSTER"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S12, _S27, _S30, _S31 = np.uint64(12), np.uint64(27), np.uint64(30), np.uint64(31)
_TWO_TO_MINUS_52 = 2.0 ** -52

#: stream ids of `stream_keys` (one key per node and stream)
STREAM_CLOCK, STREAM_LATENCY, STREAM_EDGE, STREAM_FAULT, STREAM_CHURN, STREAM_PROGRAM = 1, 2, 3, 4, 5, 6
#: the stream of stochastic codecs (`comm.compression`): one key per sending node, mixed with the message's tag
STREAM_CODEC = 7
#: the modelled cluster's spreads (`schedule.cluster_time`): each node's compute rate, each link's speed
STREAM_CLUSTER = 8


@numba.njit(cache=True)
def mix64(z):
    """SplitMix64's finaliser: a bijective hash of a uint64."""
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@numba.njit(cache=True)
def counter_uniform(key, counter):
    """The `counter`-th uniform number of the stream `key`, in the open interval (0, 1) (52 random bits)."""
    z = mix64(np.uint64(key) + np.uint64(counter) * _GOLDEN)
    return (np.float64(z >> _S12) + 0.5) * _TWO_TO_MINUS_52


@numba.njit(cache=True)
def stream_keys(seed, stream, n):
    """One uint64 key per node for random stream `stream` of run seed `seed` (keys of different seeds, streams
    and nodes are unrelated)."""
    base = mix64(mix64(np.uint64(seed) + _GOLDEN) ^ (np.uint64(stream) * _MIX2))
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        out[i] = mix64(base + np.uint64(i + 1) * _GOLDEN)
    return out


@numba.njit(cache=True)
def standard_normal(u1, u2):
    """Box-Muller: a standard normal number from two uniforms in (0, 1)."""
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)

